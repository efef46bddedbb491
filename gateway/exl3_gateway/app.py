"""The HTTP side: FastAPI routes /v1/models, /v1/completions and /v1/chat/completions (whole or
streamed as server-sent events), OpenAI-shaped errors, and the optional API key."""

import contextlib
import hmac
import json
import time
import uuid

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from . import params
from .backend import Backend
from .chat_template import ChatTemplateError
from .errors import OpenAIError, invalid, invalid_api_key, model_not_found

FINISH = {0: None, 1: "length", 2: "stop", 3: "stop", 4: "stop", 5: "length"}


class ServedModel:
    """What the gateway serves: the name clients must send, the chat template (or None), and the
    extra stop tokens of chat turns (the template's eos_token when the model does not stop on it)."""

    def __init__(self, name, chat_template, created, max_context):
        self.name = name
        self.chat_template = chat_template
        self.created = created
        self.max_context = max_context
        self.chat_stop_token_ids = []


def error_response(e):
    return JSONResponse(e.body(), status_code=e.status)


def sse(obj):
    return "data: " + json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n\n"


def usage_of(u):
    return {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens,
            "total_tokens": u.prompt_tokens + u.completion_tokens}


def _utf8(text):
    return list(text.encode("utf-8"))


async def chat_logprobs(backend, entries, top_n):
    ids = [e.token_id for e in entries] + [a.token_id for e in entries for a in e.top[:top_n]]
    texts = dict(zip(ids, await backend.token_texts(ids)))
    content = []
    for e in entries:
        top = [{"token": texts[a.token_id], "logprob": a.logprob, "bytes": _utf8(texts[a.token_id])}
               for a in e.top[:top_n]]
        content.append({"token": texts[e.token_id], "logprob": e.logprob, "bytes": _utf8(texts[e.token_id]),
                        "top_logprobs": top})
    return {"content": content}


async def completion_logprobs(backend, entries, top_n, offset):
    """OpenAI's legacy completions logprobs; returns (object, text offset after these tokens)."""
    ids = [e.token_id for e in entries] + [a.token_id for e in entries for a in e.top[:top_n]]
    texts = dict(zip(ids, await backend.token_texts(ids)))
    out = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
    for e in entries:
        out["tokens"].append(texts[e.token_id])
        out["token_logprobs"].append(e.logprob)
        out["top_logprobs"].append({texts[a.token_id]: a.logprob for a in e.top[:top_n]})
        out["text_offset"].append(offset)
        offset += len(texts[e.token_id])
    return out, offset


