#!/usr/bin/env python3
"""Makes the SentencePiece-style test tokenizers of tests/data/spm/ and their reference encodings.

Trains small BPE tokenizers with Hugging Face's `tokenizers` package (offline, on
shared/data/text) and writes, per style, DIR/tokenizer.json and DIR/cases.jsonl:

  llama2_style     normalizer Sequence[Prepend("▁"), Replace(" ", "▁")], no pre-tokenizer,
                   BPE byte_fallback with <0x00>..<0xFF> at ids 3..258, fuse_unk, decoder
                   Sequence[Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0)]
  mistral_style    Metaspace pre-tokenizer (prepend_scheme "first", split false), byte fallback,
                   decoder Sequence[ByteFallback, Metaspace], [INST] / [/INST] special tokens
  metaspace_split  Metaspace pre-tokenizer written with the legacy add_prefix_space (split
                   true), decoder Sequence[Metaspace, ByteFallback, Fuse], ignore_merges

Each line of cases.jsonl is one reference case, made by the `tokenizers` package itself:
  {"text": input, "ids": encode(input, add_special_tokens=False), "decoded": decode(ids),
   "decoded_skip": decode(ids, skip_special_tokens=True), only where it differs from "decoded"}
or, for decode-only cases (arbitrary id sequences: byte runs, special tokens), no "text".
decoder_variants.jsonl holds decode-only cases of other decoder chains over the llama2_style
vocabulary: {"decoder": spec, "ids": [...], "decoded": ...} (cases where Hugging Face's Strip
panics, a text of only stripped characters shorter than start + stop, are left out).
Tests (tests/coordinator/spm_tokenizer_test.cpp) read only these files, never Python.

Usage: python3 -m venv /tmp/spmvenv && /tmp/spmvenv/bin/pip install tokenizers
       /tmp/spmvenv/bin/python scripts/testdata/make_spm_tokenizers.py [--shared DIR] [--out DIR]
"""

import argparse
import json
import os
import random

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPACE = "\u2581"
SPECIALS = ["<unk>", "<s>", "</s>"]


def training_text(shared):
    """A fixed slice of the shared corpus: English prose, code, some multilingual text."""
    base = os.path.join(shared, "data", "text")
    parts = []
    for name, size in [("wiki.utf8", 400_000), ("code.utf8", 120_000), ("multilingual.utf8", 120_000),
                       ("tiny.utf8", 80_000)]:
        with open(os.path.join(base, name), encoding="utf-8") as f:
            parts.append(f.read(size))
    return [line for part in parts for line in part.split("\n") if line.strip()]


def train(lines, vocab_size, extra_specials=()):
    """A BPE vocabulary trained on Metaspace words, as SentencePiece would split them."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIALS + list(extra_specials),
                                  limit_alphabet=150, show_progress=False)
    tok.train_from_iterator(lines, trainer=trainer)
    return json.loads(tok.to_str())


def with_byte_tokens(spec):
    """Puts <0x00>..<0xFF> into model.vocab right after the special tokens (Llama 2's layout)."""
    vocab = spec["model"]["vocab"]
    first_regular = len(spec["added_tokens"])
    new_vocab = {}
    for token, index in sorted(vocab.items(), key=lambda item: item[1]):
        if index < first_regular:
            new_vocab[token] = index
    for b in range(256):
        new_vocab["<0x%02X>" % b] = first_regular + b
    for token, index in sorted(vocab.items(), key=lambda item: item[1]):
        if index >= first_regular:
            assert token not in new_vocab, token
            new_vocab[token] = index + 256
    spec["model"]["vocab"] = new_vocab
    return spec


def llama2_style(lines):
    spec = with_byte_tokens(train(lines, 1000))
    spec["normalizer"] = {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": SPACE},
        {"type": "Replace", "pattern": {"String": " "}, "content": SPACE}]}
    spec["pre_tokenizer"] = None
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
        {"type": "ByteFallback"},
        {"type": "Fuse"},
        {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    spec["post_processor"] = {"type": "TemplateProcessing",
                              "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                         {"Sequence": {"id": "A", "type_id": 0}}],
                              "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                       {"Sequence": {"id": "A", "type_id": 0}},
                                       {"SpecialToken": {"id": "<s>", "type_id": 1}},
                                       {"Sequence": {"id": "B", "type_id": 1}}],
                              "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}}
    return spec


def mistral_style(lines):
    spec = with_byte_tokens(train(lines, 900, extra_specials=["[INST]", "[/INST]"]))
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first", "split": False}
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "ByteFallback"},
        {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "first", "split": False}]}
    spec["post_processor"] = None
    return spec


def metaspace_split(lines):
    spec = with_byte_tokens(train(lines, 800))
    spec["normalizer"] = None
    spec["pre_tokenizer"] = {"type": "Metaspace", "replacement": SPACE, "add_prefix_space": True}
    spec["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Metaspace", "replacement": SPACE, "add_prefix_space": True},
        {"type": "ByteFallback"},
        {"type": "Fuse"}]}
    spec["model"]["ignore_merges"] = True
    spec["post_processor"] = None
    return spec


