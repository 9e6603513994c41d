"""The judge's handle on a worker process (see `graders.worker`), started under the chosen
isolation (`graders.judge.isolation`).

`Worker.start` launches the process at once, so that its torch import overlaps the judge's own;
the first request waits for it. Inside `warm_workers()`, process-isolated workers are forked from
a process that has imported torch already instead. A worker that dies, or stops answering, is
replaced by a fresh one before the next request: a candidate can lose an item this way, never
the whole grade. What a worker prints is kept in memory, its last `OUTPUT_TAIL` bytes only.
"""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from graders.judge import isolation
from graders.judge.request import DEFAULT_IMPORT_TIMEOUT, GradeRequest
from graders.shared.untrusted import clip
from graders.worker import frames
from graders.worker.limits import WALL_PER_CPU, Limits, cpu_seconds

TORCH_IMPORT_SECONDS = 120.0
SLACK_SECONDS = 5.0
OUTPUT_TAIL = 1 << 20


@dataclass
class Reply:
    """What became of one request: status "done" (with `body`, checked by `graders.judge.replies`),
    "timeout" or "crashed". `malformed`: a crash of a kind of its own, the worker's reply was
    not the reply to this request (`detail` says how)."""

    status: str
    body: object = None
    detail: str = ""
    malformed: bool = False


@dataclass(frozen=True)
class Budget:
    """A grade's time as a whole: `seconds` on the clock, that `ends` at a time.monotonic()
    value. Past it, no request is sent and none is waited for (`Worker.run`)."""

    seconds: float
    ends: float

    @classmethod
    def starting_now(cls, seconds: float) -> "Budget":
        return cls(seconds, time.monotonic() + seconds)

    def spent(self) -> bool:
        return time.monotonic() >= self.ends

    def within(self, deadline: float) -> float:
        """`deadline`, or the budget's end if that comes first."""
        return min(deadline, self.ends)

    def message(self) -> str:
        return (
            f"the grade's time budget of {self.seconds:g} s on the clock was spent (every "
            "item not graded by then is a timeout)"
        )


class WorkerUnavailable(Exception):
    """The worker could not be started or could not load the implementation; `reason` says why."""

    def __init__(self, reason: str, status: str = "error"):
        super().__init__(reason)
        self.reason, self.status = reason, status


