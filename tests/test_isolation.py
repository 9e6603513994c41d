"""What a candidate's file can do outside its worker, under each isolation (README: "What you can
trust"). Each hostile file in tests/hostile/ is graded, then the test looks at what is left:
processes, files, the report on disk, the kata's own tree. Under bubblewrap every promise holds;
the process fallback is tested for the promises it makes.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from graders.formats import report
from graders.judge import isolation
from tests.grading import grade, request
from graders.judge.isolation import (
    KATA,
    Sandbox,
    SandboxUnavailable,
    _children,
    bwrap_problem,
    unseen_beside,
)
from graders.judge.workers import GradeWorkers, Worker
from graders.shared.mutation import REFERENCE

pytestmark = pytest.mark.slow  # whole grades: `pytest -m "not slow"` is the quick loop

FAST = 3.0  # seconds a batch of calls may take where a file hangs on purpose (the fork bomb)
GIB = 1 << 30

BWRAP = pytest.param(
    "require",
    id="bwrap",
    marks=pytest.mark.skipif(
        bwrap_problem() is not None, reason=f"bubblewrap cannot run here: {bwrap_problem()}"
    ),
)
PROCESS = pytest.param("process", id="process")


def grade_file(path: Path, mode: str, memory: int = 4 * GIB, **kwargs):
    """Grade `path` in sandbox `mode` with the default limit on a batch of calls: a file that
    does not hang takes what it needs (seconds, on a loaded machine), and no more."""
    return grade(path, sandbox=Sandbox(mode, memory), **kwargs)


def why(item) -> str:
    """The whole reason an item did not pass: a file that does not import says it once."""
    return item.unavailable or item.message


def processes_with(token: str) -> list[int]:
    """Pids of live processes whose command line holds `token`."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if token.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                found.append(int(pid))
        except OSError:
            pass
    return found


def kata_tree() -> dict[str, str]:
    """A hash of every file of the kata a candidate might want to change (not the caches: other
    tests' `kata grade` keeps its record of failures in .kata_cache beside the files it grades)."""
    files = [
        p
        for folder in ("graders", "solutions", "rubric", "starter")
        for p in (KATA / folder).rglob("*")
        if p.is_file() and not {"__pycache__", ".kata_cache"} & set(p.parts)
    ]
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in files + [KATA / "cli.py"]}


@pytest.fixture(autouse=True)
def kata_unchanged():
    before = kata_tree()
    yield
    assert kata_tree() == before, "a candidate's file changed the kata's own files"


@pytest.fixture
def token() -> str:
    return f"kata-hostile-{uuid.uuid4().hex}"


@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
def test_a_double_forked_forger_is_gone_before_the_report_is_written(
    mode, tmp_path, token, hostile_file
):
    target = tmp_path / "out.json"
    path = hostile_file("forges_the_report", TARGET=target, TOKEN=token)
    result = grade_file(path, mode, only={"append-time-dim", "attend-shape"})
    assert processes_with(token) == [], "the forger outlived the grade"
    report.write_json(result, target)
    time.sleep(5)  # the forger would have written by now
    written = json.loads(target.read_text())
    assert written["level"] is None and written["partial"] is True, written
    assert written["isolation"] == {"require": "bwrap", "process": "process"}[mode]
    assert [i["status"] for i in written["items"]] == ["pass", "pass"]


@pytest.mark.parametrize("mode", [BWRAP])
def test_a_file_that_rewrites_the_grader_changes_nothing(mode, hostile_file):
    # kata_unchanged checks every file of the kata after the grade
    result = grade_file(
        hostile_file("rewrites_the_grader", KATA=KATA), mode, only={"prefix-equivalence"}
    )
    assert result.items[0].status == "pass"
    assert not (KATA / "graders" / "planted.py").exists()


@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
def test_the_judge_is_out_of_sight(mode, monkeypatch, token, hostile_file):
    monkeypatch.setenv("SECRET", token)
    result = grade_file(hostile_file("reads_the_judge"), mode, only={"attend-shape"})
    message = why(result.items[0])
    assert "found:" in message, message
    assert token not in message, "the judge's environment reached the candidate"
    if mode == "require":
        assert "pytest" not in message, "the judge's process is visible from the sandbox"
        assert "/mem:" not in message, "another process's memory was readable"


