"""The candidate's tests cannot lend the implementation the answer, nor pass by recognising it.

The tests worker is a bubblewrap sandbox of its own (graders.judge.workers.GradeWorkers): what the
judge sends it (the reference, to run the tests against) reaches no /tmp and no process of the
implementation's. And own-tests runs the tests on a correct implementation made for the grade
(graders.dense.disguise), so a test file that checks that it runs on the reference, rather than what
the code computes, fails. Each promise is graded with a hostile file of tests/hostile/.
"""

from __future__ import annotations

import sys
import types
import uuid
from pathlib import Path

import pytest

from tests.grading import grade
from graders.judge.isolation import Sandbox, bwrap_problem
from graders.shared.mutation import REFERENCE
from tests.conftest import HOSTILE

BWRAP_ONLY = pytest.mark.skipif(
    bwrap_problem() is not None, reason=f"bubblewrap cannot run here: {bwrap_problem()}"
)
BORROWED = ("prefix-equivalence", "stable-softmax", "gqa", "low-precision")


@pytest.fixture
def token() -> str:
    return f"kata-borrowed-{uuid.uuid4().hex}"


def borrowing_grade(mode: str, token: str, hostile_file):
    """Grade borrows_from_its_tests.py (no scale, unless /tmp holds the reference's code: its
    import waits for it) with tests_copy_what_they_are_sent.py as its tests, which the grade
    runs beside the other items, in sandbox `mode`."""
    path = hostile_file("borrows_from_its_tests", TOKEN=token)
    tests = hostile_file("tests_copy_what_they_are_sent", filename="test_kv_cache.py", TOKEN=token)
    result = grade(path, tests, sandbox=Sandbox(mode), only={"own-tests", *BORROWED})
    return {item.id: item for item in result.items}


@pytest.mark.slow
@BWRAP_ONLY
def test_tests_that_copy_the_reference_into_tmp_lend_it_to_no_implementation(token, hostile_file):
    items = borrowing_grade("require", token, hostile_file)
    for item in BORROWED:
        assert items[item].status == "fail", (item, items[item].message)
    assert "Likely mistake: the scores' scale" in items["prefix-equivalence"].message, items[
        "prefix-equivalence"
    ].message


@pytest.mark.slow
def test_the_copy_is_real_where_tmp_is_shared_but_no_source_is_on_the_stack(token, hostile_file):
    """The control: the process fallback shares /tmp (README: its files are not protected),
    and there the same pair passes, so the sandboxed test above fails for the sandbox's sake.
    The source text the judge sent is out of the tests' reach even there: the worker takes it
    out of the request once compiled."""
    drops = [Path(f"/tmp/{token}{suffix}") for suffix in (".marshal", ".py")]
    try:
        items = borrowing_grade("process", token, hostile_file)
        assert drops[0].exists(), "the tests copied nothing"
        for item in BORROWED:
            assert items[item].status == "pass", (item, items[item].message)
        assert not drops[1].exists(), "the tests found the source text on the stack"
    finally:
        for drop in drops:
            drop.unlink(missing_ok=True)


def reference_code_digest() -> str:
    """The digest tests_fingerprint_the_reference.py computes, of the reference as the tests
    worker compiles it."""
    reference = types.ModuleType("kv_cache")
    reference.__file__ = "<reference>"
    exec(compile(REFERENCE.read_text(), reference.__file__, "exec"), reference.__dict__)
    fingerprinter = types.ModuleType("fingerprinter")
    source = (HOSTILE / "tests_fingerprint_the_reference.py").read_text()
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(sys.modules, "kv_cache", reference)
        exec(compile(source, "fingerprinter", "exec"), fingerprinter.__dict__)
    return fingerprinter.code_digest(reference)


@pytest.mark.slow
@BWRAP_ONLY
@pytest.mark.parametrize("fingerprint", ["file", "code", "private"])
def test_tests_that_recognise_the_reference_fail_a_correct_implementation(
    fingerprint, hostile_file
):
    tests = hostile_file(
        "tests_fingerprint_the_reference",
        filename="test_kv_cache.py",
        FINGERPRINT=fingerprint,
        CODE_SHA256=reference_code_digest(),
    )
    (item,) = grade(REFERENCE, tests, sandbox=Sandbox("require"), only={"own-tests"}).items
    assert item.status == "fail", item.message
    assert item.message.startswith("your tests fail a correct implementation"), item.message