class Worker:
    """A worker in mode "implementation" (serves plans), "tests" (runs pytest files) or
    "reference" (serves plans with no candidate code: the real-model item's DynamicCache runs).

    `isolation` is "bwrap" or "process" (`graders.judge.isolation`); `files` are what it may read
    besides the Python environment (the implementation, the candidate's test file); `limits`
    are its rlimits. `preload`: it imports transformers before the implementation (the
    real-model item's worker, graders.worker.real_model).
    """

    def __init__(
        self,
        mode: str,
        path: str | None = None,
        *,
        import_timeout: float = DEFAULT_IMPORT_TIMEOUT,
        module: str = "kv_cache",
        isolation: str = "process",
        limits: Limits = Limits(),
        files=(),
        ahead: bool = False,
        preload: bool = False,
    ):
        """`path` is imported as `module`; with `ahead`, only once `go()` is called (the worker
        is started before the files it reads are saved)."""
        self.mode, self.path, self.import_timeout = mode, path, import_timeout
        self.module, self.ahead, self.preload = module, ahead, preload
        self.isolation, self.limits, self.files = isolation, limits, list(files)
        self._pid: int | None = None
        self._proc: subprocess.Popen | None = None  # None when forked by the spawner
        self._launch: isolation.Launch | None = None
        self._folder: isolation.WorkerFolder | None = None  # a root judge's process fallback
        self._in = self._out = -1  # our ends of its stdin and stdout
        self._ready = False
        self._output = OutputTail()
        self.budget: Budget | None = None  # the grade's time as a whole, when it has one
        self.companions: list[Worker] = []  # workers made for this one's grade, ended with it
        self._interrupted = False  # its answers are no longer wanted: it never starts again

    def start(self) -> "Worker":
        """Start the process (its torch import begins at once; the first request waits for
        it). Interrupted (Ctrl-C), it leaves nothing started: no process, no staged copy of the
        files."""
        try:
            return self._start()
        except BaseException:
            self._discard()
            raise

    def _start(self) -> "Worker":
        if self._interrupted:
            raise WorkerUnavailable("not run: the worker was interrupted, its answers unwanted")
        isolation.guard_judge()
        if self.isolation == "process" and isolation.worker_user_problem() is None:
            user = isolation.take_user()  # given back, its processes ended, by _discard
            try:
                self._folder = isolation.WorkerFolder.make(user, [Path(f) for f in self.files])
            except BaseException:
                isolation.give_back_user(user)
                raise
        ends = self._open()
        if _SPAWNER is not None and self.isolation == "process":
            self._pid, self._proc = _SPAWNER.spawn(ends), None
            kata_roots = isolation.kata_roots()
        else:
            self._launch = isolation.launch(
                self.isolation, "graders.worker", self.files, staged=self.ahead
            )
            self._proc = isolation.start(
                self._launch.argv,
                stdin=ends[0],
                stdout=ends[1],
                stderr=ends[2],
                env=self._launch.env,
                cwd=self._launch.cwd,
                pass_fds=self._launch.pass_fds,
                start_new_session=True,
            )
            self._launch.close_fds()
            self._pid, kata_roots = self._proc.pid, self._launch.kata_roots
        for fd in ends:
            os.close(fd)
        self._hello(kata_roots)
        return self

    def _open(self) -> list[int]:
        """Make this worker's pipes; the process's ends: stdin, stdout, stderr."""
        self._output = OutputTail()
        stdin_r, self._in = os.pipe()
        self._out, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        self._output.drain(stderr_r)
        self._ready = False
        return [stdin_r, stdout_w, stderr_w]

    def _hello(self, kata_roots: list[str]) -> None:
        folder = self._folder
        frames.write_json(
            self._in,
            {
                "mode": self.mode,
                "path": self._seen_as(self.path),
                "module": self.module,
                "named": folder and self.path,
                "limits": self.limits.to_dict(),
                "wait": self.ahead,
                "preload": self.preload,
                "import_seconds": self.import_timeout,
                "kata_roots": kata_roots,
                "user": folder and folder.user,
                "home": folder and str(folder.home),
            },
        )

    def _seen_as(self, path: str | None) -> str | None:
        """Where the worker reads the file at `path`: a copy of it when it runs as a user of its
        own (`isolation.WorkerFolder`), else `path` itself."""
        return self._folder.seen_as(path) if self._folder and path else path

    def go(self) -> None:
        """A worker started `ahead`: show it the files as they are now, and let it import."""
        if self._launch is not None:
            self._launch.stage()
        if self._folder is not None:
            self._folder.stage()
        if self.mode == "implementation":  # a tests worker reads its file at each run
            frames.write_json(self._in, {"go": True})
        self.ahead = False  # a worker started again after a crash reads the files at its start

    def run(self, requests: list[dict], timeout: float, parallel: int = 1) -> list[Reply]:
        """Send `requests` as one batch; one Reply each, in order. CandidateTimeout once the
        grade's `budget` is spent: before the batch, or while it runs (the worker restarted)."""
        if self.budget is not None and self.budget.spent():
            raise _timeout(self.budget.message())
        if self._interrupted:
            raise WorkerUnavailable("not run: the worker was interrupted, its answers unwanted")
        self._ensure_ready()
        wall = cpu_seconds(timeout) * WALL_PER_CPU  # what the zygote allows a child on the clock
        deadline = time.monotonic() + wall * len(requests) / parallel + wall + SLACK_SECONDS
        if self.budget is not None:
            deadline = self.budget.within(deadline)
        batch = secrets.token_hex(8)  # a fresh nonce: every reply to this batch names it
        if self.mode == "tests":
            requests = [{**r, "test_path": self._seen_as(r["test_path"])} for r in requests]
        replies: list[Reply] = []
        try:
            frames.write_json(
                self._in,
                {"count": len(requests), "timeout": timeout, "parallel": parallel, "batch": batch},
            )
            _replies().wire.write_frame(self._in, {"batch": batch, "requests": requests})
            for index, request in enumerate(requests):
                replies.append(self._read_reply(index, batch, request, deadline))
        except (TimeoutError, frames.PipeClosed, OSError) as exc:
            if isinstance(exc, TimeoutError) and self.budget is not None and self.budget.spent():
                self._discard()
                raise _timeout(self.budget.message()) from None
            how = "stopped answering" if isinstance(exc, TimeoutError) else "died"
            detail = f"the worker process {how}{self._stderr_tail()}"
            self._discard()
            return replies + [Reply("crashed", detail=detail) for _ in requests[len(replies) :]]
        except _replies().MalformedReply as exc:  # out of step: nothing after it can be trusted
            self._discard()
            replies.append(_malformed(f"{exc} (the worker was restarted)"))
            return replies + [
                Reply(
                    "crashed",
                    detail="not run: the worker was restarted after "
                    "a malformed reply to an earlier request",
                )
                for _ in requests[len(replies) :]
            ]
        return replies

    def interrupt(self) -> None:
        """End the worker from a thread other than the one its requests run in, for answers no
        longer wanted: its process group is killed, and nothing else is touched (that thread
        finds the pipes closed and discards the worker as after a crash); it never starts
        again, so the work it was given ends at once instead of starting it anew."""
        self._interrupted = True
        pid = self._pid
        if pid is not None:
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass

    def close(self) -> None:
        """End the worker: nothing in it needs a clean exit, so it is killed outright, with
        every process it started; and its companions."""
        self._discard()
        for companion in self.companions:
            companion.close()

    def _read_reply(self, index: int, batch: str, request: dict, deadline: float) -> Reply:
        """The reply to request `index` of `batch`. MalformedReply when the worker's stream is
        out of step (a status that is not this request's, a frame past its caps); a result
        frame that is read whole but is not this request's reply is a malformed Reply."""
        replies = _replies()
        frame = replies.read(self._out, deadline, frames.STATUSES)
        status = replies.status(replies.decode(frame), index, batch)
        if status["status"] == "done":
            frame = replies.read(self._out, deadline, frames.REPLIES)
            try:
                reply = replies.result(replies.decode(frame), index, batch)
                if self.mode in ("implementation", "reference"):
                    return Reply("done", replies.plan_reply(reply, request["plan"]["ops"]))
                return Reply("done", replies.tests_reply(reply))
            except replies.MalformedReply as exc:
                return _malformed(str(exc))
        if status["status"] == "timeout":
            return Reply("timeout", detail=_timeout_detail(status))
        if status["status"] == "malformed":
            return _malformed(status["how"])
        return Reply("crashed", detail=f"{status['how']}{_last_lines(status['stderr'])}")

    def _ensure_ready(self) -> None:
        if self._pid is None:
            self.start()
        if self._ready:
            return
        fd = self._out
        seconds = cpu_seconds(self.import_timeout)  # of CPU time, as the worker counts them
        wall = seconds * WALL_PER_CPU  # for an import that waits
        replies = _replies()
        within = self.budget.within if self.budget is not None else lambda deadline: deadline
        try:
            replies.started(
                replies.decode(
                    replies.read(
                        fd, within(time.monotonic() + TORCH_IMPORT_SECONDS), frames.STATUSES
                    )
                )
            )
            if self.mode == "implementation":
                loaded = replies.loaded(
                    replies.decode(
                        replies.read(fd, within(time.monotonic() + wall), frames.STATUSES)
                    )
                )
                if loaded["status"] == "import-timeout":
                    self._discard()
                    raise WorkerUnavailable(
                        f"importing the file used {seconds} s of CPU time without finishing "
                        "(the import limit; raise it with --import-timeout)",
                        "timeout",
                    )
                if loaded["status"] == "import-error":
                    self._discard()
                    limit = isolation.limit_reached(loaded["error"], self.limits)
                    raise WorkerUnavailable(
                        f"{limit + ': ' if limit else ''}"
                        f"the file does not import: {loaded['error']}"
                        f"{isolation.unseen_beside(loaded['error'], self.path)}"
                    )
        except TimeoutError:
            self._discard()
            if self.budget is not None and self.budget.spent():
                raise WorkerUnavailable(
                    f"importing the file did not finish: {self.budget.message()}", "timeout"
                ) from None
            raise WorkerUnavailable(
                f"importing the file did not finish within {wall:g} s on the clock "
                f"({WALL_PER_CPU}x the import limit of {seconds} s of CPU time, for a file that "
                "waits; raise it with --import-timeout)",
                "timeout",
            ) from None
        except replies.MalformedReply as exc:
            self._discard()
            raise WorkerUnavailable(
                f"the worker's reply was malformed while it imported the file: {exc}"
            ) from None
        except (frames.WireError, OSError):
            tail = self._stderr_tail()
            self._discard()
            raise WorkerUnavailable(f"the process exited while importing the file{tail}") from None
        self._ready = True

    def _discard(self) -> None:
        """Kill the worker and everything it started; the next request starts a fresh one. A
        worker half started is discarded as far as it got."""
        if self._pid is None and self._launch is None and self._folder is None and self._in < 0:
            return
        if self._pid is not None:
            try:
                os.killpg(self._pid, signal.SIGKILL)
            except OSError:
                pass
        if self._proc is not None:
            self._proc.wait()  # a spawner's worker is reaped by the spawner
            isolation.forget(self._pid)
        isolation.reap_strays()
        if self._folder is not None:  # every process of its user, wherever it went
            isolation.give_back_user(self._folder.user)
            self._folder.remove()
            self._folder = None
        if self._launch is not None:
            self._launch.cleanup()
            self._launch = None
        for fd in (self._in, self._out):
            if fd >= 0:
                os.close(fd)
        self._in = self._out = -1
        self._pid, self._proc, self._ready = None, None, False

    def _stderr_tail(self) -> str:
        return clip(_last_lines(self._output.text()))


