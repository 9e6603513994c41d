"""`kata interview` (contract section 7): the record, the stages, strict sessions, the lock, the
report and the replay.

The quick tests drive the verbs with a clock they set and a stand-in grade (`staged_grade`: a
file passes the items of the levels its STAGED_UP_TO line names), so they check the session's
bookkeeping, not the graders. The slow ones grade for real: the scripted session of issue 33
(a starter, an L4 file, an L5 file with a wrong GQA, a correct one, a hint, the end), a save
killed by SIGKILL mid-grade, two sessions on one workspace, and the interactive verb under a
pseudo-terminal.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from graders.interview import commands, record, review, session as verbs
from graders.interview.questions import MODEL_ANSWERS, QUESTIONS, STAGE_PROMPTS
from graders.judge.result import GradeResult, ItemResult, level
from graders.shared import rubric as rubric_data
from graders.shared.mutation import REFERENCE
from graders.shared.tracks import DENSE
from tests.grading import stand_in
from tests.wrong import everything

ROOT = Path(__file__).resolve().parent.parent
HOSTILE_ANSWERS = Path(__file__).parent / "hostile" / "interview_answers.md"
START = 1_800_000_000.0  # the sessions' clock starts here: 2027-01-15T08:00:00Z


class Clock:
    """A clock a test moves: `clock()` is the time, `clock.advance(s)` moves it on."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def staged_grade(request, on_item=None):
    """A stand-in for graders.judge.grade.grade (tests.grading.stand_in): the items of levels
    up to the file's `STAGED_UP_TO = "L5"` line pass, the others fail (no such line, or no
    level: none pass)."""
    implementation, only, hidden, seed = (
        request.implementation,
        request.only,
        request.hidden,
        request.seed,
    )
    found = re.search(r'STAGED_UP_TO = "([\w+]+)"', Path(implementation).read_text())
    levels = rubric_data.load().levels
    up_to = levels.index(found.group(1)) if found and found.group(1) in levels else -1
    items = [
        ItemResult(
            i.id,
            i.level,
            *(("pass", i.points) if levels.index(i.level) <= up_to else ("fail", 0.0)),
            i.points,
            "staged",
        )
        for i in rubric_data.load().track(DENSE)
        if only is None or i.id in only
    ]
    reached = None if only is not None else level(DENSE, items, [])[0]
    return GradeResult(
        str(implementation),
        reached,
        items,
        [],
        hidden,
        partial=only is not None,
        seed=seed if hidden else None,
    )


@pytest.fixture
def staged(monkeypatch):
    """Grades are staged_grade's, and the CLI's saves start no workers for it."""
    stand_in(monkeypatch, staged_grade)
    monkeypatch.setattr("graders.interview.warm.NextWorkers.start", lambda self: None)


def write_level(workspace: Path, level: str, note: str = "") -> None:
    (workspace / "kv_cache.py").write_text(f'STAGED_UP_TO = "{level}"\n# {note}\n')


def later_texts(stage: str) -> list[str]:
    """Lines of the prompts and questions of the stages after `stage`: none may show early."""
    levels = verbs.stages(DENSE)  # the interview's stages, L6+ last
    later = levels[levels.index(stage) + 1 :]
    texts = [STAGE_PROMPTS[level].splitlines()[0] for level in later]
    return texts + [QUESTIONS[i.id] for i in rubric_data.load().interviewer if i.level in later]


def workspace_text(workspace: Path) -> str:
    """Every file under `workspace`, the record and snapshots included, as one text."""
    return "\n".join(
        p.read_text(errors="replace") for p in sorted(workspace.rglob("*")) if p.is_file()
    )


def console() -> tuple[Console, object]:
    import io

    out = io.StringIO()
    return Console(file=out, width=100, highlight=False), out


# --- the questions ---------------------------------------------------------------------------


def test_each_interviewer_item_has_the_contracts_level_a_question_and_a_model_answer():
    levels = {i.id: i.level for i in rubric_data.load().interviewer}
    assert {
        k: levels[k]
        for k in (
            "why-only-kv",
            "no-future-mask",
            "total-still-quadratic",
            "cache-ownership",
            "serving-memory",
        )
    } == {
        "why-only-kv": "L4",
        "no-future-mask": "L4",
        "total-still-quadratic": "L5",
        "cache-ownership": "L5",
        "serving-memory": "L6",
    }
    assert set(QUESTIONS) == set(MODEL_ANSWERS) == set(levels)
    for item_id, answer in MODEL_ANSWERS.items():
        sentences = re.findall(r"[.!?](?:\s|$)", answer)
        assert 3 <= len(sentences) <= 6, f"{item_id}: {len(sentences)} sentences"


SECTION_8_QUESTIONS = ["why-chunk-mask", "window-trade", "rejected-draft-cost"]


def test_section_8s_questions_are_asked_at_l6_plus_with_answers_that_carry_measured_figures():
    assert [i.id for i in verbs.questions("L6+")] == SECTION_8_QUESTIONS
    readme = (ROOT / "solutions" / "README.md").read_text()
    step = readme.split("## 10. ", 1)[1].split("\n## ", 1)[0]  # the step's measured figures
    for item_id in SECTION_8_QUESTIONS:
        figures = re.findall(r"\d+\.\d+(?:e-\d+)?", MODEL_ANSWERS[item_id])
        assert figures and all(figure in step for figure in figures), (item_id, figures)


def test_the_memory_answers_give_the_llama_8b_figures():
    # 2 (K and V) x 32 layers x 8 KV heads x 128 dims x 2 bytes (bf16) = 128 KiB a token
    assert 2 * 32 * 8 * 128 * 2 == 128 * 1024
    assert "128 KiB" in MODEL_ANSWERS["serving-memory"]
    assert "512 KiB" in MODEL_ANSWERS["gqa-memory"] and "4x" in MODEL_ANSWERS["gqa-memory"]


