"""real-model: correct caches of two styles pass, the wrong ones fail naming the mode and the
step, the tolerance is the measured one pinned from both sides, replies are checked, and the
item is not attempted, saying what to install, where transformers is not.

The measurement runs the worker's adapter in this process (trusted code, fixtures of ours);
the grades run it in the item's own workers, as `kata grade` does.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import time
import tomllib
from pathlib import Path

import pytest
import torch

from graders.dense.items import real_model as item
from graders.judge.candidate import Candidate
from graders.judge.isolation import Sandbox, bwrap_problem, worker_user_problem
from graders.judge.result import ItemResult
from graders.shared import transformers_extra
from graders.shared.compare import close
from graders.shared.rubric import load
from graders.shared.tracks import DENSE
from tests.grading import grade, request
from tests.test_similarity import INDEPENDENT_AT_MOST, SOLUTIONS, fraction

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "implementations" / "real_model"
CONCAT, CHUNKS = FIXTURES / "concat.py", FIXTURES / "chunks.py"
HOSTILE = ROOT / "tests" / "hostile" / "tampers_with_transformers.py"
NEEDS_TRANSFORMERS = pytest.mark.skipif(
    transformers_extra.problem() is not None,
    reason="transformers (the real-model extra) is not here",
)

# Each wrong cache: (name, the edit of concat.py, the words its failure must hold).
WRONG = [
    (
        "reorder-keys-not-values",
        ("    cache.v = cache.v[beam_idx]\n", ""),
        ["beam search (3 beams), the model's own attention", "new token 3 of 12", "beam-reorder"],
    ),
    (
        "attend-without-scale",
        (
            '        scores = torch.einsum("bhgtd,bhsd->bhgts", q, keys) / math.sqrt(dim)',
            '        scores = torch.einsum("bhgtd,bhsd->bhgts", q, keys)',
        ),
        [
            "greedy search, your attend/attend_chunk as the attention",
            "new token 1 of 20",
            "1/sqrt(D) scale",
        ],
    ),
    (
        "truncate-keeps-the-drafts",
        ("    cache.lengths = lengths.clone()\n", ""),
        ["assisted decoding, the model's own attention", "cache.keys", "speculative-rollback"],
    ),
]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _State:
    """What the worker's operation reads of its state: the module and its names."""

    def __init__(self, module):
        self.module = module

    def fn(self, name):
        return getattr(self.module, name)


def _written(tmp_path: Path, edit: tuple[str, str], name: str) -> Path:
    source = CONCAT.read_text()
    assert edit[0] in source, edit[0]
    path = tmp_path / name / "kv_cache.py"
    path.parent.mkdir()
    path.write_text(source.replace(edit[0], edit[1]))
    return path


def _worst(module, runs) -> float:
    """The largest logit error of `module`'s generations against DynamicCache's over `runs`,
    in shares of item.LOGITS (1.0: at the bound); tokens must be equal."""
    from graders.worker import real_model

    worst = 0.0
    for run in runs:
        op = item._operation(run)
        got, want = real_model.real_model(_State(module), op), real_model.reference(op)
        assert torch.equal(got["sequences"], want["sequences"]), run.label
        bound = item.LOGITS.atol + item.LOGITS.rtol * want["logits"].abs()
        worst = max(worst, float(((got["logits"] - want["logits"]).abs() / bound).max()))
    return worst


@NEEDS_TRANSFORMERS
@pytest.mark.slow
def test_the_tolerance_keeps_the_measured_margin_from_both_sides():
    """Correct styles take 0.017 of LOGITS at the worst element over the public runs and a
    hidden seed's (58x inside; 0.026 over eight seeds of hidden runs, their MQA, MHA and GQA
    8/x models and long prompts included); the missing scale lands thousands
    of times past it. The band pins the constant: a 2x tightening (0.034) or loosening (0.0085)
    leaves it."""
    runs = item.PUBLIC + item._hidden_runs(4320, item.HIDDEN_SETS[0][1])
    for path in (CONCAT, CHUNKS):
        assert 0.012 < _worst(_load(path, f"real_model_{path.stem}"), runs) < 0.025, path.name
    source = CONCAT.read_text().replace(*WRONG[1][1])
    wrong = type(sys)("real_model_no_scale")
    exec(compile(source, "no_scale.py", "exec"), wrong.__dict__)
    from graders.worker import real_model

    run = next(r for r in item.PUBLIC if r.attention == "candidate")
    op = item._operation(run)
    got, want = real_model.real_model(_State(wrong), op), real_model.reference(op)
    bound = item.LOGITS.atol + item.LOGITS.rtol * want["logits"].abs()
    assert float(((got["logits"] - want["logits"]).abs() / bound).max()) > 1000


