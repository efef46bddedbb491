#!/usr/bin/env python3
"""Writes the small GGUF fixtures of tests/import/ (tests/data/gguf/, < 1 MB in all) with PyPI's
`gguf` package (its writer, and its own dequantization as the reference) and `transformers` (the
tokenizer encodings a GGUF's metadata gives). CI never runs this: the outputs are committed.

  python3 -m venv /tmp/ggufvenv && /tmp/ggufvenv/bin/pip install gguf numpy transformers torch
  /tmp/ggufvenv/bin/python scripts/testdata/make_gguf_fixtures.py [--out tests/data/gguf]

Files:
  types.gguf               one tensor per supported type (odd row counts, several blocks per row,
                           random block bytes with sane fp16 scales, fp16/bf16 specials), one 3-D
                           tensor, one IQ2_XXS tensor (refused by name), alignment 64, and metadata
                           of every GGUF value type (nested array included)
  types_ref.safetensors    gguf.quants.dequantize of each supported tensor (F32, HF shapes)
  tiny-llama.gguf          a 5-layer llama (hidden 64, 4 heads / 2 KV heads of 16, FFN 256, 272
                           tokens, untied head) with mixed tensor types (every supported one), Q/K
                           rows permuted as llama.cpp's converter does, a byte-level BPE tokenizer
                           (pre "smollm") with control and user-defined tokens and a ChatML template
  tiny_llama_ref.json      per HF tensor: FNV-1a 64 of its fp32 bytes (gguf dequantization, Q/K
                           rows back in HF order) and its first values; a prompt and the fp64 numpy
                           forward's logits of that HF-order model (last rows); tokenizer encodings
                           by transformers' tokenizer built from the GGUF
  tiny-spm.gguf            a SentencePiece-style ("llama") tokenizer, no tensors
  tiny_spm_ref.json        transformers' encodings with it
With --fuzz-seeds DIR (fuzz/corpus/gguf_reader), also the seed corpus of fuzz/gguf_reader_fuzzer.cpp:
types.gguf, tiny-spm.gguf and a 1-layer llama small enough for the fuzzer's 64 KiB inputs.
"""
import argparse
import json
import os

import numpy as np
import gguf
from gguf import GGMLQuantizationType as T
from gguf.quants import dequantize, quantize
from safetensors_file import write_safetensors

QK_K = 256
# Offsets of the fp16 scale fields in each block (the rest of a block is random bits).
SCALE_FIELDS = {
    T.Q4_0: [0], T.Q4_1: [0, 2], T.Q5_0: [0], T.Q5_1: [0, 2], T.Q8_0: [0],
    T.Q2_K: [80, 82], T.Q3_K: [108], T.Q4_K: [0, 2], T.Q5_K: [0, 2], T.Q6_K: [208],
}
SUPPORTED = [T.F32, T.F16, T.BF16, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0, T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]


