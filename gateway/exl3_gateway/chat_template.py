"""Chat templates: a model's Jinja `chat_template` rendered as Hugging Face transformers'
apply_chat_template(tokenize=False) renders it, so prompts are byte-identical to what the model saw
in training. The facts followed (transformers 5.x, utils/chat_template_utils.py and
tokenization_utils_base.py):

- the environment is jinja2's ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks and
  the loopcontrols extension (break/continue), templates compiled with from_string;
- `tojson` is json.dumps with ensure_ascii=False (no HTML escaping) and the options indent,
  separators, sort_keys; `raise_exception(msg)` raises TemplateError; `strftime_now(fmt)` formats
  the local time now; `dict` builds plain dicts; `namespace` refuses names starting with "_";
- the context holds messages, tools, documents, add_generation_prompt and the tokenizer's named
  special tokens as strings (bos_token, eos_token, unk_token, sep_token, pad_token, cls_token,
  mask_token: those that are set), then any extra variables;
- message keys whose value is None are dropped; a message's reasoning under reasoning_content,
  thinking or reasoning is also passed as `thinking` (first key) and `reasoning_content` (last key);
- the template is tokenizer_config.json's `chat_template` (a string, or a list of {name, template}
  where "default" is used, or "tool_use" when tools are given), or a chat_template.jinja file beside
  it, which wins.
"""

import json
import os
from datetime import datetime

import jinja2
import jinja2.ext
import jinja2.utils
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_TOKEN_NAMES = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


class ChatTemplateError(Exception):
    """The template refused the conversation (raise_exception) or could not be rendered."""


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt):
    return datetime.now().strftime(fmt)


class _DictBuilder:
    """`dict(...)` inside a template: plain dicts only, no access to the type itself."""

    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def _check_namespace_name(name):
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(
            "chat templates cannot store underscore-prefixed attributes on a namespace: %r" % name)


class _Namespace(jinja2.utils.Namespace):
    """jinja2's namespace() that refuses dunder and private names."""

    def __init__(*args, **kwargs):  # noqa: N805 (jinja2.utils.Namespace's own signature trick)
        self, rest = args[0], args[1:]
        attrs = dict(*rest, **kwargs)
        for name in attrs:
            _check_namespace_name(name)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _check_namespace_name(name)
        jinja2.utils.Namespace.__setitem__(self, name, value)


def _environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    env.globals["dict"] = _DictBuilder()
    env.globals["namespace"] = _Namespace
    return env


def _token_text(value):
    """A special token from tokenizer_config.json: a string, or an AddedToken dict with content."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def special_tokens_from_config(config):
    """The named special tokens of a tokenizer_config.json dict, as the template sees them."""
    tokens = {}
    for name in SPECIAL_TOKEN_NAMES:
        text = _token_text(config.get(name))
        if text is not None:
            tokens[name] = text
    return tokens


def _normalize_messages(messages):
    out = []
    for message in messages:
        if not isinstance(message, dict):
            raise ChatTemplateError("every message must be an object, got %r" % (message,))
        message = {k: v for k, v in message.items() if v is not None}
        reasoning = next((message[k] for k in REASONING_FIELDS if message.get(k) is not None), None)
        if reasoning is not None:
            message = {"thinking": reasoning, **message, "reasoning_content": reasoning}
        out.append(message)
    return out


class ChatTemplate:
    """One compiled template plus the special tokens it is rendered with."""

    def __init__(self, source, special_tokens=None, named_sources=None):
        self.source = source
        self.special_tokens = dict(special_tokens or {})
        self._env = _environment()
        self._compiled = self._env.from_string(source) if source is not None else None
        self._named = {name: self._env.from_string(text) for name, text in (named_sources or {}).items()}

    def _template_for(self, tools):
        if self._named:
            if tools is not None and "tool_use" in self._named:
                return self._named["tool_use"]
            if "default" in self._named:
                return self._named["default"]
            raise ChatTemplateError("the model has several chat templates and none is named default: %s" %
                                    sorted(self._named))
        return self._compiled

    def render(self, messages, add_generation_prompt=True, tools=None, documents=None, **extra):
        """The prompt text. Raises ChatTemplateError when the template refuses the conversation."""
        if not messages:
            raise ChatTemplateError("cannot apply a chat template to an empty conversation")
        template = self._template_for(tools)
        context = {**self.special_tokens, **extra}
        try:
            return template.render(messages=_normalize_messages(messages), tools=tools, documents=documents,
                                   add_generation_prompt=add_generation_prompt, **context)
        except jinja2.exceptions.TemplateError as e:
            raise ChatTemplateError(str(e)) from e
        except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
            raise ChatTemplateError("%s: %s" % (type(e).__name__, e)) from e

    @staticmethod
    def from_model_dir(model_dir, override_file=None):
        """The template of a Hugging Face-style model folder (tokenizer_config.json and an optional
        chat_template.jinja), or of `override_file` when given. None when the model has none."""
        config = {}
        config_path = os.path.join(model_dir, "tokenizer_config.json") if model_dir else None
        if config_path and os.path.exists(config_path):
            with open(config_path, encoding="utf-8") as f:
                config = json.load(f)
        special = special_tokens_from_config(config)
        if override_file:
            with open(override_file, encoding="utf-8") as f:
                return ChatTemplate(f.read(), special)
        jinja_path = os.path.join(model_dir, "chat_template.jinja") if model_dir else None
        if jinja_path and os.path.exists(jinja_path):
            with open(jinja_path, encoding="utf-8") as f:
                return ChatTemplate(f.read(), special)
        source = config.get("chat_template")
        if isinstance(source, list):
            named = {entry["name"]: entry["template"] for entry in source}
            return ChatTemplate(None, special, named_sources=named)
        if isinstance(source, str):
            return ChatTemplate(source, special)
        return None