@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
@pytest.mark.parametrize("name", ["borrows_the_solution", "imports_hidden_graders"])
def test_the_kata_s_solutions_and_hidden_graders_do_not_import(mode, name, hostile_file):
    result = grade_file(hostile_file(name), mode, hidden=True)
    assert result.level == "below L4" and result.score == 0
    assert all(i.status == "error" for i in result.reported)  # L6+ not started
    assert "refused" in why(result.items[0]), why(result.items[0])


@pytest.mark.parametrize("mode", [BWRAP])
def test_the_bundled_solution_cannot_be_read_by_path(mode, hostile_file):
    path = hostile_file("reads_the_solution_file", SOLUTION=REFERENCE)
    result = grade_file(path, mode, only={"prefix-equivalence"})
    assert result.items[0].status == "error"
    assert "FileNotFoundError" in why(result.items[0]), why(result.items[0])


@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
@pytest.mark.parametrize(
    "bomb, memory, says",
    [
        ("list", GIB, "memory limit of 1 GiB reached"),
        ("tensor", GIB, "memory limit of 1 GiB reached"),
        ("reply", 4 * GIB, "more than the 64 MiB a reply may carry"),
    ],
)
def test_a_memory_bomb_fails_its_item_and_names_the_limit(mode, bomb, memory, says, hostile_file):
    path = hostile_file("memory_bombs", MODE=bomb)
    result = grade_file(path, mode, memory, only={"append-time-dim", "attend-shape"})
    items = {i.id: i for i in result.items}
    assert items["append-time-dim"].status == "pass", "grading goes on past the bomb"
    assert items["attend-shape"].status == "error"
    assert says in why(items["attend-shape"]), why(items["attend-shape"])


# Why the process fallback's worker keeps root's user here (None where it has one of its own, as
# in Gradescope's container and in CI, whose .ci/run opens the Python environment to every user).
KEPT_ON_ROOT = isolation.worker_user_problem() if os.getuid() == 0 else None


@pytest.mark.parametrize(
    "limit, says",
    [
        ("processes", "process limit reached (64 processes)"),
        ("file", "file size limit of 64 MiB reached"),
    ],
    ids=["processes", "file"],
)
@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
def test_a_process_or_file_size_limit_fails_its_item_and_names_the_limit(
    mode, limit, says, hostile_file
):
    if limit == "processes" and mode == "process" and KEPT_ON_ROOT:
        pytest.skip(f"the process limit does not bind root outside bubblewrap ({KEPT_ON_ROOT})")
    result = grade_file(
        hostile_file("exhausts_limits", MODE=limit), mode, only={"append-time-dim", "attend-shape"}
    )
    items = {i.id: i for i in result.items}
    assert items["append-time-dim"].status == "pass", "grading goes on past the limit"
    assert items["attend-shape"].status == "error"
    assert says in why(items["attend-shape"]), why(items["attend-shape"])


@pytest.mark.parametrize("mode", [BWRAP])
def test_the_private_tmp_is_bounded(mode, hostile_file):
    result = grade_file(hostile_file("exhausts_limits", MODE="disk"), mode, only={"attend-shape"})
    assert "the private /tmp is full (256 MiB)" in why(result.items[0]), why(result.items[0])


@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
def test_an_output_flood_costs_nothing(mode, hostile_file, tmp_path, monkeypatch):
    judges_tmp = tmp_path / "judges_tmp"  # the judge's temporary files go here, and only this
    judges_tmp.mkdir()  # grade's: other tests may run beside this one
    monkeypatch.setattr(tempfile, "tempdir", str(judges_tmp))
    result = grade_file(
        hostile_file("floods_output"), mode, only={"attend-shape", "prefix-equivalence"}
    )
    assert [i.status for i in result.items] == ["pass", "pass"]
    assert list(judges_tmp.iterdir()) == [], "files left behind"


@pytest.mark.parametrize(
    "mode",
    [
        BWRAP,
        pytest.param(
            "process",
            id="process",
            marks=pytest.mark.skipif(
                bool(KEPT_ON_ROOT),
                reason="the process limit does not bind root: only bubblewrap stops a "
                f"fork bomb run as root ({KEPT_ON_ROOT})",
            ),
        ),
    ],
)
def test_a_fork_bomb_is_contained_and_leaves_nothing(mode, token, hostile_file):
    result = grade_file(
        hostile_file("fork_bomb", TOKEN=token), mode, timeout=FAST, only={"attend-shape"}
    )
    assert result.items[0].status in ("timeout", "error")
    assert processes_with(token) == [], "fork bomb processes outlived the grade"


