"""The worker process: the only place a candidate's code runs.

    python -m graders.worker            (started by graders.judge.workers, never by hand)
    python -m graders.worker --spawner FD   (forks workers on request, see `spawner`)

It speaks `graders.worker.wire` frames on the stdin/stdout it was started with, moved to private file
descriptors at start-up; the candidate's own prints land in stderr. It imports torch once, then
the candidate's file (mode "implementation"; a worker started ahead of its grade, with "wait" in
its hello, first waits for a "go" frame; with "preload", transformers first, for the
real-model item), pytest (mode "tests"), or no candidate code at all (mode "reference": the
real-model item's DynamicCache generation), and from then on acts as a
zygote: every request runs in a forked child, so a request that hangs, crashes, exits or wrecks
the interpreter costs that request only. A request's time is CPU time (`limits.limit_cpu`: the
kernel stops a child that used it up), and so is the import's (`limits.cpu_for_import`), so a
busy machine does not change where a call stops; the zygote kills a child that has not answered
after WALL_PER_CPU times as long on the clock (it sleeps, or waits for something), with the
child's whole process group. Each child is forked ahead of its request (`Spares`).

A batch of requests is two frames: ``{"count", "timeout", "parallel", "batch"}``, then
``{"batch", "requests": [...]}``, which the zygote hands on undecoded: each child decodes it and
runs its own request. Replies, one per request in order: a status frame ``{"status": "done" |
"timeout" | "crashed" | "malformed", "index", "batch", ...}``; after "done", the child's own
result frame ``{"index", "batch", "reply"}``, relayed byte for byte (the zygote reads no more than
one frame within `frames.REPLIES`, and does not decode it). `batch` is the judge's fresh nonce and
`index` the request's place in it: the judge checks both (`graders.judge.replies`).

A request child holds no descriptor but its request pipe, its reply pipe, /dev/null and its
output (`_close_all_but`): the candidate's code it runs cannot reach the judge's pipes, the
zygote's or another child's, only its own reply, which the zygote relays as the answer to that
child's request and nothing else.
"""

from __future__ import annotations

import ctypes
import gc
import importlib.abc
import importlib.util
import os
import selectors
import signal
import socket
import struct
import sys
import time
import traceback
from pathlib import Path

from graders.worker import frames, limits, wire

STDERR_TAIL = 1500
_PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _CAPABILITY_VERSION_3 = 4, 24, 0x20080522

_fork, _exit, _killpg, _waitpid, _wait4 = os.fork, os._exit, os.killpg, os.waitpid, os.wait4


def main() -> None:
    proto_in, proto_out = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    serve(proto_in, proto_out)


def serve(proto_in: int, proto_out: int) -> None:
    """Be the worker the hello frame on `proto_in` asks for, until the judge closes the pipe."""
    not_dumpable()
    hello = wire.decode(frames.read_frame(proto_in))
    if hello.get("user") is not None:  # a root judge's process fallback: a user of its own
        limits.become(hello["user"], hello["home"])
        not_dumpable()  # a change of user resets it
    limits.apply(limits.Limits(**hello["limits"]))

    import torch

    torch.set_num_threads(1)
    fill_uninitialized_memory(torch)
    wire.write_frame(proto_out, {"status": "torch-ready"})

    if hello["mode"] == "implementation":
        from graders.worker import ops

        if hello.get("preload"):  # the real-model item's worker: transformers, before the file
            from graders.worker import real_model

            real_model.preload()
        if hello.get("wait"):  # started ahead of its grade: the file is there once "go" comes
            frames.read_frame(proto_in)
        limits.guard_imports(hello["kata_roots"])
        with limits.cpu_for_import(limits.cpu_seconds(hello["import_seconds"])):
            module, reply = _load_implementation(hello["path"], hello["module"], hello.get("named"))
        wire.write_frame(proto_out, reply)
        if module is None:
            return

        def job(request):
            return {"results": ops.execute(module, request["plan"])}
    elif hello["mode"] == "reference":  # no candidate code: transformers' own generation
        from graders.worker import ops, real_model

        real_model.preload()
        limits.guard_imports(hello["kata_roots"])

        def job(request):
            return {"results": ops.execute(None, request["plan"])}
    else:
        import pytest  # noqa: F401 - imported once here, so forked children start with it loaded

        from graders.worker import pytest_runner

        limits.guard_imports(hello["kata_roots"])

        def job(request):
            return pytest_runner.run(
                request["test_path"], request["implementation"], request.get("exitfirst", False)
            )

    # Everything imported so far is shared by every forked child: move it out of the collector's
    # sight, so a child's gc.collect() (pytest runs several) does not walk all of torch.
    gc.freeze()
    spares = Spares(job)
    while True:
        try:
            batch = wire.decode(frames.read_frame(proto_in))
            requests = frames.read_frame(proto_in)  # decoded by each child, for its own request
        except frames.WireError:  # the judge closed the pipe: it is done with us
            return
        replies = supervise(
            spares, requests, batch["count"], batch["timeout"], batch.get("parallel", 1)
        )
        for index, (status, frame) in enumerate(replies):
            wire.write_frame(proto_out, {**status, "index": index, "batch": batch.get("batch")})
            if frame is not None:
                frames.write_all(proto_out, frame)


