"""Acceptance 5: the official openai client (PyPI) against exl3-launch --openai-port on a real CPU
cluster (2 workers, tensor parallel, the embedded model with a ChatML template, an API key): chat and
completions streamed and whole, usage and finish_reason, logprobs, stop strings, seeds; bad
requests get OpenAI-shaped 4xx errors; the API key is enforced. Greedy (temperature 0) outputs
are deterministic, so streamed text must equal the whole response's exactly."""

import json
import os

import httpx
import openai
import pytest

from exl3_gateway.chat_template import ChatTemplate
from launched_cluster import CHATML, MODEL_DIR, MODEL_NAME, LaunchedCluster

API_KEY = "test-key-6f1d2c"
HTTP_TIMEOUT_S = 120
QUESTION = [{"role": "system", "content": "You are a helpful assistant."},
            {"role": "user", "content": "Tell me about the history of the city."}]
PROMPT = "The history of the city"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("openai_api")
    key_file = tmp / "api-key"
    key_file.write_text(API_KEY + "\n")
    c = LaunchedCluster(str(tmp / "exl3-launch.log"), ["--openai-api-key-file", str(key_file)])
    try:
        c.wait_ready()
    except Exception:
        c.stop()
        raise
    yield c
    code = c.stop()
    assert code == 0, "exl3-launch exit %s after SIGTERM, expected 0\n%s" % (code, c.log_tail())


@pytest.fixture(scope="module")
def client(cluster):
    return openai.OpenAI(base_url=cluster.openai_url + "/v1", api_key=API_KEY, timeout=HTTP_TIMEOUT_S, max_retries=0)


def post(cluster, path, body, key=API_KEY, raw=None):
    headers = {"Authorization": "Bearer " + key} if key is not None else {}
    content = raw if raw is not None else json.dumps(body)
    return httpx.post(cluster.openai_url + path, content=content, headers={**headers, "Content-Type": "application/json"},
                      timeout=HTTP_TIMEOUT_S)


def assert_openai_error(response, status, param=None, code=None):
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert isinstance(error["message"], str) and error["message"], error
    assert error["type"] == ("invalid_request_error" if status in (400, 401, 404) else error["type"]), error
    if param is not None:
        assert error["param"] == param, error
    if code is not None:
        assert error["code"] == code, error
    return error


def test_models(client):
    models = client.models.list()
    assert [m.id for m in models.data] == [MODEL_NAME]
    assert client.models.retrieve(MODEL_NAME).id == MODEL_NAME


def test_chat_whole_and_streamed_agree(client):
    whole = client.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=12, temperature=0)
    choice = whole.choices[0]
    assert choice.message.role == "assistant"
    assert choice.message.content.strip() != ""
    assert choice.finish_reason == "length"
    assert whole.usage.completion_tokens == 12
    assert whole.usage.prompt_tokens > 10
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + 12
    assert whole.object == "chat.completion" and whole.model == MODEL_NAME

    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=12, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["length"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert chunks[-1].usage.prompt_tokens == whole.usage.prompt_tokens
    assert len(chunks) >= 4, "expected the answer in several chunks, got %d" % len(chunks)


def test_chat_prompt_is_the_rendered_template(client):
    """The chat prompt is the ChatML rendering tokenized without BOS: the same text through
    /v1/completions (which adds the tokenizer's BOS) has one token more, and greedy continuations match."""
    rendered = ChatTemplate.from_model_dir(MODEL_DIR, CHATML).render(QUESTION, add_generation_prompt=True)
    chat = client.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=6, temperature=0)
    comp = client.completions.create(model=MODEL_NAME, prompt=rendered, max_tokens=6, temperature=0)
    assert comp.usage.prompt_tokens == chat.usage.prompt_tokens + 1


def test_completions_whole_and_streamed_agree(client):
    whole = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=10, temperature=0)
    assert whole.object == "text_completion"
    assert whole.choices[0].text.strip() != ""
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage.completion_tokens == 10 and whole.usage.prompt_tokens > 0
    assert whole.usage.total_tokens == whole.usage.prompt_tokens + whole.usage.completion_tokens
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=10, temperature=0,
                                            stream=True))
    assert "".join(c.choices[0].text for c in chunks) == whole.choices[0].text
    assert chunks[-1].choices[0].finish_reason == "length"
    assert all(c.choices[0].finish_reason is None for c in chunks[:-1])


