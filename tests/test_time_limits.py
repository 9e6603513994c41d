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
import time
from contextlib import contextmanager

import pytest
import torch

from graders.judge.candidate import Candidate

from graders.dense.items import prealloc
from graders.judge.workers import Reply, Worker, _timeout_detail
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
    hogs = [subprocess.Popen([sys.executable, "-c", BUSY], preexec_fn=pin)
            for _ in range(busy_loops)]
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
@pytest.mark.parametrize("job", [computes_forever, ignores_its_cpu_limit],
                         ids=["computes-forever", "ignores-SIGXCPU"])
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


@pytest.mark.parametrize("measure, allowed", [(False, 10.0), (True, 30.0)],
                         ids=["plain", "measured"])
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


@pytest.mark.parametrize("status, says", [
    ({"seconds": 10}, "used 10 s of CPU time without finishing (a loop that never ends?)"),
    ({"seconds": 10, "wall": 30, "cpu": 0.04},
     "did not finish within 30 s, though it used only 0.0 s of CPU time (waiting for something "
     "that never comes?)"),
    ({"seconds": 10, "wall": 30, "cpu": 8.96},
     "did not finish within 30 s, having used 9.0 s of its 10 s of CPU time (a machine too busy "
     "to grade on?)"),
], ids=["cpu", "clock-idle", "clock-busy"])
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
def test_an_append_that_loops_in_python_passes_prealloc_s_hidden_run_in_its_measured_time(
        tmp_path):
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