def not_dumpable() -> None:
    """Make this process, and every process it forks, not dumpable: /proc/<pid>/fd, mem and
    environ of each are closed to the others of its user. A request child could otherwise open
    the zygote's pipes to the judge (or a sibling's reply pipe) by path, the descriptors it
    closed (`_close_all_but`) notwithstanding. Linux only; elsewhere nothing changes."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def drop_capabilities() -> None:
    """Give up every capability, and the right to regain them by exec: a request child run as
    root (the process fallback) could otherwise open a process's descriptors through /proc
    whether it is dumpable or not (CAP_SYS_PTRACE). Without capabilities (as any other user)
    nothing changes."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        for capability in range(64):  # the bounding set; past the last capability: EINVAL
            libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)
        header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
        libc.capset(header, (ctypes.c_uint32 * 6)())  # effective, permitted, inheritable: none
    except (OSError, AttributeError):
        pass


def fill_uninitialized_memory(torch) -> None:
    """Make memory the candidate's code never wrote read the same in every run.

    `torch.empty`, `empty_like`, `new_empty`, `empty_strided` and the slots `resize_` adds then
    hold NaN (floating dtypes) or the dtype's largest value (integers; True for bool) instead of
    whatever the allocator handed back, so a cache that lets attention reach a slot it never
    wrote gets NaN every time (0 * NaN = NaN) rather than zeros on most runs. Storage made with
    `torch.UntypedStorage(n)` is not filled. warn_only: an operator with no deterministic kernel
    warns (once per call site) instead of raising; of the indexing, scatter, sort and attention
    operators a cache uses, on CPU only `put_` without accumulate does. Set before the
    candidate's file is imported, and inherited by every forked child.

    `torch.use_deterministic_algorithms` would also set torch._inductor's `deterministic`,
    importing torch._inductor and torch._dynamo to do so: 1 s of the worker's start, and a
    heap that makes every forked child twice as costly. The same two settings are made without
    them: the flag through torch._C, inductor's through its environment variable, read if the
    candidate's code ever compiles.
    """
    os.environ["TORCHINDUCTOR_DETERMINISTIC"] = "1"
    torch._C._set_deterministic_algorithms(True, warn_only=True)
    torch._C._set_deterministic_fill_uninitialized_memory(True)


class _CopyLoader(importlib.abc.SourceLoader):
    """Loads the copy at `read` as the file at `named`: its code, tracebacks and `__file__` name
    the file as the candidate knows it, not the worker's copy of it. No bytecode is cached."""

    def __init__(self, named: str, read: str):
        self.named, self.read = named, read

    def get_filename(self, fullname: str) -> str:
        return self.named

    def get_data(self, path: str) -> bytes:
        with open(self.read, "rb") as f:
            return f.read()