@pytest.mark.parametrize("path", [CONCAT, CHUNKS], ids=["concat", "chunks"])
def test_the_correct_styles_are_designs_of_their_own(path):
    """Neither is a bundled solution edited: each reads at most the independent designs' bound
    of tests/test_similarity.py against both (measured: concat 0.08 and 0.12, chunks 0.01 and
    0.0; the concat fixture copied concat_kv_cache.py before, at 0.80)."""
    for name in SOLUTIONS[DENSE]:
        assert fraction(path.read_text(), DENSE, name) <= INDEPENDENT_AT_MOST, name


def test_an_element_passes_at_0_9_of_the_bound_and_fails_at_1_1():
    expected = torch.tensor([0.0, 3.0, -2.5])
    bound = item.LOGITS.atol + item.LOGITS.rtol * expected.abs()
    assert close(expected + 0.9 * bound, expected, item.LOGITS).all()
    assert not close(expected + 1.1 * bound, expected, item.LOGITS).any()


@NEEDS_TRANSFORMERS
@pytest.mark.slow
@pytest.mark.parametrize(
    "path",
    [ROOT / "solutions" / "kv_cache.py", CONCAT, CHUNKS],
    ids=["solution", "concat", "chunks"],
)
def test_correct_caches_of_two_styles_pass_public_and_hidden(path):
    result = grade(path, hidden=True, seed=7, only={item.ITEM})
    (graded,) = result.items
    assert graded.status == "pass", graded.message
    assert "append" in graded.message and "truncate" in graded.message


@NEEDS_TRANSFORMERS
@pytest.mark.slow
@pytest.mark.parametrize("name, edit, words", WRONG, ids=[w[0] for w in WRONG])
def test_wrong_caches_fail_naming_the_mode_and_the_step(tmp_path, name, edit, words):
    (graded,) = grade(_written(tmp_path, edit, name), only={item.ITEM}).items
    assert graded.status == "fail", graded.message
    for word in words:
        assert word in graded.message, (word, graded.message)


# A cache that fails L4 to L6 (no 1/sqrt(D) scale) and spins once inside the model, where the
# model's worker has imported transformers before the file.
SPINS_IN_THE_MODEL = [
    WRONG[1][1],
    ("import math\n", "import math\nimport sys\n"),
    (
        'on anything incompatible, the cache unchanged."""\n',
        'on anything incompatible, the cache unchanged."""\n'
        '    while "transformers" in sys.modules:\n        pass\n',
    ),
]


@NEEDS_TRANSFORMERS
@pytest.mark.slow
def test_runs_beside_the_other_items_end_once_the_item_is_not_graded(tmp_path):
    """The item runs from the grade's start, beside the other items (graders.judge.grade:
    BESIDE); when an item before L6+ fails, it is not started, and its runs end then: a
    cache that spins inside the model costs the grade nothing near its 60 s limit."""
    source = CONCAT.read_text()
    for before, after in SPINS_IN_THE_MODEL:
        assert before in source, before
        source = source.replace(before, after)
    path = tmp_path / "kv_cache.py"
    path.write_text(source)
    start = time.monotonic()
    result = grade(path, timeout=60.0)
    took = time.monotonic() - start
    graded = {i.id: i for i in result.items}
    assert {i.id for i in result.items if i.status == "fail"} >= {"prefix-equivalence"}
    assert graded[item.ITEM].status == "not_attempted", graded[item.ITEM].message
    assert graded[item.ITEM].message.startswith("not started: L6+ is graded once"), took
    assert took < 40.0, f"the grade waited {took:.0f} s for runs no one grades"