HAND_WRITTEN = [
    "", " ", "  ", "   ", "\n", "\t", "\n\n", " \n ", "\t\tindented", "a", "A", "▁", "▁▁", "▁a", "a▁b",
    "Hello", " Hello", "  Hello", "Hello ", "Hello  ", " Hello ", "Hello world", "Hello  world",
    "Hello   world", "Hello\nworld", "Hello\n\nworld", "Hello\tworld", "line one\r\nline two\r\n",
    "trailing newline\n", "\nleading newline", "The quick brown fox jumps over the lazy dog.",
    "It's a truth universally acknowledged, that a single man in possession of a good fortune...",
    "don't, won't, can't, I'm, you're, we've, they'll, he'd",
    "0", "1", "12", "123", "1234567890", "3.14159265358979", "-42", "+1 (555) 123-4567", "1,000,000",
    "2007-11-25T13:45:00Z", "0x7fff_ffff", "1e-10", "100%", "$19.99", "#1", "v2.3.4-rc1",
    "def f(x):\n    return x * 2\n", "for (int i = 0; i < n; ++i) { sum += a[i]; }",
    "if __name__ == \"__main__\":\n\tmain()", "<html><body class=\"x\">Hi</body></html>",
    "SELECT * FROM users WHERE id = 1;", "x = {'a': [1, 2, 3], \"b\": None}", "a&&b||!c", "~/.bashrc",
    "http://example.com/path?q=1&r=2#frag", "user@example.com", "C:\\Windows\\System32",
    "Grüße aus Köln", "naïve café résumé", "Ærøskøbing", "Ünïcödé", "São Paulo", "Straße", "ﬁne ligature",
    "Война и мир", "Привет, мир!", "مرحبا بالعالم", "שלום עולם", "Πέμπτη", "Γειά σου Κόσμε",
    "日本語のテキスト。", "中文文本", "你好，世界！", "한국어 텍스트", "ภาษาไทย", "हिन्दी भाषा", "தமிழ் மொழி",
    "ქართული ენა", "Հայերեն", "ᚠᛇᚻ᛫ᛒᛦᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "𓀀𓀁", "🀄", "∑ᵢ xᵢ² ≤ ∞", "√2 ≈ 1.414",
    "😀", "😀😀", "👍🏽", "👩‍👩‍👧‍👦", "🏳️‍🌈", "🇯🇵🇺🇸", "I ❤️ NY", "emoji at end 🎉", "🎉 emoji at start",
    "mixed 中文 and English", "tab\tseparated\tvalues", "multiple     spaces     here",
    "\u00a0non-breaking\u00a0space", "zero\u200bwidth", "soft\u00adhyphen", "e\u0301 combining",
    "\u3000ideographic space", "control\u0001char", "bell\u0007", "del\u007f",
    "<s>", "</s>", "<unk>", "<s>Hello", "Hello</s>", "<s> Hello", "<s>  Hello", "Hello <s> world",
    "<s><s>", "<s> </s>", "</s><s>", "text <unk> text", "<s>▁x", "<0x41>", "<0x41><0x42>", "<0xZZ>", "<0x+A>",
    "[INST]", "[INST] Hello [/INST]", "[INST]Hello[/INST]", " [INST] x", "a[INST]b", "[/INST]\n",
    "<s>[INST] What is 2+2? [/INST] 4</s>",
]


def corpus_cases(shared, count, rng):
    """Lines and line fragments of the shared texts, some not used for training."""
    base = os.path.join(shared, "data", "text")
    cases = []
    names = ["eval_pride_prejudice.txt", "eval_variable_man.txt", "eval_illustrious_client.txt",
             "multilingual.utf8", "technical.utf8", "code.utf8", "c4.utf8"]
    per_file = count // len(names) + 1
    for name in names:
        with open(os.path.join(base, name), encoding="utf-8") as f:
            text = f.read(600_000)
        lines = [line for line in text.split("\n") if line.strip()]
        for _ in range(per_file):
            line = rng.choice(lines)
            start = rng.randrange(0, max(1, len(line) - 20))
            cases.append(line[start:start + rng.randrange(1, 240)])
    # Multi-line blocks keep newlines, indentation and runs of spaces.
    with open(os.path.join(base, "code.utf8"), encoding="utf-8") as f:
        code = f.read(300_000)
    for _ in range(20):
        start = rng.randrange(0, len(code) - 500)
        cases.append(code[start:start + rng.randrange(50, 300)])
    return cases