@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
def test_network_and_home_are_out_of_reach(mode, tmp_path, token, hostile_file):
    home = tmp_path / "home"
    home.mkdir()
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        server.setblocking(False)
        path = hostile_file("escapes_outward", PORT=server.getsockname()[1], HOME=home, TOKEN=token)
        result = grade_file(path, mode, only={"attend-shape"})
        message = why(result.items[0])
        assert "reached:" in message, message
        if mode == "require":
            assert "network" not in message
            with pytest.raises(BlockingIOError):
                server.accept()
    written = [p for p in home.iterdir()]
    if mode == "require":
        assert written == [], "the sandbox wrote outside its private /tmp"
    assert not (Path.home() / f"kata-hostile-{token}").exists()


def test_require_refuses_to_grade_without_bubblewrap_and_auto_falls_back(monkeypatch):
    monkeypatch.setattr("graders.judge.isolation.bwrap_problem", lambda: "bwrap is not installed")
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        Sandbox("require").resolve()
    assert Sandbox("auto").resolve() == "process"
    assert Sandbox("process").resolve() == "process"


@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
def test_the_tests_run_in_a_sandbox_of_their_own_beside_the_implementations(mode, monkeypatch):
    """Two processes (two sandboxes) a grade: the tests worker is no child of the
    implementation's, so the candidate's tests, which are sent the reference's source, share
    neither /tmp nor processes with the implementation graded; nothing of either is left
    afterwards (tests/test_tests_sandbox.py grades the hostile files that try)."""
    monkeypatch.setattr("graders.judge.workers._SPAWNER", None)  # as `kata grade` starts them
    launched: list[list[int]] = []

    def on_item(item):  # the workers are alive while items run
        launched.append([pid for pid in _children(os.getpid()) if pid not in before])

    before = set(_children(os.getpid()))
    result = grade_file(
        REFERENCE,
        mode,
        tests=KATA / "solutions" / "test_kv_cache.py",
        only={"own-tests", "prefix-equivalence"},
        on_item=on_item,
    )
    assert [i.status for i in result.items] == ["pass", "pass"], result.items
    assert launched and all(len(pids) == 2 for pids in launched), launched
    assert not set(_children(os.getpid())) - before, "a worker outlived the grade"


@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
def test_workers_started_ahead_read_the_file_as_saved_when_they_go(mode, tmp_path):
    """`kata grade --watch` starts the next grade's workers before the save: they import the
    file as it is at go(), not as it was when they started."""
    path = tmp_path / "kv_cache.py"
    path.write_text("def attend(:\n")  # what lay there when the workers started
    workers = GradeWorkers.start(request(path, sandbox=Sandbox(mode)), ahead=True)
    path.write_text(REFERENCE.read_text())  # the save
    workers.go()
    result = grade_file(path, mode, workers=workers, only={"prefix-equivalence"})
    assert [i.status for i in result.items] == ["pass"], why(result.items[0])


@pytest.mark.parametrize("mode", [BWRAP])
def test_a_worker_started_ahead_sees_its_files_read_only_and_nothing_beside(
    mode, tmp_path, tmp_path_factory, hostile_file, monkeypatch
):
    """In bubblewrap the files are staged: copies of the judge's, bound read-only at their
    paths and rewritten at go(). The sandbox sees what it sees when started at the grade: its
    file, read-only, no sibling (the test file is the tests' sandbox's); the copies are gone
    with the workers."""
    path = hostile_file("looks_around_its_folder")
    source = path.read_text()
    tests = tmp_path / "test_kv_cache.py"
    tests.write_text("def test_nothing():\n    pass\n")
    (tmp_path / "notes.txt").write_text("not the candidate's to read")
    scratch = tmp_path_factory.mktemp("tmp")  # this test's own: other tests' grades use /tmp
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    workers = GradeWorkers.start(request(path, tests, sandbox=Sandbox(mode)), ahead=True)
    workers.go()
    result = grade_file(path, mode, tests=tests, workers=workers, only={"prefix-equivalence"})
    (item,) = result.items
    assert "saw ['kv_cache.py'], wrote []" in why(item), why(item)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kv_cache.py",
        "notes.txt",
        "test_kv_cache.py",
    ]
    assert path.read_text() == source
    assert not list(scratch.iterdir()), "the staged copies outlived their workers"


