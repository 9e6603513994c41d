"""How a worker is walled off from the judge and the machine: bubblewrap, or a process fallback.

Chosen once per grade (`Sandbox.resolve`):

    bwrap    the worker runs in a bubblewrap sandbox: new PID, mount, network, IPC and UTS
             namespaces; a read-only view of the Python environment with the kata's own files
             masked; the worker side of the kata (graders/worker) alone at /kata; the
             candidate's files read-only; a private /tmp; no network; run as a user id of its
             own (when the judge is root) so that its process limit counts only its processes.
    process  where bubblewrap is missing or cannot make namespaces: the worker in its own
             session, a working directory of its own, the kata's modules refused at import;
             run by a root judge as a user id of its own too (`WorkerFolder`), with copies of
             its files, where the Python environment is readable by every user
             (`worker_user_problem`).

Both add the resource limits (`graders.worker.limits`) and guard the judge: it is not
dumpable and is the child subreaper of everything a worker starts, so that `reap_strays` can
kill every process a candidate left before any report is written; a worker run as a user of
its own is ended with every process of that user (`end_user`).
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from graders.shared import bundled
import graders.worker
from graders.worker.limits import Limits

GIB = 1 << 30
KATA = bundled.PACKAGES  # the folder holding the graders and benchmarks packages
WORKER_SIDE = Path(graders.worker.__file__).resolve().parent
SANDBOX_CODE = "/kata"  # where the sandbox sees the worker side (and the bench's code)
TMP_BYTES = 256 << 20  # the sandbox's private /tmp lives in memory: this is its size
# What of the judge's environment a process-isolated worker keeps: what Python and torch need.
PASSED_ON = {"PATH", "LANG", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "CONDA_PREFIX", "OMP_NUM_THREADS"}
# A root judge runs each worker as a user id no account uses: SANDBOX_UID, then a block of
# USER_SLOTS ids for each judge (by its pid), so that judges running at once never share one,
# and ending every process of a worker's user ends no other judge's worker.
SANDBOX_UID = 1_000_000
USER_SLOTS = 64
END_USER_SECONDS = 30.0  # processes of a worker's user still there after this: the kata broke
# A worker forks a child for every call, from a process holding torch's ~150 MiB of heap: the
# C library's heap on transparent huge pages (where the kernel offers them on request) makes
# that fork and its exit 2-3x cheaper (9.6 -> 3.9 ms on the 2-core machine of the closing
# notes). torch.compile is off (it returns the function as written): a child compiles afresh,
# 10-20 s a graph, so a correct file that compiles its attention would time out in every item.
# The bench's runner keeps the defaults: it measures caches as PyTorch runs them, compiled.
WORKER_ENV = {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1", "TORCH_COMPILE_DISABLE": "1"}


# What the process fallback leaves open, in one line (PROCESS_FALLBACK_GAPS, at the end of this
# module, from `_fallback_gaps`): the report and the scorecard of a grade in it say so, and so
# does the refusal that sends an interviewer to it (README: "Isolation").


def worker_user_problem() -> str | None:
    """Why a process-isolated worker runs as the judge's own user here, or None when it runs as
    one of its own: the judge must be root (to change users), and every folder a worker reads
    (the Python environment, the worker side of the kata) readable by every user, and the
    temporary folder its files are copied into (tempfile's, TMPDIR) open for them to enter."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return "the kata is not run as root, which alone can run it as another user"
    closed = _environment_closed()
    if closed is not None:
        return f"{closed} is closed to other users, and the Python environment lies in it"
    # A worker's folder is made (and given to its user) inside the judge's temporary folder: a
    # TMPDIR of 0700 would fail every item of a correct file with a PermissionError at import.
    closed = _closed_to_others(tempfile.gettempdir(), listed=False)
    if closed is not None:
        return f"{closed} is closed to other users, and the worker's temporary folder lies in it"
    return None


@cache
def _environment_closed() -> str | None:
    """The first folder of the Python environment or the kata's worker side closed to other
    users, or None (cached: they do not move while the kata runs, TMPDIR may)."""
    for folder in (
        *_python_dirs(_shown_path_entries()),
        str(WORKER_SIDE),
        os.path.dirname(os.path.realpath(sys.executable)),
    ):
        closed = _closed_to_others(folder)
        if closed is not None:
            return closed
    return None


def _closed_to_others(folder: str, listed: bool = True) -> str | None:
    """The first folder on the way to `folder` (itself included) that a user other than its
    owner cannot enter (or, when `listed`, list itself), or None."""
    path = Path(folder)
    for step in [*reversed(path.parents), path]:
        try:
            mode = step.stat().st_mode
        except OSError:
            return str(step)
        if not mode & 0o001 or (listed and step == path and not mode & 0o004):
            return str(step)
    return None


def _fallback_gaps() -> str:
    """What the process fallback leaves open here, in one line."""
    problem = worker_user_problem()
    if problem is None:
        return (
            "the process fallback runs the candidate's code as a user of its own, but does "
            "not stop it from reading what every user may read or using the network"
        )
    if os.geteuid() == 0:
        return (
            "the process fallback does not stop the candidate's code from reading or "
            "writing root's files, reading the judge, forking without bound or using the "
            f"network: it runs as root, the judge's user ({problem})"
        )
    return (
        "the process fallback does not stop the candidate's code from reading or writing "
        "this user's files or using the network"
    )


class SandboxUnavailable(Exception):
    """`--sandbox require` and bubblewrap cannot run here; the message says what to install."""


@dataclass(frozen=True)
class Sandbox:
    """What the user asked for: `mode` is "auto" (bubblewrap where it works, else the process
    fallback), "require" (bubblewrap or nothing) or "process" (cli's `SandboxMode`, the one
    list of them, which --sandbox checks); `memory` is the data limit in
    bytes of every process the candidate's code runs in. `chosen` is False where `mode` is a
    command's default rather than the user's word (an interviewer's run requires bubblewrap
    unless told otherwise): it changes only what a refusal says."""

    mode: str = "auto"
    memory: int = 4 * GIB
    chosen: bool = field(default=True, compare=False)

    def resolve(self) -> str:
        """ "bwrap" or "process"; SandboxUnavailable when "require" cannot be met."""
        if self.mode == "process":
            return "process"
        problem = bwrap_problem()
        if problem is None:
            return "bwrap"
        if self.mode == "require" and self.chosen:
            raise SandboxUnavailable(
                f"--sandbox require: bubblewrap cannot run here ({problem}); "
                "install the 'bubblewrap' package (apt-get install bubblewrap)"
            )
        if self.mode == "require":
            raise SandboxUnavailable(
                f"bubblewrap cannot run here ({problem}), and an interviewer's run (--hidden, "
                "grade-all) grades a candidate's file only in its sandbox: install it (apt-get "
                "install bubblewrap), or accept the process fallback with --sandbox process "
                f"({PROCESS_FALLBACK_GAPS})"
            )
        return "process"

    def limits(self, **others) -> Limits:
        """The worker's Limits: this memory limit, the defaults or `others` for the rest."""
        return Limits(memory=self.memory, **others)


@dataclass
class Launch:
    """How to start one sandboxed process: Popen's arguments, and what to clean up after it."""

    argv: list[str] = field(default_factory=list)
    env: dict = field(default_factory=dict)
    cwd: str = "/"
    pass_fds: list[int] = field(default_factory=list)
    scratch: str | None = None  # a folder of the judge's for this process, removed at the end
    kata_roots: list[str] = field(default_factory=list)  # for the import guard in the worker
    staged: list[tuple[Path, Path]] = field(default_factory=list)  # (file, the copy it sees)
    user: int | None = None  # a user of the launch's own (`take_user`), given back by cleanup

    def close_fds(self) -> None:
        """Close the descriptors handed to bubblewrap (it has read them once started)."""
        for fd in self.pass_fds:
            os.close(fd)

    def stage(self) -> None:
        """A staged launch: copy each file's content now into the copy the sandbox sees at the
        file's path (in place: the bind follows the copy's inode)."""
        for path, copy in self.staged:
            with open(path, "rb") as source, open(copy, "wb") as target:
                shutil.copyfileobj(source, target)

    def cleanup(self) -> None:
        if self.user is not None:
            give_back_user(self.user)
            self.user = None
        if self.scratch:
            shutil.rmtree(self.scratch, ignore_errors=True)


def launch(
    isolation: str,
    module: str | None,
    files: list[Path],
    code: tuple[str, ...] = ("graders.worker",),
    tmp_bytes: int = TMP_BYTES,
    staged: bool = False,
    user: int | None = None,
) -> Launch:
    """How to run `python -m module` (None: `python -c ''`, bubblewrap only) under `isolation`,
    seeing `files` (read-only, at their own paths) and the kata's packages named in `code`
    ("graders.worker": the worker side alone), with a private /tmp of `tmp_bytes`. A root
    judge's bubblewrap runs it as `user` (`take_user`; None: one of the launch's own, ended and
    given back by `cleanup`); the process fallback leaves the change of user to the worker.

    Bubblewrap shows `files` as they are at the launch; `staged`, as they are at each
    `Launch.stage()` (a process started before a save reads the saved file). The process
    fallback reads them where they lie, whenever it reads them."""
    made = Launch()  # owns each descriptor and folder as it is made: an interrupt leaves none
    try:
        if isolation == "bwrap":
            _bwrap_launch(made, module, files, code, tmp_bytes, staged, user)
        else:
            _process_launch(made, module)
    except BaseException:
        made.close_fds()
        made.cleanup()
        raise
    return made


def _process_launch(made: Launch, module: str) -> None:
    """`made`, filled for the process fallback: a plain child with a scratch folder as its home."""
    made.scratch = tempfile.mkdtemp(prefix="kata-worker-")
    env = {
        key: value
        for key, value in os.environ.items()
        if key in PASSED_ON or key.startswith(("LC_", "PYTHON"))
    }
    env.update(
        HOME=made.scratch,
        TMPDIR=made.scratch,
        PYTHONPATH=os.pathsep.join(p for p in (str(KATA), os.environ.get("PYTHONPATH")) if p),
    )
    if module == "graders.worker":
        env.update(WORKER_ENV)
    made.argv, made.env, made.cwd = [sys.executable, "-P", "-m", module], env, made.scratch
    made.kata_roots = kata_roots()


def kata_roots() -> list[str]:
    """The folders a process-isolated worker must take off sys.path: the kata's checkout, when
    it runs from one (an installed kata lies in site-packages, which stays)."""
    return [str(KATA)] if (KATA / "pyproject.toml").is_file() else []


@cache
def bwrap_problem() -> str | None:
    """Why bubblewrap cannot run a worker here, or None when it can (tried once a process)."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    trial = launch("bwrap", None, [])
    try:
        done = subprocess.run(
            trial.argv,
            env=trial.env,
            cwd=trial.cwd,
            pass_fds=trial.pass_fds,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bwrap did not start: {exc}"
    finally:
        trial.close_fds()
        trial.cleanup()
    if done.returncode != 0:
        return (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    return None


def _bwrap_launch(
    made: Launch,
    module: str | None,
    files: list[Path],
    code,
    tmp_bytes: int,
    staged: bool,
    user: int | None,
) -> None:
    """`made`, filled for bubblewrap: its arguments, and the descriptors and staged copies
    they name."""
    args = ["bwrap", "--die-with-parent", "--new-session"]
    as_root = os.getuid() == 0 and shutil.which("setpriv") is not None
    if as_root:  # no user namespace: the worker drops to a user id of its own below
        args += [
            "--unshare-ipc",
            "--unshare-pid",
            "--unshare-net",
            "--unshare-uts",
            "--unshare-cgroup-try",
        ]
    else:
        args += ["--unshare-all"]
    args += [
        "--perms",
        "1777",
        "--size",
        str(tmp_bytes),
        "--tmpfs",
        "/tmp",
        "--proc",
        "/proc",
        "--dev",
        "/dev",
    ]
    tree = _Tree()
    for top in ("/usr", "/bin", "/lib", "/lib32", "/lib64", "/sbin"):
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += tree.bind(top, top)
    for path in (
        *(
            f"/etc/{name}"
            for name in (
                "ld.so.cache",
                "ld.so.conf",
                "localtime",
                "passwd",
                "group",
                "nsswitch.conf",
            )
        ),
        "/sys/devices/system/cpu",
    ):  # what the C library, torch and the bench read
        if os.path.exists(path):
            args += tree.bind(path, path)
    shown = _shown_path_entries()
    python_dirs = _python_dirs(shown)
    for folder in python_dirs:
        args += tree.bind(folder, folder)
    for hidden in _kata_paths():  # the kata, where it lies inside the Python environment
        if any(_inside(hidden, folder) for folder in python_dirs):
            args += tree.mask(hidden)
    for package in code:
        if package == "graders.worker":  # the worker side alone, in an empty graders package
            made.pass_fds.append(_empty_file())
            args += tree.bind(str(WORKER_SIDE), f"{SANDBOX_CODE}/graders/worker")
            args += [
                "--perms",
                "0444",
                "--ro-bind-data",
                str(made.pass_fds[-1]),
                f"{SANDBOX_CODE}/graders/__init__.py",
            ]
        else:
            args += tree.bind(str(KATA / package), f"{SANDBOX_CODE}/{package}")
    if staged:
        made.scratch = tempfile.mkdtemp(prefix="kata-staged-")
    for number, path in enumerate(files):
        if staged:  # a copy of the judge's, bound read-only: stage() rewrites it in place
            made.staged.append((Path(path), Path(made.scratch, f"{number}-{Path(path).name}")))
            made.staged[-1][1].touch(mode=0o644)
            args += tree.parents(str(path)) + ["--ro-bind", str(made.staged[-1][1]), str(path)]
            continue
        made.pass_fds.append(os.open(path, os.O_RDONLY))
        args += tree.parents(str(path)) + [
            "--perms",
            "0444",
            "--ro-bind-data",
            str(made.pass_fds[-1]),
            str(path),
        ]
    args += ["--remount-ro", "/", "--chdir", "/tmp", "--clearenv"]
    extra_path = [
        entry
        for entry in shown  # what the prefixes do not hold
        if not any(_inside(os.path.realpath(entry), prefix) for prefix in _prefixes())
    ]
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": "/tmp",
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "USER": "kata",
        "LOGNAME": "kata",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": os.pathsep.join([SANDBOX_CODE, *extra_path]),
        "OMP_NUM_THREADS": "1",
    }
    if module == "graders.worker":
        env.update(WORKER_ENV)
    for key, value in env.items():
        args += ["--setenv", key, value]
    if as_root:
        if user is None:  # a launch of its own (the bench, the trial run): its user is its own
            user = made.user = take_user()
        args += [
            "/usr/bin/setpriv",
            "--reuid",
            str(user),
            "--regid",
            str(user),
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ]
    inner = ["-c", ""] if module is None else ["-P", "-m", module]
    made.argv = args + [sys.executable, *inner]
    made.env, made.cwd = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, "/"


class _Tree:
    """The sandbox's folders as the bwrap arguments build them: binds of host folders (whose
    insides exist) and folders made on the sandbox's root or /tmp (searchable by its user)."""

    def __init__(self):
        self.binds: list[str] = ["/proc", "/dev"]
        self.masks: list[str] = []
        self.made: set[str] = {"/tmp"}

    def bind(self, source: str, dest: str) -> list[str]:
        args = self.parents(dest) + ["--ro-bind", source, dest]
        self.binds.append(dest)
        return args

    def mask(self, path: str) -> list[str]:
        """Hide what lies at `path` inside a bind: an empty folder, or an empty file."""
        if not os.path.isdir(path):
            return ["--ro-bind", "/dev/null", path]
        self.masks.append(path)
        return ["--tmpfs", path]

    def parents(self, dest: str) -> list[str]:
        args = []
        parts = Path(dest).parts
        for depth in range(2, len(parts)):
            folder = str(Path(*parts[:depth]))
            shown = any(_inside(folder, b) for b in self.binds) and not any(
                _inside(folder, m) for m in self.masks
            )
            if folder in self.made or shown:
                continue
            args += ["--perms", "0755", "--dir", folder]
            self.made.add(folder)
        return args


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _prefixes() -> list[str]:
    return sorted(
        {
            os.path.realpath(p)
            for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)
        }
    )