@NEEDS_TRANSFORMERS
@pytest.mark.slow
def test_a_file_without_section_8_is_not_attempted():
    (graded,) = grade(ROOT / "solutions" / "concat_kv_cache.py", only={item.ITEM}).items
    assert graded.status == "not_attempted"
    assert "defines no attend_chunk, truncate" in graded.message


def test_without_transformers_the_item_says_what_to_install(monkeypatch):
    """transformers hidden from the judge (sys.modules holds None for it: find_spec finds
    nothing): the item is not attempted, and no worker of the item starts."""
    monkeypatch.setitem(sys.modules, "transformers", None)
    assert transformers_extra.problem() == (
        "transformers is not installed: pip install 'kvkata[real-model]' "
        "(or pip install 'transformers>=5.0,<6')"
    )
    started = []
    monkeypatch.setattr(
        "graders.judge.workers.Worker.start",
        lambda self: started.append(self.mode) or _real_start(self),
    )
    (graded,) = grade(CONCAT, only={item.ITEM}).items
    assert graded.status == "not_attempted"
    assert "pip install 'kvkata[real-model]'" in graded.message
    assert started == ["implementation"]


_real_start = __import__("graders.judge.workers", fromlist=["Worker"]).Worker.start


def test_a_version_outside_the_range_is_not_attempted(monkeypatch):
    monkeypatch.setattr(transformers_extra.importlib.metadata, "version", lambda name: "4.57.1")
    if importlib.util.find_spec("transformers") is None:
        pytest.skip("transformers is not here: the version is never read")
    assert transformers_extra.problem().startswith(
        "transformers 4.57.1 is outside the tested range transformers>=5.0,<6"
    )


def test_the_range_is_the_extras():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert extras[transformers_extra.EXTRA] == [transformers_extra.REQUIREMENT]
    assert transformers_extra.REQUIREMENT in extras["bench"]


@NEEDS_TRANSFORMERS
@pytest.mark.slow
@pytest.mark.parametrize(
    "tamper, status, words",
    [
        ("adapter", "pass", "equal DynamicCache token for token"),
        ("generate", "fail", "the model's generate never called your append"),
        ("weights", "fail", "part from DynamicCache's"),
    ],
)
def test_tampering_inside_the_worker_gains_the_item_at_most(hostile_file, tamper, status, words):
    """A file runs beside the adapter and transformers: replacing the adapter wins the item,
    a bypassed cache or another model loses it (the reference ran where the file is not)."""
    path = hostile_file("tampers_with_transformers", TAMPER=tamper)
    (graded,) = grade(path, only={item.ITEM}).items
    assert graded.status == status and words in graded.message, graded.message


DIRECT = {"chunk-causal-mask", "speculative-rollback"}  # L6+ items that call the file directly


@NEEDS_TRANSFORMERS
@pytest.mark.slow
@pytest.mark.xfail(
    not DIRECT <= {i.id for i in load().items},
    strict=True,
    reason="the L6+ items that grade attend_chunk and truncate directly are not "
    "in this rubric yet: until they are, a tampering file reaches L6+",
)
def test_a_tampering_file_never_gains_a_level(hostile_file):
    """The adapter replaced, real-model passes; the items that call attend_chunk and truncate
    themselves fail; the level is L6, what the other items give."""
    result = grade(
        hostile_file("tampers_with_transformers", TAMPER="adapter"),
        ROOT / "solutions" / "test_kv_cache.py",
    )
    status = {i.id: i.status for i in result.items}
    assert status[item.ITEM] == "pass"
    assert {status[i] for i in DIRECT} == {"fail"}
    assert {i for i, s in status.items() if s != "pass"} == DIRECT | {"sliding-window"}
    assert result.level == "L6"


