"""The judge's handle on a worker process (see `graders.worker`).

`Worker.start` launches the process at once, so that its torch import overlaps the judge's own;
the first request waits for it. Inside `warm_workers()`, workers are forked from a process that
has imported torch already instead. A worker that dies, or stops answering, is replaced by a fresh
one before the next request: a candidate can lose an item this way, never the whole grade.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from graders.worker import wire

PROJECT_ROOT = Path(__file__).resolve().parent.parent
TORCH_IMPORT_SECONDS = 120.0
SLACK_SECONDS = 5.0


@dataclass
class Reply:
    """What became of one request: status "done" (with `body`), "timeout" or "crashed"."""

    status: str
    body: object = None
    detail: str = ""


class WorkerUnavailable(Exception):
    """The worker could not be started or could not load the implementation; `reason` says why."""

    def __init__(self, reason: str, status: str = "error"):
        super().__init__(reason)
        self.reason, self.status = reason, status


class Worker:
    """A worker in mode "implementation" (serves plans) or "tests" (runs pytest files)."""

    def __init__(self, mode: str, path: str | None = None, import_timeout: float = 10.0,
                 module: str = "kv_cache", names: tuple[str, ...] = ()):
        """`path` is imported as `module`; `names` are the contract's, reported when missing."""
        self.mode, self.path, self.import_timeout = mode, path, import_timeout
        self.module, self.names = module, names
        self.missing: list[str] = []
        self._pid: int | None = None
        self._proc: subprocess.Popen | None = None  # None when forked by the spawner
        self._in = self._out = -1  # our ends of its stdin and stdout
        self._ready = False
        self._stderr_path: str | None = None

    def start(self) -> "Worker":
        self._remove_stderr_file()
        stderr, self._stderr_path = tempfile.mkstemp(prefix="kata-worker-", suffix=".log")
        stdin_r, self._in = os.pipe()
        self._out, stdout_w = os.pipe()
        ends = [stdin_r, stdout_w, stderr]
        if _SPAWNER is not None:
            self._pid, self._proc = _SPAWNER.spawn(ends), None
        else:
            self._proc = subprocess.Popen([sys.executable, "-m", "graders.worker"],
                                          stdin=stdin_r, stdout=stdout_w, stderr=stderr,
                                          env=_environment(), start_new_session=True,
                                          cwd=PROJECT_ROOT)
            self._pid = self._proc.pid
        for fd in ends:
            os.close(fd)
        wire.write_frame(self._in, {"mode": self.mode, "path": self.path, "module": self.module,
                                    "names": list(self.names)})
        self._ready = False
        return self

    def run(self, requests: list[dict], timeout: float, parallel: int = 1) -> list[Reply]:
        """Send `requests` as one batch; one Reply each, in order."""
        self._ensure_ready()
        deadline = time.monotonic() + timeout * len(requests) / parallel + timeout + SLACK_SECONDS
        try:
            wire.write_frame(self._in,
                             {"requests": requests, "timeout": timeout, "parallel": parallel})
            replies = [self._read_reply(deadline) for _ in requests]
        except (TimeoutError, wire.WireError, OSError) as exc:
            how = "stopped answering" if isinstance(exc, TimeoutError) else "died"
            detail = f"the worker process {how}{self._stderr_tail()}"
            self._discard()
            return [Reply("crashed", detail=detail) for _ in requests]
        return replies

    def close(self) -> None:
        """End the worker: nothing in it needs a clean exit, so it is killed outright."""
        self._discard()

    def _read_reply(self, deadline: float) -> Reply:
        fd = self._out
        status = wire.decode(wire.read_frame(fd, deadline))
        if status["status"] == "done":
            return Reply("done", wire.decode(wire.read_frame(fd, deadline)))
        if status["status"] == "timeout":
            return Reply("timeout", detail=f"no answer within {status['seconds']:g} s")
        return Reply("crashed", detail=f"{status['how']}{_last_lines(status['stderr'])}")

    def _ensure_ready(self) -> None:
        if self._pid is None:
            self.start()
        if self._ready:
            return
        fd = self._out
        try:
            wire.decode(wire.read_frame(fd, time.monotonic() + TORCH_IMPORT_SECONDS))
            if self.mode == "implementation":
                loaded = wire.decode(wire.read_frame(fd, time.monotonic() + self.import_timeout))
                if loaded["status"] == "import-error":
                    self._discard()
                    raise WorkerUnavailable(f"the file does not import: {loaded['error']}")
                self.missing = list(loaded["missing"])
        except TimeoutError:
            self._discard()
            raise WorkerUnavailable(
                f"importing the file did not finish within {self.import_timeout:g} s", "timeout") from None
        except (wire.WireError, OSError):
            tail = self._stderr_tail()
            self._discard()
            raise WorkerUnavailable(f"the process exited while importing the file{tail}") from None
        self._ready = True

    def _discard(self) -> None:
        """Kill the worker and everything it started; the next request starts a fresh one."""
        if self._pid is None:
            return
        try:
            os.killpg(self._pid, signal.SIGKILL)
        except OSError:
            pass
        if self._proc is not None:
            self._proc.wait()  # a spawner's worker is reaped by the spawner
        for fd in (self._in, self._out):
            os.close(fd)
        self._pid, self._proc, self._ready = None, None, False

    def _stderr_tail(self) -> str:
        if not self._stderr_path:
            return ""
        try:
            return _last_lines(Path(self._stderr_path).read_text(errors="replace"))
        except OSError:
            return ""

    def _remove_stderr_file(self) -> None:
        if self._stderr_path:
            try:
                os.unlink(self._stderr_path)
            except OSError:
                pass
            self._stderr_path = None

    def __del__(self):
        self._remove_stderr_file()


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (": " + " | ".join(lines[-n:])) if lines else ""


def _environment() -> dict:
    """The judge's environment, with the project importable (`python -m graders.worker`)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join(
        p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p))


class _Spawner:
    """A process that has imported torch and forks workers on request (`worker.spawner`)."""

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "graders.worker", "--spawner", str(theirs.fileno())],
            pass_fds=[theirs.fileno()], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            env=_environment(), start_new_session=True, cwd=PROJECT_ROOT)
        theirs.close()
        self._sock, self._replies = ours, ours.makefile("rb")
        self._lock = threading.Lock()

    def spawn(self, fds: list[int]) -> int:
        """Fork a worker whose stdin, stdout and stderr are `fds`; its pid."""
        with self._lock:
            socket.send_fds(self._sock, [b"w"], fds)
            line = self._replies.readline()
        if not line:
            raise WorkerUnavailable("the spawner of worker processes died")
        return int(line)

    def close(self) -> None:
        self._replies.close()
        self._sock.close()
        self._proc.kill()
        self._proc.wait()


_SPAWNER: _Spawner | None = None


@contextmanager
def warm_workers():
    """Within this block, workers are forked from one process that has already imported torch
    (and pytest): grading many implementations pays for one import, not one per worker."""
    global _SPAWNER
    previous, _SPAWNER = _SPAWNER, _Spawner()
    try:
        yield
    finally:
        spawner, _SPAWNER = _SPAWNER, previous
        spawner.close()
