"""`kata hint`: every item's hints, step by step, from the rubric."""

import pytest

from graders.workflows.hints import hint
from graders.rubric import load

ITEMS = [item.id for item in load().items]


@pytest.mark.parametrize("item_id", ITEMS)
def test_every_item_goes_from_a_nudge_to_nearly_the_answer(item_id):
    first, steps = hint(item_id, 1)
    last, _ = hint(item_id, steps)
    assert steps >= 2
    assert first != last
    assert [hint(item_id, s)[0] for s in range(1, steps + 1)] == list(load().item(item_id).hints)


def test_steps_past_the_end_give_the_last():
    last, steps = hint("prefix-equivalence", 3)
    assert hint("prefix-equivalence", steps + 1) == hint("prefix-equivalence", 99) == (last, steps)


def test_an_unknown_item_names_the_valid_ids():
    with pytest.raises(KeyError) as raised:
        hint("no-such-item", 1)
    assert "no-such-item" in str(raised.value)
    assert all(item_id in str(raised.value) for item_id in ITEMS)
