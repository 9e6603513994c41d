"""`kata hint`: every item's hints, step by step, from the rubric.

Every item has at least three steps: first a question that points, then the concept, then the
shape of the fix. No step is code: none contains a line of code of a solution (solutions/*.py and
the attention steps in benchmarks/), compared without whitespace, of at least
MIN_CODE_LINE characters.
"""

import re

import pytest
from typer.testing import CliRunner

from cli import app
from graders.shared import bundled
from graders.shared.mutation import strip_prose
from graders.shared.rubric import load
from graders.workflows.hints import hint, label

ITEMS = [item.id for item in load().items]
# The shortest lines that compute something (`slots = pos % bs`, `xf = x.float()`) are 12
# characters without whitespace. Shorter lines are keywords, imports and bare names (`return`,
# `else:`, `import math`, `return copy`): prose may contain them and they give nothing away.
MIN_CODE_LINE = 12


def _squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def solution_code_lines() -> set[str]:
    """Every line of code (comments and docstrings removed) of the solutions, without whitespace,
    of at least MIN_CODE_LINE characters."""
    files = [
        *sorted(bundled.SOLUTIONS.glob("*.py")),
        bundled.TILED_ATTENTION,
        bundled.FUSED_ATTENTION,
        bundled.FUSED_PAGED_ATTENTION,
    ]
    lines = {
        _squeezed(line) for path in files for line in strip_prose(path.read_text()).splitlines()
    }
    return {line for line in lines if len(line) >= MIN_CODE_LINE}


@pytest.mark.parametrize("item_id", ITEMS)
def test_every_item_goes_from_a_question_to_the_concept_to_the_shape_of_the_fix(item_id):
    first, steps = hint(item_id, 1)
    assert steps >= 3, f"{item_id}: a question, the concept, the shape of the fix"
    assert "?" in first, f"{item_id}: the first step asks a question that points"
    hints = [hint(item_id, s)[0] for s in range(1, steps + 1)]
    assert hints == list(load().item(item_id).hints)
    assert len(set(hints)) == steps, f"{item_id}: a step repeats another"


def test_no_hint_is_a_line_of_a_solution():
    code = solution_code_lines()
    assert len(code) > 300, "the solutions' code was read"
    quoted = [
        (item.id, step, line)
        for item in load().items
        for step, text in enumerate(item.hints, 1)
        for line in code
        if line in _squeezed(text)
    ]
    assert quoted == [], "hints must point, never give the code"


def test_a_hint_that_quotes_a_solution_line_is_caught():
    code = solution_code_lines()
    quoted = "Then write   weights = torch.softmax(scores,  dim=-1)  and you are done."
    assert any(line in _squeezed(quoted) for line in code)


def test_steps_past_the_end_give_the_last():
    last, steps = hint("prefix-equivalence", 3)
    assert hint("prefix-equivalence", steps + 1) == hint("prefix-equivalence", 99) == (last, steps)


def test_the_label_says_which_step_is_the_last_and_when_a_step_past_it_was_asked():
    assert [label(step, 3) for step in (1, 2, 3, 4, 9)] == [
        "hint 1 of 3",
        "hint 2 of 3",
        "hint 3 of 3, the last",
        "hint 3 of 3, the last (there is no step 4)",
        "hint 3 of 3, the last (there is no step 9)",
    ]


def test_kata_hint_past_the_last_step_says_it_gives_the_last_and_offers_no_more():
    last, steps = hint("prefix-equivalence", 99)
    done = CliRunner().invoke(app, ["hint", "prefix-equivalence", "--step", "9"])
    assert done.exit_code == 0, done.output
    shown = " ".join(done.output.split())
    assert shown == (
        f"prefix-equivalence, hint {steps} of {steps}, the last (there is no step "
        f"9): {' '.join(last.split())}"
    )
    within = CliRunner().invoke(app, ["hint", "prefix-equivalence", "--step", str(steps - 1)])
    assert f"more: kata hint prefix-equivalence --step {steps}" in within.output


def test_an_unknown_item_names_the_valid_ids():
    with pytest.raises(KeyError) as raised:
        hint("no-such-item", 1)
    assert "no-such-item" in str(raised.value)
    assert all(item_id in str(raised.value) for item_id in ITEMS)
