"""The report a candidate re-grades with: a line for each level naming the items that pass,
each cause of what does not pass once (its lead's message and hint; graders.formats.causes), the
detected tells, and a closing block (level, score, the causes, the next command, that command
whole on its own line) that ends every report, -q's alone. -v and hidden runs (an interviewer
reading) explain every item. Rendered at 80 and 120 columns, in a terminal and
without one, from GradeResults built here: the real files' line counts are in test_cli.py.
"""

from __future__ import annotations

import io
import re
from dataclasses import replace

import pytest
from rich.console import Console

from graders.formats.report import render
from graders.judge.grade import BEFORE_PLUS
from graders.judge.result import GradeResult, ItemResult, TellResult
from graders.shared.rubric import PLUS, load
from graders.shared.tracks import DENSE

COMMAND = "kata grade solutions/concat_kv_cache.py --tests solutions/test_kv_cache.py"
# As long as the real ones: a pass explains itself in a few lines, prealloc's failure in ten.
PASSED = "{id}: every case within 1e-05 + 1e-04*|expected| of the float64 reference; " * 4
PREALLOC = (
    "256 single-token appends to KVCache() (B=2, 2 kv heads, head_dim 128): 128 "
    "reallocations in the last 128 appends (appends that allocated at least 1/4 of the "
    "bytes of the K+V held); all appends allocated 129.0x the 1 MiB the cache holds at "
    "the end; the largest allocations: 2 x float32 [2, 2, 256, 128] (512 KiB each), 2 x "
    "float32 [2, 2, 255, 128] (510 KiB each): the storage is copied into a new one at "
    "every append, O(n^2) bytes for n tokens. Likely mistake: how append makes room for "
    "new positions"
)
LOW_PRECISION = (
    "bf16 cache, prefix 7 of 12: attend's output differs from the float64 "
    "reference by 0.41 at row 1, head 3 (tolerance 3e-02 + 3e-02*|expected|): "
    "the softmax ran in bfloat16; compute the logits and the softmax in float32"
)
CONCAT_TELL = PREALLOC.split("; the largest")[0]
FAILING = {"prealloc": PREALLOC, "low-precision": LOW_PRECISION}
WIDTHS = [80, 120]
TERMINAL = [True, False]


def concat(failing: tuple[str, ...] = ("prealloc",), **changes) -> GradeResult:
    """A full dense grade like the concat solution's: every item passes but `failing`, and the
    tell concat-every-step is detected."""
    items = []
    for item in load().track(DENSE):
        fails = item.id in failing
        if item.level == PLUS:  # not started: an item of L4-L6 fails (the judge's gate)
            items.append(
                ItemResult(item.id, item.level, "not_attempted", 0.0, item.points, BEFORE_PLUS)
            )
            continue
        items.append(
            ItemResult(
                item.id,
                item.level,
                "fail" if fails else "pass",
                0.0 if fails else item.points,
                item.points,
                FAILING[item.id] if fails else PASSED.format(id=item.id),
            )
        )
    tells = [
        TellResult(
            t.id,
            t.id == "concat-every-step",
            CONCAT_TELL if t.id == "concat-every-step" else f"{t.id} is clear",
        )
        for t in load().tells
    ]
    result = GradeResult(
        "solutions/concat_kv_cache.py", "L5", items, tells, False, isolation="bwrap"
    )
    return replace(result, **changes)


def rendered(
    result: GradeResult,
    detail: str = "default",
    width: int = 80,
    terminal: bool = False,
    first: set[str] = frozenset(),
) -> tuple[str, str]:
    """(the text shown, what was written to the stream: with colour codes in a terminal)."""
    stream = io.StringIO()
    console = Console(
        width=width,
        file=stream,
        record=True,
        force_terminal=terminal,
        color_system="standard" if terminal else None,
    )
    render(result, console, detail, COMMAND, first)
    return console.export_text(), stream.getvalue()


def flat(text: str) -> str:
    """`text` with its wrapping, and the borders of its tables and panels, undone."""
    return " ".join(re.sub("[\u2500-\u257f]", " ", text).split())


def is_command(line: str) -> bool:
    """The command "Next:" leads to: printed whole on a line of its own, however wide."""
    return line.startswith(COMMAND)


def closing_lines(text: str) -> list[str]:
    """The lines after the report's last rule: the closing block."""
    lines = text.rstrip("\n").splitlines()
    return lines[max(n for n, line in enumerate(lines) if set(line) == {"─"}) + 1 :]