@pytest.mark.parametrize("mode", [BWRAP])
def test_files_beside_the_graded_ones_are_out_of_sight_and_the_messages_say_where_they_are(
    mode, tmp_path
):
    """The contract grades one file and one test file: a sandbox shows each worker its file
    alone, so a helper module beside the implementation, or a conftest.py beside the tests, is
    not there, and the message says it lies beside the file but is not shown."""
    path = tmp_path / "kv_cache.py"
    path.write_text("from rope_helpers import rotate\n" + REFERENCE.read_text())
    (tmp_path / "rope_helpers.py").write_text("def rotate(x):\n    return x\n")
    (item,) = grade_file(path, mode, only={"attend-shape"}).items
    assert item.status == "error"
    assert why(item).endswith(
        "No module named 'rope_helpers' (line 1). rope_helpers.py lies "
        "beside kv_cache.py, but a grade shows kv_cache.py alone (the "
        "contract: one file): move what it needs from rope_helpers.py into "
        "kv_cache.py"
    ), why(item)

    tests = tmp_path / "test_kv_cache.py"
    tests.write_text("def test_reads_a_fixture_of_conftest(kv):\n    assert kv\n")
    (tmp_path / "conftest.py").write_text(
        "import pytest\n\n@pytest.fixture\ndef kv():\n    return 1\n"
    )
    (item,) = grade_file(REFERENCE, mode, tests=tests, only={"own-tests"}).items
    assert item.status == "fail" and "fixture 'kv' not found" in item.message
    assert item.message.endswith(
        "conftest.py lies beside test_kv_cache.py, but a grade shows "
        "test_kv_cache.py alone (the contract: one file): move what it "
        "needs from conftest.py into test_kv_cache.py"
    ), item.message


@pytest.mark.parametrize(
    "error, beside",
    [
        ("ModuleNotFoundError: No module named 'rope_helpers'", "rope_helpers.py"),
        ("ModuleNotFoundError: No module named 'tools.rope'", "tools"),
        ("ModuleNotFoundError: No module named 'numpyx'", None),
        ("ImportError: cannot import name 'rotate' from 'rope_helpers'", None),
        ("E       fixture 'kv' not found", "conftest.py"),
    ],
    ids=["module", "package", "nothing-beside", "not-a-missing-module", "fixture"],
)
def test_a_message_names_a_file_only_when_it_lies_beside_the_graded_one(tmp_path, error, beside):
    (tmp_path / "rope_helpers.py").write_text("")
    (tmp_path / "tools").mkdir()
    (tmp_path / "conftest.py").write_text("")
    said = unseen_beside(error, str(tmp_path / "kv_cache.py"))
    assert said == (
        ""
        if beside is None
        else f". {beside} lies beside kv_cache.py, but a grade "
        "shows kv_cache.py alone (the contract: one file): move what it needs from "
        f"{beside} into kv_cache.py"
    )
    (tmp_path / "conftest.py").unlink()
    assert unseen_beside("E       fixture 'kv' not found", str(tmp_path / "kv_cache.py")) == ""


@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
def test_workers_started_ahead_that_died_waiting_are_closed_and_say_so(mode, tmp_path, monkeypatch):
    """A worker killed while it waits for its grade (out of memory, by hand): go() says False
    and leaves nothing, and `kata grade --watch` starts fresh workers instead."""
    monkeypatch.setattr("graders.judge.workers._SPAWNER", None)  # as `kata grade` starts them
    before = set(_children(os.getpid()))
    workers = GradeWorkers.start(request(REFERENCE, sandbox=Sandbox(mode)), ahead=True)
    os.killpg(workers.implementation._pid, 9)
    poll = select.poll()  # the worker's stdin has no reader left once all of it is gone
    poll.register(workers.implementation._in, select.POLLERR)
    assert poll.poll(10_000), "the killed worker's stdin still has a reader after 10 s"
    assert workers.go() is False
    assert not set(_children(os.getpid())) - before, "a worker outlived go()"