# --- the record and the stages ----------------------------------------------------------------


def test_a_session_opens_its_stages_in_order_and_records_every_event(tmp_path, staged):
    clock, ws = Clock(), tmp_path / "ws"
    session, made, resumed = verbs.start(ws, clock=clock)
    assert not resumed and (ws / "kv_cache.py") in made
    assert session["stage"] == "L4" and session["started"] == "2027-01-15T08:00:00Z"
    clock.advance(30)
    first = verbs.save(ws, clock=clock)
    assert first.event["level"] == "below L4" and first.opened is None
    write_level(ws, "L4")
    clock.advance(60)
    second = verbs.save(ws, clock=clock)
    assert second.opened == "L5" and second.event["level"] == "L4"
    assert {i.id for i in second.result.items} == {"append-time-dim", "attend-shape"}
    write_level(ws, "L5")
    clock.advance(60)
    third = verbs.save(ws, clock=clock)
    assert third.opened == "L6" and len(third.result.items) == 12
    saved = json.loads((ws / ".kata" / "session.json").read_text())
    assert list(saved) == [
        "version",
        "track",
        "minutes",
        "strict",
        "started",
        "ended",
        "stage",
        "events",
        "final",
    ]
    assert [(e["t"], e["kind"], e.get("stage") or e.get("level")) for e in saved["events"]] == [
        (30.0, "save", "below L4"),
        (90.0, "save", "L4"),
        (90.0, "stage", "L5"),
        (150.0, "save", "L5"),
        (150.0, "stage", "L6"),
    ]
    assert saved["stage"] == "L6" and saved["ended"] is None and saved["final"] is None


def test_once_l6_passes_an_l6_plus_stage_opens_with_its_prompt_and_section_8s_questions(
    tmp_path, staged
):
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, clock=clock)
    for reached in ("L4", "L5"):
        write_level(ws, reached)
        clock.advance(60)
        verbs.save(ws, clock=clock)
    write_level(ws, "L6")
    clock.advance(60)
    opened = verbs.save(ws, clock=clock)
    assert opened.opened == "L6+" and opened.event["level"] == "L6"
    assert "## why-chunk-mask" in (ws / "answers.md").read_text()
    out_console, out = console()
    commands.show_stage(out_console, opened.record, "L6+")
    shown = " ".join(out.getvalue().split())
    assert " ".join(STAGE_PROMPTS["L6+"].split()) in shown
    for item_id in SECTION_8_QUESTIONS:
        assert f"{item_id}: {QUESTIONS[item_id]}" in shown
    assert "sliding-window" in shown  # an item the stage adds
    write_level(ws, "L6+")
    clock.advance(60)
    last = verbs.save(ws, clock=clock)
    assert last.event["level"] == "L6+" and last.opened is None  # the last stage


def test_a_snapshot_is_a_folder_named_by_number_and_the_hash_of_both_files(tmp_path, staged):
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, clock=clock)
    event = verbs.save(ws, clock=clock).event
    folder = ws / ".kata" / event["snapshot"]
    implementation, tests = (
        (ws / name).read_bytes() for name in ("kv_cache.py", "test_kv_cache.py")
    )
    assert event["snapshot"] == f"001-{record.content_hash(implementation, tests)}"
    assert (folder / "kv_cache.py").read_bytes() == implementation
    assert (folder / "test_kv_cache.py").read_bytes() == tests
    (ws / "test_kv_cache.py").write_text("def test_more(): pass\n")  # a test file's change
    assert verbs.save(ws, clock=clock).event["snapshot"].startswith("002-")


def test_a_save_without_a_change_records_nothing_unless_a_stage_opened(tmp_path, staged):
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, clock=clock)
    verbs.save(ws, clock=clock)
    assert verbs.save(ws, clock=clock).event is None
    write_level(ws, "L6")
    assert verbs.save(ws, clock=clock).opened == "L5"
    again = verbs.save(ws, clock=clock)  # the same file, graded with L5's items now
    assert again.event is not None and again.opened == "L6"
    assert len([e for e in verbs.load(ws)["events"] if e["kind"] == "save"]) == 3


def test_no_later_prompt_or_question_shows_before_its_stage_opens(tmp_path, staged):
    ws = tmp_path / "ws"
    out_console, out = console()
    assert commands.start(out_console, ws, 60, False, DENSE) == 0  # on the real clock
    verbs.save(ws)
    shown = out.getvalue() + workspace_text(ws)
    assert STAGE_PROMPTS["L4"].split()[5] in shown and QUESTIONS["why-only-kv"] in shown
    for text in later_texts("L4"):
        assert text not in shown, text
    write_level(ws, "L4")
    assert commands.save(out_console, ws) == 0
    shown = out.getvalue() + workspace_text(ws)
    assert QUESTIONS["cache-ownership"] in shown and "## cache-ownership" in shown
    for text in later_texts("L5"):
        assert text not in shown, text


def test_answers_keep_what_the_candidate_wrote_when_a_stage_adds_questions(tmp_path, staged):
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, clock=clock)
    answers = ws / "answers.md"
    answers.write_text(
        answers.read_text().replace(
            f"_{QUESTIONS['why-only-kv']}_\n",
            f"_{QUESTIONS['why-only-kv']}_\n\nQ is never reused.\n",
        )
    )
    write_level(ws, "L4")
    verbs.save(ws, clock=clock)
    text = answers.read_text()
    assert re.findall(r"^## (\S+)$", text, re.M) == [
        "why-only-kv",
        "no-future-mask",
        "total-still-quadratic",
        "cache-ownership",
    ]
    assert verbs.answers(ws)["why-only-kv"] == "Q is never reused."
    assert verbs.answers(ws)["no-future-mask"] == ""