@dataclass
class GradeWorkers:
    """The processes one grade runs the candidate's code in: the implementation's worker and,
    when the candidate's tests are run, the tests' worker (`tests` the test file); `isolation`
    says how they are walled off ("bwrap" or "process"). The real-model item runs in two more:
    `model`, the implementation again beside transformers, and `reference`, transformers alone
    (graders.worker.real_model); each starts with the grade when the item is to run, else at
    its first request.

    Each is a sandbox of its own, holding its own file alone: the candidate's tests, which the
    judge hands the reference's source, share no /tmp and no process with the implementation
    being graded. Both start at once, so their torch imports overlap."""

    implementation: Worker
    tests: Path | None
    test_worker: Worker | None
    isolation: str
    model: Worker | None = None
    reference: Worker | None = None

    @classmethod
    def start(cls, request: GradeRequest, ahead: bool = False) -> "GradeWorkers":
        """Start the workers `request` needs: the implementation's (its file imported as the
        track's module), the tests' worker when the grade runs the candidate's tests, and the
        real-model item's two when it runs the model (their imports of transformers overlap the
        other items; the reference worker only where `request.runs_reference`: public answers
        not kept yet, or hidden runs; made either way, unstarted, for a grader that asks for
        them). The one place a grade's workers start; the judge only uses and closes them.
        Needs no torch: a caller that has not imported it yet starts the workers first, and its
        own import overlaps theirs. SandboxUnavailable when the request's sandbox cannot be had.

        `ahead`: for a grade that has not begun (`kata grade --watch` starts the next grade's
        workers while the files are edited); they read the files as they are at `go()`."""
        sandbox, tests = request.sandbox, request.tests_run
        implementation = Path(request.implementation).absolute()
        module, import_timeout = request.track.module, request.import_timeout
        # Inside warm_workers() (the test suite, trusted batches) "auto" takes the process
        # fallback, whose workers fork from a warm process; "require" still means bubblewrap.
        mode = "process" if sandbox.mode == "auto" and warm() else sandbox.resolve()
        worker = Worker(
            "implementation",
            str(implementation),
            import_timeout=import_timeout,
            module=module,
            isolation=mode,
            limits=sandbox.limits(),
            files=[implementation],
            ahead=ahead,
        ).start()
        started = [worker]
        try:
            test_worker = (
                Worker(
                    "tests", isolation=mode, limits=sandbox.limits(), files=[tests], ahead=ahead
                ).start()
                if tests
                else None
            )
            started.append(test_worker)
            model, reference = cls.model_workers(
                implementation, module, mode, sandbox, import_timeout, ahead and request.runs_model
            )
            if request.runs_model:
                started.append(model.start())
            if request.runs_reference:
                started.append(reference.start())
        except BaseException:
            for started_worker in started:
                if started_worker:
                    started_worker.close()
            raise
        return cls(worker, tests, test_worker, mode, model, reference)

    @staticmethod
    def model_workers(
        implementation: Path,
        module: str,
        mode: str,
        sandbox: isolation.Sandbox,
        import_timeout: float,
        ahead: bool = False,
    ) -> tuple[Worker, Worker]:
        """The real-model item's two workers, not started: the implementation beside
        transformers, and transformers alone. One not started `ahead` reads the file when its
        first request starts it."""
        model = Worker(
            "implementation",
            str(implementation),
            import_timeout=import_timeout,
            module=module,
            isolation=mode,
            limits=sandbox.limits(),
            files=[implementation],
            ahead=ahead,
            preload=True,
        )
        return model, Worker("reference", isolation=mode, limits=sandbox.limits())

    def fits(self, request: GradeRequest) -> bool:
        """Whether these workers are the ones `request` needs: a tests worker exactly when it
        runs the candidate's tests (a session's workers, started on the workspace's files,
        grade its snapshot of them)."""
        return (self.tests is None) == (request.tests_run is None)

    def limit_to(self, budget: "Budget") -> None:
        """From now on, neither worker runs the candidate's code past `budget`."""
        for worker in self._all():
            worker.budget = budget

    def go(self) -> bool:
        """Workers started `ahead`: their grade begins, with the files as they are now. False,
        and closed, when they died while waiting: the grade must start its own."""
        try:
            for worker in (self.implementation, self.test_worker):
                if worker:
                    worker.go()
            if self.model is not None and self.model.ahead:  # started with the grade's others
                self.model.go()
        except OSError:
            self.close()
            return False
        return True

    def close(self) -> None:
        for worker in self._all():
            worker.close()

    def _all(self) -> list[Worker]:
        return [
            w
            for w in (self.implementation, self.test_worker, self.model, self.reference)
            if w is not None
        ]


