"""A call's time limit is CPU time: the same file gets the same grade on a busy machine.

The worker's zygote (graders.worker.serve) runs each request in a forked child that may use
`timeout` seconds of CPU time (`limits.limit_cpu`); time spent waiting for a core does not
count. A child that uses little CPU but never answers (it sleeps, it waits) is stopped on the
clock at WALL_PER_CPU times the limit. These tests run `supervise` itself, with jobs that stand
for a candidate's code, in children forked from this process.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch

from graders.judge.candidate import Candidate

from graders.dense.items import prealloc
from graders.export import autograder
from graders.judge.request import TimeBudget
from tests.grading import grade
from graders.judge.workers import Reply, Worker, WorkerUnavailable, _timeout_detail
from graders.shared import hidden_cases
from graders.shared.mutation import REFERENCE
from graders.shared.plans import CandidateTimeout, Plan
from graders.worker import limits, wire
from graders.worker.limits import WALL_PER_CPU
from graders.worker.serve import Spares, reap_answered, supervise

TIMEOUT = 1.0  # seconds of CPU time a request may use
WORK = 0.5  # seconds of CPU time the job that finishes uses: half its limit
BUSY = "while True: pass"


def burn(seconds: float) -> None:
    """Compute until this process has used `seconds` more CPU time."""
    start = time.process_time()
    while time.process_time() - start < seconds:
        pass


def run_one(job, timeout: float = TIMEOUT) -> dict:
    """Run `job` on one request as the worker does; the request's status frame."""
    spares = Spares(job)
    requests = wire.encode({"requests": [{}]})
    [(status, _)] = list(supervise(spares, requests, 1, timeout, 1))
    spare = spares.take()  # forked for a next request: told there is none, and reaped
    os.close(spare.job_fd)
    spare.finish()
    reap_answered()
    return status


@contextmanager
def one_core_shared_with(busy_loops: int):
    """Pin this process (and the children it forks) to one core, beside `busy_loops` processes
    that compute forever on the same core: a machine busier than any CI runner."""
    before = os.sched_getaffinity(0)
    core = {min(before)}
    os.sched_setaffinity(0, core)
    pin = lambda: os.sched_setaffinity(0, core)  # noqa: E731 - run in each child before exec
    hogs = [
        subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=pin) for _ in range(busy_loops)
    ]
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
        os.sched_setaffinity(0, before)


def finishes(request):
    burn(WORK)
    return {"finished": True}


def computes_forever(request):
    while True:
        pass


def sleeps_forever(request):
    time.sleep(3600)


def ignores_its_cpu_limit(request):
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    while True:
        pass


@pytest.mark.slow  # computes for 3 processes' seconds
def test_a_call_that_needs_half_its_cpu_time_finishes_on_a_core_shared_three_ways():
    start = time.monotonic()
    with one_core_shared_with(busy_loops=2):
        status = run_one(finishes)
    elapsed = time.monotonic() - start
    assert status == {"status": "done"}, status
    # The point of the test: on the clock it took longer than its limit, so a limit on the
    # clock would have stopped it.
    assert elapsed > TIMEOUT, f"{WORK} s of CPU took only {elapsed:.1f} s: the core was not shared"


@pytest.mark.slow  # computes until stopped
@pytest.mark.parametrize(
    "job", [computes_forever, ignores_its_cpu_limit], ids=["computes-forever", "ignores-SIGXCPU"]
)
def test_a_call_that_computes_forever_is_stopped_by_its_cpu_time(job, monkeypatch):
    # SIGXCPU at 1 s of CPU; a child that ignores it gets SIGKILL one second later. The clock's
    # deadline is moved out of the way, so that a busy machine cannot stop the child first.
    monkeypatch.setattr(limits, "WALL_PER_CPU", 20)
    status = run_one(job)
    assert status["status"] == "timeout" and "wall" not in status, status
    assert status["seconds"] == TIMEOUT


def test_a_call_that_sleeps_forever_is_stopped_on_the_clock():
    start = time.monotonic()
    status = run_one(sleeps_forever, timeout=0.5)  # rlimits count whole seconds: 1 s
    elapsed = time.monotonic() - start
    assert status["status"] == "timeout", status
    assert status["seconds"] == 1 and status["wall"] == WALL_PER_CPU, status
    assert status["cpu"] < 0.5, status
    assert WALL_PER_CPU <= elapsed < WALL_PER_CPU + 2, f"stopped after {elapsed:.1f} s"