def test_after_time_up_a_save_is_refused_and_the_session_ends_once(tmp_path, staged):
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, minutes=1, clock=clock)
    clock.advance(61)
    write_level(ws, "L4")
    with pytest.raises(verbs.Refused, match="time is up"):
        verbs.save(ws, clock=clock)
    ended = verbs.load(ws)
    assert ended["ended"] == "2027-01-15T08:01:01Z" and ended["final"]["hidden"] is True
    assert not [e for e in ended["events"] if e["kind"] == "save"]
    clock.advance(100)
    assert verbs.end(ws, clock=clock) == ended  # idempotent: nothing graded or moved again
    with pytest.raises(verbs.Refused, match="ended"):
        verbs.save(ws, clock=clock)


# --- hints and strict sessions ---------------------------------------------------------------


def test_every_hint_and_solution_asked_in_a_session_is_recorded(tmp_path):
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, clock=clock)
    clock.advance(42)
    verbs.hint(ws, "ragged-batch", 2, clock=clock)
    clock.advance(8)
    verbs.solution(ws, "preallocated", clock=clock)  # not strict: allowed, and recorded
    assert verbs.load(ws)["events"] == [
        {"t": 42.0, "kind": "hint", "item": "ragged-batch", "step": 2},
        {"t": 50.0, "kind": "solution", "item": "preallocated"},
    ]
    shown = "\n".join(review.lines(verbs.load(ws), ws))
    assert "Solutions read: preallocated at 0m 50s" in shown
    assert "- solution `preallocated` read at 0m 50s" in review.markdown(verbs.load(ws), ws)


def test_a_strict_session_refuses_hints_and_solutions_and_records_each_refusal(tmp_path):
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, strict=True, clock=clock)
    clock.advance(5)
    with pytest.raises(verbs.Refused, match="strict"):
        verbs.hint(ws, "gqa", 1, clock=clock)
    with pytest.raises(verbs.Refused, match="strict"):
        verbs.solution(ws, "preallocated", clock=clock)
    with pytest.raises(KeyError):  # not an item: neither refused nor recorded
        verbs.hint(ws, "no-such-item", 1, clock=clock)
    assert verbs.load(ws)["events"] == [
        {"t": 5.0, "kind": "refused", "what": "hint", "item": "gqa"},
        {"t": 5.0, "kind": "refused", "what": "solution", "item": "preallocated"},
    ]


def test_a_strict_sessions_refusal_through_the_cli(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cli import app

    ws = tmp_path / "ws"
    verbs.start(ws, strict=True)
    monkeypatch.chdir(ws)
    result = CliRunner().invoke(app, ["hint", "reset"])
    assert result.exit_code == 1 and "strict interview session" in result.output
    assert "reset" not in result.output.split("session")[0]  # no hint text before the refusal
    assert verbs.load(ws)["events"][-1]["what"] == "hint"
    monkeypatch.chdir(tmp_path)  # outside the workspace: no session, the hint as ever
    assert CliRunner().invoke(app, ["hint", "reset"]).exit_code == 0


def test_the_verbs_through_the_cli(tmp_path, staged, monkeypatch):
    from typer.testing import CliRunner

    from cli import app

    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    missing = runner.invoke(app, ["interview", "report", "nowhere"])
    assert missing.exit_code == 2 and missing.output.startswith("kata: error: no interview")
    assert runner.invoke(app, ["interview", "start", "ws"]).exit_code == 0
    assert verbs.load(tmp_path / "ws")["minutes"] == 60  # as the contract's record has it
    write_level(tmp_path / "ws", "L4")
    saved = runner.invoke(app, ["interview", "save", "ws"])
    assert saved.exit_code == 0 and "stage L5 opens" in saved.output
    assert re.search(r"\[\d+m \d\ds left \| stage L5 \| level L4 \| 1 saves\]", saved.output)
    report = runner.invoke(
        app, ["interview", "report", "ws", "--markdown", "r.md", "--json", "r.json"]
    )
    assert report.exit_code == 0 and "Time to each level" in report.output
    assert "## Time to each level" in (tmp_path / "r.md").read_text()
    assert json.loads((tmp_path / "r.json").read_text())["figures"]["time_to_level"]["L5"] is None
    assert runner.invoke(app, ["interview", "replay", "ws", "--step", "1"]).exit_code == 0
    unknown = runner.invoke(app, ["interview", "replay", "ws", "--step", "5"])
    assert unknown.exit_code == 2 and unknown.output.strip().count("\n") == 0


@pytest.mark.parametrize(
    "words",
    [
        ["solution", "--readme"],
        ["solution", "concat"],
        ["solution", "--diff", "concat", "preallocated"],
        ["hint", "gqa", "--step", "3"],
    ],
)
def test_no_way_to_see_a_solution_or_hint_in_a_strict_sessions_workspace(
    tmp_path, monkeypatch, words
):
    """Every form of `kata solution`, and the last hint, from the workspace or a folder under
    it: refused before anything is shown (exit 1), the refusal recorded; outside, shown."""
    from typer.testing import CliRunner

    from cli import app

    ws = tmp_path / "ws"
    verbs.start(ws, strict=True)
    (ws / "notes").mkdir()
    for folder in (ws, ws / "notes"):
        monkeypatch.chdir(folder)
        refused = CliRunner().invoke(app, words)
        assert refused.exit_code == 1, refused.output
        assert refused.output.startswith("kata: this is a strict interview session")
        assert len(refused.output.strip().splitlines()) == 1  # nothing of the solution
    events = verbs.load(ws)["events"]
    assert [(e["kind"], e["what"]) for e in events] == [("refused", words[0])] * 2
    assert (
        events[0]["item"]
        == {
            "--readme": "readme",
            "concat": "concat",
            "--diff": "concat -> preallocated",
            "gqa": "gqa",
        }[words[1]]
    )
    monkeypatch.chdir(tmp_path)  # outside every workspace: shown, nothing recorded
    shown = CliRunner().invoke(app, words)
    assert shown.exit_code == 0 and len(shown.output.splitlines()) > 1
    assert len(verbs.load(ws)["events"]) == 2


def test_a_verb_wins_over_a_folder_of_its_name_and_any_other_word_is_a_folder():
    from typer.testing import CliRunner

    from cli import app

    runner = CliRunner()
    shown = runner.invoke(app, ["interview", "save", "--help"]).output
    assert "interview save [OPTIONS]" in shown
    for words in (["./save", "--help"], ["--help"], ["my-kata", "--help"]):
        shown = runner.invoke(app, ["interview", *words]).output
        assert ("interview run [OPTIONS]" in shown) == (words != ["--help"]), words


# --- the lock ---------------------------------------------------------------------------------


def test_a_live_sessions_lock_refuses_another_and_a_dead_ones_is_taken_over(tmp_path):
    ws = tmp_path / "ws"
    verbs.start(ws)
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        (ws / ".kata" / "session.lock").write_text(f"{other.pid}\n")
        with pytest.raises(record.SessionBusy, match=f"pid {other.pid}"):
            verbs.start(ws)
    finally:
        other.kill()
        other.wait()
    session, _, resumed = verbs.start(ws)  # its process is gone: the lock is stale
    assert resumed and not (ws / ".kata" / "session.lock").exists()


# --- the report and the replay ----------------------------------------------------------------


def test_the_report_gives_each_figure_and_the_replay_each_diff(tmp_path, staged):
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, minutes=30, clock=clock)
    for reached, minutes in (("none", 2), ("L4", 5), ("L5", 9)):
        write_level(ws, reached, note=f"at {minutes}")
        clock.now = START + minutes * 60
        verbs.save(ws, clock=clock)
    clock.advance(30)
    verbs.hint(ws, "gqa", 1, clock=clock)
    found = review.figures(verbs.load(ws))
    assert found["time_to_level"] == {"L4": 300.0, "L5": 540.0, "L6": None, "L6+": None}
    assert found["first_pass"]["attend-shape"] == 300.0 and found["first_pass"]["gqa"] is None
    assert found["levels"] == [[120.0, "below L4"], [300.0, "L4"], [540.0, "L5"]]
    assert [e["item"] for e in found["hints"]] == ["gqa"]
    strip = review.strip(verbs.load(ws), width=20)
    assert strip[0].startswith("L6+ |") and "█" not in strip[0]  # the rubric's levels, L6+ too
    assert strip[1].lstrip().startswith("L6 |") and "█" not in strip[1]
    assert strip[3].index("█") < strip[2].index("█")  # L4 was reached before L5
    steps = review.replay(verbs.load(ws), ws)
    assert [bool(diff) for _, diff in steps] == [False, True, True]
    assert '-STAGED_UP_TO = "L4"' in steps[2][1] and '+STAGED_UP_TO = "L5"' in steps[2][1]
    assert review.replay(verbs.load(ws), ws, step=2)[0][0]["snapshot"].startswith("002-")
    with pytest.raises(ValueError, match="no snapshot 9"):
        review.replay(verbs.load(ws), ws, step=9)