def import_file(path: str | Path, module_name: str, named: str | None = None):
    """Import the file at `path` as module `module_name`, its folder first on sys.path (a
    candidate's file may import files beside it, then or later). `named`: the path the file
    goes by, where `path` is a copy of it (a worker run as a user of its own reads copies)."""
    sys.path.insert(0, str(Path(path).resolve().parent))
    loader = _CopyLoader(str(named), str(path)) if named else None
    spec = importlib.util.spec_from_file_location(module_name, named or path, loader=loader)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def _load_implementation(path: str, module_name: str, named: str | None = None):
    """Import the candidate's file as `module_name` (the contract's: kv_cache, paged_kv_cache);
    (module or None, the reply for the judge)."""
    try:
        module = import_file(path, module_name, named)
    except limits.ImportTimeLimit:
        return None, {"status": "import-timeout"}
    except BaseException as exc:  # noqa: BLE001 - SyntaxError, ImportError, SystemExit, anything
        return None, {"status": "import-error", "error": import_error(exc, named or path)}
    return module, {"status": "loaded"}


def import_error(exc: BaseException, path: str) -> str:
    """What the judge is told of an import that raised `exc`: the exception's first line and, for
    a SyntaxError, where it is and its one source line (as Python prints it), else the line
    number of the file's frame it came from; each line cut to wire.TEXT_CHARS. Never more of
    the file: one that is not Python (a password file) shows at most the line that failed."""
    try:
        message = exc.msg if isinstance(exc, SyntaxError) else str(exc)
    except Exception:  # noqa: BLE001 - a candidate's exception whose __str__ raises
        message = "(its message could not be read)"
    error = _first_line(f"{type(exc).__name__}: {message}" if message else type(exc).__name__)
    if isinstance(exc, SyntaxError):
        source = _first_line(exc.text or "").strip()
        where = f'  File "{exc.filename}", line {exc.lineno}'
        return "\n".join([where, *([f"    {source}"] if source else []), error])
    where = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == str(Path(path))]
    return error + (f" (line {where[-1].lineno})" if where else "")


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0][: wire.TEXT_CHARS]


def supervise(spares: "Spares", requests: bytes, count: int, timeout: float, parallel: int):
    """Run the `count` requests of the frame `requests` each in a child of `spares`, at most
    `parallel` at once; yield (status, frame) in order."""
    reap_answered()
    pending = list(range(count))
    running: dict[int, _Child] = {}
    done: dict[int, tuple[dict, bytes | None]] = {}
    selector = selectors.DefaultSelector()
    next_to_yield = 0
    while pending or running:
        while pending and len(running) < parallel:
            index = pending.pop(0)
            try:
                child = spares.take().hand(index, requests, timeout)
            except OSError as exc:  # fork failed: the process limit, most likely
                done[index] = (
                    {
                        "status": "crashed",
                        "stderr": "",
                        "how": f"could not start a process for the call ({exc.strerror})",
                    },
                    None,
                )
                continue
            running[child.pid] = child
            selector.register(child.fd, selectors.EVENT_READ, child.read_answer)
            selector.register(child.output_fd, selectors.EVENT_READ, child.read_output)
        spares.refill()  # while the children work: the next request need not wait for a fork
        if running:
            wait = max(0.0, min(c.deadline for c in running.values()) - time.monotonic())
            for key, _ in selector.select(timeout=wait):
                key.data()
        for child in list(running.values()):
            if child.answered or child.eof or time.monotonic() >= child.deadline:
                for fd in (child.fd, child.output_fd):
                    if fd in selector.get_map():
                        selector.unregister(fd)
                del running[child.pid]
                done[child.index] = child.finish()
        while next_to_yield in done:
            yield done.pop(next_to_yield)
            next_to_yield += 1


class Spares:
    """A child forked ahead of its request, waiting for it: the fork (several ms for a process
    that has imported torch) is made while the previous request runs, not when the next comes.
    A spare is forked from the zygote as it is between requests, so what a request finds is the
    same whether it got a spare or a child forked on the spot."""

    def __init__(self, job):
        self.job = job
        self.spare: _Child | None = None
        self.refill()

    def take(self) -> "_Child":
        """The spare, or a child forked now; OSError when no process can be started."""
        child, self.spare = self.spare, None
        return child if child is not None and child.alive() else _Child.fork(self.job)

    def refill(self) -> None:
        if self.spare is None:
            try:
                self.spare = _Child.fork(self.job)
            except OSError:  # the process limit: the next request forks its own, or says why
                pass