def in_a_child(body) -> int:
    """Run `body` in a forked child (its rlimits and signal handlers are its own); its exit code."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = body()
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


@pytest.mark.slow  # computes until stopped
def test_an_import_that_computes_forever_is_stopped_by_its_cpu_time_and_the_limit_restored():
    def body():
        before = resource.getrlimit(resource.RLIMIT_CPU)
        try:
            with limits.cpu_for_import(1):
                computes_forever(None)
        except limits.ImportTimeLimit:
            return 3 if resource.getrlimit(resource.RLIMIT_CPU) == before else 4
        return 5

    assert in_a_child(body) == 3, "3: stopped and restored; 4: not restored"


class RecordingWorker:
    """Stands for a worker: records the time each batch is given, and says it ran out."""

    def __init__(self):
        self.timeouts: list[float] = []

    def run(self, requests, timeout, parallel=1):
        self.timeouts.append(timeout)
        return [Reply("timeout", detail=f"used {timeout:g} s of CPU time without finishing")]


@pytest.mark.parametrize(
    "measure, allowed", [(False, 10.0), (True, 30.0)], ids=["plain", "measured"]
)
def test_a_plan_whose_appends_are_measured_gets_more_time(measure, allowed):
    """prealloc's probe runs Python at every torch operation of an append: a correct append
    that loops over positions in Python took 13 s on prealloc's hidden run."""
    worker = RecordingWorker()
    plan = Plan()
    plan.new("c")
    plan.append("c", torch.zeros(1, 1, 1, 2), torch.zeros(1, 1, 1, 2), measure=measure or None)
    with pytest.raises(CandidateTimeout, match=f"used {allowed:g} s of CPU time"):
        Candidate(worker, timeout=10.0).run(plan)
    assert worker.timeouts == [allowed]


@pytest.mark.parametrize(
    "status, says",
    [
        ({"seconds": 10}, "used 10 s of CPU time without finishing (a loop that never ends?)"),
        (
            {"seconds": 10, "wall": 30, "cpu": 0.04},
            "did not finish within 30 s, though it used only 0.0 s of CPU time (waiting for something "
            "that never comes?)",
        ),
        (
            {"seconds": 10, "wall": 30, "cpu": 8.96},
            "did not finish within 30 s, having used 9.0 s of its 10 s of CPU time (a machine too busy "
            "to grade on?)",
        ),
    ],
    ids=["cpu", "clock-idle", "clock-busy"],
)
def test_a_timeout_says_whether_the_call_computed_or_waited(status, says):
    assert _timeout_detail({"status": "timeout", **status}) == says


SLICE_LOOPS = '''

def append(cache, new_key, new_value, counts=None):
    """Correct, if slow: one Python iteration per 4 positions of a row, where the reference
    writes every position in one indexed assignment."""
    counts = _validate_append(cache, new_key, new_value, counts)
    lengths = cache.lengths if cache.lengths is not None else counts.new_zeros(len(counts))
    _reserve(cache, int((lengths + counts).max()), new_key)
    for b, (start, count) in enumerate(zip(lengths.tolist(), counts.tolist())):
        for i in range(0, count, 4):
            n = min(4, count - i)
            cache.k_storage[b, :, start + i : start + i + n] = new_key[b, :, i : i + n]
            cache.v_storage[b, :, start + i : start + i + n] = new_value[b, :, i : i + n]
    cache.lengths = lengths + counts
'''


@pytest.mark.slow  # a worker, and 3 s of the loops, measured
def test_an_append_that_loops_in_python_passes_prealloc_s_hidden_run_in_its_measured_time(tmp_path):
    """Measured by the allocation probe, the loops of prealloc's hidden run take about 3 s of
    CPU: more than the 2 s of a plain plan, less than the 6 s of a measured one (the same append
    one position at a time: 18 s measured, against --timeout 10's 30)."""
    path = tmp_path / "kv_cache.py"
    path.write_text(REFERENCE.read_text() + SLICE_LOOPS)
    worker = Worker("implementation", str(path), files=[path]).start()
    try:
        with hidden_cases.run_seed(1):
            prealloc.grade_hidden(Candidate(worker, timeout=2.0))  # Fail or timeout: raises
    finally:
        worker.close()


# --- a grade's time as a whole ------------------------------------------------------------------