@pytest.mark.slow  # matplotlib's import alone takes 1.5 s here
def test_the_level_over_time_as_a_png(tmp_path, staged):
    pytest.importorskip("matplotlib")
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, clock=clock)
    write_level(ws, "L4")
    clock.advance(120)
    verbs.save(ws, clock=clock)
    review.save_png(verbs.load(ws), tmp_path / "level.png")
    assert (tmp_path / "level.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_candidates_answers_reach_no_output_as_markup_or_control(tmp_path, staged):
    """tests/hostile/interview_answers.md: terminal escapes, bidi controls, a fence that would
    close the block, a Markdown link and HTML, under a heading the session asked."""
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, clock=clock)
    (ws / "answers.md").write_text(HOSTILE_ANSWERS.read_text())
    verbs.end(ws, clock=clock)
    session = verbs.load(ws)
    terminal = "\n".join(review.lines(session, ws))
    assert "\x1b" not in terminal and "\u202e" not in terminal and "\\x1b" in terminal
    page = review.markdown(session, ws)
    answer = page.split("### why-only-kv")[1].split("Model answer:")[0]
    fence = re.search(r"^(`{3,})text$", answer, re.M).group(1)
    assert answer.count(fence) == 2 and "\x1b" not in page  # the candidate's ``` is inside
    assert (
        json.loads(json.dumps(review.to_json(session, ws)))["answers"][0]["answer"].find("\x1b")
        == -1
    )


def test_a_replay_shows_no_control_of_the_candidates_file(tmp_path, staged):
    """The attacks of tests/hostile/interview_answers.md as comments of a saved kv_cache.py."""
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, clock=clock)
    verbs.save(ws, clock=clock)
    attack = "".join(f"# {line}\n" for line in HOSTILE_ANSWERS.read_text().splitlines())
    (ws / "kv_cache.py").write_text('STAGED_UP_TO = "L4"\n' + attack)
    verbs.save(ws, clock=clock)
    shown = "\n".join(review.replay_lines(verbs.load(ws), ws))
    assert "\x1b]8;;" not in shown and "\u202e" not in shown and "\x07" not in shown
    assert "+# \\x1b[2J\\x1b]8;;http://evil.example\\x07click here" in shown


# --- the clock's warnings ---------------------------------------------------------------------


