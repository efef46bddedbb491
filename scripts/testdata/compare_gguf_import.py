#!/usr/bin/env python3
"""Checks an exl3-import output directory against the `gguf` package (acceptance 1 of P8): every
tensor of the GGUF, dequantized by gguf.quants.dequantize, Q/K rows put back in Hugging Face order
(the inverse of llama.cpp's convert permute), must equal the imported tensor bit for bit (an fp32
import), or equal its round-to-nearest-even bf16 / fp16 cast (a bf16 / fp16 import).

  build/.../bin/exl3-import MODEL.gguf /tmp/out --dtype fp32
  /tmp/ggufvenv/bin/python scripts/testdata/compare_gguf_import.py MODEL.gguf /tmp/out
"""
import argparse
import glob
import json
import os
import re
import struct
import sys

import numpy as np
import gguf
from gguf.quants import dequantize

LAYER = {
    "attn_norm.weight": "input_layernorm.weight", "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight", "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight", "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight", "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
GLOBAL = {"token_embd.weight": "model.embed_tokens.weight", "output_norm.weight": "model.norm.weight",
          "output.weight": "lm_head.weight"}


def hf_name(name):
    if name in GLOBAL:
        return GLOBAL[name]
    m = re.fullmatch(r"blk\.(\d+)\.(.*)", name)
    return f"model.layers.{m.group(1)}.{LAYER[m.group(2)]}"


def load_dir(path):
    out = {}
    for file in sorted(glob.glob(os.path.join(path, "*.safetensors"))):
        with open(file, "rb") as f:
            n = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(n))
            base = 8 + n
        raw = np.memmap(file, dtype=np.uint8, mode="r")
        for k, v in header.items():
            if k == "__metadata__":
                continue
            b, e = v["data_offsets"]
            dt = {"F32": np.uint32, "BF16": np.uint16, "F16": np.uint16}[v["dtype"]]
            out[k] = (v["dtype"], raw[base + b:base + e].view(dt).reshape(v["shape"]))
    return out


def unpermute(w, n_head):
    return w.reshape(n_head, w.shape[0] // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def bf16_bits(a):
    u = a.view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), np.uint16(0x7FC0), r)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("gguf")
    ap.add_argument("dir")
    args = ap.parse_args()
    reader = gguf.GGUFReader(args.gguf)
    arch = reader.fields["general.architecture"].contents()
    heads = int(reader.fields[f"{arch}.attention.head_count"].contents())
    kv_heads = int(reader.fields[f"{arch}.attention.head_count_kv"].contents())
    imported = load_dir(args.dir)
    bad = 0
    for t in reader.tensors:
        a = dequantize(t.data, t.tensor_type).astype(np.float32)
        a = a.reshape([int(d) for d in reversed(t.shape)])
        if t.name.endswith("attn_q.weight"):
            a = unpermute(a, heads)
        elif t.name.endswith("attn_k.weight"):
            a = unpermute(a, kv_heads)
        name = hf_name(t.name)
        dtype, got = imported[name]
        want = {"F32": lambda x: x.view(np.uint32), "BF16": bf16_bits,
                "F16": lambda x: x.astype(np.float16).view(np.uint16)}[dtype](np.ascontiguousarray(a))
        diff = int(np.count_nonzero(got != want)) if got.shape == want.shape else -1
        if diff != 0:
            bad += 1
            print(f"MISMATCH {t.name} ({t.tensor_type.name}) -> {name}: {diff} elements differ")
    dtypes = sorted({d for d, _ in imported.values()})
    print(f"{len(reader.tensors)} tensors compared (stored as {', '.join(dtypes)}), {bad} mismatching")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
