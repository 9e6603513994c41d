"""Hidden failures never print inputs: each names its seed and the kind of case, and no tensor;
and they name the likely mistakes the public cases name.

Every item's `grade_hidden` is called directly on wrong implementations, so that it runs even
where the public cases would fail first (as `kata grade` never lets it): three of the bundled
mistakes (graders.dense.mistakes) on every dense item, the hidden-only mutants of
tests/test_hidden.py on their items, and the wrong schedulers of tests/wrong/batching.py on
theirs. Every verdict that is not a pass, whatever its kind (a wrong
output, an exception or a crash of the implementation, a hang), must read "seed N (kind of
case)" and show no tensor: no repr, no decimals of the kind inputs are made of.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from graders.judge.candidate import Candidate

from graders.dense.mistakes import MISTAKES
from graders.judge.grade import kata_graders
from graders.judge.workers import Worker
from graders.shared import hidden_cases
from graders.shared.mutation import PAGED_REFERENCE, Mutant
from graders.shared.plans import CandidateError, CandidateTimeout, Fail
from graders.shared.rubric import load
from graders.shared.tracks import DENSE
from tests.test_hidden import MUTANTS
from tests.seeds import SUITE_SEED
from tests.wrong import everything
from tests.wrong.batching import SCHEDULERS
from tests.wrong.batching import SOLUTION as SCHEDULER_SOLUTION

pytestmark = pytest.mark.slow  # whole grades: `pytest -m "not slow"` is the quick loop

BROAD = ("no-scale", "attends-over-capacity", "appends-on-heads")  # fail most dense items
SEED_AND_KIND = re.compile(r"seed \d+ \([^)]*\w")
TENSOR_REPR = re.compile(r"tensor\(")
INPUT_DECIMALS = re.compile(r"(?<![\w.])-?\d+\.\d{4,}(?![\de])")  # 0.1234: not 1.2e-03 or 1234
PARALLEL = 3
LIKELY = [  # wrong implementation (tests/wrong), item, the likely mistake its public cases name
    ("gqa-head-mapping-modulo", "gqa", "Likely mistake: the GQA head mapping"),
    ("no-scale", "prefix-equivalence", "Likely mistake: the scores' scale"),
]


def _jobs(folder: Path) -> list[tuple[str, Path, str, set[str]]]:
    """(name, candidate file, module, item ids to grade hidden) of every wrong implementation."""
    dense = {i.id for i in load().items if DENSE.owns(i.level)}
    hidden = {g.item for g in kata_graders(hidden=True)}
    wrong = [(m, hidden & dense) for m in MISTAKES if m.name in BROAD]
    wrong += [(case.mutant, set(case.items)) for case in MUTANTS]
    wrong += [(scheduler.mutant, set(scheduler.fails)) for scheduler in SCHEDULERS]
    jobs = []
    for mutant, items in wrong:
        path = folder / mutant.name / mutant.base.name
        path.parent.mkdir()
        path.write_text(mutant.source())
        jobs.append((mutant.name, path, _module(mutant), items))
    return jobs


def _module(mutant: Mutant) -> str:
    if mutant.base == SCHEDULER_SOLUTION:
        return "scheduler"
    return "paged_kv_cache" if mutant.base == PAGED_REFERENCE else "kv_cache"


def _hidden_verdicts(path: Path, module: str, items: set[str]) -> dict[str, str]:
    """Each of `items`' hidden graders run on `path`: item -> the message of its verdict when it
    did not pass."""
    worker = Worker("implementation", str(path), module=module, files=[path]).start()
    verdicts = {}
    try:
        candidate = Candidate(worker, timeout=10.0)
        for grader in kata_graders(hidden=True):
            if grader.item in items:
                try:
                    with hidden_cases.run_seed(SUITE_SEED):
                        grader.grade(candidate)
                except (Fail, CandidateError, CandidateTimeout) as exc:
                    verdicts[grader.item] = str(exc)
    finally:
        worker.close()
    return verdicts


@pytest.fixture(scope="module")
def failures(tmp_path_factory) -> list[tuple[str, str, str]]:
    """(implementation, item, message) of every hidden verdict that was not a pass."""
    jobs = _jobs(tmp_path_factory.mktemp("hidden-messages"))

    def run(job):
        name, path, module, items = job
        return [
            (name, item, message) for item, message in _hidden_verdicts(path, module, items).items()
        ]

    with ThreadPoolExecutor(PARALLEL) as pool:
        return [found for found_by_one in pool.map(run, jobs) for found in found_by_one]


def test_every_hidden_grader_failed_somewhere(failures):
    """The check below covers every item's hidden cases."""
    assert {item for _, item, _ in failures} == {g.item for g in kata_graders(hidden=True)}


def test_hidden_failures_name_seed_and_kind_and_print_no_tensor(failures):
    for name, item, message in failures:
        where = f"{item} on {name}: {message}"
        assert SEED_AND_KIND.search(message), f"no seed and kind of case named: {where}"
        assert not TENSOR_REPR.search(message), f"prints a tensor: {where}"
        assert not INPUT_DECIMALS.search(message), f"prints values like an input's: {where}"


@pytest.mark.parametrize("name, item, label", LIKELY, ids=[f"{n} {i}" for n, i, _ in LIKELY])
def test_hidden_cases_name_the_likely_mistake_the_public_ones_name(name, item, label, tmp_path):
    wrong = next(w for w in everything() if w.name == name)
    path = wrong.write(tmp_path)
    message = _hidden_verdicts(path, "kv_cache", {item})[item]
    assert SEED_AND_KIND.search(message) and label in message, message