def test_the_status_line_warns_under_10_then_2_minutes_left(tmp_path):
    clock, ws = Clock(), tmp_path / "ws"
    session = verbs.start(ws, minutes=15, clock=clock)[0]
    early, late, last = (
        commands.status(session, START + (15 - left) * 60) for left in (11, 9.5, 1.5)
    )
    assert "under" not in early.plain and early.style == "cyan"
    assert early.plain.startswith("[11m 00s left | stage L4")
    assert late.plain.startswith("[9m 30s left, under 10 minutes! | stage L4")
    assert last.plain.startswith("[1m 30s left, under 2 minutes! | stage L4")
    assert (late.style, last.style) == ("bold yellow", "bold red")
    assert "under" not in commands.status(session, START + 15 * 60).plain  # time up: 0m 00s
    short = verbs.start(tmp_path / "short", minutes=5, clock=clock)[0]  # no "under 10" in it
    assert [
        commands.status(short, START + (5 - left) * 60).plain.split(" |")[0] for left in (5, 3, 1)
    ] == ["[5m 00s left", "[3m 00s left", "[1m 00s left, under 2 minutes!"]


def test_each_warning_is_printed_once_when_its_time_comes(tmp_path):
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, minutes=15, clock=clock)
    out_console, out = console()
    ticker = commands.Ticker(out_console)
    printed = []
    for minutes in (0, 4.9, 5.1, 6, 12.9, 13.1, 14, 14.99):
        assert not ticker.time_up(ws, START + minutes * 60)
        printed.append(out.getvalue())
    flat = " ".join  # a warning wraps at the terminal's width, at spaces
    assert printed[1] == "" and flat(printed[2].split()) == flat(commands.WARNINGS[600].split())
    assert all(len(line) <= out_console.width for line in printed[2].splitlines())
    assert printed[4] == printed[2]  # not again while it holds
    assert flat(printed[5].split()) == flat(
        (commands.WARNINGS[600] + " " + commands.WARNINGS[120]).split()
    )
    assert printed[5] == printed[7]
    assert ticker.time_up(ws, START + 15 * 60) and out.getvalue() == printed[7]
    resumed_console, resumed = console()  # a session resumed with a minute left: the latest
    assert not commands.Ticker(resumed_console).time_up(ws, START + 14 * 60)
    assert flat(resumed.getvalue().split()) == flat(commands.WARNINGS[120].split())
    short_console, short = console()  # a 5-minute session: the 2-minute warning alone
    verbs.start(tmp_path / "short", minutes=5, clock=clock)
    short_ticker = commands.Ticker(short_console)
    for minutes in (0, 2.9, 3.1, 4):
        short_ticker.time_up(tmp_path / "short", START + minutes * 60)
    assert flat(short.getvalue().split()) == flat(commands.WARNINGS[120].split())


def test_in_a_terminal_the_status_line_ticks_in_place_with_its_warning(tmp_path):
    import io

    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, minutes=15, clock=clock)
    out = io.StringIO()
    ticker = commands.Ticker(Console(file=out, width=100, force_terminal=True))
    ticker.time_up(ws, START + 60)
    ticker.time_up(ws, START + 60.5)  # within the second: not rewritten
    assert out.getvalue().count("\r") == 1 and out.getvalue().endswith("\x1b[K")
    assert "14m 00s left | stage L4" in out.getvalue()
    ticker.time_up(ws, START + 13.5 * 60)
    tail = out.getvalue().rsplit("\r", 1)[1]
    assert "1m 30s left, under 2 minutes! |" in tail and "\x1b[1;31m" in tail  # bold red


# --- saves kept warm --------------------------------------------------------------------------


def test_an_unchanged_test_file_keeps_its_own_tests_verdict_across_saves(tmp_path, monkeypatch):
    """A save that changes kv_cache.py alone is graded without own-tests and takes the verdict
    the same test file got, with its tell; a change of the test file grades the item again."""
    from graders.interview.warm import OWN_TESTS_TELLS, OwnTestsVerdict
    from graders.judge.result import TellResult

    graded = []

    def grade_with_tells(request, on_item=None):
        only = request.only
        graded.append(set(only))
        result = staged_grade(request)
        mark = "caught" if b"caught" in Path(request.tests).read_bytes() else "shapes only"
        return replace(
            result,
            tells=[
                TellResult("caches-q", False, "clear"),
                TellResult("shape-only-tests", mark != "caught", mark, checked="own-tests" in only),
            ],
        )

    stand_in(monkeypatch, grade_with_tells)
    clock, ws, kept = Clock(), tmp_path / "ws", OwnTestsVerdict()
    verbs.start(ws, clock=clock)
    (ws / "test_kv_cache.py").write_text("# caught\n")
    write_level(ws, "L6")
    # Opens L5; graded with L5's items, own-tests kept, opens L6; graded with L6's.
    first, graded_l5, last = (verbs.save(ws, clock=clock, own_tests=kept) for _ in range(3))
    assert ["own-tests" in items for items in graded] == [False, True, False]
    assert kept.covers(ws / "test_kv_cache.py") and last.event["level"] == "L6"
    write_level(ws, "L6", note="kv_cache.py alone changes")
    again = verbs.save(ws, clock=clock, own_tests=kept)
    # L6 reached opened L6+: graded with its 4 items too, kv_cache.py's 22 (own-tests kept)
    assert "own-tests" not in graded[-1] and len(graded[-1]) == 22
    own = next(i for i in again.result.items if i.id == "own-tests")
    assert own.status == "pass" and graded_l5.event["snapshot"].startswith("002-")
    assert (
        own.message == f"as graded at {graded_l5.event['snapshot']} (the test file is "
        "unchanged): staged"
    )
    assert [i.id for i in again.result.items if i.level != "L6+"] == [
        i.id for i in last.result.items
    ]
    assert again.event["level"] == "L6" and "own-tests" in again.event["passing"]
    tells = {t.id: t for t in again.result.tells}
    assert tells["shape-only-tests"].checked and tells["shape-only-tests"].message == "caught"
    assert OWN_TESTS_TELLS == ("shape-only-tests",)
    (ws / "test_kv_cache.py").write_text("# checks shapes\n")
    verbs.save(ws, clock=clock, own_tests=kept)
    assert "own-tests" in graded[-1]  # a new test file: graded again
    assert kept.tells[0].detected and kept.tells[0].message == "shapes only"


