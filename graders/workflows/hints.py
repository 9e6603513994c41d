"""Hints for a rubric item, one step at a time: a question that points, then the concept, then
the shape of the fix, never the code (tests/test_hints.py holds every item to that).

The steps are the item's `hints` in `rubric/rubric.toml`; nothing here is hard-coded.
"""

from __future__ import annotations

from graders.shared import rubric as rubric_data


def hint(item_id: str, step: int = 1) -> tuple[str, int]:
    """Hint `step` (1-based) of item `item_id`, and how many steps the item has.

    A step past the last gives the last, the shape of the fix. KeyError, naming
    the valid ids, for an unknown item; ValueError for a step below 1.
    """
    items = {item.id: item for item in rubric_data.load().items}
    if item_id not in items:
        raise KeyError(f"unknown rubric item {item_id!r}; valid ids: {', '.join(items)}")
    if step < 1:
        raise ValueError(f"hint steps count from 1, got {step}")
    hints = items[item_id].hints
    return hints[min(step, len(hints)) - 1], len(hints)


def label(step: int, steps: int) -> str:
    """The words that introduce hint `step` of an item's `steps`: "hint 2 of 3"; the last says
    so, "hint 3 of 3, the last", and a step past it says that the last is what it gets, "hint 3
    of 3, the last (there is no step 9)"."""
    words = f"hint {min(step, steps)} of {steps}"
    if step > steps:
        return f"{words}, the last (there is no step {step})"
    return f"{words}, the last" if step == steps else words
