"""The worker side is one folder that stands alone, and the judge never runs candidate code.

graders/worker/ is all a sandboxed worker sees of the kata (`graders.isolation` binds it in
alone), so nothing in it may import the judge's modules; and the judge's modules may load a
candidate's file only by handing its path to a worker.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from benchmarks.bench import BENCH_CODE
from graders import isolation
from graders.isolation import WORKER_ENV

GRADERS = Path(__file__).resolve().parent.parent / "graders"
WORKER_SIDE = sorted((GRADERS / "worker").glob("*.py"))
JUDGE_SIDE = sorted(p for p in GRADERS.rglob("*.py") if "worker" not in p.relative_to(GRADERS).parts)
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
    judge = sorted(m for m in imported_modules(path)
                   if m.split(".")[0] == "graders" and not m.startswith("graders.worker")
                   and m != "graders")
    assert judge == [], f"{path.name} imports the judge's {judge}: the sandbox does not hold them"


@pytest.mark.parametrize("path", JUDGE_SIDE, ids=[str(p.relative_to(GRADERS)) for p in JUDGE_SIDE])
def test_the_judge_never_loads_a_file_in_its_own_process(path):
    calls = {node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
             for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Call)}
    # grade.py loads the kata's items and an interviewer's grader files; tolerances.py measures
    # the bundled solutions (a developer's tool): trusted code, never a candidate's.
    allowed = {"grade.py": {"import_module", "spec_from_file_location", "exec_module"},
               "tolerances.py": {"spec_from_file_location", "exec_module"}}
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