class OutputTail:
    """The last OUTPUT_TAIL bytes of a pipe, read by a thread until the pipe closes."""

    def __init__(self):
        self._data = bytearray()
        self._lock = threading.Lock()

    def drain(self, fd: int) -> None:
        threading.Thread(target=self._read, args=(fd,), daemon=True).start()

    def _read(self, fd: int) -> None:
        with os.fdopen(fd, "rb", buffering=0) as pipe:
            while chunk := pipe.read(1 << 16):
                with self._lock:
                    self._data += chunk
                    del self._data[:-OUTPUT_TAIL]

    def text(self) -> str:
        with self._lock:
            return self._data.decode(errors="replace")


def _timeout_detail(status: dict) -> str:
    """How a request ran out of time, as a predicate: of CPU time (it computed all along), or on
    the clock, having used little CPU (it slept or waited) or much of it (the machine was too
    busy to give it its time)."""
    if "wall" in status and status["cpu"] < status["seconds"] / 2:
        return (
            f"did not finish within {status['wall']:g} s, though it used only "
            f"{status['cpu']:.1f} s of CPU time (waiting for something that never comes?)"
        )
    if "wall" in status:  # it computed, but got little of the machine
        return (
            f"did not finish within {status['wall']:g} s, having used {status['cpu']:.1f} s "
            f"of its {status['seconds']:g} s of CPU time (a machine too busy to grade on?)"
        )
    return f"used {status['seconds']:g} s of CPU time without finishing (a loop that never ends?)"