def test_a_verdict_that_broke_is_not_kept(tmp_path):
    from graders.interview.warm import OwnTestsVerdict

    tests = tmp_path / "test_kv_cache.py"
    tests.write_text("def test_x(): pass\n")
    kept = OwnTestsVerdict()
    for status, holds in (("pass", True), ("timeout", False), ("fail", True), ("error", False)):
        item = ItemResult("own-tests", "L5", status, 0.0, 7.0, "m")
        kept.keep(GradeResult("f", None, [item], [], False), tests, "001-00000000")
        assert kept.covers(tests) == holds, status
    kept.keep(
        GradeResult("f", None, [ItemResult("own-tests", "L5", "pass", 7.0, 7.0, "m")], [], False),
        tests,
        "002-00000000",
    )
    assert kept.covers(tests)
    kept.keep(GradeResult("f", None, [], [], False), tests, "003-00000000")  # not graded
    assert not kept.covers(tests)
    not_run = ItemResult("own-tests", "L5", "not_attempted", 0.0, 7.0, "not run", "no worker")
    kept.keep(GradeResult("f", None, [not_run], [], False), tests, "004-00000000")
    assert not kept.covers(tests)
    tests.write_text("def test_y(): pass\n")
    assert not kept.covers(tests) and not kept.covers(None)


class FakeWorker:
    """Stands for a graders.judge.workers.Worker: counts its go() and close()."""

    started: list = []

    def __init__(self, mode: str, **_) -> None:
        self.mode, self.gone, self.closed = mode, False, False
        FakeWorker.started.append(self)

    def start(self) -> "FakeWorker":
        return self

    def go(self) -> None:
        self.gone = True

    def close(self) -> None:
        self.closed = True


def test_the_next_workers_keep_an_idle_tests_worker_across_saves(tmp_path, monkeypatch):
    from graders.interview.warm import NextWorkers
    from graders.judge import workers as judge_workers

    def start(request, ahead=False):
        assert request.tests_run is None and ahead
        return judge_workers.GradeWorkers(FakeWorker("implementation"), None, None, "bwrap")

    FakeWorker.started = []
    monkeypatch.setattr(judge_workers.GradeWorkers, "start", staticmethod(start))
    monkeypatch.setattr(judge_workers, "Worker", FakeWorker)
    ws = tmp_path / "ws"
    verbs.start(ws)
    ahead = NextWorkers(ws)
    ahead.start()  # stage L4: no item runs the tests
    assert [w.mode for w in FakeWorker.started] == ["implementation"]
    assert ahead.take(with_tests=True).test_worker is None
    verbs.update(ws, lambda s: s.update(stage="L5"))
    ahead.start()
    assert [w.mode for w in FakeWorker.started] == ["implementation"] * 2 + ["tests"]
    tests_worker = FakeWorker.started[-1]
    alone = ahead.take(with_tests=False)  # the test file's verdict is kept: not needed
    assert alone.test_worker is None and not tests_worker.gone
    ahead.start()  # a fresh implementation worker; the tests worker is still the one kept
    assert [w.mode for w in FakeWorker.started].count("tests") == 1
    both = ahead.take(with_tests=True)
    assert both.test_worker is tests_worker and tests_worker.gone
    assert both.tests == ws / "test_kv_cache.py" and both.implementation.gone
    ahead.start()
    ahead.close()
    assert all(w.closed for w in FakeWorker.started[-2:])


# --- a Ctrl-C during the final grade ----------------------------------------------------------


def interrupted_after(count: int):
    """A stand-in for the final grade: `count` items graded (heard of by on_item), then a Ctrl-C
    (KeyboardInterrupt), as a second Ctrl-C during `end` brings."""

    def grade(request, on_item=None):
        for item in staged_grade(request).items[:count]:
            on_item(item)
        raise KeyboardInterrupt

    return grade


def test_a_ctrl_c_during_the_final_grade_ends_the_session_with_what_it_has(tmp_path, monkeypatch):
    import signal

    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, clock=clock)
    write_level(ws, "L4")
    with monkeypatch.context() as patched:
        stand_in(patched, staged_grade)
        saved = verbs.save(ws, clock=clock)
    writes = []
    original_save = record.save
    monkeypatch.setattr(
        record,
        "save",
        lambda w, r: (writes.append(signal.getsignal(signal.SIGINT)), original_save(w, r)),
    )
    stand_in(monkeypatch, interrupted_after(5))
    clock.advance(60)
    with pytest.raises(verbs.Interrupted, match="after 5 of 23 items") as caught:
        verbs.end(ws, clock=clock)
    assert writes == [signal.SIG_IGN]  # a third Ctrl-C cannot cut the record's write
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # and then restored
    ended = verbs.load(ws)
    assert caught.value.record == ended and ended["ended"] == record.iso(START + 60)
    final = ended["final"]
    assert final["partial"] and final["hidden"] and final["level"] is None
    assert [i["id"] for i in final["items"]] == [
        "append-time-dim",
        "attend-shape",
        "prefix-equivalence",
        "validate-shapes",
        "validate-dtype-device",
    ]
    assert isinstance(final["seed"], int) and final["isolation"] is None
    assert final["implementation"] == f"{saved.event['snapshot']}/kv_cache.py"
    assert verbs.end(ws, clock=clock) == ended  # ended: idempotent, nothing graded again
    shown = "\n".join(review.lines(ended, ws))
    assert "interrupted (Ctrl-C) after 5 of 23 items, 10/27 points on those; no level" in shown
    assert (
        f"kata grade --hidden --seed {final['seed']} "
        f"{ws / '.kata' / saved.event['snapshot'] / 'kv_cache.py'}"
    ) in shown
    assert "interrupted (Ctrl-C)" in review.markdown(ended, ws)


