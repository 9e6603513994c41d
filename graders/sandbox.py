"""The judge's handle on a worker process (see `graders.worker`).

`Worker.start` launches the process at once, so that its torch import overlaps the judge's own;
the first request waits for it. A worker that dies, or stops answering, is replaced by a fresh
one before the next request: a candidate can lose an item this way, never the whole grade.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from graders import wire

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

    def __init__(self, mode: str, path: str | None = None, import_timeout: float = 10.0):
        self.mode, self.path, self.import_timeout = mode, path, import_timeout
        self.missing: list[str] = []
        self._proc: subprocess.Popen | None = None
        self._ready = False
        self._stderr_path: str | None = None

    def start(self) -> "Worker":
        self._remove_stderr_file()
        fd, self._stderr_path = tempfile.mkstemp(prefix="kata-worker-", suffix=".log")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(
            p for p in (str(PROJECT_ROOT), os.environ.get("PYTHONPATH")) if p))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "graders.worker"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=fd,
            env=env, start_new_session=True, cwd=PROJECT_ROOT,
        )
        os.close(fd)
        hello = {"mode": self.mode, "path": self.path}
        wire.write_frame(self._proc.stdin.fileno(), hello)
        self._ready = False
        return self

    def run(self, requests: list[dict], timeout: float, parallel: int = 1) -> list[Reply]:
        """Send `requests` as one batch; one Reply each, in order."""
        self._ensure_ready()
        deadline = time.monotonic() + timeout * len(requests) / parallel + timeout + SLACK_SECONDS
        try:
            wire.write_frame(self._proc.stdin.fileno(),
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
        fd = self._proc.stdout.fileno()
        status = wire.decode(wire.read_frame(fd, deadline))
        if status["status"] == "done":
            return Reply("done", wire.decode(wire.read_frame(fd, deadline)))
        if status["status"] == "timeout":
            return Reply("timeout", detail=f"no answer within {status['seconds']:g} s")
        return Reply("crashed", detail=f"{status['how']}{_last_lines(status['stderr'])}")

    def _ensure_ready(self) -> None:
        if self._proc is None:
            self.start()
        if self._ready:
            return
        fd = self._proc.stdout.fileno()
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
        if self._proc is None:
            return
        try:
            os.killpg(self._proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self._proc.wait()
        for stream in (self._proc.stdin, self._proc.stdout):
            try:
                stream.close()
            except OSError:
                pass
        self._proc = None
        self._ready = False

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
