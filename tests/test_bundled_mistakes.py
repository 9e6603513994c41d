"""The bundled mistakes own-tests judges a test file by (graders/dense/mistakes.py): they build on the
reference however it is formatted, each one is needed, and the shape-only ones are exactly those.

"Needed" is shown by generating, for each mistake, a candidate test file that catches every other
one and not it: own-tests must fail that file naming the mistake, so dropping any mistake from
MISTAKES would let a file pass that misses it (and the names are pinned, so a drop shows).
"""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest
import torch

from graders.dense.mistakes import MISTAKES, SHAPE_MISTAKES
from tests.grading import grade
from graders.shared import mutation
from graders.shared.mutation import REFERENCE, MutationError, strip_prose

MODEL_TESTS = mutation.SOLUTIONS / "test_kv_cache.py"
NAMES = (
    "no-scale",
    "scale-by-head-dim",
    "softmax-wrong-axis",
    "values-are-keys",
    "attends-over-capacity",
    "drops-newest",
    "causal-mask-on-newest",
    "overwrites-first-slot",
    "appends-on-heads",
)
B, H, D, STEPS = 2, 2, 8, 5  # ordinary inputs: a few rows, equal lengths, MHA, a token a step


def test_the_bundled_mistakes_are_these_nine_and_one_changes_the_shape():
    assert tuple(m.name for m in MISTAKES) == NAMES
    assert SHAPE_MISTAKES == {"appends-on-heads"}


def outcome(source: str) -> tuple:
    """What `source` (a kv_cache module) gives on ordinary inputs, one token at a time:
    ("outputs", [each step's attend output as lists]) or ("error", the exception's type)."""
    module = types.ModuleType("kv_cache")
    exec(compile(source, "<kv_cache>", "exec"), module.__dict__)
    generator = torch.Generator().manual_seed(0)
    cache, outputs = module.KVCache(), []
    try:
        for _ in range(STEPS):
            k, v, q = (torch.randn(B, H, 1, D, generator=generator) for _ in range(3))
            module.append(cache, k, v)
            outputs.append(module.attend(cache, q).tolist())  # [B, H, 1, D]
    except Exception as exc:  # noqa: BLE001 - a mistake may raise anything
        return ("error", type(exc).__name__)
    return ("outputs", outputs)


def test_the_shape_only_mistakes_are_those_whose_output_shape_changes():
    """SHAPE_MISTAKES caps nothing it should not: a mistake is in it exactly when its outputs on
    ordinary inputs have another shape than the reference's (or it raises)."""

    def shape(result: tuple):
        return result if result[0] == "error" else torch.tensor(result[1]).shape

    reference = shape(outcome(REFERENCE.read_text()))
    assert {m.name for m in MISTAKES if shape(outcome(m.source())) != reference} == SHAPE_MISTAKES


@pytest.fixture(scope="module")
def unparsed(tmp_path_factory) -> Path:
    """solutions/*.py as ast.unparse lays them out: no comment, other parentheses and quotes,
    every statement on one line."""
    folder = tmp_path_factory.mktemp("unparsed")
    for path in mutation.SOLUTIONS.glob("*.py"):
        (folder / path.name).write_text(ast.unparse(ast.parse(path.read_text())) + "\n")
    return folder


def test_the_unparsed_reference_is_laid_out_otherwise(unparsed):
    """The layout the next tests build on differs where the mistakes' edits are."""
    text = (unparsed / "kv_cache.py").read_text()
    assert "(q.float() @ keys.float().transpose(-1, -2)) / math.sqrt" not in text
    assert "keys, values = cache.keys, cache.values" not in text
    with pytest.raises(MutationError):  # a text edit anchored on the old layout breaks
        mutation.Mutant(
            "text",
            "",
            replace=(("keys, values = cache.keys, cache.values", ""),),
            base=unparsed / "kv_cache.py",
        ).source()


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_every_mistake_builds_on_the_unparsed_reference_and_differs(mistake, unparsed, monkeypatch):
    source = mistake.source()
    monkeypatch.setattr(mutation, "REFERENCE", unparsed / "kv_cache.py")
    reformatted = mistake.source()
    compile(reformatted, mistake.name, "exec")
    assert ast.dump(ast.parse(reformatted)) == ast.dump(ast.parse(source)), (
        "the mistake is another on the unparsed reference"
    )
    reference = strip_prose((unparsed / "kv_cache.py").read_text())
    assert ast.dump(ast.parse(reformatted)) != ast.dump(ast.parse(reference))


@pytest.mark.slow
def test_own_tests_grades_on_unparsed_solutions(unparsed, monkeypatch):
    monkeypatch.setattr(mutation, "REFERENCE", unparsed / "kv_cache.py")
    monkeypatch.setattr(mutation, "PAGED_REFERENCE", unparsed / "paged_kv_cache.py")
    result = grade(unparsed / "kv_cache.py", MODEL_TESTS, only={"own-tests"})
    (item,) = result.items
    assert not result.grader_broke, item.message
    assert item.status == "pass", item.message


TESTS_THAT_MISS = '''"""Generated: passes on what the reference or {name} gives, nothing else."""

import torch
from kv_cache import KVCache, append, attend

nan = float("nan")  # what a mistake that masks every position gives
ALLOWED = {allowed!r}


def outcome():
    generator = torch.Generator().manual_seed(0)
    cache, outputs = KVCache(), []
    try:
        for _ in range({steps}):
            k, v, q = (torch.randn({b}, {h}, 1, {d}, generator=generator) for _ in range(3))
            append(cache, k, v)
            outputs.append(attend(cache, q))
    except Exception as exc:
        return ("error", type(exc).__name__)
    return ("outputs", outputs)


def same(got, allowed):
    if got[0] != allowed[0] or got[0] == "error":
        return got == allowed
    wanted = [torch.tensor(want) for want in allowed[1]]
    return len(got[1]) == len(wanted) and all(
        out.shape == want.shape and torch.allclose(out, want, atol=1e-5, equal_nan=True)
        for out, want in zip(got[1], wanted))


def test_gives_the_reference_or_{slug}():
    got = outcome()
    assert any(same(got, allowed) for allowed in ALLOWED)
'''


def a_file_that_misses(mistake: mutation.Mutant) -> str:
    """A test file that catches every bundled mistake whose outcome differs from both the
    reference's and `mistake`'s, and passes on those two."""
    allowed = [outcome(REFERENCE.read_text()), outcome(mistake.source())]
    return TESTS_THAT_MISS.format(
        name=mistake.name,
        allowed=allowed,
        steps=STEPS,
        b=B,
        h=H,
        d=D,
        slug=mistake.name.replace("-", "_"),
    )


@pytest.mark.slow
@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_every_mistake_is_needed_to_fail_a_test_file_that_misses_it(mistake, tmp_path):
    tests = tmp_path / "test_kv_cache.py"
    tests.write_text(a_file_that_misses(mistake))
    result = grade(REFERENCE, tests, only={"own-tests"})
    (item,) = result.items
    assert item.status == "fail", item.message
    assert (
        f"pass on 1 of {len(MISTAKES)} bundled wrong implementations: missed "
        f"{mistake.description}; caught " in item.message
    ), item.message
    caught = item.message.rsplit("; caught ", 1)[1].split(", ")
    assert caught == [m.name for m in MISTAKES if m is not mistake]