def _python_dirs(shown: list[str]) -> list[str]:
    """The Python environment: its prefixes, its install paths, and the folders of the sys.path
    entries `shown` (`_shown_path_entries`: site-packages elsewhere, PYTHONPATH entries); the
    outermost only, as an inner one is in view already."""
    folders = set(_prefixes())
    for name in ("stdlib", "platstdlib", "purelib", "platlib"):
        folders.add(os.path.realpath(sysconfig.get_paths()[name]))
    folders.update(os.path.realpath(entry) for entry in shown)
    return [f for f in sorted(folders) if not any(f != g and _inside(f, g) for g in folders)]


def _shown_path_entries() -> list[str]:
    """The entries of the judge's sys.path that a sandbox shows: existing folders, but neither
    the root, the kata's own checkout, nor one of the judge's own folders."""
    hidden = {"/", str(KATA), *_judges_own_folders()}
    return [
        entry
        for entry in sys.path
        if entry and os.path.isdir(entry) and os.path.realpath(entry) not in hidden
    ]


def _judges_own_folders() -> set[str]:
    """The folders Python put on sys.path for the judge's own sake: its working directory
    (`python -m`) and its script's folder (`python script.py`). A worker imports nothing from
    either, and either may be any folder of the user's (their home, other candidates' files):
    a sandbox is never shown them, unless PYTHONPATH names them."""
    own = {os.path.realpath(os.getcwd())}
    if sys.argv and sys.argv[0] and os.path.isfile(sys.argv[0]):
        own.add(os.path.realpath(os.path.dirname(os.path.abspath(sys.argv[0]))))
    named = {os.path.realpath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p}
    return own - named