@pytest.mark.parametrize("mode", [BWRAP, PROCESS])
def test_workers_interrupted_while_starting_leave_nothing(mode, tmp_path, monkeypatch):
    """Ctrl-C while a grade's workers start, after their processes and staged copies exist:
    both are gone when the interrupt propagates."""
    monkeypatch.setattr("graders.judge.workers._SPAWNER", None)  # as `kata grade` starts them
    tests = tmp_path / "test_kv_cache.py"
    tests.write_text("def test_nothing():\n    pass\n")

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Worker, "_hello", interrupted)
    scratch = tmp_path / "tmp"  # this test's own: other tests' grades make folders in /tmp
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    before = set(_children(os.getpid()))
    with pytest.raises(KeyboardInterrupt):
        GradeWorkers.start(request(REFERENCE, tests, sandbox=Sandbox(mode)), ahead=True)
    assert not set(_children(os.getpid())) - before, "a worker outlived the interrupt"
    assert not list(scratch.iterdir()), "a staged folder outlived the interrupt"


@pytest.mark.parametrize(
    "isolation, staged",
    [
        pytest.param("bwrap", True, id="bwrap-staged", marks=BWRAP.marks),
        pytest.param("bwrap", False, id="bwrap", marks=BWRAP.marks),
        pytest.param("process", False, id="process"),
    ],
)
def test_a_launch_interrupted_midway_leaves_nothing(isolation, staged, tmp_path, monkeypatch):
    """Ctrl-C inside `launch`, after it made descriptors or a folder and before it returns
    them: it closes and removes what it made before the interrupt propagates."""
    from graders.judge import isolation as module

    candidate = tmp_path / "kv_cache.py"
    candidate.write_text("")
    parents = module._Tree.parents

    def interrupted_at_the_candidate(tree, dest):  # once the file's descriptor or copy exists
        if dest == str(candidate):
            raise KeyboardInterrupt
        return parents(tree, dest)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(module._Tree, "parents", interrupted_at_the_candidate)
    monkeypatch.setattr(module, "kata_roots", interrupted)  # the process launch's last step
    scratch = tmp_path / "tmp"  # this test's own: other tests' grades make folders in /tmp
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    fds_before = set(os.listdir("/proc/self/fd"))
    with pytest.raises(KeyboardInterrupt):
        module.launch(isolation, "graders.worker", [candidate], staged=staged)
    assert not list(scratch.iterdir()), "a launch's folder outlived the interrupt"
    assert set(os.listdir("/proc/self/fd")) == fds_before, "a launch's descriptor stayed open"


@pytest.mark.parametrize("mode", [BWRAP])
@pytest.mark.parametrize("how", ["script", "module"])
def test_the_judges_own_folders_are_out_of_sight(mode, how, tmp_path, token, hostile_file):
    """Python puts the judge's script folder (`python script.py`) or its working directory
    (`python -m`) on sys.path; the sandbox binds the Python path's folders for the worker's
    imports, but never these: they may be any folder of the user's."""
    judge = tmp_path / "judge"
    judge.mkdir()
    (judge / "secret.txt").write_text(token)
    path = hostile_file("reads_a_file", PATH=judge / "secret.txt")
    (judge / "grade_it.py").write_text(
        "import sys\nfrom pathlib import Path\nfrom tests.grading import grade\n"
        "from graders.judge.isolation import Sandbox\n"
        f"result = grade(Path({str(path)!r}), sandbox=Sandbox({mode!r}), only={{'attend-shape'}})\n"
        "print(result.items[0].unavailable or result.items[0].message)\n"
    )
    argv = (
        [sys.executable, "grade_it.py"] if how == "script" else [sys.executable, "-m", "grade_it"]
    )
    done = subprocess.run(
        argv,
        cwd=judge,
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, PYTHONPATH=str(KATA)),
    )
    assert "unreadable: FileNotFoundError" in done.stdout, done.stdout + done.stderr
    assert token not in done.stdout


# --- the worker's user, for a root judge (issue 40) ----------------------------------------------

AS_ROOT = pytest.mark.skipif(
    os.geteuid() != 0,
    reason="only root can run processes as another "
    "user, as a root judge runs its workers: run the test as root",
)


def test_each_live_worker_gets_a_user_of_its_own_in_this_judges_block():
    users = [isolation.take_user() for _ in range(3)]
    try:
        block = isolation.SANDBOX_UID + (os.getpid() % (1 << 20)) * isolation.USER_SLOTS
        assert len(set(users)) == 3
        assert all(block <= uid < block + isolation.USER_SLOTS for uid in users)
    finally:
        for uid in users:
            isolation.give_back_user(uid)
    again = isolation.take_user()
    isolation.give_back_user(again)
    assert again == min(users), "a user given back is taken again"


