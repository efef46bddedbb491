"""exl3-launch with --openai-port as the gateway tests run it: 2 CPU workers on the embedded model
models/exl3-4.0bpw with the ChatML template of tests/data/chat_templates (the model has none),
its stdout read by a thread for the "serving on" and "openai api on" lines, its stderr in a log
file shown when a test fails, and helpers to find its workers and gateway in /proc.

EXL3_LAUNCH names exl3-launch (the ctest entry sets it)."""

import ctypes
import os
import queue
import signal
import subprocess
import threading
import time

from conftest import REPO

MODEL_DIR = os.path.join(REPO, "models", "exl3-4.0bpw")
MODEL_NAME = "exl3-4.0bpw"
CHATML = os.path.join(REPO, "tests", "data", "chat_templates", "chatml.jinja")
READY_TIMEOUT_S = 120


def _die_with_parent():
    # PR_SET_PDEATHSIG = 1: a crashed test run takes the launcher (and through its own rules the
    # workers and the gateway) down with it.
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)


def launch_binary():
    path = os.environ.get("EXL3_LAUNCH")
    if not path or not os.access(path, os.X_OK):
        raise RuntimeError("EXL3_LAUNCH must name an executable exl3-launch (e.g. build/ci/bin/exl3-launch); got %r"
                           % path)
    return path


def children(pid):
    """(pid, command line) of the processes whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            if ppid != pid:
                continue
            with open("/proc/%s/cmdline" % entry, "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, ValueError):
            continue
        out.append((int(entry), cmdline))
    return sorted(out)


def process_gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().split(")")[-1].split()[0] == "Z"  # exited, not yet reaped by its parent
    except OSError:
        return True


class LaunchedCluster:
    def __init__(self, log_path, extra_args=(), max_seq_len=512, openai_port=0):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.cmd = [launch_binary(), "--model", MODEL_DIR, "--cpu-workers", "2", "--port", "0",
                    "--max-seq-len", str(max_seq_len), "--openai-port", str(openai_port), "--openai-chat-template", CHATML]
        self.cmd += list(extra_args)
        self.proc = subprocess.Popen(self.cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log,
                                     text=True, preexec_fn=_die_with_parent)
        self.lines = queue.Queue()
        self.stdout = []
        threading.Thread(target=self._read, daemon=True).start()
        self.grpc_address = None
        self.openai_url = None

    def _read(self):
        for line in self.proc.stdout:
            self.stdout.append(line)
            self.lines.put(line.rstrip("\n"))
        self.lines.put(None)

    def wait_line(self, prefix, timeout_s=READY_TIMEOUT_S):
        deadline = time.monotonic() + timeout_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError("no %r line from exl3-launch within %d s\n%s" % (prefix, timeout_s, self.log_tail()))
            try:
                line = self.lines.get(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            if line is None:
                raise RuntimeError("exl3-launch exited (code %s) before printing %r\n%s" %
                                   (self.proc.wait(timeout=30), prefix, self.log_tail()))
            if line.startswith(prefix):
                return line[len(prefix):].strip()

    def wait_ready(self):
        self.grpc_address = self.wait_line("serving on ")
        self.openai_url = self.wait_line("openai api on ")
        return self

    def workers(self):
        return [pid for pid, cmd in children(self.proc.pid) if "exl3-worker" in cmd]

    def gateway_pids(self):
        return [pid for pid, cmd in children(self.proc.pid) if "exl3-gateway" in cmd]

    def stop(self, timeout_s=60):
        """SIGTERM and the exit code (SIGKILL and None when it does not exit in time)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)
            return None
        finally:
            self.log.close()

    def log_tail(self, lines=60):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
