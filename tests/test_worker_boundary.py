"""The worker side is one folder that stands alone, the judge never runs candidate code, and a
request child that runs it holds nothing of the judge's.

graders/worker/ is all a sandboxed worker sees of the kata (`graders.judge.isolation` binds it in
alone), so nothing in it may import the judge's modules; and the judge's modules may load a
candidate's file only by handing its path to a worker.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import pytest

from benchmarks.bench import BENCH_CODE
from graders.judge import isolation
from graders.judge.isolation import WORKER_ENV
from graders.worker import wire
from graders.worker.serve import Spares, reap_answered, supervise

GRADERS = Path(__file__).resolve().parent.parent / "graders"
WORKER_SIDE = sorted((GRADERS / "worker").glob("*.py"))
JUDGE_SIDE = sorted(
    p for p in GRADERS.rglob("*.py") if "worker" not in p.relative_to(GRADERS).parts
)
# Ways to run a file's code in this process: a worker-side module is the only place for them.
LOADERS = {"exec_module", "spec_from_file_location", "run_path", "import_module", "__import__"}


def imported_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            modules |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return modules


@pytest.mark.parametrize("path", WORKER_SIDE, ids=[p.name for p in WORKER_SIDE])
def test_the_worker_side_imports_nothing_of_the_judge(path):
    judge = sorted(
        m
        for m in imported_modules(path)
        if m.split(".")[0] == "graders" and not m.startswith("graders.worker") and m != "graders"
    )
    assert judge == [], f"{path.name} imports the judge's {judge}: the sandbox does not hold them"


@pytest.mark.parametrize("path", JUDGE_SIDE, ids=[str(p.relative_to(GRADERS)) for p in JUDGE_SIDE])
def test_the_judge_never_loads_a_file_in_its_own_process(path):
    calls = {
        node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call)
    }
    # grade.py loads the kata's items and an interviewer's grader files; tolerances.py measures
    # the bundled solutions (a developer's tool): trusted code, never a candidate's.
    allowed = {
        "grade.py": {"import_module", "spec_from_file_location", "exec_module"},
        "tolerances.py": {"spec_from_file_location", "exec_module"},
    }
    found = (calls & LOADERS) - allowed.get(path.name, set())
    assert not found, f"{path.relative_to(GRADERS)} loads code with {sorted(found)}"


@pytest.mark.parametrize("mode", ["bwrap", "process"])
def test_workers_run_eagerly_on_a_huge_page_heap_and_the_bench_runner_does_neither(mode):
    """A worker forks a child a call: its heap on huge pages makes that fork cheap, and with
    torch.compile off a child does not compile again. The bench's runner keeps the defaults, so
    that its figures are PyTorch's as users run it, compiled code compiled."""

    def environment(module: str, code: tuple[str, ...]) -> dict[str, str]:
        launched = isolation.launch(mode, module, [], code=code)
        launched.close_fds()
        launched.cleanup()
        if mode == "process":
            return launched.env
        argv = launched.argv
        return {argv[i + 1]: argv[i + 2] for i, arg in enumerate(argv) if arg == "--setenv"}

    assert environment("graders.worker", ("graders.worker",)).items() >= WORKER_ENV.items()
    assert not environment("benchmarks.runner", BENCH_CODE).keys() & WORKER_ENV.keys()


def _what_a_request_child_holds(request) -> dict:
    """The job of a request child in the test below: its open descriptors and capabilities."""
    links = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            links[int(fd)] = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # the listing's own descriptor, closed by now
            pass
    status = Path("/proc/self/status").read_text()
    caps = dict(line.split(":\t") for line in status.splitlines() if line.startswith("Cap"))
    return {
        "links": {str(k): v for k, v in links.items()},
        "effective": int(caps["CapEff"], 16),
        "bounding": int(caps["CapBnd"], 16),
    }


def test_a_request_child_holds_no_descriptor_but_its_own_pipes_and_no_capability():
    """The zygote's pipes to the judge (here: a pipe this process holds when it forks) are
    closed in the child, which keeps stdin, its output and its reply pipe alone."""
    judge_read, judge_write = os.pipe()
    try:
        spares = Spares(_what_a_request_child_holds)
        requests = wire.encode({"batch": "b", "requests": [{}]})
        [(status, frame)] = list(supervise(spares, requests, 1, 10.0, 1))
        spare = spares.take()
        os.close(spare.job_fd)
        spare.finish()
        reap_answered()
        held = wire.decode(frame)["reply"]
        judge = {os.readlink(f"/proc/self/fd/{fd}") for fd in (judge_read, judge_write)}
        above_stderr = {fd: link for fd, link in held["links"].items() if int(fd) > 2}
        assert status == {"status": "done"}
        assert not judge & set(held["links"].values()), held["links"]
        assert len(above_stderr) == 1 and next(iter(above_stderr.values())).startswith("pipe:")
        assert held["effective"] == 0 and held["bounding"] == 0
    finally:
        os.close(judge_read)
        os.close(judge_write)