def create_app(served, backend_factory, api_key=None):
    """The FastAPI app. backend_factory() makes the Backend inside the server's event loop."""
    state = {}

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        state["backend"] = backend_factory()
        try:
            yield
        finally:
            await state["backend"].close()

    app = FastAPI(title="exl3 OpenAI-compatible gateway", docs_url=None, redoc_url=None, openapi_url=None,
                  lifespan=lifespan)

    def backend() -> Backend:
        return state["backend"]

    @app.exception_handler(OpenAIError)
    async def openai_error(_request, e):
        return error_response(e)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request, e):
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code)
        return error_response(OpenAIError(e.status_code, str(e.detail), "invalid_request_error", None, code))

    @app.exception_handler(Exception)
    async def internal_error(_request, e):
        return error_response(OpenAIError(500, "internal error: %s: %s" % (type(e).__name__, e), "server_error",
                                          None, "internal_error"))

    @app.middleware("http")
    async def check_api_key(request, call_next):
        if api_key is not None and request.url.path.startswith("/v1"):
            header = request.headers.get("authorization", "")
            given = header[7:].strip() if header[:7].lower() == "bearer " else ""
            if not hmac.compare_digest(given.encode(), api_key.encode()):
                return error_response(invalid_api_key())
        return await call_next(request)

    async def body_of(request):
        raw = await request.body()
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as e:
            raise invalid("the request body is not valid JSON: %s" % e)
        params.check_body(body)
        return body

    def check_model(body):
        name = params.model_name(body)
        if name != served.name:
            raise model_not_found(name, served.name)

    def model_card():
        return {"id": served.name, "object": "model", "created": served.created, "owned_by": "exl3",
                "max_model_len": served.max_context}

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def list_models():
        return {"object": "list", "data": [model_card()]}

    @app.get("/v1/models/{model_id:path}")
    async def get_model(model_id: str):
        if model_id != served.name:
            raise model_not_found(model_id, served.name)
        return model_card()

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        body = await body_of(request)
        messages, tools, g = params.chat(body)
        check_model(body)
        if served.chat_template is None:
            raise invalid("the model has no chat template (start the gateway with --chat-template FILE); "
                          "use /v1/completions", "messages", "no_chat_template")
        try:
            g.prompt_text = served.chat_template.render(messages, add_generation_prompt=True, tools=tools)
        except ChatTemplateError as e:
            raise invalid("the chat template refused the messages: %s" % e, "messages")
        g.add_bos = False  # the template writes BOS itself where the model wants it
        g.stop_token_ids = list(served.chat_stop_token_ids)
        request_pb = backend().request(g)
        rid = "chatcmpl-" + uuid.uuid4().hex
        created = int(time.time())
        if g.stream:
            return await streaming_response(stream_chat(await open_stream(request_pb), g, rid, created))
        r = await backend().generate(request_pb)
        choice = {"index": 0, "message": {"role": "assistant", "content": r.text},
                  "finish_reason": FINISH.get(r.finish_reason), "logprobs": None}
        if g.want_logprobs:
            choice["logprobs"] = await chat_logprobs(backend(), r.logprobs, g.logprobs)
        return {"id": rid, "object": "chat.completion", "created": created, "model": served.name,
                "choices": [choice], "usage": usage_of(r.usage)}

    async def open_stream(request_pb):
        """The coordinator's stream with its first message already read, so that a request it
        refuses gets an HTTP error status instead of a 200 stream holding an error."""
        messages = backend().generate_stream(request_pb)
        try:
            first = await messages.__anext__()
        except StopAsyncIteration:
            first = None
        except BaseException:
            await messages.aclose()
            raise
        return first, messages

    async def replay(opened):
        first, messages = opened
        try:
            if first is not None:
                yield first
                async for m in messages:
                    yield m
        finally:
            await messages.aclose()

    async def streaming_response(events):
        return StreamingResponse(events, media_type="text/event-stream",
                                 headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})

    async def stream_chat(opened, g, rid, created):
        def chunk(delta, finish=None, logprobs=None):
            return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": served.name,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": logprobs}]}

        async with contextlib.aclosing(replay(opened)) as messages:
            try:
                yield sse(chunk({"role": "assistant", "content": ""}))
                async for m in messages:
                    lp = None
                    if g.want_logprobs and m.logprobs:
                        lp = await chat_logprobs(backend(), m.logprobs, g.logprobs)
                    if m.text or lp:
                        yield sse(chunk({"content": m.text}, None, lp))
                    finish = FINISH.get(m.finish_reason)
                    if finish is not None:
                        yield sse(chunk({}, finish))
                        if g.include_usage:
                            yield sse({"id": rid, "object": "chat.completion.chunk", "created": created,
                                       "model": served.name, "choices": [], "usage": usage_of(m.usage)})
                yield "data: [DONE]\n\n"
            except OpenAIError as e:
                yield sse(e.body())

    @app.post("/v1/completions")
    async def completions(request: Request):
        body = await body_of(request)
        g = params.completion(body)
        check_model(body)
        request_pb = backend().request(g)
        rid = "cmpl-" + uuid.uuid4().hex
        created = int(time.time())
        if g.stream:
            return await streaming_response(stream_completion(await open_stream(request_pb), g, rid, created))
        r = await backend().generate(request_pb)
        choice = {"index": 0, "text": r.text, "finish_reason": FINISH.get(r.finish_reason), "logprobs": None}
        if g.want_logprobs:
            choice["logprobs"], _ = await completion_logprobs(backend(), r.logprobs, g.logprobs, 0)
        return {"id": rid, "object": "text_completion", "created": created, "model": served.name,
                "choices": [choice], "usage": usage_of(r.usage)}

    async def stream_completion(opened, g, rid, created):
        def chunk(text, finish=None, logprobs=None):
            return {"id": rid, "object": "text_completion", "created": created, "model": served.name,
                    "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": logprobs}]}

        offset = 0
        async with contextlib.aclosing(replay(opened)) as messages:
            try:
                async for m in messages:
                    lp = None
                    if g.want_logprobs and m.logprobs:
                        lp, offset = await completion_logprobs(backend(), m.logprobs, g.logprobs, offset)
                    finish = FINISH.get(m.finish_reason)
                    if m.text or lp or finish is not None:
                        yield sse(chunk(m.text, finish, lp))
                    if finish is not None and g.include_usage:
                        yield sse({"id": rid, "object": "text_completion", "created": created,
                                   "model": served.name, "choices": [], "usage": usage_of(m.usage)})
                yield "data: [DONE]\n\n"
            except OpenAIError as e:
                yield sse(e.body())

    return app