@pytest.mark.parametrize("terminal", TERMINAL, ids=["terminal", "pipe"])
@pytest.mark.parametrize("width", WIDTHS)
@pytest.mark.parametrize(
    "failing", [("prealloc",), ("low-precision", "prealloc")], ids=["one-failing", "two-failing"]
)
def test_the_default_report_fits_a_screen_and_shows_every_failure_in_full(width, terminal, failing):
    result = concat(failing)
    text, written = rendered(result, width=width, terminal=terminal)
    lines = text.rstrip("\n").splitlines()
    # The CLI's line naming the files makes one more: 45 at most for today's concat solution.
    # The detected tell's message has a line of its own, under the tell (at 120 columns, one
    # line more than when it followed the tell's id).
    # Each failure is a cause of its own here (neither depends on the other); 44 and 48
    # lines at 80 columns when every item had a line of its own.
    limit = {(80, 1): 25, (80, 2): 31, (120, 1): 21, (120, 2): 25}[width, len(failing)]
    assert len(lines) <= limit, text
    assert max(len(line) for line in lines if not is_command(line)) <= width
    assert ("\x1b[" in written) is terminal, "colour in a terminal, plain text in a pipe"
    levels = flat("\n".join(lines[: lines.index(next(l for l in lines if "FAIL" in l))]))
    for level in ("L4", "L5", "L6"):
        items = [i for i in result.items if i.level == level]
        others = [i.id for i in items if i.status != "pass"]
        said = (
            levels.split(f"{level} ", 1)[1].split(" L", 1)[0].removesuffix(";")
        )  # "; L6+ not started"
        assert said.endswith(f"all pass but {', '.join(others)}" if others else "all pass"), said
    assert "PASS" not in text and "every case within" not in text, "passes are named, for -v"
    for item_id in failing:
        assert FAILING[item_id] in flat(text), f"{item_id}'s message, whole"
        assert f"(more: kata hint {item_id})" in flat(text)


@pytest.mark.parametrize("terminal", TERMINAL, ids=["terminal", "pipe"])
@pytest.mark.parametrize("width", WIDTHS)
def test_the_closing_block_names_the_level_the_failing_ids_and_the_next_command(width, terminal):
    text, _ = rendered(concat(("low-precision", "prealloc")), width=width, terminal=terminal)
    closing = flat("\n".join(closing_lines(text)))
    assert closing == (
        "Level: L5 Score: 88/100 isolation: bwrap "
        "Not passing: 2 items, 2 causes: low-precision, prealloc "
        f"Next: kata hint low-precision, or grade it alone: {COMMAND} --item "
        "low-precision"
    ), closing
    assert closing_lines(text)[-1] == f"{COMMAND} --item low-precision", "whole, on its own"
    assert text.index("low-precision") < text.index("prealloc"), "the rubric's order"


def test_the_tells_detected_are_shown_whole_and_the_others_in_one_line():
    text, _ = rendered(concat())
    tells = [line for line in text.splitlines() if "tell" in line.lower()]
    assert [line.split(":")[0] for line in tells] == ["Down-level tell DETECTED", "Other tells"]
    # prealloc's message, above, holds the tell's evidence: said once, there
    assert (
        "Down-level tell DETECTED: concat-every-step (caps the level at L5): what prealloc "
        "found, above"
    ) in flat(text) and flat(text).count(CONCAT_TELL) == 1
    alone = concat(failing=())
    assert (
        f"Down-level tell DETECTED: concat-every-step (caps the level at L5): {CONCAT_TELL}"
    ) in flat(rendered(alone)[0]), "whole when no item above gave it"
    assert "Other tells: clear (caches-q, recomputes-projections, shape-only-tests)" in text
    clean = concat(failing=(), tells=[TellResult(t.id, False, "") for t in load().tells])
    assert (
        "Down-level tells: none detected; clear (caches-q, recomputes-projections, "
        "shape-only-tests, concat-every-step)"
    ) in flat(rendered(clean)[0])


@pytest.mark.parametrize("width", WIDTHS)
def test_verbose_explains_every_item_and_quiet_prints_the_closing_block_alone(width):
    result = concat()
    default, _ = rendered(result, width=width)
    verbose, _ = rendered(result, "verbose", width)
    quiet, _ = rendered(result, "quiet", width)
    for item in result.reported:  # L6+ not started: one line
        assert flat(item.message) in flat(verbose), item.id
    assert len(verbose.splitlines()) > 2 * len(default.splitlines())
    # -q names every item that does not pass; the default report's closing, its causes
    assert [l for l in quiet.splitlines() if "Not passing" not in l] == [
        l for l in closing_lines(default) if "Not passing" not in l
    ]
    assert "Not passing: prealloc" in quiet
    assert quiet.startswith("Level: L5") and len(quiet.splitlines()) <= 4


def test_the_interviewers_checklist_is_for_hidden_runs():
    prompt = load().interviewer[0].prompt[:40]
    for detail in ("default", "verbose", "quiet"):
        assert prompt not in flat(rendered(concat(), detail)[0]), detail
    hidden = concat(
        hidden=True, seed=42, similarity=[{"solution": "solutions/kv_cache.py", "fraction": 0.5}]
    )
    text, _ = rendered(hidden)
    assert prompt in flat(text) and PASSED.format(id="gqa")[:60] in flat(text), "the full form"
    closing = flat("\n".join(closing_lines(text)))
    assert closing.startswith("Similarity to the bundled solutions")
    assert "hidden cases of seed 42 (--seed 42 replays them)" in closing
    assert "Not passing: prealloc" in closing and "Next:" not in closing, "the interviewer's"
    assert prompt not in flat(rendered(hidden, "quiet")[0])


