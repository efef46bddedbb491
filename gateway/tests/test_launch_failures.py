"""exl3-launch --openai-port when things go wrong: a worker SIGKILLed while completions stream ends
every SSE stream with an OpenAI-shaped error event (raw HTTP: a `data: {"error": ...}` line, then the
stream closes; the openai client: APIError) within a deadline, and the launcher stops everything; a
gateway that cannot start is a clear error and nothing is left running."""

import json
import os
import signal
import socket
import subprocess
import threading
import time

import httpx
import openai

from launched_cluster import MODEL_DIR, MODEL_NAME, LaunchedCluster, launch_binary, process_gone

ERROR_DEADLINE_S = 15  # from the SIGKILL to the error event (the coordinator notices within about 3 s)
LONG = {"max_tokens": 400, "temperature": 0.8, "ignore_eos": True}


def test_killed_worker_ends_streams_with_an_error_event(tmp_path):
    c = LaunchedCluster(str(tmp_path / "exl3-launch.log")).wait_ready()
    try:
        workers = c.workers()
        assert len(workers) == 2, c.log_tail()
        gateway = c.gateway_pids()
        assert len(gateway) == 1, c.log_tail()

        # Raw SSE stream: read lines in a thread so the test itself can never hang on it.
        events, raw_done = [], threading.Event()
        raw_first = threading.Event()

        def read_raw():
            body = {"model": MODEL_NAME, "prompt": "Once upon a time", "stream": True, "seed": 5, **LONG}
            try:
                with httpx.stream("POST", c.openai_url + "/v1/completions", json=body, timeout=60) as r:
                    events.append(("status", r.status_code))
                    for line in r.iter_lines():
                        if line.startswith("data: "):
                            events.append(("data", line[6:]))
                            raw_first.set()
            except Exception as e:  # a closed connection instead of an error event is a failure below
                events.append(("exception", repr(e)))
            finally:
                raw_first.set()
                raw_done.set()

        reader = threading.Thread(target=read_raw, daemon=True)
        reader.start()
        client = openai.OpenAI(base_url=c.openai_url + "/v1", api_key="none", timeout=60, max_retries=0)
        stream = client.chat.completions.create(model=MODEL_NAME, messages=[{"role": "user", "content": "Hello"}],
                                                stream=True, seed=6, max_tokens=400, temperature=0.8,
                                                extra_body={"ignore_eos": True})
        got = 0
        for chunk in stream:
            if chunk.choices and chunk.choices[0].delta.content:
                got += 1
            if got >= 2:
                break
        assert raw_first.wait(30), "the raw stream produced nothing"
        assert not raw_done.is_set(), "the raw stream ended before the kill: %s" % events[-3:]

        os.kill(workers[1], signal.SIGKILL)
        killed_at = time.monotonic()

        error = None
        try:
            for _ in stream:
                pass
        except openai.APIError as e:
            error = e
        after = time.monotonic() - killed_at
        assert error is not None, "the chat stream ended without an error after the kill"
        assert after < ERROR_DEADLINE_S, "the chat stream's error came %.1f s after the kill" % after
        assert isinstance(error.body, dict) and error.body.get("code") == "service_unavailable", error.body
        print("[timing] chat stream error %.3f s after the SIGKILL: %s" % (after, error.body["message"]))

        assert raw_done.wait(ERROR_DEADLINE_S), "the raw stream did not end within %d s of the kill" % ERROR_DEADLINE_S
        assert events[0] == ("status", 200), events[:3]
        kinds = [k for k, _ in events]
        assert "exception" not in kinds, "the raw stream broke instead of ending with an error event: %s" % events[-3:]
        last = json.loads(events[-1][1])
        assert set(last) == {"error"}, "last event %s" % events[-1][1]
        assert set(last["error"]) == {"message", "type", "param", "code"}
        assert last["error"]["type"] == "server_error" and last["error"]["code"] == "service_unavailable"
        assert "UNAVAILABLE" in last["error"]["message"]
        assert all(d != "[DONE]" for k, d in events if k == "data")
        print("[timing] raw stream ended %.3f s after the SIGKILL, %d events" % (time.monotonic() - killed_at,
                                                                                 len(events)))
        chunks = [json.loads(d) for k, d in events[1:-1]]
        assert chunks and all(ch["choices"][0]["finish_reason"] is None for ch in chunks)

        # Without --restart the launcher stops, the gateway and the other worker with it.
        code = c.proc.wait(timeout=30)
        assert code != 0, "exl3-launch exited 0 after losing a worker"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not all(process_gone(p) for p in workers + gateway):
            time.sleep(0.05)
        assert all(process_gone(p) for p in workers + gateway), "processes left: %s" % [
            p for p in workers + gateway if not process_gone(p)]
    finally:
        c.stop()


def run_launch(args, timeout_s=120):
    return subprocess.run([launch_binary()] + args, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=timeout_s)


def test_missing_python_is_a_clear_error():
    r = run_launch(["--model", MODEL_DIR, "--cpu-workers", "2", "--openai-port", "0",
                    "--openai-python", "/nonexistent/python3"])
    assert r.returncode == 2, r.stderr
    assert "--openai-port" in r.stderr and "/nonexistent/python3" in r.stderr and "scripts/setup" in r.stderr, r.stderr


def test_gateway_that_cannot_listen_stops_the_launch(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        c = LaunchedCluster(str(tmp_path / "exl3-launch.log"), openai_port=port)
        try:
            c.wait_line("serving on ")
            code = c.proc.wait(timeout=60)
        finally:
            c.stop()
    log = open(c.log_path).read()
    assert code == 1, log
    assert "the OpenAI gateway did not start" in log and "exited with code 1" in log, log
    assert "cannot listen on 127.0.0.1:%d" % port in log, log
    assert not any("openai api on" in line for line in c.stdout)