def _kata_paths() -> list[str]:
    """What of the kata a candidate may not see when it lies inside the Python environment
    (an installed wheel): its packages, the CLI, and the bundled files."""
    paths = [
        KATA / "graders",
        KATA / "benchmarks",
        KATA / "cli.py",
        bundled.STARTER,
        bundled.SOLUTIONS,
        bundled.RUBRIC.parent,
    ]
    return sorted({str(p) for p in paths if p.exists()})


def _empty_file() -> int:
    """A descriptor that reads as an empty file (for the sandbox's graders/__init__.py)."""
    read_end, write_end = os.pipe()
    os.close(write_end)
    return read_end


# --- a user of the worker's own, for a root judge ---------------------------------------------

_slots_taken: set[int] = set()
_slots_lock = threading.Lock()


def take_user() -> int:
    """A user id for one worker, that no other live worker (of any judge) has: the lowest free
    one of this judge's block. Given back with `give_back_user`."""
    with _slots_lock:
        slot = next(n for n in range(USER_SLOTS + 1) if n not in _slots_taken)
        if slot == USER_SLOTS:
            raise RuntimeError(f"more than {USER_SLOTS} workers at once")
        _slots_taken.add(slot)
    return SANDBOX_UID + (os.getpid() % (1 << 20)) * USER_SLOTS + slot