def test_after_a_partial_run_that_passes_the_next_command_grades_every_item():
    result = concat(failing=(), partial=True, level=None)
    closing = flat("\n".join(closing_lines(rendered(result)[0])))
    assert closing.startswith("Partial run:") and "Not passing" not in closing
    assert closing.endswith(f"Next: grade every item, for the level: {COMMAND}")
    assert "Next:" not in rendered(concat(failing=()))[0], "nothing next after a full pass"


def test_items_not_run_say_why_once_at_the_end_without_hints():
    items = [
        ItemResult(
            i.id,
            i.level,
            "error",
            0.0,
            i.points,
            "not run: the file does not import",
            "the file does not import: SyntaxError: invalid syntax (kv_cache.py, line 3)",
        )
        for i in load().track(DENSE)
    ]
    text, _ = rendered(concat(items=items))
    assert flat(text).count("SyntaxError") == 1 and "hint:" not in text
    assert flat("\n".join(closing_lines(text))).endswith(
        f"Items not run ({len(items)}): the file does not import: SyntaxError: invalid syntax "
        f"(kv_cache.py, line 3) Next: fix that, then: {COMMAND}"
    )


def test_ff_shows_the_causes_of_the_items_graded_first_first():
    text, _ = rendered(concat(("low-precision", "prealloc")), first={"prealloc"})
    causes = [line.split()[1] for line in text.splitlines() if line.startswith("  FAIL")]
    assert causes == ["prealloc", "low-precision"], text


def test_ff_shows_the_items_graded_first_ahead_of_the_levels_in_verbose():
    first = {"prealloc", "low-precision"}
    text, _ = rendered(concat(("low-precision", "prealloc")), "verbose", first=first)
    lines = text.splitlines()
    assert lines[0].startswith("Graded first: did not pass last time  (0/12 points)"), lines[0]
    ahead = [
        line.split()[1]
        for line in lines[1:]
        if line.startswith("  ") and line.split()[0] in ("PASS", "FAIL")
    ][:2]
    assert ahead == ["low-precision", "prealloc"], "graded first, shown first, rubric order"
    for item_id in first:
        assert len(re.findall(rf"^  \w+ +{item_id} ", text, re.M)) == 1, "shown once"
    assert re.search(r"^L6 .*\(28/40 points\)$", text, re.M), "a level's points are all its items'"
    assert "Graded first" not in rendered(concat(("low-precision", "prealloc")), first=first)[0]


def test_next_never_suggests_the_command_just_run():
    alone = concat(("prealloc",), partial=True, level=None)
    alone = replace(alone, items=[i for i in alone.items if i.id == "prealloc"])
    closing = flat("\n".join(closing_lines(rendered(alone)[0])))
    assert closing.endswith("Next: kata hint prealloc"), closing
    assert "--item prealloc" not in closing
    two = concat(("prealloc",), partial=True, level=None)
    two = replace(two, items=[i for i in two.items if i.id in ("prealloc", "gqa")])
    assert flat(rendered(two)[0]).endswith(
        f"Next: kata hint prealloc, or grade it alone: {COMMAND} --item prealloc"
    )


@pytest.mark.parametrize("width", WIDTHS)
def test_verbose_wraps_each_explanation_under_its_item_across_the_width(width):
    text, _ = rendered(concat(), "verbose", width)
    lines = text.splitlines()
    assert max(len(line) for line in lines if not is_command(line)) <= width
    assert not any("│" in line for line in lines if "PASS" in line or "FAIL" in line), (
        "no table: an item is a line, its explanation under it"
    )
    explained = [n for n, line in enumerate(lines) if re.match(r"  (PASS|FAIL) ", line)]
    for n in explained:
        assert lines[n + 1].startswith(" " * 4) and len(lines[n + 1]) > width // 2, lines[n + 1]
    assert len(lines) < 180, "238 lines as a table at 80 columns before"


def test_kata_grade_ff_reports_the_items_that_failed_last_time_first(tmp_path, monkeypatch):
    """The CLI passes --ff's items to the report (the grade itself stubbed: no worker runs)."""
    from typer.testing import CliRunner

    import cli
    from graders.workflows.last_failed import record
    from tests.grading import stand_in

    (tmp_path / "kv_cache.py").write_text("")
    monkeypatch.chdir(tmp_path)
    record(tmp_path / "kv_cache.py", concat(("prealloc",)))
    stand_in(monkeypatch, lambda request, on_item: concat(("prealloc",)))
    output = (
        CliRunner().invoke(cli.app, ["grade", "kv_cache.py", "--ff"], env={"COLUMNS": "80"}).output
    )
    lines = output.splitlines()
    assert lines[1] == "--failed-first: grading prealloc first, which did not pass last time"
    causes = [line.split() for line in lines if line.startswith("  FAIL")]
    assert causes == [["FAIL", "prealloc", "0/6"]], output
