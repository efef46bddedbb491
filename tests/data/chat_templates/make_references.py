#!/usr/bin/env python3
"""Makes references.json: every conversation of conversations.json rendered by Hugging Face
transformers' apply_chat_template (tokenize=False) with the chat template of every model folder
here. Run offline, once, whenever a template or a conversation changes; CI never runs it and needs
no transformers (gateway/tests/test_chat_templates.py compares our renderer with the file).

    python3 -m venv /tmp/gwvenv && /tmp/gwvenv/bin/pip install transformers jinja2
    /tmp/gwvenv/bin/python tests/data/chat_templates/make_references.py [--shared ../shared]

Model folders: llama3 and qwen3 hold the tokenizer_config.json of shared/data/tokenizers/{llama3,qwen3}
without its added_tokens_decoder (the tokenizers are loaded from shared/ itself); smollm2 (the
ChatML template of SmolLM2-135M-Instruct's GGUF), mistral (Mistral-7B-Instruct-v0.1's [INST]
template) and features (a template of ours exercising Jinja features) are loaded from a temporary
folder holding their tokenizer_config.json (and chat_template.jinja) beside the embedded model's
tokenizer.json. A conversation the template refuses (raise_exception) is stored as its error message.
"""

import argparse
import json
import os
import shutil
import sys
import tempfile

import jinja2
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
MODELS = ["smollm2", "llama3", "qwen3", "mistral", "features"]


def load_tokenizer(name, shared, tmp):
    if name in ("llama3", "qwen3"):
        return transformers.AutoTokenizer.from_pretrained(os.path.join(shared, "data", "tokenizers", name))
    folder = os.path.join(tmp, name)
    os.makedirs(folder)
    shutil.copy(os.path.join(REPO, "models", "exl3-4.0bpw", "tokenizer.json"), folder)
    for f in ("tokenizer_config.json", "chat_template.jinja"):
        if os.path.exists(os.path.join(HERE, name, f)):
            shutil.copy(os.path.join(HERE, name, f), folder)
    return transformers.AutoTokenizer.from_pretrained(folder)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shared", default=os.path.join(REPO, "..", "shared"))
    args = p.parse_args()
    conversations = json.load(open(os.path.join(HERE, "conversations.json"), encoding="utf-8"))
    out = {"transformers": transformers.__version__, "jinja2": jinja2.__version__, "models": {}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            tok = load_tokenizer(name, args.shared, tmp)
            renders = {}
            for case in conversations:
                try:
                    text = tok.apply_chat_template(case["messages"], tools=case.get("tools"), tokenize=False,
                                                   add_generation_prompt=case["add_generation_prompt"])
                    renders[case["name"]] = {"text": text}
                except jinja2.exceptions.TemplateError as e:
                    renders[case["name"]] = {"error": str(e)}
            out["models"][name] = {"special_tokens": tok.special_tokens_map, "renders": renders}
            errors = sum("error" in r for r in renders.values())
            print("%s: %d rendered, %d refused" % (name, len(renders) - errors, errors))
    with open(os.path.join(HERE, "references.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