def test_the_end_verb_interrupted_exits_130_with_the_report_and_no_traceback(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    verbs.start(ws)
    stand_in(monkeypatch, interrupted_after(0))
    out_console, out = console()
    assert commands.end(out_console, ws) == commands.INTERRUPTED == 130
    shown = out.getvalue()
    assert "the final grade was interrupted (Ctrl-C) after 0 of 23 items" in shown
    assert "Time to each level" in shown and "Traceback" not in shown
    assert verbs.load(ws)["ended"] is not None


# --- the scripted session, for real -----------------------------------------------------------


def wrong_file(name: str) -> str:
    found = next(w for w in everything() if w.name == name)
    return found.implementation.source()


@pytest.mark.slow
def test_a_scripted_session_graded_for_real(tmp_path):
    """Issue 33's session: the starter; an L4 file (a reset bug only L5 catches); an L5 file with
    a wrong GQA, with the reference tests; a hint; the correct file; the end."""
    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, clock=clock)
    clock.advance(60)
    starter = verbs.save(ws, clock=clock)
    (ws / "kv_cache.py").write_text(wrong_file("reset-rewinds-lengths"))
    clock.advance(600)
    l4 = verbs.save(ws, clock=clock)
    (ws / "kv_cache.py").write_text(wrong_file("gqa-head-mapping-modulo"))
    shutil.copy(ROOT / "solutions" / "test_kv_cache.py", ws / "test_kv_cache.py")
    clock.advance(900)
    l5 = verbs.save(ws, clock=clock)
    clock.advance(60)
    verbs.hint(ws, "gqa", 1, clock=clock)
    shutil.copy(REFERENCE, ws / "kv_cache.py")
    clock.advance(300)
    l6 = verbs.save(ws, clock=clock)
    clock.advance(60)
    session = verbs.end(ws, clock=clock)

    assert [s.event["level"] for s in (starter, l4, l5, l6)] == ["below L4", "L4", "L5", "L6"]
    assert [s.opened for s in (starter, l4, l5, l6)] == [None, "L5", "L6", "L6+"]
    assert "reset" in l5.event["passing"] and "reset" not in l4.event["passing"]
    assert "gqa" not in {i.id for i in l5.result.items}  # graded before L6 opened
    assert [(e["kind"], e["t"]) for e in session["events"]] == [
        ("save", 60.0),
        ("save", 660.0),
        ("stage", 660.0),
        ("save", 1560.0),
        ("stage", 1560.0),
        ("hint", 1620.0),
        ("save", 1920.0),
        ("stage", 1920.0),
    ]
    names = [e["snapshot"] for e in session["events"] if e["kind"] == "save"]
    assert [n[:4] for n in names] == ["001-", "002-", "003-", "004-"]
    assert (
        sorted(p.name for p in (ws / ".kata").iterdir() if record.SNAPSHOT.match(p.name)) == names
    )
    final = session["final"]
    # the final grade has L6+ open: the reference passes its items too
    assert final["hidden"] is True and final["level"] == "L6+" and final["score"] == 100.0
    assert session["ended"] == record.iso(START + 1980)
    found = review.figures(session)
    assert found["time_to_level"] == {"L4": 660.0, "L5": 1560.0, "L6": 1920.0, "L6+": None}
    assert found["first_pass"]["gqa"] == 1920.0 and found["first_pass"]["reset"] == 1560.0
    lines = "\n".join(review.lines(session, ws))
    assert "Final grade (--hidden" in lines and "Similarity to the bundled solutions" in lines
    diffs = [diff for _, diff in review.replay(session, ws) if diff]
    assert len(diffs) == 3
    assert "test_kv_cache.py" in diffs[1] and "test_kv_cache.py" not in diffs[2]


@pytest.mark.slow
def test_a_kept_own_tests_verdict_is_the_one_the_test_file_got_for_real(tmp_path):
    """The reference and its tests at stage L6: a save of kv_cache.py alone takes the own-tests
    verdict and tell of the save before, and a grade of own-tests alone checks exactly the
    tells a kept verdict brings (OWN_TESTS_TELLS)."""
    from graders.interview.warm import OWN_TESTS_TELLS, OwnTestsVerdict
    from tests.grading import grade

    ws, kept = tmp_path / "ws", OwnTestsVerdict()
    verbs.start(ws)
    shutil.copy(REFERENCE, ws / "kv_cache.py")
    shutil.copy(ROOT / "solutions" / "test_kv_cache.py", ws / "test_kv_cache.py")
    verbs.update(ws, lambda s: s.update(stage="L6"))
    ran = verbs.save(ws, own_tests=kept)
    with (ws / "kv_cache.py").open("a") as file:
        file.write("# a comment\n")
    took = verbs.save(ws, own_tests=kept)
    # the first save reaches L6 and opens L6+, so the second is graded with L6+'s items too
    assert [s.event["level"] for s in (ran, took)] == ["L6", "L6+"] and ran.opened == "L6+"
    for saved in (ran, took):
        assert saved.result.score == 100.0
    own = [next(i for i in s.result.items if i.id == "own-tests") for s in (ran, took)]
    assert (
        own[1].message == f"as graded at {ran.event['snapshot']} (the test file is "
        f"unchanged): {own[0].message}"
    )
    tells = [{t.id: t for t in s.result.tells}["shape-only-tests"] for s in (ran, took)]
    assert tells[0] == tells[1] and tells[0].checked and not tells[0].detected
    alone = grade(
        ws / "kv_cache.py",
        ws / "test_kv_cache.py",
        only={"own-tests"},
        sandbox=verbs.default_sandbox(),
    )
    assert tuple(t.id for t in alone.tells if t.checked) == OWN_TESTS_TELLS


# --- processes: SIGKILL, two sessions, the pseudo-terminal ------------------------------------