def test_a_folder_closed_to_other_users_keeps_the_worker_on_the_judges_user():
    base = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's tmp_path lies in a folder of 0700
    try:
        base.chmod(0o755)
        lib = base / "closed" / "env" / "lib"
        lib.mkdir(parents=True)
        assert isolation._closed_to_others(str(lib)) is None
        (base / "closed").chmod(0o700)
        assert isolation._closed_to_others(str(lib)) == str(base / "closed")
        (base / "closed").chmod(0o755)
        lib.chmod(0o711)  # to be entered, not read: an import lists it
        assert isolation._closed_to_others(str(lib)) == str(lib)
    finally:
        shutil.rmtree(base)


def test_a_temporary_folder_closed_to_other_users_keeps_the_worker_on_the_judges_user(monkeypatch):
    """A worker's folder is made in tempfile's folder: one of 0700 on the way (pytest's own,
    a TMPDIR of the user's) would fail every item of a correct file, so the worker stays on the
    judge's user and the reason names it; one others may enter (0711) is enough."""
    base = Path(tempfile.mkdtemp(dir="/tmp"))
    try:
        base.chmod(0o755)
        temporary = base / "closed" / "tmp"
        temporary.mkdir(parents=True)
        monkeypatch.setattr(os, "geteuid", lambda: 0)
        monkeypatch.setattr(isolation, "_environment_closed", lambda: None)
        monkeypatch.setattr(tempfile, "tempdir", str(temporary))
        (base / "closed").chmod(0o700)
        assert isolation.worker_user_problem() == (
            f"{base / 'closed'} is closed to other users, and the worker's temporary folder "
            "lies in it"
        )
        (base / "closed").chmod(0o711)
        temporary.chmod(0o711)
        assert isolation.worker_user_problem() is None
    finally:
        shutil.rmtree(base)


@AS_ROOT
@pytest.mark.skipif(
    bool(KEPT_ON_ROOT), reason=f"the worker keeps the judge's user here ({KEPT_ON_ROOT})"
)
def test_a_worker_of_its_own_user_names_the_file_as_the_candidate_knows_it(tmp_path):
    """A root judge's worker reads a copy of the file in a folder of its own; what it says of the
    file (a traceback's line, `__file__`) names the file's own path, the same on every run."""
    path = tmp_path / "kv_cache.py"
    path.write_text("raise RuntimeError(__file__)\n")
    (item,) = grade(path, only={"attend-shape"}, sandbox=Sandbox("process")).items
    assert item.status == "error"
    assert f"RuntimeError: {path} (line 1)" in item.unavailable, item


@AS_ROOT
def test_ending_a_workers_user_kills_and_reaps_every_process_of_it(token):
    """A process of the worker's user that left a sleeper in a session of its own, as a
    candidate's code would: end_user returns once /proc shows none of either."""
    isolation.guard_judge()  # the judge is the subreaper of what its workers leave
    uid = isolation.take_user()
    try:
        starter = subprocess.Popen(
            ["/bin/sh", "-c", f"setsid /bin/sh -c 'sleep 600; : {token}' & sleep 600"],
            user=uid,
            group=uid,
            extra_groups=[],
            cwd="/",
        )
        deadline = time.monotonic() + 10
        while len(isolation._processes_of_user(uid)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(isolation._processes_of_user(uid)) >= 3, "the sleeper did not start"
        isolation.end_user(uid)
        assert isolation._processes_of_user(uid) == [] and processes_with(token) == []
        starter.wait(timeout=5)
    finally:
        isolation.give_back_user(uid)


@pytest.mark.parametrize(
    "euid, problem, says",
    [
        (
            0,
            None,
            "runs the candidate's code as a user of its own, but does not stop it from "
            "reading what every user may read or using the network",
        ),
        (
            0,
            "/root is closed to other users",
            "forking without bound or using the network: it runs "
            "as root, the judge's user (/root is closed",
        ),
        (
            1000,
            "the kata is not run as root",
            "reading or writing this user's files or using the network",
        ),
    ],
    ids=["root-as-its-own-user", "root-kept", "not-root"],
)
def test_the_fallback_note_says_what_the_fallback_leaves_open_here(
    euid, problem, says, monkeypatch
):
    monkeypatch.setattr(isolation, "worker_user_problem", lambda: problem)
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    assert says in isolation._fallback_gaps()