def _malformed(how: str) -> Reply:
    return Reply("crashed", detail=f"the worker's reply was malformed: {how}", malformed=True)


def _last_lines(text: str, n: int = 3) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return (": " + " | ".join(lines[-n:])) if lines else ""


class _Spawner:
    """A process that has imported torch and forks workers on request (`worker.spawner`)."""

    def __init__(self):
        isolation.guard_judge()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self._launch = isolation.launch("process", "graders.worker", [])
        self._proc = isolation.start(
            [*self._launch.argv, "--spawner", str(theirs.fileno())],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            env=self._launch.env,
            start_new_session=True,
            cwd=self._launch.cwd,
        )
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
        isolation.forget(self._proc.pid)
        isolation.reap_strays()
        self._launch.cleanup()


_SPAWNER: _Spawner | None = None


def warm() -> bool:
    """Whether this is inside `warm_workers()`."""
    return _SPAWNER is not None


@contextmanager
def warm_workers():
    """Within this block, process-isolated workers are forked from one process that has
    already imported torch (and pytest): grading many implementations pays for one import, not
    one per worker. Sandboxed workers cannot be forked from it (each sandbox is a bubblewrap of
    its own) and start as usual."""
    global _SPAWNER
    previous, _SPAWNER = _SPAWNER, _Spawner()
    try:
        yield
    finally:
        spawner, _SPAWNER = _SPAWNER, previous
        spawner.close()


def _timeout(message: str) -> Exception:
    """graders.shared.plans.CandidateTimeout, imported at first use: plans imports torch (see
    `_replies`)."""
    from graders.shared.plans import CandidateTimeout

    return CandidateTimeout(message)


def _replies():
    """graders.judge.replies (and through it graders.worker.wire), imported at first use: they import
    torch, and a worker is started (its first frame written with graders.worker.frames) before
    the judge imports torch, so that the two imports overlap."""
    from graders.judge import replies

    return replies
