"""Validation of OpenAI request bodies and their mapping to the coordinator's GenerateRequest.
Every value is checked here, before any gRPC call, and a bad one is a 400 invalid_request_error
naming the parameter. Ranges follow OpenAI's API reference where it has them (temperature [0, 2],
top_p [0, 1], penalties [-2, 2], top_logprobs [0, 20], logit_bias [-100, 100])."""

from dataclasses import dataclass, field

from .errors import invalid

UINT64 = 1 << 64
INT32_MAX = (1 << 31) - 1
CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


@dataclass
class Generation:
    """What one completion asks the coordinator for (prompt set by the endpoint)."""
    prompt_text: str = None
    prompt_tokens: list = None
    add_bos: bool = None
    temperature: float = None
    top_p: float = None
    top_k: int = None
    min_p: float = None
    repetition_penalty: float = None
    ignore_eos: bool = False
    presence_penalty: float = None
    frequency_penalty: float = None
    seed: int = None
    logit_bias: dict = field(default_factory=dict)
    max_tokens: int = None
    stop: list = field(default_factory=list)
    stop_token_ids: list = field(default_factory=list)
    logprobs: int = 0          # alternatives asked for (0..20)
    want_logprobs: bool = False
    stream: bool = False
    include_usage: bool = False


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _is_int(v):
    return isinstance(v, int) and not isinstance(v, bool)


def number(body, name, lo, hi, lo_open=False):
    v = body.get(name)
    if v is None:
        return None
    if not _is_number(v):
        raise invalid("'%s' must be a number, got %s" % (name, _show(v)), name)
    if v < lo or v > hi or (lo_open and v == lo):
        raise invalid("'%s' is %s; it must be in %s%g, %g]" % (name, _show(v), "(" if lo_open else "[", lo, hi), name)
    return float(v)


def integer(body, name, lo, hi):
    v = body.get(name)
    if v is None:
        return None
    if not _is_int(v):
        raise invalid("'%s' must be an integer, got %s" % (name, _show(v)), name)
    if v < lo or v > hi:
        raise invalid("'%s' is %d; it must be in [%d, %d]" % (name, v, lo, hi), name)
    return v


def boolean(body, name, default=False):
    v = body.get(name)
    if v is None:
        return default
    if not isinstance(v, bool):
        raise invalid("'%s' must be a boolean, got %s" % (name, _show(v)), name)
    return v


def _show(v):
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def check_body(body):
    if not isinstance(body, dict):
        raise invalid("the request body must be a JSON object")


def model_name(body):
    v = body.get("model")
    if not isinstance(v, str) or not v:
        raise invalid("'model' is required (a string naming the served model)", "model")
    return v


def _stop(body):
    v = body.get("stop")
    if v is None:
        return []
    if isinstance(v, str):
        v = [v]
    if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
        raise invalid("'stop' must be a string or a list of strings", "stop")
    if any(s == "" for s in v):
        raise invalid("'stop' strings may not be empty", "stop")
    return v


def _logit_bias(body):
    v = body.get("logit_bias")
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise invalid("'logit_bias' must be an object mapping token ids to biases", "logit_bias")
    out = {}
    for key, bias in v.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise invalid("'logit_bias' key %s is not a token id" % _show(key), "logit_bias")
        if token < 0 or token > INT32_MAX:
            raise invalid("'logit_bias' token id %d is out of range" % token, "logit_bias")
        if not _is_number(bias) or bias < -100 or bias > 100:
            raise invalid("'logit_bias' of token %d is %s; biases must be numbers in [-100, 100]" % (token, _show(bias)),
                          "logit_bias")
        out[token] = float(bias)
    return out


