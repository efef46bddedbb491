"""Acceptance 4: our chat template renderer is byte-identical to transformers' apply_chat_template
(tokenize=False) on every conversation of tests/data/chat_templates/conversations.json under each
model's template (references.json, made offline by make_references.py), refuses the same
conversations with the same message, and reads the same special tokens from tokenizer_config.json."""

import json
import os

import pytest

from conftest import REPO
from exl3_gateway.chat_template import ChatTemplate, ChatTemplateError, special_tokens_from_config

DATA = os.path.join(REPO, "tests", "data", "chat_templates")
with open(os.path.join(DATA, "references.json"), encoding="utf-8") as f:
    REFERENCES = json.load(f)
with open(os.path.join(DATA, "conversations.json"), encoding="utf-8") as f:
    CONVERSATIONS = {c["name"]: c for c in json.load(f)}
CASES = [(model, name) for model, ref in REFERENCES["models"].items() for name in ref["renders"]]


def first_difference(a, b):
    i = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    return "first difference at char %d: ours %r, transformers %r" % (i, a[max(0, i - 20):i + 40],
                                                                      b[max(0, i - 20):i + 40])


def test_enough_references():
    renders = [r for model in REFERENCES["models"].values() for r in model["renders"].values() if "text" in r]
    assert len(CONVERSATIONS) >= 20
    assert set(REFERENCES["models"]) >= {"smollm2", "llama3", "qwen3", "mistral"}
    assert len(renders) >= 100
    cases = list(CONVERSATIONS.values())
    assert any(c["messages"][0]["role"] == "system" for c in cases)
    assert any(c["messages"][0]["role"] != "system" for c in cases)
    assert any(c["add_generation_prompt"] for c in cases) and any(not c["add_generation_prompt"] for c in cases)
    assert any(sum(m["role"] == "user" for m in c["messages"]) >= 3 for c in cases)


@pytest.mark.parametrize("model", sorted(REFERENCES["models"]))
def test_special_tokens_match_transformers(model):
    with open(os.path.join(DATA, model, "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert special_tokens_from_config(config) == REFERENCES["models"][model]["special_tokens"]


@pytest.mark.parametrize("model,name", CASES)
def test_render_matches_transformers(model, name):
    template = ChatTemplate.from_model_dir(os.path.join(DATA, model))
    assert template is not None
    case = CONVERSATIONS[name]
    expected = REFERENCES["models"][model]["renders"][name]
    if "error" in expected:
        with pytest.raises(ChatTemplateError) as e:
            template.render(case["messages"], add_generation_prompt=case["add_generation_prompt"],
                            tools=case.get("tools"))
        assert str(e.value) == expected["error"]
        return
    ours = template.render(case["messages"], add_generation_prompt=case["add_generation_prompt"],
                           tools=case.get("tools"))
    assert ours == expected["text"], first_difference(ours, expected["text"])


def test_sandbox_refuses_unsafe_access():
    template = ChatTemplate("{{ messages.__class__.__mro__ }}")
    with pytest.raises(ChatTemplateError):
        template.render([{"role": "user", "content": "x"}])
    template = ChatTemplate("{% set ns = namespace(_secret=1) %}{{ ns._secret }}")
    with pytest.raises(ChatTemplateError):
        template.render([{"role": "user", "content": "x"}])
    template = ChatTemplate("{% set x = messages.append(1) %}")
    with pytest.raises(ChatTemplateError):
        template.render([{"role": "user", "content": "x"}])


def test_strftime_now_and_named_templates(tmp_path):
    template = ChatTemplate("{{ strftime_now('%Y') }}")
    year = template.render([{"role": "user", "content": "x"}])
    assert year.isdigit() and len(year) == 4
    config = {"eos_token": "</s>", "chat_template": [{"name": "default", "template": "D{{ eos_token }}"},
                                                     {"name": "tool_use", "template": "T{{ tools | length }}"}]}
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    named = ChatTemplate.from_model_dir(str(tmp_path))
    assert named.render([{"role": "user", "content": "x"}]) == "D</s>"
    assert named.render([{"role": "user", "content": "x"}], tools=[{"a": 1}]) == "T1"
    (tmp_path / "chat_template.jinja").write_text("J{{ messages[0].content }}")
    assert ChatTemplate.from_model_dir(str(tmp_path)).render([{"role": "user", "content": "x"}]) == "Jx"
    override = tmp_path / "override.jinja"
    override.write_text("O{{ add_generation_prompt }}")
    assert ChatTemplate.from_model_dir(str(tmp_path), str(override)).render(
        [{"role": "user", "content": "x"}], add_generation_prompt=False) == "OFalse"
    assert ChatTemplate.from_model_dir(str(tmp_path / "missing")) is None