def kata(*args: str, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(ROOT / "cli.py"), *args],
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "COLUMNS": "100"},
    )


@pytest.mark.slow
def test_a_session_killed_mid_grade_resumes_with_every_completed_event(tmp_path):
    ws = tmp_path / "ws"
    verbs.start(ws)
    verbs.hint(ws, "reset", 1)
    shutil.copy(REFERENCE, ws / "kv_cache.py")
    saving = kata("interview", "save", str(ws), cwd=tmp_path)
    deadline = time.monotonic() + 30
    while not list((ws / ".kata").glob("001-*")) and time.monotonic() < deadline:
        time.sleep(0.02)
    saving.send_signal(signal.SIGKILL)  # the snapshot is taken: the grade is under way
    saving.wait()
    assert verbs.load(ws)["events"] == [e for e in verbs.load(ws)["events"] if e["kind"] == "hint"]
    done = kata("interview", "save", str(ws), cwd=tmp_path)
    output = done.communicate(timeout=120)[0]
    assert done.returncode == 0, output
    events = verbs.load(ws)["events"]
    assert [e["kind"] for e in events] == ["hint", "save", "stage"]
    assert events[1]["snapshot"].startswith("002-")  # never over the killed save's folder


@pytest.mark.slow
def test_two_sessions_on_one_workspace_are_refused_with_a_line(tmp_path):
    ws = tmp_path / "ws"
    first = kata("interview", str(ws), "--minutes", "5", cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while not (ws / ".kata" / "session.lock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = kata("interview", "save", str(ws), cwd=tmp_path)
        output = second.communicate(timeout=60)[0]
        assert second.returncode == 2
        assert output.strip().splitlines() == [
            f"kata: error: another session runs in this workspace (pid {first.pid}): one "
            "session at a time"
        ]
    finally:
        first.kill()
        first.wait()


class Terminal:
    """`kata interview DIR` under a pseudo-terminal: `read_until(text)` reads its output until
    `text` shows (what was read is `seen`); `close()` kills it if it still runs."""

    def __init__(self, ws: Path) -> None:
        self.leader, follower = pty.openpty()
        self.process = subprocess.Popen(
            [sys.executable, str(ROOT / "cli.py"), "interview", str(ws)],
            cwd=ws.parent,
            stdin=follower,
            stdout=follower,
            stderr=follower,
            env={**os.environ, "COLUMNS": "100", "TERM": "xterm"},
        )
        os.close(follower)
        self.seen = ""

    def read_until(self, text: str, timeout: float = 90) -> bool:
        deadline = time.monotonic() + timeout
        while text not in self.seen and time.monotonic() < deadline:
            if select.select([self.leader], [], [], 0.2)[0]:
                try:
                    self.seen += os.read(self.leader, 65536).decode(errors="replace")
                except OSError:
                    break
        return text in self.seen

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.leader)


@pytest.mark.slow
def test_the_interactive_verb_grades_a_save_under_a_pseudo_terminal(tmp_path):
    ws = tmp_path / "ws"
    terminal = Terminal(ws)
    try:
        assert terminal.read_until("1 saves]"), terminal.seen  # the starter; the status ticks
        assert "stage L4" in terminal.seen and "Items this stage adds" in terminal.seen
        for text in later_texts("L4"):
            assert text not in terminal.seen
        (ws / "kv_cache.py").write_text(wrong_file("reset-rewinds-lengths"))
        assert terminal.read_until("2 saves]"), terminal.seen
        assert "stage L5 opens" in terminal.seen and "stage L5" in terminal.seen
        terminal.process.send_signal(signal.SIGINT)  # Ctrl-C: the session ends
        assert terminal.read_until("Final grade (--hidden"), terminal.seen
        assert terminal.process.wait(timeout=120) == 0
    finally:
        terminal.close()
    assert verbs.load(ws)["ended"] is not None


@pytest.mark.slow
def test_a_second_ctrl_c_during_the_final_grade_ends_the_session_without_a_traceback(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(REFERENCE, ws / "kv_cache.py")  # its final grade takes 4-10 s here
    shutil.copy(ROOT / "solutions" / "test_kv_cache.py", ws / "test_kv_cache.py")
    terminal = Terminal(ws)
    try:
        assert terminal.read_until("1 saves]"), terminal.seen
        terminal.process.send_signal(signal.SIGINT)  # the first: the session ends
        assert terminal.read_until("the final grade, with the hidden cases"), terminal.seen
        time.sleep(0.5)  # the final grade under way
        terminal.process.send_signal(signal.SIGINT)  # the second
        assert terminal.process.wait(timeout=60) == 130
        terminal.read_until("no text: read what is left", timeout=1)
    finally:
        terminal.close()
    assert "Traceback" not in terminal.seen and "KeyboardInterrupt" not in terminal.seen
    assert "the final grade was interrupted (Ctrl-C) after" in terminal.seen
    assert "Final grade (--hidden, seed" in terminal.seen and "kata grade --hidden" in terminal.seen
    session = verbs.load(ws)
    assert session["ended"] is not None and session["final"]["partial"] is True
    assert not (ws / ".kata" / "session.lock").exists()  # the workspace is free again


def test_the_session_report_wraps_at_the_terminals_width(tmp_path):
    import io

    clock, ws = Clock(), tmp_path / "ws"
    verbs.start(ws, minutes=15, clock=clock)
    out = io.StringIO()
    assert commands.report(Console(file=out, width=72), ws, None, None, None) == 0
    lines = out.getvalue().splitlines()
    assert lines and max(len(line) for line in lines) <= 72, out.getvalue()
    said = " ".join(review.lines(verbs.load(ws), ws))
    # A path longer than the width is folded inside itself: compare without any whitespace.
    assert "".join(out.getvalue().split()) == "".join(said.split()), "wrapped, nothing cut"
