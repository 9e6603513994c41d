"""Every wrong implementation fails exactly its intended items and shows exactly its tells."""

from __future__ import annotations

import pytest

from graders.grade import grade
from tests.wrong import everything

WRONG = everything()


@pytest.mark.parametrize("wrong", WRONG, ids=[w.name for w in WRONG])
def test_fails_exactly_its_items(wrong, tmp_path):
    result = grade(wrong.write(tmp_path), hidden=False)
    failed = {i.id for i in result.items if i.status != "pass" and i.id != "own-tests"}
    detected = {t.id for t in result.tells if t.detected}
    messages = "\n".join(f"  {i.id}: {i.status}: {i.message}" for i in result.items)
    assert not result.grader_broke, f"the grader broke:\n{messages}"
    assert failed == set(wrong.fails), f"{wrong.name} failed {sorted(failed)}, expected {sorted(wrong.fails)}:\n{messages}"
    assert detected == set(wrong.tells), f"{wrong.name} showed tells {sorted(detected)}, expected {sorted(wrong.tells)}"