class _Child:
    """One forked child: its result pipe, the tail of what it printed, and its deadline (set
    when it is handed its request). `malformed` says how what it sent on its result pipe cannot
    be a frame within `frames.REPLIES` (None while it can)."""

    @classmethod
    def fork(cls, job) -> "_Child":
        """A child waiting for its request, which it runs with `job`."""
        job_r, job_w = os.pipe()
        read_fd, write_fd = os.pipe()
        output_r, output_w = os.pipe()
        try:
            pid = _fork()
        except OSError:
            for fd in (job_r, job_w, read_fd, write_fd, output_r, output_w):
                os.close(fd)
            raise
        if pid == 0:
            _run_child(job, job_r, write_fd, output_w)
        for fd in (job_r, write_fd, output_w):
            os.close(fd)
        try:
            os.setpgid(pid, pid)
        except OSError:
            pass  # the child already did it, or already exited
        return cls(pid, job_w, read_fd, output_r)

    def __init__(self, pid, job_fd, fd, output_fd):
        self.pid, self.job_fd, self.fd, self.output_fd = pid, job_fd, fd, output_fd
        self.index, self.deadline, self.timeout = -1, 0.0, 0.0
        self.answer = frames.FrameBuffer(frames.REPLIES)
        self.malformed: str | None = None
        self.output = bytearray()
        self.eof = False

    def alive(self) -> bool:
        """Still waiting for its request (a spare can be killed by an earlier request's code)."""
        if _waitpid(self.pid, os.WNOHANG) == (0, 0):
            return True
        for fd in (self.job_fd, self.fd, self.output_fd):
            os.close(fd)
        return False

    def hand(self, index: int, requests: bytes, timeout: float) -> "_Child":
        """Give the child request `index` of the frame `requests` and `timeout` seconds of CPU
        time (`limits.cpu_seconds`); its deadline on the clock starts now."""
        self.index, self.timeout = index, limits.cpu_seconds(timeout)
        self.deadline = time.monotonic() + self.timeout * limits.WALL_PER_CPU
        try:
            frames.write_all(self.job_fd, JOB.pack(index, self.timeout) + requests)
        except OSError:
            pass  # it died meanwhile: its result pipe says so (end of file, "crashed")
        os.close(self.job_fd)
        return self

    def read_answer(self) -> None:
        chunk = os.read(self.fd, frames.CHUNK)
        if not chunk:
            self.eof = True
            return
        try:
            self.answer.feed(chunk)
        except frames.WireError as exc:
            self.malformed = str(exc)

    def read_output(self) -> None:
        """Keep only the tail of what the child prints: a flood costs reading, not memory."""
        chunk = os.read(self.output_fd, 1 << 16)
        self.output = (self.output + chunk)[-STDERR_TAIL:]

    @property
    def answered(self) -> bool:
        """A whole frame arrived (even if something the child started still holds the pipe), or
        what arrived cannot be one: either way nothing more is read."""
        return self.answer.whole or self.malformed is not None

    def finish(self) -> tuple[dict, bytes | None]:
        """Kill what is left of the child's process group and say how it went. A child that
        answered is reaped later (`reap_answered`): its memory is freed while the answer
        travels, not before. Of an answer, the first frame is relayed; bytes after it are not."""
        timed_out = not (self.answered or self.eof)
        try:
            _killpg(self.pid, signal.SIGKILL)
        except OSError:
            pass
        os.close(self.fd)
        os.close(self.output_fd)
        if self.malformed is not None:
            _ANSWERED.append(self.pid)
            return {"status": "malformed", "how": self.malformed}, None
        if self.answered:
            _ANSWERED.append(self.pid)
            return {"status": "done"}, self.answer.frame()
        _, status, usage = _wait4(self.pid, 0)
        stderr = self.output.decode(errors="replace")
        cpu = usage.ru_utime + usage.ru_stime
        if timed_out:  # on the clock, with CPU time to spare
            return {
                "status": "timeout",
                "seconds": self.timeout,
                "wall": self.timeout * limits.WALL_PER_CPU,
                "cpu": round(cpu, 1),
                "stderr": stderr,
            }, None
        if _used_its_cpu(status, cpu, self.timeout):
            return {"status": "timeout", "seconds": self.timeout, "stderr": stderr}, None
        return {"status": "crashed", "how": _how_it_ended(status), "stderr": stderr}, None


JOB = struct.Struct(">QI")  # what a child is handed: its request's index and seconds, the frame
_ANSWERED: list[int] = []  # children killed after they answered, not reaped yet


