"""Mutants apply to the reference exactly as written, and the bundled mistakes are real ones."""

from __future__ import annotations

import pytest

from graders.grade import grade
from graders.mistakes import MISTAKES
from graders.mutation import Mutant, MutationError, REFERENCE


def test_an_edit_that_does_not_match_exactly_once_is_an_error():
    with pytest.raises(MutationError):
        Mutant("ghost", "edits text the reference does not have", replace=(("no such text", ""),)).source()


def test_a_function_swap_replaces_the_whole_definition():
    source = Mutant("swap", "", functions={"reset": "def reset(cache):\n    pass\n"}).source()
    assert "def reset(cache):\n    pass\n" in source
    assert source.count("def reset(") == 1
    compile(source, "mutant", "exec")


@pytest.mark.parametrize("mistake", MISTAKES, ids=[m.name for m in MISTAKES])
def test_every_bundled_mistake_differs_from_the_reference_and_fails_prefix_equivalence(mistake, tmp_path):
    source = mistake.source()
    assert source != REFERENCE.read_text()
    path = tmp_path / "kv_cache.py"
    path.write_text(source)
    (item,) = grade(path, only={"prefix-equivalence"}).items
    assert item.status != "pass", f"{mistake.name} is not caught by prefix-equivalence"