def test_watch_keeps_the_verdict_while_the_file_is_unchanged(tmp_path):
    from graders.workflows.grading import KEPT, Verdicts

    path = tmp_path / "kv_cache.py"
    path.write_text("x = 1\n")
    verdicts = Verdicts()
    assert verdicts.kept(path) == {}  # nothing heard yet
    verdicts.hear(ItemResult("real-model", "L6+", "pass", 10, 10, "7 generate runs"))
    verdicts.hear(ItemResult("gqa", "L6", "pass", 6, 6, "gqa's"))  # only real-model is kept
    kept = verdicts.kept(path)
    assert list(kept) == ["real-model"] and kept["real-model"].message == KEPT + "7 generate runs"
    verdicts.hear(kept["real-model"])  # kept again: said once
    assert verdicts.kept(path)["real-model"].message == KEPT + "7 generate runs"
    path.write_text("x = 2\n")
    assert verdicts.kept(path) == {}  # changed: run again
    verdicts.hear(ItemResult("real-model", "L6+", "timeout", 0, 10, "hung"))
    assert verdicts.kept(path) == {}  # a timeout is no verdict


def test_a_kept_verdict_is_taken_as_it_is_and_generates_nothing(monkeypatch):
    """The judge takes a kept result in the item's place: no request reaches a worker (the
    model's workers, started ahead for the save that kept it, are closed unused)."""
    asked = []
    monkeypatch.setattr(
        "graders.judge.workers.Worker.run",
        lambda self, requests, *args: asked.append(self.mode) or [],
    )
    verdict = ItemResult("real-model", "L6+", "pass", 10.0, 10.0, "kept: 7 generate runs")
    (graded,) = grade(CONCAT, only={item.ITEM}, kept={item.ITEM: verdict}).items
    assert graded == verdict and asked == []


@NEEDS_TRANSFORMERS
@pytest.mark.slow
def test_public_answers_are_kept_and_a_bad_file_is_computed_again(monkeypatch, tmp_path):
    """The first public grade writes DynamicCache's answers; the next reads them and starts no
    reference worker (hidden runs still do); a file the reply schema refuses, or one that
    does not load, is computed in the reference worker again and rewritten."""
    from graders.shared import model_answers

    monkeypatch.setenv("KVKATA_CACHE", str(tmp_path / "kept"))
    assert not model_answers.kept() and request(CONCAT, only={item.ITEM}).runs_reference
    (first,) = grade(CONCAT, only={item.ITEM}).items
    assert first.status == "pass" and model_answers.kept()
    assert not request(CONCAT, only={item.ITEM}).runs_reference
    assert request(CONCAT, only={item.ITEM}, hidden=True).runs_reference
    asked = []
    reference = Candidate.reference
    monkeypatch.setattr(
        Candidate, "reference", lambda self, plan: asked.append(1) or reference(self, plan)
    )
    (again,) = grade(CONCAT, only={item.ITEM}).items
    assert again == first and asked == []
    kept = model_answers.read()
    steps = len(kept[0]["logits"])
    kept[0]["logits"] = kept[0]["logits"][:1]  # a shape the operation did not ask for
    model_answers.write(kept)
    (graded,) = grade(CONCAT, only={item.ITEM}).items
    assert graded == first and asked == [1] and len(model_answers.read()[0]["logits"]) == steps
    model_answers.path().write_bytes(b"not a tensor file")
    (graded,) = grade(CONCAT, only={item.ITEM}).items
    assert graded == first and asked == [1, 1] and model_answers.read() is not None


def test_kept_answers_anyone_else_could_have_written_are_not_read(monkeypatch, tmp_path):
    """A folder or file of kept answers writable by a group or other users (a worker run as a
    user of its own among them) is not read; the judge's folder is made closed to them."""
    from graders.shared import model_answers

    monkeypatch.setenv("KVKATA_CACHE", str(tmp_path / "kept"))
    model_answers.write([{"tokens": torch.arange(3)}])
    where = model_answers.path()
    assert where.parent.stat().st_mode & 0o777 == 0o700
    assert torch.equal(model_answers.read()[0]["tokens"], torch.arange(3))
    for opened, mode in [(where.parent, 0o770), (where.parent, 0o702), (where, 0o622)]:
        original = opened.stat().st_mode & 0o777
        opened.chmod(mode)
        assert model_answers.read() is None, f"{opened.name} at {mode:o}"
        opened.chmod(original)
    assert model_answers.read() is not None


