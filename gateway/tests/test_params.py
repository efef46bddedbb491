"""Request validation and mapping without a server: every bad value is a 400 naming its parameter
before any gRPC call; good values land in the GenerateRequest fields; gRPC codes map to HTTP
statuses; a stream that goes quiet ends with a 504 error instead of hanging."""

import asyncio

import grpc
import pytest

from exl3_gateway import params
from exl3_gateway.backend import Backend, BackendConfig
from exl3_gateway.errors import OpenAIError, from_grpc
from exl3_gateway.stubs import default_proto_path, load_stubs

pb, pb_grpc = load_stubs(default_proto_path())
MSG = [{"role": "user", "content": "hi"}]


def bad(fn, body, param):
    with pytest.raises(OpenAIError) as e:
        fn(body)
    assert e.value.status == 400 and e.value.type == "invalid_request_error"
    assert e.value.param == param, e.value.message
    return e.value


@pytest.mark.parametrize("field,value", [
    ("temperature", -1), ("temperature", 2.5), ("temperature", "1"), ("temperature", True),
    ("top_p", 1.5), ("top_p", -0.1), ("presence_penalty", -2.5), ("frequency_penalty", 3),
    ("max_tokens", 0), ("max_tokens", 1.5), ("max_completion_tokens", -3), ("n", 2), ("n", 0),
    ("seed", 1.5), ("seed", 1 << 64), ("stop", 5), ("stop", ["a", 3]), ("stop", [""]), ("logit_bias", {"x": 1}),
    ("logit_bias", {"5": 101}), ("top_logprobs", 21), ("logprobs", 1), ("stream", "yes"), ("top_k", -2),
    ("min_p", 2), ("repetition_penalty", 0), ("stream_options", {"include_usage": True}),
])
def test_chat_bad_values(field, value):
    body = {"model": "m", "messages": MSG, field: value}
    if field == "top_logprobs":
        body["logprobs"] = True
    bad(params.chat, body, field)


def test_chat_bad_messages():
    bad(params.chat, {"model": "m"}, "messages")
    bad(params.chat, {"model": "m", "messages": []}, "messages")
    bad(params.chat, {"model": "m", "messages": ["hi"]}, "messages[0]")
    bad(params.chat, {"model": "m", "messages": [{"role": "user"}]}, "messages[0].content")
    bad(params.chat, {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]},
        "messages[0].content")
    bad(params.chat, {"messages": MSG}, "model")
    bad(params.chat, {"model": "m", "messages": MSG, "top_logprobs": 2}, "top_logprobs")
    bad(params.chat, {"model": "m", "messages": MSG, "response_format": {"type": "json_object"}}, "response_format")


def test_completion_bad_values():
    bad(params.completion, {"model": "m"}, "prompt")
    bad(params.completion, {"model": "m", "prompt": ["a", "b"]}, "prompt")
    bad(params.completion, {"model": "m", "prompt": [1, -2]}, "prompt")
    bad(params.completion, {"model": "m", "prompt": "x", "logprobs": 21}, "logprobs")
    bad(params.completion, {"model": "m", "prompt": "x", "echo": True}, "echo")
    bad(params.completion, {"model": "m", "prompt": "x", "best_of": 3}, "best_of")


def request_of(g):
    backend = Backend.__new__(Backend)
    backend.pb = pb
    return Backend.request(backend, g)


def test_mapping_to_generate_request():
    messages, tools, g = params.chat({
        "model": "m", "messages": [{"role": "developer", "content": [{"type": "text", "text": "a"},
                                                                    {"type": "text", "text": "b"}]}] + MSG,
        "temperature": 0.5, "top_p": 0.9, "presence_penalty": -1, "frequency_penalty": 1.25, "seed": -1,
        "max_tokens": 7, "stop": "END", "logprobs": True, "top_logprobs": 0, "logit_bias": {"17": -100},
        "stream": True, "stream_options": {"include_usage": True}, "top_k": 40, "ignore_eos": True})
    assert messages[0] == {"role": "system", "content": "ab"} and tools is None
    assert g.stream and g.include_usage
    g.prompt_text = "p"
    r = request_of(g)
    s = r.sampling
    assert (s.temperature, s.top_p, s.presence_penalty, s.frequency_penalty) == pytest.approx((0.5, 0.9, -1, 1.25))
    assert s.seed == (1 << 64) - 1 and s.top_k == 40 and dict(s.logit_bias) == {17: -100.0}
    assert s.logprobs == 1  # the chosen token's logprob needs one alternative; none are reported
    assert r.stopping.max_new_tokens == 7 and list(r.stopping.stop_strings) == ["END"] and r.stopping.ignore_eos
    assert r.prompt == "p" and r.skip_special_tokens

    g = params.completion({"model": "m", "prompt": [[5, 6, 7]], "logprobs": 3, "top_p": 0})
    r = request_of(g)
    assert list(r.prompt_tokens.ids) == [5, 6, 7] and r.sampling.logprobs == 3
    assert r.sampling.temperature == 0 and not r.sampling.HasField("top_p")  # top_p 0 = greedy
    assert r.stopping.max_new_tokens == 16  # OpenAI's default for completions
    r = request_of(params.completion({"model": "m", "prompt": "x", "n": 1, "stop": None}))
    assert not r.sampling.HasField("temperature") and not r.sampling.HasField("seed") and r.sampling.logprobs == 0


@pytest.mark.parametrize("code,status", [
    (grpc.StatusCode.INVALID_ARGUMENT, 400), (grpc.StatusCode.RESOURCE_EXHAUSTED, 429),
    (grpc.StatusCode.UNAVAILABLE, 503), (grpc.StatusCode.UNAUTHENTICATED, 401),
    (grpc.StatusCode.DEADLINE_EXCEEDED, 504), (grpc.StatusCode.INTERNAL, 500),
])
def test_grpc_codes(code, status):
    e = from_grpc(code, "why")
    assert e.status == status
    body = e.body()["error"]
    assert set(body) == {"message", "type", "param", "code"} and "why" in body["message"]


class QuietCall:
    """A Generate call that never sends anything."""

    def __init__(self):
        self.cancelled = False

    async def read(self):
        await asyncio.sleep(3600)

    def cancel(self):
        self.cancelled = True


def test_quiet_stream_ends_with_504():
    call = QuietCall()
    backend = Backend.__new__(Backend)
    backend.config = BackendConfig("unused", idle_timeout_s=0.2)
    backend.stub = type("Stub", (), {"Generate": lambda self, *a, **k: call})()

    async def consume():
        async for _ in backend.generate_stream(pb.GenerateRequest()):
            pass

    with pytest.raises(OpenAIError) as e:
        asyncio.run(asyncio.wait_for(consume(), 10))
    assert e.value.status == 504 and e.value.code == "timeout"
    assert call.cancelled