def random_blocks(rng, qtype, rows, cols, scale):
    """Random block bytes for [rows, cols] of `qtype`, fp16 scales drawn in (-scale, scale)."""
    block, size = gguf.GGML_QUANT_SIZES[qtype]
    n = rows * cols // block
    raw = rng.integers(0, 256, size=(n, size), dtype=np.uint8)
    for off in SCALE_FIELDS[qtype]:
        d = (rng.uniform(0.2, 1.0, size=n) * scale * rng.choice([-1, 1], size=n)).astype(np.float16)
        if n > 2:
            d[1] = np.float16(3e-7)   # a subnormal scale
            d[2] = np.float16(0.0)
        raw[:, off:off + 2] = d.view(np.uint8).reshape(n, 2)
    return raw.reshape(rows, cols // block * size)


def fnv1a64(data):
    h = 0xcbf29ce484222325
    for b in data:
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return h


def fnv1a64_fast(a):
    """FNV-1a 64 of the bytes of a float32 array (vectorised per byte is awkward; arrays are small)."""
    return fnv1a64(np.ascontiguousarray(a, dtype=np.float32).tobytes())


def read_dequantized(path):
    reader = gguf.GGUFReader(path)
    out = {}
    for t in reader.tensors:
        if t.tensor_type in SUPPORTED:
            out[t.name] = dequantize(t.data, t.tensor_type).astype(np.float32)
    return out


# ----------------------------------------------------------------------------- types.gguf

def make_types(out_dir, rng):
    path = os.path.join(out_dir, "types.gguf")
    w = gguf.GGUFWriter(path, "types-test")
    w.add_custom_alignment(64)
    w.add_uint8("test.u8", 200)
    w.add_int8("test.i8", -100)
    w.add_uint16("test.u16", 60000)
    w.add_int16("test.i16", -30000)
    w.add_uint32("test.u32", 4000000000)
    w.add_int32("test.i32", -2000000000)
    w.add_float32("test.f32", 0.125)
    w.add_uint64("test.u64", 2 ** 63 + 5)
    w.add_int64("test.i64", -(2 ** 62))
    w.add_float64("test.f64", -2.5e-300)
    w.add_bool("test.bool", True)
    w.add_string("test.string", "h\u00e9llo \U0001F600")
    w.add_array("test.strings", ["a", "", "\u00fc\u00f1\u00ee"])
    w.add_key_value("test.i16s", [1, -2, 3], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT16)
    w.add_array("test.nested", [[1, 2], [3]])

    tensors = {}
    # Plain types: 7 rows of 33, with specials in row 0.
    base = rng.standard_normal((7, 33)).astype(np.float32)
    base[0, :6] = [np.inf, -np.inf, np.nan, 6e-8, -0.0, 70000.0]
    tensors["f32"] = (base, T.F32)
    with np.errstate(over="ignore"):
        tensors["f16"] = (base.astype(np.float16), T.F16)  # 70000 becomes inf on purpose
    bf = quantize(base, T.BF16)
    tensors["bf16"] = (bf, T.BF16)
    # Legacy block types: 5 rows of 3 blocks; K-quants: 3 rows of 2 super-blocks.
    for qt in [T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.Q8_0]:
        tensors[qt.name.lower()] = (random_blocks(rng, qt, 5, 96, 0.05), qt)
    for qt in [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K]:
        tensors[qt.name.lower()] = (random_blocks(rng, qt, 3, 512, 0.01), qt)
    # A 3-D tensor (ggml dims [64, 3, 2]).
    q3d = random_blocks(rng, T.Q8_0, 6, 64, 0.05).reshape(2, 3, -1)
    tensors["q8_0_3d"] = (q3d, T.Q8_0)
    # A type exl3-import refuses by name.
    tensors["iq2_xxs"] = (rng.integers(0, 256, size=(1, 66), dtype=np.uint8), T.IQ2_XXS)
    for name, (data, qt) in tensors.items():
        if qt in (T.F32, T.F16):
            w.add_tensor(name, data)
        else:
            w.add_tensor(name, data, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    write_safetensors(os.path.join(out_dir, "types_ref.safetensors"),
                      {k: np.asarray(v, dtype=np.float32) for k, v in read_dequantized(path).items()})


# ----------------------------------------------------------------------------- tiny llama

def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def byte_level_vocab():
    spell = bytes_to_unicode()
    tokens = [spell[b] for b in range(256)]
    merges = ["\u0120 t", "h e", "\u0120t he", "i n", "\u0120 a", "e r", "o n", "\u0120 s", "r e", "a n",
              "\u0120a n", "i s"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for special in ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]:
        tokens.append(special)
        types.append(gguf.TokenType.CONTROL)
    tokens.append("<think>")
    types.append(gguf.TokenType.USER_DEFINED)
    return tokens, types, merges


CHATML = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
          "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}")


def llama_permute(w, n_head):
    """llama.cpp's converter: HF q/k rows -> ggml's interleaved RoPE order."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama_unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def rms_norm(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def forward(weights, ids, cfg):
    """fp64 Llama forward (HF semantics: rotate_half RoPE, GQA, SiLU MLP) -> logits [n, vocab]."""
    hd, nh, nkv, eps, theta = cfg["head_dim"], cfg["heads"], cfg["kv_heads"], cfg["eps"], cfg["theta"]
    W = {k: v.astype(np.float64) for k, v in weights.items()}
    x = W["model.embed_tokens.weight"][ids]
    n = len(ids)
    inv = theta ** (-np.arange(0, hd, 2, dtype=np.float64) / hd)
    ang = np.outer(np.arange(n), inv)
    cos, sin = np.cos(np.concatenate([ang, ang], -1)), np.sin(np.concatenate([ang, ang], -1))

    def rope(t):  # [heads, n, hd]
        rot = np.concatenate([-t[..., hd // 2:], t[..., :hd // 2]], -1)
        return t * cos + rot * sin

    mask = np.triu(np.full((n, n), -np.inf), 1)
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        h = rms_norm(x, W[p + "input_layernorm.weight"], eps)
        q = (h @ W[p + "self_attn.q_proj.weight"].T).reshape(n, nh, hd).transpose(1, 0, 2)
        k = (h @ W[p + "self_attn.k_proj.weight"].T).reshape(n, nkv, hd).transpose(1, 0, 2)
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(n, nkv, hd).transpose(1, 0, 2)
        q, k = rope(q), rope(k)
        k = np.repeat(k, nh // nkv, 0)
        v = np.repeat(v, nh // nkv, 0)
        s = q @ k.transpose(0, 2, 1) / np.sqrt(hd) + mask
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = (s @ v).transpose(1, 0, 2).reshape(n, nh * hd)
        x = x + a @ W[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, W[p + "post_attention_layernorm.weight"], eps)
        g = h @ W[p + "mlp.gate_proj.weight"].T
        u = h @ W[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ W[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, W["model.norm.weight"], eps)
    return x @ W["lm_head.weight"].T


def make_tiny_llama(out_dir, rng):
    cfg = dict(layers=5, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=256, eps=1e-5, theta=10000.0, ctx=256)
    tokens, types, merges = byte_level_vocab()
    vocab = len(tokens)
    path = os.path.join(out_dir, "tiny-llama.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_name("tiny-llama-test")
    w.add_block_count(cfg["layers"])
    w.add_context_length(cfg["ctx"])
    w.add_embedding_length(cfg["hidden"])
    w.add_feed_forward_length(cfg["ffn"])
    w.add_head_count(cfg["heads"])
    w.add_head_count_kv(cfg["kv_heads"])
    w.add_rope_freq_base(cfg["theta"])
    w.add_layer_norm_rms_eps(cfg["eps"])
    w.add_rope_dimension_count(cfg["head_dim"])
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_unk_token_id(tokens.index("<|endoftext|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHATML)

    h, hd, nh, nkv, ffn = cfg["hidden"], cfg["head_dim"], cfg["heads"], cfg["kv_heads"], cfg["ffn"]
    # (gguf name, HF name, HF shape, type, permute heads); K-quant down projections hold random blocks.
    layer_types = {
        "attn_q": [T.Q4_0, T.Q5_1, T.Q8_0, T.Q4_1, T.F16],
        "attn_k": [T.Q5_0, T.Q4_1, T.F16, T.Q8_0, T.BF16],
        "attn_v": [T.Q8_0, T.BF16, T.Q4_0, T.Q5_0, T.Q5_1],
        "attn_output": [T.F16, T.Q5_0, T.Q5_1, T.Q4_0, T.Q8_0],
        "ffn_gate": [T.Q4_1, T.Q8_0, T.F32, T.Q5_1, T.Q4_0],
        "ffn_up": [T.BF16, T.Q4_0, T.Q8_0, T.F16, T.Q5_0],
        "ffn_down": [T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K],
    }
    plan = [("token_embd.weight", "model.embed_tokens.weight", (vocab, h), T.Q8_0, 0)]
    for i in range(cfg["layers"]):
        p = f"model.layers.{i}."
        plan += [
            (f"blk.{i}.attn_norm.weight", p + "input_layernorm.weight", (h,), T.F32, 0),
            (f"blk.{i}.attn_q.weight", p + "self_attn.q_proj.weight", (nh * hd, h), layer_types["attn_q"][i], nh),
            (f"blk.{i}.attn_k.weight", p + "self_attn.k_proj.weight", (nkv * hd, h), layer_types["attn_k"][i], nkv),
            (f"blk.{i}.attn_v.weight", p + "self_attn.v_proj.weight", (nkv * hd, h), layer_types["attn_v"][i], 0),
            (f"blk.{i}.attn_output.weight", p + "self_attn.o_proj.weight", (h, nh * hd), layer_types["attn_output"][i], 0),
            (f"blk.{i}.ffn_norm.weight", p + "post_attention_layernorm.weight", (h,), T.F32, 0),
            (f"blk.{i}.ffn_gate.weight", p + "mlp.gate_proj.weight", (ffn, h), layer_types["ffn_gate"][i], 0),
            (f"blk.{i}.ffn_up.weight", p + "mlp.up_proj.weight", (ffn, h), layer_types["ffn_up"][i], 0),
            (f"blk.{i}.ffn_down.weight", p + "mlp.down_proj.weight", (h, ffn), layer_types["ffn_down"][i], 0),
        ]
    plan += [("output_norm.weight", "model.norm.weight", (h,), T.F32, 0),
             ("output.weight", "lm_head.weight", (vocab, h), T.F16, 0)]

    for gname, hname, shape, qt, heads in plan:
        if gname.endswith("norm.weight"):
            hf = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            hf = (rng.standard_normal(shape) / np.sqrt(shape[-1])).astype(np.float32)
        stored = llama_permute(hf, heads) if heads else hf
        if qt in (T.Q2_K, T.Q3_K, T.Q4_K, T.Q5_K, T.Q6_K):
            scale = {T.Q2_K: 0.02, T.Q3_K: 0.005, T.Q4_K: 0.005, T.Q5_K: 0.002, T.Q6_K: 0.0005}[qt]
            w.add_tensor(gname, random_blocks(rng, qt, shape[0], shape[1], scale), raw_dtype=qt)
        elif qt == T.F32:
            w.add_tensor(gname, stored)
        elif qt == T.F16:
            w.add_tensor(gname, stored.astype(np.float16))
        else:
            w.add_tensor(gname, quantize(stored, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()

    # The reference: gguf's dequantization of what was written, Q/K rows back in HF order.
    deq = read_dequantized(path)
    weights = {}
    for gname, hname, shape, qt, heads in plan:
        a = deq[gname].reshape(shape)
        weights[hname] = llama_unpermute(a, heads) if heads else a
    ref = {"config": cfg, "tensors": {}}
    for name, a in sorted(weights.items()):
        ref["tensors"][name] = {"shape": list(a.shape), "fnv1a64": f"{fnv1a64_fast(a):016x}",
                                "first": [float(v) for v in a.reshape(-1)[:4]]}
    prompt = [int(t) for t in rng.integers(0, vocab, size=19)]
    logits = forward(weights, prompt, cfg)
    ref["prompt"] = prompt
    ref["logits_last_rows"] = [[float(v) for v in row] for row in logits[-3:]]

    texts = ["the theme is in an answer", " the", "Hello world!", "12345 and 6789", "  spaces   and\ttabs\n\nnew",
             "<|im_start|>user\nhi<|im_end|>", "<think>reason</think>", "\u00fcnicode \u4e2d\u6587 \U0001F600", "",
             "re-run: an answer", "a<|endoftext|>b"]
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(out_dir, gguf_file="tiny-llama.gguf")
    ref["encodings"] = [{"text": t, "ids": tok.encode(t, add_special_tokens=False)} for t in texts]
    with open(os.path.join(out_dir, "tiny_llama_ref.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


# ----------------------------------------------------------------------------- SentencePiece tokenizer

def make_tiny_spm(out_dir):
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL] + [gguf.TokenType.BYTE] * 256
    scores = [0.0, 0.0, 0.0] + [0.0] * 256
    pieces = ["\u2581", "e", "t", "h", "a", "n", "s", "o", "r", "i", "l", "d", "w", "!", "1", "2",
              "\u2581t", "he", "\u2581the", "an", "\u2581a", "\u2581an", "er", "on", "in", "\u2581s", "or",
              "ll", "\u2581w", "\u2581wor", "ld", "\u2581world", "el", "\u2581h", "\u2581hel", "lo", "\u2581hello",
              "\u00e9", "\u2581\u2581"]
    for k, p in enumerate(pieces):
        tokens.append(p)
        types.append(gguf.TokenType.NORMAL)
        scores.append(-1.0 - 0.25 * k if len(p) > 1 else -100.0 - k)
    tokens.append("<tool>")
    types.append(gguf.TokenType.USER_DEFINED)
    scores.append(0.0)
    path = os.path.join(out_dir, "tiny-spm.gguf")
    w = gguf.GGUFWriter(path, "llama")
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_scores(scores)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(out_dir, gguf_file="tiny-spm.gguf")
    texts = ["hello world", "the answer", " the", "Hello World!", "h\u00e9llo 12", "  two  spaces", "<s>the</s>",
             "<tool>hello", "\u4e2d", ""]
    ref = {"encodings": [{"text": t, "ids": tok.encode(t, add_special_tokens=False)} for t in texts],
           "add_bos_token": bool(getattr(tok, "add_bos_token", True))}
    with open(os.path.join(out_dir, "tiny_spm_ref.json"), "w") as f:
        json.dump(ref, f, indent=1)
        f.write("\n")


def make_seed_llama(path, rng):
    """A 1-layer llama (hidden 32, FFN 64, 2 heads of 16, 1 KV head) with a 6-token vocabulary."""
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_context_length(64)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(["a", "b", "ab", "\u0120", "<s>", "</s>"])
    w.add_token_types([1, 1, 1, 1, 3, 3])
    w.add_token_merges(["a b"])
    w.add_bos_token_id(4)
    w.add_eos_token_id(5)
    w.add_chat_template("{{ messages[0]['content'] }}")
    shapes = {"token_embd.weight": (6, 32), "blk.0.attn_norm.weight": (32,), "blk.0.attn_q.weight": (32, 32),
              "blk.0.attn_k.weight": (16, 32), "blk.0.attn_v.weight": (16, 32), "blk.0.attn_output.weight": (32, 32),
              "blk.0.ffn_norm.weight": (32,), "blk.0.ffn_gate.weight": (64, 32), "blk.0.ffn_up.weight": (64, 32),
              "blk.0.ffn_down.weight": (32, 64), "output_norm.weight": (32,)}
    types = [T.Q8_0, T.Q4_0, T.Q4_1, T.Q5_0, T.Q5_1, T.F16, T.BF16]
    for k, (name, shape) in enumerate(shapes.items()):
        a = rng.standard_normal(shape).astype(np.float32)
        qt = T.F32 if len(shape) == 1 else types[k % len(types)]
        if qt == T.F32:
            w.add_tensor(name, a)
        elif qt == T.F16:
            w.add_tensor(name, a.astype(np.float16))
        else:
            w.add_tensor(name, quantize(a, qt), raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "gguf"))
    ap.add_argument("--fuzz-seeds", help="also write the fuzzer's seed corpus to this directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = np.random.default_rng(20261201)
    make_types(args.out, rng)
    make_tiny_llama(args.out, rng)
    make_tiny_spm(args.out)
    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out))
    print(f"wrote {args.out}: {total} bytes")
    if args.fuzz_seeds:
        import shutil
        os.makedirs(args.fuzz_seeds, exist_ok=True)
        for name in ["types.gguf", "tiny-spm.gguf"]:
            shutil.copy(os.path.join(args.out, name), os.path.join(args.fuzz_seeds, name))
        make_seed_llama(os.path.join(args.fuzz_seeds, "llama-1-layer.gguf"), np.random.default_rng(7))
        print(f"wrote {args.fuzz_seeds}")


if __name__ == "__main__":
    main()