@NEEDS_TRANSFORMERS
@pytest.mark.slow
@pytest.mark.parametrize(
    "mode",
    [
        pytest.param(
            "require",
            id="bwrap",
            marks=pytest.mark.skipif(bwrap_problem() is not None, reason="no bubblewrap here"),
        ),
        pytest.param(
            "process",
            id="process-as-its-own-user",
            marks=pytest.mark.skipif(
                os.geteuid() != 0 or worker_user_problem() is not None,
                reason="only a root judge runs the fallback's worker as a user of its own",
            ),
        ),
    ],
)
def test_a_file_cannot_plant_the_kept_answers(mode, monkeypatch, tmp_path, hostile_file):
    """A file that overwrites the kept answers at import, and writes its own beside them,
    leaves the judge's folder as the judge wrote it, and its grade reads what is true."""
    kept = tmp_path / "kept"
    monkeypatch.setenv("KVKATA_CACHE", str(kept))
    (first,) = grade(CONCAT, only={item.ITEM}).items  # the judge writes the answers
    before = {path.name: path.read_bytes() for path in kept.iterdir()}
    assert first.status == "pass" and before
    planter = hostile_file("plants_the_kept_answers", FOLDER=kept)
    (graded,) = grade(planter, only={item.ITEM}, sandbox=Sandbox(mode)).items
    assert {path.name: path.read_bytes() for path in kept.iterdir()} == before
    assert graded.status == "pass", graded.message


def test_the_request_runs_the_model_when_its_items_hold_the_item(monkeypatch):
    assert not request(CONCAT, up_to="L6").runs_model
    monkeypatch.setattr(transformers_extra, "problem", lambda: None)
    assert request(CONCAT, only={item.ITEM}).runs_model
    assert not request(CONCAT, only={"gqa"}).runs_model
    monkeypatch.setattr(transformers_extra, "problem", lambda: "transformers is not installed")
    assert not request(CONCAT, only={item.ITEM}).runs_model


def test_a_watch_hands_the_judge_the_verdict_of_an_unchanged_file(monkeypatch, tmp_path):
    """workflows.grading.grade with a watch's Verdicts: the first grade keeps nothing and is
    heard; the next, the file unchanged, hands the judge real-model's verdict; a changed file
    none."""
    import io

    from rich.console import Console

    from graders.judge.result import GradeResult
    from graders.judge.workers import GradeWorkers
    from graders.workflows import grading as workflow
    from tests.grading import NoWorkers

    path = tmp_path / "kv_cache.py"
    path.write_text("x = 1\n")
    monkeypatch.chdir(tmp_path)
    verdict = ItemResult("real-model", "L6+", "pass", 10.0, 10.0, "7 generate runs")
    handed = []

    def judge(request, workers, on_item=None, kept=None):
        handed.append(dict(kept or {}))
        workers.close()
        on_item(verdict)
        return GradeResult.from_items(str(path), request.track, [verdict], None, hidden=False)

    monkeypatch.setattr(
        GradeWorkers, "start", classmethod(lambda cls, request, ahead=False: NoWorkers(request))
    )
    monkeypatch.setattr("graders.judge.grade.grade", judge)
    verdicts, asked = workflow.Verdicts(), request(path, only={item.ITEM})
    outputs = workflow.Outputs(shown="kv_cache.py", command="kata grade kv_cache.py")
    for _ in range(2):
        workflow.grade(
            lambda stderr=False: Console(file=io.StringIO()), asked, outputs, verdicts=verdicts
        )
    path.write_text("x = 2\n")
    workflow.grade(
        lambda stderr=False: Console(file=io.StringIO()), asked, outputs, verdicts=verdicts
    )
    assert [list(kept) for kept in handed] == [[], [item.ITEM], []]
    assert handed[1][item.ITEM].message == workflow.KEPT + "7 generate runs"
