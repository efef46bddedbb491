"""exl3-gateway's command line: checks everything it needs before listening (API key file, the
coordinator's ModelInfo over gRPC, the chat template), binds its socket (a port in use is an error),
serves with uvicorn, and announces itself on stdout ("openai gateway serving on http://HOST:PORT")
and, with --ready-file, by writing HOST:PORT to that file (how exl3-launch learns it is up)."""

import argparse
import asyncio
import os
import socket
import sys
import time

import grpc
import uvicorn

from .app import ServedModel, create_app
from .backend import Backend, BackendConfig, chat_stop_tokens, fetch_model_info, read_token
from .chat_template import ChatTemplate
from .stubs import StubError, default_proto_path, load_stubs


def parse_args(argv):
    p = argparse.ArgumentParser(
        prog="exl3-gateway",
        description="OpenAI-compatible HTTP API (/v1/models, /v1/completions, /v1/chat/completions) in front of an "
                    "EXL3 coordinator's public gRPC API. exl3-launch --openai-port starts it for you.")
    p.add_argument("--grpc", required=True, help="coordinator's public API, HOST:PORT")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0: every interface)")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0 = any free port; default 8000)")
    p.add_argument("--api-key-file", help="file holding the API key clients must send as 'Authorization: Bearer KEY' "
                                          "(default: no key)")
    p.add_argument("--served-model-name", help="model name clients must send (default: the model folder's name)")
    p.add_argument("--model-dir", help="model folder with tokenizer_config.json (default: the coordinator's, from "
                                       "ModelInfo)")
    p.add_argument("--chat-template", help="Jinja chat template file to use instead of the model's")
    p.add_argument("--grpc-auth-token-file", help="bearer token of the coordinator (its --auth-token-file)")
    p.add_argument("--grpc-tls-ca", help="PEM CA certificate to verify a coordinator serving TLS (its --tls-cert when "
                                         "self-signed)")
    p.add_argument("--grpc-tls-server-name", help="name to check the coordinator's certificate against (default: the "
                                                  "host of --grpc)")
    p.add_argument("--proto", default=default_proto_path(), help="inference.proto (default: the checkout's)")
    p.add_argument("--connect-timeout", type=float, default=30.0,
                   help="seconds to wait for the coordinator to answer at start-up (default 30)")
    p.add_argument("--rpc-timeout", type=float, default=10.0, help="deadline of short gRPC calls, s (default 10)")
    p.add_argument("--request-timeout", type=float, default=3600.0,
                   help="deadline of one completion, s (default 3600)")
    p.add_argument("--stream-idle-timeout", type=float, default=300.0,
                   help="end a completion (with an error) when the coordinator sends nothing for this long, s "
                        "(default 300)")
    p.add_argument("--ready-file", help="write HOST:PORT here once listening (for exl3-launch)")
    p.add_argument("--log-level", default="warning", help="uvicorn log level (default warning)")
    return p.parse_args(argv)


def fail(message):
    print("exl3-gateway: " + message, file=sys.stderr, flush=True)
    return 1


def bind(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def write_ready_file(path, address):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(address + "\n")
    os.replace(tmp, path)


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        api_key = read_token(args.api_key_file)
        auth_token = read_token(args.grpc_auth_token_file)
    except (OSError, ValueError) as e:
        return fail("cannot read a key file: %s" % e)
    try:
        pb, pb_grpc = load_stubs(args.proto)
    except StubError as e:
        return fail(str(e))
    config = BackendConfig(args.grpc, auth_token, args.grpc_tls_ca, args.grpc_tls_server_name, args.rpc_timeout,
                           args.request_timeout, args.stream_idle_timeout)
    try:
        info = fetch_model_info(config, pb, pb_grpc, args.connect_timeout)
    except grpc.RpcError as e:
        return fail("the coordinator at %s did not answer ModelInfo: %s: %s" % (args.grpc, e.code().name, e.details()))
    except OSError as e:
        return fail("cannot read --grpc-tls-ca: %s" % e)
    model_dir = args.model_dir or info.model_dir
    try:
        template = ChatTemplate.from_model_dir(model_dir, args.chat_template)
    except (OSError, ValueError) as e:
        return fail("cannot load the chat template: %s" % e)
    except Exception as e:  # a template jinja2 cannot compile
        return fail("cannot compile the chat template: %s: %s" % (type(e).__name__, e))
    name = args.served_model_name or os.path.basename(os.path.normpath(model_dir)) or "model"
    served = ServedModel(name, template, int(time.time()), info.max_context)
    if template is not None:
        served.chat_stop_token_ids = chat_stop_tokens(config, pb, pb_grpc, template, info)
    try:
        sock = bind(args.host, args.port)
    except OSError as e:
        return fail("cannot listen on %s:%d: %s" % (args.host, args.port, e.strerror or e))
    host, port = sock.getsockname()[:2]
    address = "%s:%d" % (args.host if args.host not in ("0.0.0.0", "::") else host, port)

    app = create_app(served, lambda: Backend(config, pb, pb_grpc), api_key)
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, timeout_graceful_shutdown=3,
                                           lifespan="on", access_log=False))

    async def announce():
        while not server.started:
            await asyncio.sleep(0.02)
        if args.ready_file:
            write_ready_file(args.ready_file, address)
        print("openai gateway serving on http://%s (model %s, chat template %s, coordinator %s)" % (
            address, name, "yes" if template is not None else "none", args.grpc), flush=True)

    async def run():
        task = asyncio.create_task(announce())
        try:
            await server.serve(sockets=[sock])
        finally:
            task.cancel()

    asyncio.run(run())
    return 0