def test_default_max_tokens_of_completions_is_16(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, temperature=0,
                                  extra_body={"ignore_eos": True})
    assert r.usage.completion_tokens == 16 and r.choices[0].finish_reason == "length"


def test_chat_logprobs(client):
    r = client.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=8, temperature=0,
                                       logprobs=True, top_logprobs=3)
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 8
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        values = [t.logprob for t in entry.top_logprobs]
        assert values == sorted(values, reverse=True)
        # Greedy: the chosen token is the most likely one.
        assert entry.token == entry.top_logprobs[0].token
        assert entry.logprob == pytest.approx(values[0], abs=1e-6)
        assert bytes(entry.bytes).decode("utf-8", errors="replace") == entry.token
    # Streamed logprobs are the same values.
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=8, temperature=0,
                                                 logprobs=True, top_logprobs=3, stream=True))
    streamed = [e for c in chunks if c.choices and c.choices[0].logprobs for e in c.choices[0].logprobs.content]
    assert [e.token for e in streamed] == [e.token for e in content]
    assert [e.logprob for e in streamed] == pytest.approx([e.logprob for e in content], abs=1e-6)
    # logprobs without alternatives.
    r = client.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=4, temperature=0,
                                       logprobs=True)
    assert len(r.choices[0].logprobs.content) == 4
    assert all(e.top_logprobs == [] for e in r.choices[0].logprobs.content)
    r = client.chat.completions.create(model=MODEL_NAME, messages=QUESTION, max_tokens=4, temperature=0)
    assert r.choices[0].logprobs is None


def test_completion_logprobs(client):
    r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=6, temperature=0, logprobs=2)
    lp = r.choices[0].logprobs
    assert len(lp.tokens) == len(lp.token_logprobs) == len(lp.top_logprobs) == len(lp.text_offset) == 6
    assert all(len(t) == 2 for t in lp.top_logprobs)
    assert all(v <= 0 for v in lp.token_logprobs)
    assert lp.text_offset[0] == 0 and lp.text_offset == sorted(lp.text_offset)
    assert "".join(lp.tokens) == r.choices[0].text


def test_stop_strings(client):
    base = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0,
                                     extra_body={"ignore_eos": True}).choices[0].text
    words = [w for w in base[3:].split() if len(w) >= 2]
    assert words, "no word to stop at in %r" % base
    stop = words[len(words) // 2]
    expected = base[:base.index(stop)]
    for form in (stop, [stop, "\u00a7never\u00a7"]):
        r = client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0, stop=form,
                                      extra_body={"ignore_eos": True})
        assert r.choices[0].text == expected, "stop %r in %r" % (stop, base)
        assert r.choices[0].finish_reason == "stop"
    chunks = list(client.completions.create(model=MODEL_NAME, prompt=PROMPT, max_tokens=24, temperature=0, stop=stop,
                                            stream=True, extra_body={"ignore_eos": True}))
    assert "".join(c.choices[0].text for c in chunks) == expected
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_seed_and_penalties(client):
    kwargs = dict(model=MODEL_NAME, messages=QUESTION, max_tokens=12, temperature=1.0, top_p=0.95, seed=1234,
                  presence_penalty=1.5, frequency_penalty=0.5)
    a = client.chat.completions.create(**kwargs).choices[0].message.content
    b = client.chat.completions.create(**kwargs).choices[0].message.content
    assert a == b and a != ""
    texts = {client.chat.completions.create(**{**kwargs, "seed": s}).choices[0].message.content for s in (1, 2, 3)}
    assert len(texts) >= 2, "three seeds gave the same text %r" % texts


