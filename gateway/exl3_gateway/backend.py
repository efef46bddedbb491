"""The coordinator, seen through its public gRPC API only (exl3.v1.Inference): model info,
token texts, and completions streamed or whole. Every call carries a deadline; a stream also ends
when no message arrives for `idle_timeout_s`, so a stuck coordinator can never hang a client."""

import asyncio
import time

import grpc

from .errors import from_rpc_error, stream_idle_timeout


def channel_credentials(tls_ca):
    if not tls_ca:
        return None
    with open(tls_ca, "rb") as f:
        return grpc.ssl_channel_credentials(f.read())


def read_token(path):
    if not path:
        return None
    with open(path, encoding="utf-8") as f:
        token = f.read().strip()
    if not token:
        raise ValueError("token file %s is empty" % path)
    return token


class BackendConfig:
    def __init__(self, target, auth_token=None, tls_ca=None, tls_server_name=None, rpc_timeout_s=10.0,
                 request_timeout_s=3600.0, idle_timeout_s=300.0):
        self.target = target
        self.auth_token = auth_token
        self.tls_ca = tls_ca
        self.tls_server_name = tls_server_name
        self.rpc_timeout_s = rpc_timeout_s
        self.request_timeout_s = request_timeout_s
        self.idle_timeout_s = idle_timeout_s

    def metadata(self):
        return (("authorization", "Bearer " + self.auth_token),) if self.auth_token else ()

    def options(self):
        opts = [("grpc.max_receive_message_length", 64 << 20)]
        if self.tls_server_name:
            opts.append(("grpc.ssl_target_name_override", self.tls_server_name))
        return opts


def blocking_channel(config):
    """A synchronous channel, for the start-up calls made before the event loop runs."""
    creds = channel_credentials(config.tls_ca)
    if creds:
        return grpc.secure_channel(config.target, creds, config.options())
    return grpc.insecure_channel(config.target, config.options())


def fetch_model_info(config, pb, pb_grpc, wait_s):
    """ModelInfo over a short-lived blocking channel, retried until the coordinator answers or
    wait_s passes (start-up check); raises grpc.RpcError with the last failure."""
    deadline = time.monotonic() + wait_s
    while True:
        channel = blocking_channel(config)
        try:
            stub = pb_grpc.InferenceStub(channel)
            return stub.ModelInfo(pb.ModelInfoRequest(), timeout=config.rpc_timeout_s, metadata=config.metadata())
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() >= deadline:
                raise
            time.sleep(0.2)
        finally:
            channel.close()


def chat_stop_tokens(config, pb, pb_grpc, template, info):
    """The template's eos_token as a stop token id for chat turns, when it is one token that the
    model does not already stop on (e.g. a ChatML model whose config names another EOS)."""
    eos = template.special_tokens.get("eos_token")
    if not eos:
        return []
    channel = blocking_channel(config)
    try:
        ids = pb_grpc.InferenceStub(channel).Tokenize(pb.TokenizeRequest(text=eos, add_bos=False),
                                                      timeout=config.rpc_timeout_s, metadata=config.metadata()).ids
    except grpc.RpcError:
        return []
    finally:
        channel.close()
    if len(ids) == 1 and ids[0] not in info.eos_token_ids:
        return [ids[0]]
    return []


class Backend:
    """Async client of one coordinator; create inside the running event loop."""

    def __init__(self, config, pb, pb_grpc):
        self.config = config
        self.pb = pb
        creds = channel_credentials(config.tls_ca)
        self.channel = (grpc.aio.secure_channel(config.target, creds, config.options()) if creds
                        else grpc.aio.insecure_channel(config.target, config.options()))
        self.stub = pb_grpc.InferenceStub(self.channel)
        self._token_text = {}

    async def close(self):
        await self.channel.close(grace=None)

    async def tokenize(self, text):
        try:
            r = await self.stub.Tokenize(self.pb.TokenizeRequest(text=text, add_bos=False),
                                         timeout=self.config.rpc_timeout_s, metadata=self.config.metadata())
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        return list(r.ids)

    async def token_texts(self, ids):
        """Each token's own text (for logprobs), cached per id."""
        missing = sorted({i for i in ids if i not in self._token_text})

        async def one(i):
            r = await self.stub.Detokenize(self.pb.DetokenizeRequest(ids=[i]), timeout=self.config.rpc_timeout_s,
                                           metadata=self.config.metadata())
            self._token_text[i] = r.text

        try:
            await asyncio.gather(*(one(i) for i in missing))
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e
        return [self._token_text[i] for i in ids]

    def request(self, g):
        """The GenerateRequest of a validated params.Generation."""
        pb = self.pb
        r = pb.GenerateRequest(skip_special_tokens=True)
        if g.prompt_tokens is not None:
            r.prompt_tokens.ids.extend(g.prompt_tokens)
        else:
            r.prompt = g.prompt_text
        if g.add_bos is not None:
            r.add_bos = g.add_bos
        s = r.sampling
        for name in ("temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                     "frequency_penalty", "seed"):
            value = getattr(g, name)
            if value is not None:
                setattr(s, name, value)
        for token, bias in g.logit_bias.items():
            s.logit_bias[token] = bias
        if g.want_logprobs:
            s.logprobs = max(1, g.logprobs)
        if g.max_tokens is not None:
            r.stopping.max_new_tokens = g.max_tokens
        r.stopping.stop_strings.extend(g.stop)
        r.stopping.stop_token_ids.extend(g.stop_token_ids)
        r.stopping.ignore_eos = g.ignore_eos
        return r

    async def generate(self, request):
        try:
            return await self.stub.GenerateUnary(request, timeout=self.config.request_timeout_s,
                                                 metadata=self.config.metadata())
        except grpc.RpcError as e:
            raise from_rpc_error(e) from e

    async def generate_stream(self, request):
        """Yields GenerateResponses; raises OpenAIError on a gRPC failure or an idle stream. The call
        is cancelled when the consumer stops early (client gone)."""
        call = self.stub.Generate(request, timeout=self.config.request_timeout_s, metadata=self.config.metadata())
        try:
            while True:
                try:
                    message = await asyncio.wait_for(call.read(), self.config.idle_timeout_s)
                except asyncio.TimeoutError:
                    raise stream_idle_timeout(self.config.idle_timeout_s) from None
                except grpc.RpcError as e:
                    raise from_rpc_error(e) from e
                if message is grpc.aio.EOF:
                    return
                yield message
        finally:
            call.cancel()