def give_back_user(uid: int) -> None:
    """End every process of `uid` (`end_user`), then free its id for another worker."""
    end_user(uid)
    with _slots_lock:
        _slots_taken.discard((uid - SANDBOX_UID) % USER_SLOTS)


def end_user(uid: int) -> None:
    """Kill every process of `uid` and return once none is left: stopped first (so none forks
    again), then killed, then reaped (by this judge, the subreaper of each, or the process that
    forked it). RuntimeError if some are still there after END_USER_SECONDS."""
    deadline = time.monotonic() + END_USER_SECONDS
    while pids := _processes_of_user(uid):
        for pid in pids:
            _signal(pid, signal.SIGSTOP)
        for pid in pids:
            _signal(pid, signal.SIGKILL)
        reap_strays()
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{len(pids)} processes of the worker's user {uid} outlived "
                f"SIGKILL for {END_USER_SECONDS:g} s"
            )
        time.sleep(0.005)


def _processes_of_user(uid: int) -> list[int]:
    """Pids of the processes whose real, effective or saved user id is `uid` (zombies too)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/status") as f:
                    ids = next(line for line in f if line.startswith("Uid:")).split()[1:4]
            except (OSError, StopIteration):
                continue
            if str(uid) in ids:
                found.append(int(entry.name))
    return found


@dataclass
class WorkerFolder:
    """Where a process-isolated worker run as `user` lives: `root`, the judge's (others may
    enter it, not list it), holding `home` (the user's own: its working directory, $HOME and
    $TMPDIR) and a read-only copy of each of its files (`shown`: each file's path -> the copy's,
    under the file's own name), made at `stage()`. The worker reads the copies: the judge's
    folders, where the files lie, are closed to its user."""

    user: int
    root: Path
    home: Path
    shown: dict[str, str]

    @classmethod
    def make(cls, user: int, files: list[Path]) -> "WorkerFolder":
        root = Path(tempfile.mkdtemp(prefix="kata-worker-"))
        try:
            root.chmod(0o711)
            home = root / "home"
            home.mkdir(mode=0o700)
            os.chown(home, user, user)
            shown = {}
            for number, path in enumerate(files):
                (root / str(number)).mkdir(mode=0o755)  # pytest lists its test file's folder
                shown[str(path)] = str(root / str(number) / Path(path).name)
            folder = cls(user, root, home, shown)
            folder.stage()
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        return folder

    def stage(self) -> None:
        """Copy each file as it is now (the judge's read: the worker's user may not read the
        original), readable by every user and writable by none but the judge."""
        for path, copy in self.shown.items():
            with open(path, "rb") as source, open(copy + ".new", "wb") as target:
                shutil.copyfileobj(source, target)
            os.chmod(copy + ".new", 0o444)
            os.replace(copy + ".new", copy)

    def seen_as(self, path: str) -> str:
        """The path at which the worker reads the file at `path`."""
        return self.shown.get(str(path), str(path))

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


# --- the judge's guard -----------------------------------------------------------------------

_PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 4, 36
_guarded = False
_live: set[int] = set()  # pids of the judge's own children that must outlive a reap
_lock = threading.RLock()


def guard_judge() -> None:
    """Make this process not dumpable (no /proc/<judge>/mem, environ, ptrace for its user) and
    the subreaper of its descendants (a double fork lands here, not with init). Idempotent."""
    global _guarded
    if _guarded or not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    _guarded = True


def start(argv: list[str], **popen) -> subprocess.Popen:
    """Popen, with the child counted as one of the judge's own until `forget` is called."""
    with _lock:
        process = subprocess.Popen(argv, **popen)
        _live.add(process.pid)
    return process


def forget(pid: int) -> None:
    with _lock:
        _live.discard(pid)


def reap_strays() -> None:
    """Kill and reap every process that descends from the judge and is not one of its own live
    workers: what a candidate's code left behind (double forks, processes in a new session,
    a sandbox's init whose bwrap was killed). Returns when there are none left."""
    if not sys.platform.startswith("linux"):
        return
    with _lock:
        while True:
            strays = [pid for pid in _children(os.getpid()) if pid not in _live]
            if not strays:
                return
            _kill_trees(strays)
            for pid in strays:
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass


def _kill_trees(roots: list[int]) -> None:
    """Stop every process under `roots` (so none can fork again), then kill them all."""
    stopped: set[int] = set()
    while True:
        tree = _descendants(roots) - stopped
        if not tree:
            break
        for pid in tree:
            _signal(pid, signal.SIGSTOP)
        stopped |= tree
    for pid in stopped:
        _signal(pid, signal.SIGKILL)


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except OSError:
        pass


def _parents_by_pid() -> dict[int, int]:
    parents = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat[stat.rindex(b")") + 2 :].split()[1])
    return parents