def decode_only_cases(tok, rng, count):
    """Id sequences that encoding never makes: byte runs split, cut and mixed with other tokens."""
    vocab = tok.get_vocab()
    byte_ids = [vocab["<0x%02X>" % b] for b in range(256)]
    specials = [vocab[s] for s in SPECIALS if s in vocab]
    space_ids = [i for t, i in vocab.items() if t.startswith(SPACE)]
    others = sorted(vocab.values())
    utf8 = [list("€".encode()), list("中".encode()), list("😀".encode()), list("é".encode())]
    fixed = [
        [byte_ids[0xE4]], [byte_ids[0xE4], byte_ids[0xB8]], [byte_ids[0xE4], byte_ids[0xB8], byte_ids[0xAD]],
        [byte_ids[b] for b in utf8[0]] + [byte_ids[0xFF]], [byte_ids[0xFF], others[300]],
        [vocab[SPACE]], [vocab[SPACE], vocab[SPACE]], [vocab[SPACE], byte_ids[0x41]],
        [byte_ids[0x20], byte_ids[0x41]], [specials[1], vocab[SPACE], others[400]],
        [byte_ids[b] for b in utf8[1]] + [byte_ids[b] for b in utf8[2]],
        [byte_ids[0x80], byte_ids[0x80], others[500], byte_ids[0xC3]],
    ]
    cases = list(fixed)
    for _ in range(count - len(fixed)):
        ids = []
        for _ in range(rng.randrange(1, 16)):
            kind = rng.random()
            if kind < 0.3:
                ids.extend(byte_ids[b] for b in rng.choice(utf8)[: rng.randrange(1, 5)])
            elif kind < 0.4:
                ids.append(rng.choice(byte_ids))
            elif kind < 0.5:
                ids.append(rng.choice(specials))
            elif kind < 0.7:
                ids.append(rng.choice(space_ids))
            else:
                ids.append(rng.choice(others))
        cases.append(ids)
    return cases


def reference(tok, ids, record):
    record["ids"] = ids
    record["decoded"] = tok.decode(ids, skip_special_tokens=False)
    skip = tok.decode(ids, skip_special_tokens=True)
    if skip != record["decoded"]:
        record["decoded_skip"] = skip
    return record


DECODER_VARIANTS = [
    {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                                      {"type": "ByteFallback"}, {"type": "Fuse"},
                                      {"type": "Strip", "content": " ", "start": 2, "stop": 1}]},
    {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                                      {"type": "Strip", "content": " ", "start": 1, "stop": 1},
                                      {"type": "ByteFallback"}, {"type": "Fuse"}]},
    {"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "always", "split": True},
    {"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": SPACE, "prepend_scheme": "never"},
                                      {"type": "ByteFallback"}, {"type": "Fuse"},
                                      {"type": "Strip", "content": " ", "start": 0, "stop": 3}]},
    {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                                      {"type": "Replace", "pattern": {"String": "  "}, "content": "_"}]},
    {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": SPACE}, "content": " "},
                                      {"type": "ByteFallback"}, {"type": "Fuse"}]},
]


def write_decoder_variants(out_dir, spec, rng):
    records = []
    for decoder in DECODER_VARIANTS:
        variant = dict(spec)
        variant["decoder"] = decoder
        tok = Tokenizer.from_str(json.dumps(variant, ensure_ascii=False))
        for ids in decode_only_cases(tok, rng, 20):
            try:
                records.append({"decoder": decoder, "ids": ids, "decoded": tok.decode(ids, skip_special_tokens=False)})
            except BaseException:  # pyo3's PanicException: Strip's start and stop overlap
                continue
    with open(os.path.join(out_dir, "decoder_variants.jsonl"), "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    print(f"decoder_variants: {len(records)} decode-only cases over {len(DECODER_VARIANTS)} decoders")


def write_style(out_dir, name, spec, texts, rng):
    directory = os.path.join(out_dir, name)
    os.makedirs(directory, exist_ok=True)
    text = json.dumps(spec, ensure_ascii=False, separators=(",", ":"))
    with open(os.path.join(directory, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(text + "\n")
    tok = Tokenizer.from_str(text)
    records = []
    for case in texts:
        ids = tok.encode(case, add_special_tokens=False).ids
        records.append(reference(tok, ids, {"text": case}))
    for ids in decode_only_cases(tok, rng, 30):
        records.append(reference(tok, ids, {}))
    with open(os.path.join(directory, "cases.jsonl"), "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n")
    names = {index: token for token, index in tok.get_vocab().items()}
    fallback = sum(1 for r in records if "text" in r and any(names[i].startswith("<0x") for i in r["ids"]))
    print(f"{name}: {len(texts)} encode cases ({fallback} with byte fallback), "
          f"{len(records) - len(texts)} decode-only cases")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shared", default=os.path.join(os.path.dirname(root), "shared"))
    parser.add_argument("--out", default=os.path.join(root, "tests", "data", "spm"))
    args = parser.parse_args()

    lines = training_text(args.shared)
    rng = random.Random(20260601)
    texts = HAND_WRITTEN + corpus_cases(args.shared, 120, rng)
    for name, make in [("llama2_style", llama2_style), ("mistral_style", mistral_style),
                       ("metaspace_split", metaspace_split)]:
        spec = make(lines)
        write_style(args.out, name, spec, texts, rng)
        if name == "llama2_style":
            llama2 = spec
    write_decoder_variants(args.out, llama2, rng)


if __name__ == "__main__":
    main()