def common(body, max_tokens_default=None):
    """The sampling and stopping fields shared by /v1/completions and /v1/chat/completions."""
    g = Generation()
    n = body.get("n")
    if n is not None and (not _is_int(n) or n != 1):
        raise invalid("'n' is %s; only n = 1 is supported" % _show(n), "n")
    best_of = body.get("best_of")
    if best_of is not None and (not _is_int(best_of) or best_of != 1):
        raise invalid("'best_of' is %s; only 1 is supported" % _show(best_of), "best_of")
    g.temperature = number(body, "temperature", 0, 2)
    g.top_p = number(body, "top_p", 0, 1)
    if g.top_p == 0:
        # top_p 0 keeps only the most likely token: greedy.
        g.temperature, g.top_p = 0.0, None
    g.presence_penalty = number(body, "presence_penalty", -2, 2)
    g.frequency_penalty = number(body, "frequency_penalty", -2, 2)
    seed = body.get("seed")
    if seed is not None:
        if not _is_int(seed) or seed < -(1 << 63) or seed >= UINT64:
            raise invalid("'seed' must be a 64-bit integer, got %s" % _show(seed), "seed")
        g.seed = seed % UINT64
    g.logit_bias = _logit_bias(body)
    g.stop = _stop(body)
    g.stream = boolean(body, "stream")
    options = body.get("stream_options")
    if options is not None:
        if not isinstance(options, dict):
            raise invalid("'stream_options' must be an object", "stream_options")
        if not g.stream:
            raise invalid("'stream_options' is only allowed with stream: true", "stream_options")
        g.include_usage = boolean(options, "include_usage")
    # Extensions as vLLM and TabbyAPI accept them (the openai client sends them through extra_body).
    g.top_k = integer(body, "top_k", -1, INT32_MAX)
    if g.top_k == -1:
        g.top_k = 0
    g.min_p = number(body, "min_p", 0, 1)
    g.repetition_penalty = number(body, "repetition_penalty", 0, 10, lo_open=True)
    g.ignore_eos = boolean(body, "ignore_eos")
    g.max_tokens = max_tokens_default
    for name in ("max_tokens", "max_completion_tokens"):
        v = integer(body, name, 1, INT32_MAX)
        if v is not None:
            g.max_tokens = v
    return g


def chat(body):
    """(messages, tools, Generation) of a /v1/chat/completions body."""
    check_body(body)
    model_name(body)
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' is required: a non-empty list of {role, content} objects", "messages")
    normalized = []
    for i, m in enumerate(messages):
        param = "messages[%d]" % i
        if not isinstance(m, dict):
            raise invalid("%s must be an object" % param, param)
        role = m.get("role")
        if role not in CHAT_ROLES:
            raise invalid("%s.role is %s; it must be one of %s" % (param, _show(role), ", ".join(CHAT_ROLES)),
                          param + ".role")
        content = m.get("content")
        if isinstance(content, list):
            texts = []
            for part in content:
                if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise invalid("%s.content parts must be {type: 'text', text: string} (only text is supported)" %
                                  param, param + ".content")
                texts.append(part["text"])
            content = "".join(texts)
        elif content is None:
            if role != "assistant" or not m.get("tool_calls"):
                raise invalid("%s.content is required" % param, param + ".content")
        elif not isinstance(content, str):
            raise invalid("%s.content must be a string or a list of text parts" % param, param + ".content")
        out = dict(m)
        out["role"] = "system" if role == "developer" else role
        out["content"] = content
        normalized.append(out)
    tools = body.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools)):
        raise invalid("'tools' must be a list of objects", "tools")
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") != "text"):
        raise invalid("'response_format' other than {type: 'text'} is not supported", "response_format")
    g = common(body)
    g.want_logprobs = boolean(body, "logprobs")
    top = integer(body, "top_logprobs", 0, 20)
    if top is not None and not g.want_logprobs:
        raise invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    if g.want_logprobs:
        # The coordinator reports the chosen token's log-probability only together with >= 1 alternative.
        g.logprobs = top or 0
    return normalized, tools, g


def completion(body):
    """Generation of a /v1/completions body (OpenAI's default max_tokens there is 16)."""
    check_body(body)
    model_name(body)
    if boolean(body, "echo"):
        raise invalid("'echo' is not supported", "echo")
    if body.get("suffix") is not None:
        raise invalid("'suffix' is not supported", "suffix")
    g = common(body, max_tokens_default=16)
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, str):
        g.prompt_text = prompt
    elif isinstance(prompt, list) and prompt and all(_is_int(t) for t in prompt):
        if any(t < 0 or t > INT32_MAX for t in prompt):
            raise invalid("'prompt' token ids must be non-negative 32-bit integers", "prompt")
        g.prompt_tokens = prompt
    elif prompt is None:
        raise invalid("'prompt' is required", "prompt")
    else:
        raise invalid("'prompt' must be a string, a list of token ids, or a list holding one of them "
                      "(batches of prompts are not supported)", "prompt")
    lp = integer(body, "logprobs", 0, 20)
    if lp is not None:
        g.want_logprobs = True
        g.logprobs = lp
    return g