def _children(pid: int) -> list[int]:
    return [child for child, parent in _parents_by_pid().items() if parent == pid]


def _descendants(roots: list[int]) -> set[int]:
    parents = _parents_by_pid()
    found, frontier = set(), [r for r in roots if r in parents]
    while frontier:
        pid = frontier.pop()
        found.add(pid)
        frontier += [c for c, p in parents.items() if p == pid and c not in found]
    return found


# --- what a worker's error says of its sandbox: a file it was not shown, a limit reached -------


def unseen_beside(error: str, path: str) -> str:
    """What to add to `error` when it comes from a file beside `path` that a sandbox does not
    show: a module the file imports, or the conftest.py holding its tests' fixtures (a grade
    sees the graded file alone, as the contract grades one file). "" otherwise."""
    folder, name = Path(path).parent, Path(path).name
    module = re.search(r"No module named '([A-Za-z_]\w*)", error)
    if module:
        helper = next(
            (f for f in (f"{module.group(1)}.py", module.group(1)) if (folder / f).exists()), None
        )
    else:
        fixture = re.search(r"fixture '[^']+' not found", error)
        helper = "conftest.py" if fixture and (folder / "conftest.py").exists() else None
    if helper is None:
        return ""
    return (
        f". {helper} lies beside {name}, but a grade shows {name} alone (the contract: one "
        f"file): move what it needs from {helper} into {name}"
    )


def limit_reached(text: str, limits: Limits) -> str | None:
    """Which limit `text` (an exception or how a process ended) shows was reached, as a phrase
    naming it ("memory limit of 4 GiB reached"); None when it shows none."""
    signs = (
        (
            ("MemoryError", "can't allocate memory", "Cannot allocate memory"),
            f"memory limit of {_size(limits.memory)} reached",
        ),
        (("SIGXCPU",), f"CPU time limit of {limits.cpu_seconds} s reached"),
        (("SIGXFSZ", "File too large"), f"file size limit of {_size(limits.file_size)} reached"),
        (
            ("Resource temporarily unavailable",),
            f"process limit reached ({limits.processes} processes)",
        ),
        (("No space left on device",), f"the private /tmp is full ({_size(TMP_BYTES)})"),
    )
    for needles, phrase in signs:
        if any(needle in text for needle in needles):
            return phrase
    return None


def _size(n: int) -> str:
    return f"{n / GIB:g} GiB" if n >= GIB else f"{n >> 20} MiB"


PROCESS_FALLBACK_GAPS = _fallback_gaps()
PROCESS_FALLBACK_NOTE = f"Not sandboxed: {PROCESS_FALLBACK_GAPS} (bubblewrap does)."