def reap_answered() -> None:
    """Reap the children that answered (killed already: this waits for their exit to finish)."""
    while _ANSWERED:
        _waitpid(_ANSWERED.pop(), 0)


def _run_child(job, job_fd: int, write_fd: int, output_fd: int) -> None:
    """In the forked child: keep no descriptor but its own pipes, wait for the request, run
    `job` on it, send one frame ``{"index", "batch", "reply"}``, leave without cleanup
    handlers."""
    try:
        os.setpgid(0, 0)
        os.dup2(output_fd, 1)
        os.dup2(output_fd, 2)
        _close_all_but(job_fd, write_fd)
        drop_capabilities()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        try:
            index, seconds = JOB.unpack(frames.read_exactly(job_fd, JOB.size))
            batch = wire.decode(frames.read_frame(job_fd))
        except frames.WireError:  # the zygote ended before handing a request: nothing to do
            return
        os.close(job_fd)
        limits.limit_cpu(seconds)
        envelope = {"index": index, "batch": batch.get("batch")}
        try:
            frame = wire.encode({**envelope, "reply": job(batch["requests"][index])})
            if not frames.fits(frame, frames.REPLIES):
                frame = wire.encode({**envelope, "reply": {"error": _too_large(frame)}})
        except BaseException as exc:  # noqa: BLE001 - the child must always answer or die
            error = "".join(traceback.format_exception_only(type(exc), exc))[: wire.TEXT_CHARS]
            frame = wire.encode({**envelope, "reply": {"error": error}})
        frames.write_all(write_fd, frame)
    finally:
        _exit(0)


def _close_all_but(*keep: int) -> None:
    """Close every descriptor above stderr but `keep`: what the zygote held when it forked
    (the judge's pipes, other children's pipes) is out of the candidate's reach."""
    low = 3
    for fd in sorted(keep):
        os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, os.sysconf("SC_OPEN_MAX"))


def _too_large(frame: bytes) -> str:
    (header_len,) = frames.HEADER.unpack_from(frame)
    if header_len > frames.REPLIES.header:
        return (
            f"the result is {header_len >> 10:,} KiB of numbers and text, more than the "
            f"{frames.REPLIES.header >> 10:,} KiB a reply may carry besides its tensors"
        )
    return (
        f"the result is {len(frame) >> 20} MiB, more than the {frames.REPLIES.frame >> 20} "
        "MiB a reply may carry"
    )


def _used_its_cpu(status: int, cpu: float, seconds: int) -> bool:
    """Did the kernel stop the child for its CPU time: SIGXCPU, or the SIGKILL that follows
    when SIGXCPU is caught?"""
    if not os.WIFSIGNALED(status):
        return False
    return os.WTERMSIG(status) == signal.SIGXCPU or (
        os.WTERMSIG(status) == signal.SIGKILL and cpu >= seconds
    )


def _how_it_ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            return f"killed by signal {signal.Signals(number).name}"
        except ValueError:
            return f"killed by signal {number}"
    return f"exited with code {os.WEXITSTATUS(status)} before answering"


def spawner(sock_fd: int) -> None:
    """Import what every worker needs once, then fork a worker for each request.

    A request is a message on the unix socket `sock_fd` carrying the new worker's stdin, stdout
    and stderr; the reply is its pid. The forked worker runs `main()` with its imports done, so
    grading many implementations (the test suite, grade-all) pays for one torch import.
    """
    import pytest  # noqa: F401 - loaded here, shared by every worker forked below
    import torch

    from graders.worker import ops, pytest_runner  # noqa: F401

    torch.set_num_threads(1)
    not_dumpable()
    gc.freeze()
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # workers are reaped as they end
    sock = socket.socket(fileno=sock_fd)
    while True:
        try:
            _, fds, _, _ = socket.recv_fds(sock, 16, 3)
        except OSError:
            return
        if len(fds) != 3:  # the judge closed the socket
            return
        pid = _fork()
        if pid == 0:
            try:
                sock.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.setsid()
                for target, fd in enumerate(fds):
                    os.dup2(fd, target)
                    os.close(fd)
                main()
            finally:
                _exit(0)
        for fd in fds:
            os.close(fd)
        sock.sendall(f"{pid}\n".encode())
