#!/usr/bin/python3
"""End-to-end check that a client in another language, built only from proto/inference.proto,
can use the server: Python grpcio stubs are generated from inference.proto (and the standard health
and reflection protos under protos/), exl3-launch is started on the embedded model with two CPU
workers, and the public API, the grpc.health.v1 service and server reflection are exercised.

Run:  python3 python_client_test.py --launch BUILD/bin/exl3-launch \
          [--proto-dir REPO/proto] [--model REPO/models/exl3-4.0bpw]
(or set EXL3_LAUNCH, EXL3_PROTO_DIR, EXL3_MODEL). Prints "N passed, M failed"; exit code 0 only
when every check passed and the launcher exited 0 after SIGTERM.

Uses the system protoc plus Debian's grpc_python_plugin, not grpc_tools: Debian's grpc_tools bundles
protoc 3.5, which rejects proto3 `optional` (used by inference.proto).
"""

import argparse
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PROTOS = os.path.join(HERE, "protos")

PROMPT = "The history of"
MAX_NEW_TOKENS = 24
CPU_WORKERS = 2
MAX_SEQ_LEN = 512
VOCAB_SIZE = 4096

READY_TIMEOUT_S = 120   # workers spawned, shards loaded, public API listening
RPC_TIMEOUT_S = 10      # tokenize, model info, health, reflection, rejected requests
GENERATE_TIMEOUT_S = 120  # 24 tokens on the CPU reference kernels take a few seconds
STOP_TIMEOUT_S = 60     # SIGTERM drains requests, stops the workers and closes the servers


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launch", default=os.environ.get("EXL3_LAUNCH"), help="path of exl3-launch")
    p.add_argument("--proto-dir", default=os.environ.get("EXL3_PROTO_DIR", os.path.join(REPO, "proto")),
                   help="directory holding inference.proto")
    p.add_argument("--model", default=os.environ.get("EXL3_MODEL", os.path.join(REPO, "models", "exl3-4.0bpw")),
                   help="model directory")
    p.add_argument("--protoc", default=shutil.which("protoc") or "/usr/bin/protoc")
    p.add_argument("--grpc-python-plugin", default=shutil.which("grpc_python_plugin") or "/usr/bin/grpc_python_plugin")
    p.add_argument("--stubs", help="directory of stubs generated earlier (skips protoc: for machines without it)")
    p.add_argument("--devices", default="--cpu-workers %d" % CPU_WORKERS,
                   help="exl3-launch device flags, e.g. \"--gpus 0,1 --split 20,24\" (default: 2 CPU workers)")
    args = p.parse_args()
    if not args.launch:
        p.error("--launch (or EXL3_LAUNCH) is required")
    return args