BUDGET = 8.0  # seconds: the test's own budget, for a grade that would otherwise take minutes
SLEEP = 2.5  # seconds each request waits: under the 3 s a call of --timeout 1 may take
WAITING_TESTS = """import time


def test_waits_for_what_never_comes():
    time.sleep(3600)
"""


@pytest.mark.slow  # a grade of BUDGET seconds, on purpose
def test_a_grade_whose_every_request_waits_ends_at_its_budget_with_the_rest_timeouts(
    hostile_file, tmp_path
):
    """Each request sleeps just under its limit on the clock, so no call times out and the
    per-item hang count never trips; the candidate's tests, run beside, wait too. The grade
    ends at its budget: what was graded keeps its status, every item after (own-tests among
    them) is a timeout that names the budget."""
    path = hostile_file("sleeps_before_every_answer", SLEEP=SLEEP)
    tests = tmp_path / "test_kv_cache.py"
    tests.write_text(WAITING_TESTS)
    start = time.monotonic()
    result = grade(path, tests, timeout=1.0, budget=TimeBudget(public=BUDGET, hidden=BUDGET))
    elapsed = time.monotonic() - start
    assert elapsed < BUDGET + 10, f"the grade took {elapsed:.0f} s against a budget of {BUDGET:g}"
    says = f"the grade's time budget of {BUDGET:g} s on the clock was spent"
    spent = [item for item in result.items if item.status == "timeout"]
    assert spent and all(says in why(item) for item in spent), [why(i) for i in spent]
    statuses = {item.id: item.status for item in result.items}
    assert statuses["own-tests"] == "timeout"
    assert "pass" in statuses.values(), "no item was graded before the budget: the file is correct"
    assert len(spent) < len(result.items) - 1
    assert result.level is not None and not result.partial, "a budget leaves out no item"


def why(item) -> str:
    return item.unavailable or item.message


def test_the_default_budget_is_the_readmes_and_under_the_autograders_backstop():
    """The figures the README states, and the order they must keep: a Gradescope grade ends
    at its budget, never at run_autograder's backstop (which says only "did not finish")."""
    budget = TimeBudget()
    assert (budget.public, budget.hidden) == (150.0, 240.0)
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    assert "a time budget of 150 s (240 s with `--hidden`" in " ".join(readme.split())
    assert autograder.GRADE_SECONDS >= budget.hidden + 30
    assert budget.public + budget.hidden + 2 * 30 < 600, "Gradescope's default limit: 10 min"


@pytest.mark.slow  # one grade of the reference, timed
def test_the_reference_grades_in_a_fraction_of_the_default_budget():
    """The margin the default was chosen with (8-12x, grade.TimeBudget): the reference and its
    tests grade, public cases, in under a quarter of it even on a loaded machine."""
    tests = REFERENCE.parent / "test_kv_cache.py"
    start = time.monotonic()
    result = grade(REFERENCE, tests)
    elapsed = time.monotonic() - start
    assert result.passed, [why(i) for i in result.items if i.status != "pass"]
    assert elapsed < TimeBudget().public / 4, f"the reference took {elapsed:.0f} s"


SPINS_ON_NEW = """

class KVCache(KVCache):  # noqa: F811 - the reference's, spinning where it is made
    def __init__(self, *args, **kwargs):
        while True:
            pass
"""


@pytest.mark.slow  # a worker
def test_an_interrupted_worker_ends_its_request_at_once_and_never_starts_again(tmp_path):
    """Worker.interrupt from another thread than the request's (the judge's, when the
    real-model item that runs beside the others is not graded after all): the request ends
    as a crash in a moment, not at its limit, and the next is refused instead of starting
    the worker anew."""
    path = tmp_path / "kv_cache.py"
    path.write_text(REFERENCE.read_text() + SPINS_ON_NEW)
    spin = Plan()
    spin.new("c")
    worker = Worker("implementation", str(path), files=[path]).start()
    try:
        assert worker.run([{"plan": {"ops": []}}], 30.0)[0].status == "done"  # imported
        replies = []
        running = threading.Thread(
            target=lambda: replies.extend(worker.run([{"plan": {"ops": spin.ops}}], 30.0))
        )
        start = time.monotonic()
        running.start()
        time.sleep(0.5)
        worker.interrupt()
        running.join(30.0)
        assert not running.is_alive() and time.monotonic() - start < 10.0
        assert [reply.status for reply in replies] == ["crashed"], replies
        with pytest.raises(WorkerUnavailable, match="interrupted"):
            worker.run([{"plan": {"ops": []}}], 30.0)
    finally:
        worker.close()
