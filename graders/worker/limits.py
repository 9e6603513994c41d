"""What a worker may use, applied to itself before any candidate code runs.

`Limits` travels in the worker's hello frame; `apply` turns it into rlimits, which every process
the candidate starts inherits. `become` makes a worker started by a root judge (the process
fallback) a user of its own first. `limit_cpu` gives one request its time and `cpu_for_import` the
import of the candidate's file its own: CPU time, so that how busy the machine is does not decide
whether they finish in time. `guard_imports` keeps the kata's own modules (the judge, the hidden
cases, the solutions) out of the candidate's reach, for the process fallback where their files
are on the disk the worker sees; under bubblewrap they are not there at all.
"""

from __future__ import annotations

import ctypes
import math
import os
import resource
import signal
import sys
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

MIB = 1 << 20
WALL_PER_CPU = 3  # a request that uses little CPU (it sleeps, waits) is stopped at 3x its time


@dataclass(frozen=True)
class Limits:
    """`memory`: bytes of data (heap, anonymous mappings) each process may hold; `processes`:
    how many processes the worker may add to those its user already runs; `file_size`: bytes
    of any file it writes; `cpu_seconds`: CPU time of each process. Core dumps are always off."""

    memory: int = 4 << 30
    processes: int = 64
    file_size: int = 64 * MIB
    cpu_seconds: int = 600

    def to_dict(self) -> dict:
        return asdict(self)


def apply(limits: Limits) -> None:
    """Set this process's rlimits from `limits` (inherited by every process it starts)."""
    _set(resource.RLIMIT_DATA, limits.memory)
    _set(resource.RLIMIT_FSIZE, limits.file_size)
    _set(resource.RLIMIT_CPU, limits.cpu_seconds)
    _set(resource.RLIMIT_CORE, 0)
    # RLIMIT_NPROC counts every process of this user, so the limit is what runs now plus ours.
    _set(resource.RLIMIT_NPROC, _processes_of(os.getuid()) + limits.processes)


_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS = 24, 38


def become(user: int, home: str) -> None:
    """Run from now on as `user` (its group alike, no other group), at home in `home` (the
    working directory, $HOME and $TMPDIR): every capability gone, and no way back to root, a
    set-user-id program included (no_new_privs). Raises OSError where it cannot: a worker that
    stayed root would share the judge's user."""
    libc = ctypes.CDLL(None, use_errno=True)
    for capability in range(64):  # the bounding set; past the last capability: EINVAL
        libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0)
    os.chdir(home)
    os.setgroups([])
    os.setresgid(user, user, user)
    os.setresuid(user, user, user)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
    if os.getresuid() != (user, user, user) or os.getgroups():
        raise OSError(f"the worker did not become user {user}")
    os.environ.update(HOME=home, TMPDIR=home)
    tempfile.tempdir = None


def cpu_seconds(timeout: float) -> int:
    """The CPU time a request given `timeout` seconds may use: whole seconds, as rlimits count,
    rounded up."""
    return max(1, math.ceil(timeout))


class ImportTimeLimit(BaseException):
    """Raised where the candidate's import is when it has used its CPU time (`cpu_for_import`)."""


@contextmanager
def cpu_for_import(seconds: int):
    """While the block runs, this process may use `seconds` more CPU time: then SIGXCPU raises
    ImportTimeLimit wherever the import is (and again each second while it is caught). Afterwards
    the limit is what it was: the process goes on to fork the children that run the calls."""
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    previous = signal.signal(signal.SIGXCPU, _import_time_limit)
    resource.setrlimit(resource.RLIMIT_CPU, (_capped(_cpu_used() + seconds, hard), hard))
    try:
        yield
    finally:
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)  # the import may have lowered it
        resource.setrlimit(resource.RLIMIT_CPU, (_capped(soft, hard), hard))
        signal.signal(signal.SIGXCPU, previous)


def _import_time_limit(signum, frame):
    raise ImportTimeLimit


def limit_cpu(seconds: int) -> None:
    """Let this process use `seconds` more CPU time: the kernel then sends SIGXCPU, and SIGKILL
    one second later if that is caught. Time waiting for a core does not count, so the same
    code is stopped at the same point of its work however many other processes share the
    machine."""
    _, hard = resource.getrlimit(resource.RLIMIT_CPU)
    soft = _capped(_cpu_used() + seconds, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (soft, _capped(soft + 1, hard)))


def _cpu_used() -> int:
    """Whole seconds of CPU time this process has used, user and system, every thread."""
    return int(sum(os.times()[:2]))


def _capped(value: int, hard: int) -> int:
    """`value`, or the hard limit `hard` if lower: no process may set a limit past its hard one."""
    return value if hard == resource.RLIM_INFINITY else min(value, hard)


def _set(which: int, value: int) -> None:
    _, hard = resource.getrlimit(which)
    value = _capped(value, hard)
    resource.setrlimit(which, (value, value))


def _processes_of(uid: int) -> int:
    """How many processes have `uid` as their real user id, as RLIMIT_NPROC counts them. Read
    from each /proc/<pid>/status, not from who owns /proc/<pid>: for a process that is not
    dumpable (the worker's zygote) the kernel may show root as that owner, whatever its user."""
    count = 0
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                count += _real_uid(Path(entry.path, "status").read_text()) == uid
            except OSError:
                pass  # it ended while we looked
    return count


def _real_uid(status: str) -> int | None:
    """The real user id in the text of a /proc/<pid>/status file."""
    for line in status.splitlines():
        if line.startswith("Uid:"):
            return int(line.split()[1])
    return None


class KataImportBlocked(ImportError):
    """The candidate's code tried to import part of the kata other than its worker side."""


class _KataGuard:
    """A meta-path finder that refuses the kata's judge side, hidden cases and solutions."""

    ALLOWED = ("graders.worker",)
    BLOCKED = ("graders", "solutions", "benchmarks", "cli", "starter", "rubric")

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        top = name.split(".")[0]
        if top not in cls.BLOCKED or name == "graders" or name.startswith(cls.ALLOWED):
            return None
        raise KataImportBlocked(
            f"import of {name!r} refused: a candidate's file may not use "
            "the kata's graders, hidden cases or solutions"
        )


def guard_imports(kata_roots: list[str]) -> None:
    """Take `kata_roots` (the folders holding the kata's packages) off sys.path and refuse
    imports of the kata's modules from here on; what is already imported stays usable."""
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") not in kata_roots]
    for name in [
        n
        for n in sys.modules
        if n.split(".")[0] in _KataGuard.BLOCKED
        and n != "graders"
        and not n.startswith(_KataGuard.ALLOWED)
    ]:
        del sys.modules[name]
    sys.meta_path.insert(0, _KataGuard)