def expect_status(call, error_class, status, param=None, code=None):
    with pytest.raises(error_class) as e:
        call()
    assert e.value.status_code == status
    body = e.value.body
    assert isinstance(body, dict) and set(body) >= {"message", "type", "param", "code"}, body
    if param is not None:
        assert body["param"] == param, body
    if code is not None:
        assert body["code"] == code, body
    return body


def test_bad_requests_get_openai_errors(client, cluster):
    chat = client.chat.completions.create
    expect_status(lambda: chat(model=MODEL_NAME, messages=QUESTION, temperature=-1), openai.BadRequestError, 400,
                  "temperature")
    expect_status(lambda: chat(model=MODEL_NAME, messages=QUESTION, top_p=1.5), openai.BadRequestError, 400, "top_p")
    expect_status(lambda: chat(model=MODEL_NAME, messages=QUESTION, n=2), openai.BadRequestError, 400, "n")
    expect_status(lambda: chat(model=MODEL_NAME, messages=QUESTION, presence_penalty=3), openai.BadRequestError, 400,
                  "presence_penalty")
    expect_status(lambda: chat(model=MODEL_NAME, messages=QUESTION, top_logprobs=30, logprobs=True),
                  openai.BadRequestError, 400, "top_logprobs")
    expect_status(lambda: chat(model="no-such-model", messages=QUESTION), openai.NotFoundError, 404, "model",
                  "model_not_found")
    expect_status(lambda: client.completions.create(model="gpt-4", prompt="x"), openai.NotFoundError, 404,
                  code="model_not_found")
    expect_status(lambda: chat(model=MODEL_NAME, messages=[]), openai.BadRequestError, 400, "messages")
    expect_status(lambda: chat(model=MODEL_NAME, messages=[{"role": "wizard", "content": "x"}]),
                  openai.BadRequestError, 400, "messages[0].role")
    # Refused by the coordinator (INVALID_ARGUMENT): more new tokens than the context holds, whole and streamed.
    body = expect_status(lambda: chat(model=MODEL_NAME, messages=QUESTION, max_tokens=100000), openai.BadRequestError,
                         400)
    assert "max_new_tokens" in body["message"], body
    expect_status(lambda: list(chat(model=MODEL_NAME, messages=QUESTION, max_tokens=100000, stream=True)),
                  openai.BadRequestError, 400)
    # Raw HTTP: malformed JSON, a missing field, a body that is not an object, an unknown route.
    assert_openai_error(post(cluster, "/v1/chat/completions", None, raw="{not json"), 400)
    assert_openai_error(post(cluster, "/v1/chat/completions", {"model": MODEL_NAME}), 400, "messages")
    assert_openai_error(post(cluster, "/v1/chat/completions", [1, 2]), 400)
    assert_openai_error(post(cluster, "/v1/completions", {"model": MODEL_NAME}), 400, "prompt")
    assert_openai_error(post(cluster, "/v1/completions", {"model": MODEL_NAME, "prompt": "x", "max_tokens": "9"}), 400,
                        "max_tokens")
    assert_openai_error(post(cluster, "/v1/completions", {"model": MODEL_NAME, "prompt": "x", "temperature": True}),
                        400, "temperature")
    assert_openai_error(post(cluster, "/v1/nothing", {}), 404)


def test_api_key_is_enforced(cluster):
    for key in (None, "wrong-key"):
        assert_openai_error(post(cluster, "/v1/completions", {"model": MODEL_NAME, "prompt": "x"}, key=key), 401,
                            code="invalid_api_key")
        headers = {"Authorization": "Bearer " + key} if key else {}
        r = httpx.get(cluster.openai_url + "/v1/models", headers=headers, timeout=HTTP_TIMEOUT_S)
        assert_openai_error(r, 401, code="invalid_api_key")
    bad = openai.OpenAI(base_url=cluster.openai_url + "/v1", api_key="wrong-key", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()
    assert httpx.get(cluster.openai_url + "/health", timeout=HTTP_TIMEOUT_S).status_code == 200


def test_gateway_listens_on_loopback_only(cluster):
    host = cluster.openai_url.split("//")[1].rsplit(":", 1)[0]
    assert host == "127.0.0.1"
    assert len(cluster.gateway_pids()) == 1