def generate_stubs(args, out_dir):
    """Writes inference_pb2(_grpc), health_pb2(_grpc) and reflection_pb2(_grpc) into out_dir.

    The health and reflection protos are compiled with -I at their own directory, so the modules
    are top-level (health_pb2, not grpc.health.v1.health_pb2): a generated `grpc/` package in the
    temp dir would clash with grpcio's own `grpc` package. The proto packages (grpc.health.v1,
    grpc.reflection.v1alpha) and hence the method paths on the wire are unchanged.
    """
    jobs = [
        (args.proto_dir, "inference.proto"),
        (os.path.join(PROTOS, "grpc", "health", "v1"), "health.proto"),
        (os.path.join(PROTOS, "grpc", "reflection", "v1alpha"), "reflection.proto"),
    ]
    if args.stubs:
        sys.path.insert(0, args.stubs)
        return
    for include, name in jobs:
        cmd = [args.protoc, "-I" + include, "--python_out=" + out_dir, "--grpc_out=" + out_dir,
               "--plugin=protoc-gen-grpc=" + args.grpc_python_plugin, name]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError("protoc failed (%s):\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
    sys.path.insert(0, out_dir)


class Launcher:
    """exl3-launch as a child process: stdout read by a thread (for the `serving on` line), stderr
    to a log file shown when something fails."""

    def __init__(self, args, log_path):
        self.log_path = log_path
        self.log = open(log_path, "w")
        cmd = [args.launch, "--model", args.model] + args.devices.split() + ["--port", "0",
               "--max-seq-len", str(MAX_SEQ_LEN)]
        print("starting: " + " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True)
        self.lines = queue.Queue()
        self.reader = threading.Thread(target=self._read_stdout, daemon=True)
        self.reader.start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)  # EOF

    def wait_serving(self, timeout_s):
        """Returns HOST:PORT from the `serving on HOST:PORT` line, or raises after timeout_s."""
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("no 'serving on' line within %d s" % timeout_s)
            try:
                line = self.lines.get(timeout=min(left, 1.0))
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError("exl3-launch closed stdout (exit code %s) before serving" % self.proc.poll())
            print("launcher stdout: " + line, flush=True)
            if line.startswith("serving on "):
                return line[len("serving on "):].strip()

    def stop(self):
        """SIGTERM, then wait up to STOP_TIMEOUT_S; SIGKILL if it does not exit (its workers die with
        it through PDEATHSIG). Returns the exit code (negative = killed by that signal), or None
        when the SIGKILL fallback was needed."""
        if self.proc.poll() is not None:
            return self.proc.returncode
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            print("exl3-launch did not exit within %d s of SIGTERM; sending SIGKILL" % STOP_TIMEOUT_S, flush=True)
            self.proc.kill()
            self.proc.wait(timeout=30)
            return None
        finally:
            self.reader.join(timeout=5)
            self.log.close()

    def log_tail(self, lines=40):
        try:
            with open(self.log_path) as f:
                return "".join(f.readlines()[-lines:])
        except OSError as e:
            return "(no log: %s)\n" % e


def check(condition, message):
    if not condition:
        raise AssertionError(message)


class Checks:
    """One method per behaviour; run() calls them in order and counts the results."""

    def __init__(self, address):
        import grpc
        import health_pb2
        import health_pb2_grpc
        import inference_pb2
        import inference_pb2_grpc
        import reflection_pb2
        import reflection_pb2_grpc
        self.grpc = grpc
        self.pb = inference_pb2
        self.health_pb = health_pb2
        self.refl_pb = reflection_pb2
        self.channel = grpc.insecure_channel(address)
        grpc.channel_ready_future(self.channel).result(timeout=RPC_TIMEOUT_S)
        self.inference = inference_pb2_grpc.InferenceStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)
        self.reflection = reflection_pb2_grpc.ServerReflectionStub(self.channel)
        self.streamed = None  # (responses, token ids) of the streamed greedy completion

    def close(self):
        self.channel.close()

    def greedy_request(self, **sampling):
        pb = self.pb
        return pb.GenerateRequest(
            prompt=PROMPT,
            sampling=pb.SamplingParams(temperature=0.0, **sampling),
            stopping=pb.StoppingCriteria(max_new_tokens=MAX_NEW_TOKENS))

    def detokenize(self, ids):
        return self.inference.Detokenize(self.pb.DetokenizeRequest(ids=ids), timeout=RPC_TIMEOUT_S).text

    def test_stream_generate(self):
        pb = self.pb
        responses = list(self.inference.Generate(self.greedy_request(), timeout=GENERATE_TIMEOUT_S))
        check(len(responses) >= 2, "expected several streamed responses, got %d" % len(responses))
        ids = [i for r in responses for i in r.token_ids]
        text = "".join(r.text for r in responses)
        request_ids = {r.request_id for r in responses}
        check(len(request_ids) == 1 and "" not in request_ids,
              "one non-empty request_id expected across the stream, got %s" % sorted(request_ids))
        for r in responses[:-1]:
            check(r.finish_reason == pb.FINISH_REASON_UNSPECIFIED and not r.HasField("usage"),
                  "only the last response may carry finish_reason and usage: %s" % r)
        last = responses[-1]
        check(last.finish_reason == pb.FINISH_REASON_LENGTH,
              "last finish_reason %s, expected LENGTH" % pb.FinishReason.Name(last.finish_reason))
        check(last.HasField("usage"), "the last response has no usage")
        check(last.usage.completion_tokens == MAX_NEW_TOKENS,
              "usage.completion_tokens %d, expected %d" % (last.usage.completion_tokens, MAX_NEW_TOKENS))
        check(len(ids) == MAX_NEW_TOKENS, "%d token ids streamed, expected %d" % (len(ids), MAX_NEW_TOKENS))
        check(all(0 <= i < VOCAB_SIZE for i in ids), "token id out of [0, %d): %s" % (VOCAB_SIZE, ids))
        prompt_ids = self.inference.Tokenize(pb.TokenizeRequest(text=PROMPT), timeout=RPC_TIMEOUT_S).ids
        check(last.usage.prompt_tokens == len(prompt_ids),
              "usage.prompt_tokens %d, Tokenize gives %d ids" % (last.usage.prompt_tokens, len(prompt_ids)))
        check(last.usage.total_time_s > 0 and last.usage.time_to_first_token_s > 0,
              "usage times not set: %s" % last.usage)
        detok = self.detokenize(ids)
        check(text == detok, "streamed text %r != Detokenize(ids) %r" % (text, detok))
        check(text.strip() != "", "streamed text is blank")
        print("    %d responses, ids %s" % (len(responses), ids))
        print("    text %r" % text)
        self.streamed = (responses, ids)

    def test_unary_matches_stream(self):
        pb = self.pb
        check(self.streamed is not None, "needs the streamed completion (test_stream_generate failed)")
        r = self.inference.GenerateUnary(self.greedy_request(), timeout=GENERATE_TIMEOUT_S)
        _, stream_ids = self.streamed
        check(list(r.token_ids) == stream_ids, "unary ids %s != streamed ids %s" % (list(r.token_ids), stream_ids))
        check(r.text == self.detokenize(stream_ids), "unary text %r differs from the stream's" % r.text)
        check(r.finish_reason == pb.FINISH_REASON_LENGTH, "unary finish_reason %s" % r.finish_reason)
        check(r.usage.completion_tokens == MAX_NEW_TOKENS, "unary completion_tokens %d" % r.usage.completion_tokens)

    def test_tokenize_and_model_info(self):
        pb = self.pb
        info = self.inference.ModelInfo(pb.ModelInfoRequest(), timeout=RPC_TIMEOUT_S)
        check(info.architecture == "LlamaForCausalLM", "architecture %r" % info.architecture)
        check(info.vocab_size == VOCAB_SIZE, "vocab_size %d" % info.vocab_size)
        check(info.max_context == MAX_SEQ_LEN, "max_context %d, launched with --max-seq-len %d" %
              (info.max_context, MAX_SEQ_LEN))
        check(info.num_layers > 0 and info.hidden_size > 0, "num_layers %d hidden_size %d" %
              (info.num_layers, info.hidden_size))
        check(len(info.shards) == CPU_WORKERS, "%d shards, expected %d" % (len(info.shards), CPU_WORKERS))
        ranks = [s.rank for s in info.shards]
        check(ranks == list(range(CPU_WORKERS)), "shard ranks %s" % ranks)
        check(all(s.weight_bytes > 0 for s in info.shards), "a shard plans no weights")
        check(info.split_mode in ("tp", "layers"), "split_mode %r" % info.split_mode)

        def tokenize(add_bos):
            request = pb.TokenizeRequest(text=PROMPT, add_bos=add_bos)
            return list(self.inference.Tokenize(request, timeout=RPC_TIMEOUT_S).ids)

        plain = tokenize(False)
        check(len(plain) > 0 and all(0 <= i < VOCAB_SIZE for i in plain), "Tokenize ids %s" % plain)
        with_bos = tokenize(True)
        if info.HasField("bos_token_id"):
            check(with_bos == [info.bos_token_id] + plain, "add_bos=True gives %s, plain %s" % (with_bos, plain))
        check(self.detokenize(plain) == PROMPT, "Detokenize(Tokenize(%r)) = %r" % (PROMPT, self.detokenize(plain)))
        print("    %s, %d layers, vocab %d, bos %s, eos %s, %s over %d shards; %r -> %s" % (
            info.architecture, info.num_layers, info.vocab_size,
            info.bos_token_id if info.HasField("bos_token_id") else None, list(info.eos_token_ids),
            info.split_mode, len(info.shards), PROMPT, plain))

    def test_stats_count_the_completions(self):
        s = self.inference.Stats(self.pb.StatsRequest(), timeout=RPC_TIMEOUT_S)
        check(s.completed_requests >= 2, "completed_requests %d after two completions" % s.completed_requests)
        check(s.generated_tokens >= 2 * MAX_NEW_TOKENS, "generated_tokens %d" % s.generated_tokens)
        check(len(s.workers) == CPU_WORKERS, "%d workers in stats" % len(s.workers))
        check(s.total_kv_pages > 0, "total_kv_pages %d" % s.total_kv_pages)

    def test_health(self):
        hp = self.health_pb
        r = self.health.Check(hp.HealthCheckRequest(service=""), timeout=RPC_TIMEOUT_S)
        check(r.status == hp.HealthCheckResponse.SERVING,
              "health of \"\" is %s" % hp.HealthCheckResponse.ServingStatus.Name(r.status))
        # The standard Check answers NOT_FOUND for a service it has no status for.
        try:
            self.health.Check(hp.HealthCheckRequest(service="no.such.Service"), timeout=RPC_TIMEOUT_S)
            raise AssertionError("health Check of an unknown service succeeded")
        except self.grpc.RpcError as e:
            check(e.code() == self.grpc.StatusCode.NOT_FOUND, "unknown service: %s" % e.code())

    def reflect(self, **request):
        rp = self.refl_pb
        responses = list(self.reflection.ServerReflectionInfo(
            iter([rp.ServerReflectionRequest(**request)]), timeout=RPC_TIMEOUT_S))
        check(len(responses) == 1, "%d reflection responses to one request" % len(responses))
        r = responses[0]
        check(r.WhichOneof("message_response") != "error_response",
              "reflection error %d: %s" % (r.error_response.error_code, r.error_response.error_message))
        return r

    def test_reflection(self):
        from google.protobuf import descriptor_pb2
        services = [s.name for s in self.reflect(list_services="").list_services_response.service]
        print("    services: %s" % services)
        for name in ("exl3.v1.Inference", "grpc.health.v1.Health"):
            check(name in services, "%s not in reflection's services %s" % (name, services))

        r = self.reflect(file_containing_symbol="exl3.v1.Inference")
        check(r.WhichOneof("message_response") == "file_descriptor_response", "no file descriptor: %s" % r)
        files = []
        for blob in r.file_descriptor_response.file_descriptor_proto:
            fd = descriptor_pb2.FileDescriptorProto()
            fd.ParseFromString(blob)
            files.append(fd)
        defining = [f for f in files if any(s.name == "Inference" for s in f.service)]
        check(len(defining) == 1, "files returned: %s" % [f.name for f in files])
        fd = defining[0]
        check(fd.package == "exl3.v1", "package %r" % fd.package)
        service = next(s for s in fd.service if s.name == "Inference")
        methods = {m.name: m for m in service.method}
        check("Generate" in methods, "Inference methods %s" % sorted(methods))
        gen = methods["Generate"]
        check(gen.server_streaming and not gen.client_streaming,
              "Generate streaming: server %s client %s" % (gen.server_streaming, gen.client_streaming))
        check(gen.input_type == ".exl3.v1.GenerateRequest" and gen.output_type == ".exl3.v1.GenerateResponse",
              "Generate types %s -> %s" % (gen.input_type, gen.output_type))
        print("    %s: package %s, methods %s" % (fd.name, fd.package, sorted(methods)))

    def expect_invalid_top_p(self, call):
        try:
            call()
            raise AssertionError("top_p 1.5 was accepted")
        except self.grpc.RpcError as e:
            check(e.code() == self.grpc.StatusCode.INVALID_ARGUMENT, "code %s (%s)" % (e.code(), e.details()))
            check("top_p" in (e.details() or ""), "details %r do not name top_p" % e.details())
            return e.details()

    def test_invalid_top_p(self):
        request = self.greedy_request(top_p=1.5)
        details = self.expect_invalid_top_p(
            lambda: list(self.inference.Generate(request, timeout=RPC_TIMEOUT_S)))
        self.expect_invalid_top_p(lambda: self.inference.GenerateUnary(request, timeout=RPC_TIMEOUT_S))
        print("    details: %r" % details)

    def run(self):
        names = ["test_stream_generate", "test_unary_matches_stream", "test_tokenize_and_model_info",
                 "test_stats_count_the_completions", "test_health", "test_reflection", "test_invalid_top_p"]
        passed = failed = 0
        for name in names:
            start = time.monotonic()
            try:
                getattr(self, name)()
                passed += 1
                print("PASS %s (%.2f s)" % (name, time.monotonic() - start), flush=True)
            except Exception:  # a failed check or an RPC error: report it, go on with the others
                failed += 1
                print("FAIL %s (%.2f s)\n%s" % (name, time.monotonic() - start, traceback.format_exc()), flush=True)
        return passed, failed


def main():
    args = parse_args()
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="exl3_python_client_") as tmp:
        try:
            generate_stubs(args, tmp)
        except Exception:
            print("FAIL generating the stubs\n%s" % traceback.format_exc(), flush=True)
            print("0 passed, 1 failed", flush=True)
            return 1
        launcher = Launcher(args, os.path.join(tmp, "exl3-launch.log"))
        try:
            address = launcher.wait_serving(READY_TIMEOUT_S)
            checks = Checks(address)
            try:
                p, f = checks.run()
                passed += p
                failed += f
            finally:
                checks.close()
        except Exception:
            failed += 1
            print("FAIL start-up\n%s" % traceback.format_exc(), flush=True)
        finally:
            code = launcher.stop()
            if code == 0:
                passed += 1
                print("PASS launcher exits 0 after SIGTERM", flush=True)
            else:
                failed += 1
                print("FAIL launcher exit: %s, expected 0 after SIGTERM" %
                      ("still running %d s after SIGTERM, killed" % STOP_TIMEOUT_S if code is None
                       else "code %d" % code), flush=True)
            if failed:
                print("--- exl3-launch stderr (tail) ---\n" + launcher.log_tail(), flush=True)
    print("%d passed, %d failed" % (passed, failed), flush=True)
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
