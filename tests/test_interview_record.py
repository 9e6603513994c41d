"""A session's record is the candidate's file (issue 40): its schema, its snapshots' names, and
every interview surface as data (contract sections 5 and 7).

Quick: the grades are tests/test_interview.py's stand-in (`staged_grade`), so these check what
the report, the replay and the errors show of a record and a workspace, not the graders. The
attacks are tests/hostile/interview_records.json (escapes and wrong types put into a record),
tests/hostile/edits_its_interview_record.py (a record edited by hand) and
tests/hostile/interview_answers_not_utf8.md. tests/test_interview_verify.py grades for real.
"""

from __future__ import annotations

import json
import re
import runpy
import shutil
import unicodedata
from dataclasses import replace
from pathlib import Path

import pytest
import typer
from click.testing import CliRunner

from cli import app
from graders.interview import record, review, schema, session as verbs, verify
from graders.interview.questions import STAGE_PROMPTS
from graders.shared import rubric as rubric_data
from graders.shared.mutation import REFERENCE
from tests.test_formats import code_spans
from tests.test_safe_formats import strings
from tests.test_interview import Clock, staged_grade, write_level
from tests.grading import stand_in

HOSTILE = Path(__file__).parent / "hostile"
RECORDS = json.loads((HOSTILE / "interview_records.json").read_text())
ATTACK = RECORDS["attack"]
PATH_ATTACK = ATTACK.replace("/", "")  # a folder's name holds no slash
EDIT = runpy.run_path(str(HOSTILE / "edits_its_interview_record.py"))["edit"]
COMMAND = typer.main.get_command(app)  # built once: typer takes 0.1 s to build it
# Each wrong record through `report`; a few through `replay` and `save` too (each verb loads the
# record the same way: record.load).
SCHEMA_CASES = [("report", wrong) for wrong in RECORDS["wrong"]] + [
    (verb, wrong)
    for verb in ("replay", "save")
    for wrong in RECORDS["wrong"][:2] + RECORDS["wrong"][-1:]
]


def raw_controls(data: bytes | str) -> list[str]:
    """The control characters (C0 but tab and newline, DEL, C1), format characters (bidi
    controls) and lone surrogates in `data` (bytes: decoded as UTF-8, which they must be)."""
    text = data.decode("utf-8") if isinstance(data, bytes) else data
    return [
        char
        for char in text
        if char not in "\t\n" and unicodedata.category(char) in ("Cc", "Cf", "Cs")
    ]


def live_markup(markdown: str) -> list[str]:
    """What could render as a link, an image or HTML in `markdown` (an autolink included),
    outside code spans and fenced blocks."""
    outside, _ = code_spans(re.sub(r"^(`{3,})text\n.*?^\1$", "", markdown, flags=re.M | re.S))
    return re.findall(r"\]\(|<[a-zA-Z/!]|https?:|www\.", outside)


def kata(*args: str, cwd: Path):
    """The CLI in this process (its grades staged); (exit code, the bytes it wrote)."""
    import os

    here = os.getcwd()
    os.chdir(cwd)
    try:
        # A wide terminal: the report wraps at its width, and these tests read it by line.
        done = CliRunner().invoke(COMMAND, list(args), env={"COLUMNS": "1000"})
    finally:
        os.chdir(here)
    assert done.exception is None or isinstance(done.exception, SystemExit), done.exception
    return done.exit_code, done.stdout_bytes + done.stderr_bytes


@pytest.fixture
def staged(monkeypatch):
    """Grades are tests/test_interview.py's stand-in, and the CLI's saves start no workers."""
    stand_in(monkeypatch, staged_grade)
    monkeypatch.setattr("graders.interview.warm.NextWorkers.start", lambda self: None)


@pytest.fixture
def staged_verify(staged, monkeypatch):
    """--verify's grades are staged too, and it starts no workers ahead for them."""
    monkeypatch.setattr("graders.interview.verify._Ahead.start", lambda self, event, stage: None)


@pytest.fixture(scope="module")
def base_session(tmp_path_factory) -> Path:
    """An ended staged session: a save that opens L5 (events[0], the stage events[1]), a hint
    (events[2]), a second save at L5, the end."""
    ws = tmp_path_factory.mktemp("base") / "ws"
    with pytest.MonkeyPatch.context() as patch:
        stand_in(patch, staged_grade)
        clock = Clock()
        verbs.start(ws, clock=clock)
        write_level(ws, "L4")
        clock.advance(60)
        verbs.save(ws, clock=clock)
        clock.advance(30)
        verbs.hint(ws, "gqa", 2, clock=clock)
        write_level(ws, "L5", note="with its stage")
        clock.advance(60)
        verbs.save(ws, clock=clock)
        clock.advance(30)
        verbs.end(ws, clock=clock)
    return ws


@pytest.fixture
def session_copy(base_session, tmp_path) -> Path:
    ws = tmp_path / "ws"
    shutil.copytree(base_session, ws)
    return ws


def edit_record(ws: Path, change) -> None:
    data = json.loads(record.path(ws).read_text())
    change(data)
    record.path(ws).write_text(json.dumps(data))


def set_field(data: dict, field: str, value) -> None:
    """Put `value` at `field` ("events[0].passing[1]") of the record `data`."""
    keys = [int(key) if key.isdigit() else key for key in re.findall(r"[^.\[\]]+", field)]
    for key in keys[:-1]:
        data = data[key]
    data[keys[-1]] = value


# --- the schema -------------------------------------------------------------------------------


def test_every_record_a_session_writes_passes_its_schema(base_session, tmp_path, staged):
    assert verbs.load(base_session)["final"]["level"] == "L5"
    clock, ws = Clock(), tmp_path / "strict"
    verbs.start(ws, strict=True, clock=clock)
    for ask in (
        lambda: verbs.hint(ws, "gqa", 1, clock=clock),
        lambda: verbs.solution(ws, "concat -> preallocated", clock=clock),
    ):
        with pytest.raises(verbs.Refused):
            ask()
    verbs.start(tmp_path / "open", clock=clock)
    for name in ("readme", "tests", "concat -> preallocated"):
        verbs.solution(tmp_path / "open", name, clock=clock)
    kinds = [e["kind"] for e in verbs.load(ws)["events"] + verbs.load(tmp_path / "open")["events"]]
    assert kinds == ["refused", "refused", "solution", "solution", "solution"]


@pytest.mark.parametrize(
    ("verb", "wrong"),
    SCHEMA_CASES,
    ids=[f"{verb}-{wrong['field']}={wrong['value']!r}"[:48] for verb, wrong in SCHEMA_CASES],
)
def test_a_record_that_fails_its_schema_is_one_line_naming_the_field(
    session_copy, staged, verb, wrong
):
    value = (
        wrong["value"].replace("@ATTACK@", ATTACK)
        if isinstance(wrong["value"], str)
        else wrong["value"]
    )
    edit_record(session_copy, lambda data: set_field(data, wrong["field"], value))
    code, shown = kata("interview", verb, "ws", cwd=session_copy.parent)
    text = shown.decode("utf-8")
    assert code == 2 and text.count("\n") == 1 and "Traceback" not in text, text
    assert text.startswith(
        f"kata: error: {session_copy / '.kata' / 'session.json'}: {wrong['field']}: "
    ), text
    assert raw_controls(shown) == []


def test_the_schema_takes_its_levels_items_and_stages_from_the_rubric(session_copy, monkeypatch):
    """A level the rubric adds (an L7, with its items) is known to the schema at once."""

    def plus(data: dict) -> None:
        data.update(stage="L7")
        data["events"][0].update(level="L7", passing=["tree-attention"])
        data["events"].insert(2, {"t": 60.0, "kind": "stage", "stage": "L7"})

    edit_record(session_copy, plus)
    with pytest.raises(schema.RecordError, match=r"stage: .L7.: not one of L4, L5, L6, L6\+"):
        verbs.load(session_copy)
    rubric = rubric_data.load()
    item = rubric_data.Item("tree-attention", "L7", 10.0, "a tree of drafts", "", ("?",) * 3)
    grown = rubric_data.Rubric(
        (*rubric.levels, "L7"), (*rubric.items, item), rubric.tells, rubric.interviewer
    )
    monkeypatch.setattr(rubric_data, "load", lambda *_: grown)
    loaded = verbs.load(session_copy)
    assert loaded["stage"] == "L7" and loaded["events"][0]["passing"] == ["tree-attention"]


# --- escapes: the record's fields, the snapshots' names, the workspace's path, the errors -----


@pytest.mark.parametrize("verb", ["report", "replay", "save"])
@pytest.mark.parametrize("field", ["events[2].item", "events[2].step", "events[0].snapshot"])
def test_escapes_in_a_records_field_reach_no_terminal_raw(session_copy, staged, verb, field):
    edit_record(session_copy, lambda data: set_field(data, field, ATTACK))
    markdown = ["--markdown", "r.md"] if verb == "report" else []
    code, shown = kata("interview", verb, "ws", *markdown, cwd=session_copy.parent)
    assert code == 2 and raw_controls(shown) == [], shown
    assert "\\x1b[2J\\x1b]0;owned\\x07\\x9b31m\\u202eL6" in shown.decode()
    assert not (session_copy.parent / "r.md").exists()  # refused before anything was written


def test_a_snapshot_folder_named_with_escapes_is_no_snapshot_of_the_record(session_copy, staged):
    """A folder beside the snapshots, named with escapes, that a record names: refused by name
    (the schema); one the record does not name is never read."""
    (record.folder(session_copy) / f"003-{PATH_ATTACK}").mkdir()
    code, shown = kata("interview", "replay", "ws", cwd=session_copy.parent)
    assert code == 0 and raw_controls(shown) == [] and "003-" not in shown.decode()
    assert verify.unverified(verbs.load(session_copy), session_copy).edited is False


def test_a_workspace_path_with_escapes_reaches_no_terminal_or_page_raw(
    base_session, tmp_path, staged
):
    ws = tmp_path / PATH_ATTACK
    shutil.copytree(base_session, ws)
    edit_record(ws, lambda data: data["final"].update(partial=True, level=None))
    for args in (
        ["report", PATH_ATTACK, "--markdown", "r.md", "--json", "r.json"],
        ["replay", PATH_ATTACK],
        ["save", PATH_ATTACK],
    ):
        code, shown = kata("interview", *args, cwd=tmp_path)
        assert raw_controls(shown) == [], (args, shown)
    assert (
        f"Interview session in {tmp_path}/\\x1b[2J\\x1b]0;owned\\x07"
        in kata("interview", "report", PATH_ATTACK, cwd=tmp_path)[1].decode()
    )
    page = (tmp_path / "r.md").read_text()
    assert "Grade the snapshot in full" in page and live_markup(page) == [], live_markup(page)
    assert raw_controls((tmp_path / "r.md").read_bytes()) == []
    assert raw_controls((tmp_path / "r.json").read_bytes()) == []
    for verb in ("report", "replay", "save", "end"):  # no session there: the one-line errors
        code, shown = kata("interview", verb, f"{PATH_ATTACK}-none", cwd=tmp_path)
        assert code == 2 and shown.decode().count("\n") == 1 and raw_controls(shown) == [], shown
    code, shown = kata("interview", "replay", PATH_ATTACK, "--step", "9", cwd=tmp_path)
    assert code == 2 and shown.decode().startswith("kata: error: no snapshot 9"), shown
    code, shown = kata(
        "interview", "report", PATH_ATTACK, "--markdown", f"{PATH_ATTACK}/x/r.md", cwd=tmp_path
    )
    assert code == 2 and shown.decode().count("\n") == 1 and raw_controls(shown) == [], shown


def test_every_renderer_escapes_every_field_even_past_the_schema(base_session):
    """Defence in depth: a record that skipped the schema (made in memory), with the attack in
    every free field the renderers read: no format shows it raw."""
    session = json.loads(record.path(base_session).read_text())
    session["events"][0]["snapshot"] = f"001-{ATTACK}"
    session["events"][2].update(item=ATTACK, step=ATTACK)
    session["events"] += [
        {"t": 200.0, "kind": "solution", "item": ATTACK},
        {"t": 201.0, "kind": "refused", "what": ATTACK, "item": ATTACK},
    ]
    session["final"]["similarity"] = [{"solution": ATTACK, "fraction": 0.5}]
    session["final"]["items"][0]["id"] = ATTACK
    terminal = "\n".join(
        [*review.lines(session, base_session), *review.replay_lines(session, base_session)]
    )
    page = review.markdown(session, base_session)
    assert raw_controls(terminal) == [] and terminal.count("\\x1b[2J") >= 6
    assert raw_controls(page) == [] and live_markup(page) == [], live_markup(page)
    assert all(raw_controls(text) == [] for text in strings(review.to_json(session, base_session)))


def test_the_pngs_labels_are_printable_and_no_mathtext():
    assert review._png_label("L6 $\\x$ \x1b[2J\u202e") == "L6 \\$\\x\\$ \\x1b[2J\\u202e"


# --- the snapshots against their names, without --verify ------------------------------------


def test_a_snapshot_whose_files_do_not_match_its_name_is_named_without_verify(session_copy, staged):
    shown_first = kata("interview", "report", "ws", cwd=session_copy.parent)[1].decode()
    assert shown_first.splitlines()[0].startswith("This report shows the record as written")
    assert "EDITED" not in shown_first
    second = verbs.load(session_copy)["events"][3]["snapshot"]
    (record.folder(session_copy) / second / "kv_cache.py").write_text(REFERENCE.read_text())
    actual = record.content_hash(
        REFERENCE.read_bytes(),
        (record.folder(session_copy) / second / "test_kv_cache.py").read_bytes(),
    )
    code, shown = kata(
        "interview",
        "report",
        "ws",
        "--markdown",
        "r.md",
        "--json",
        "r.json",
        cwd=session_copy.parent,
    )
    lines = shown.decode().splitlines()
    assert code == 0 and lines[0].startswith("This report shows the record as written")
    assert lines[1] == (
        f"EDITED: 1 snapshot(s) do not match their names: snapshot {second}'s "
        f"files do not match its name: they hash to {actual}."
    )
    assert sum(f"EDITED: snapshot {second}'s files" in line for line in lines) == 2  # save, final
    page = (session_copy.parent / "r.md").read_text()
    assert page.startswith("**This report shows the record as written") and "EDITED: 1 snap" in page
    checked = json.loads((session_copy.parent / "r.json").read_text())["checked"]
    assert checked["verified"] is False and checked["edited"] is True
    assert [s["matches"] for s in checked["snapshots"]] == [True, False]
    replayed = kata("interview", "replay", "ws", cwd=session_copy.parent)[1].decode()
    assert replayed.splitlines()[1].startswith("EDITED: 1 snapshot(s)")
    shutil.rmtree(record.folder(session_copy) / second)
    code, shown = kata("interview", "replay", "ws", cwd=session_copy.parent)
    assert code == 0 and f"snapshot {second} is missing (the record names it)" in shown.decode()


# --- --verify, graded by the stand-in ----------------------------------------------------------


def test_verify_sets_each_claim_beside_its_grade(session_copy, staged_verify):
    honest = verify.verify(verbs.load(session_copy), session_copy, verbs.default_sandbox())
    assert not honest.edited and honest.verified and honest.unchecked == 0
    assert [c.verdict for c in honest.saves] == ["agrees", "agrees"]
    assert [c.stage for c in honest.saves] == ["L4", "L5"]
    assert honest.stages.verdict == honest.final.verdict == "agrees"
    assert review.lines(verbs.load(session_copy), session_copy, honest)[0].startswith("Verified:")
    EDIT(session_copy, REFERENCE)
    session = verbs.load(session_copy)
    edited = verify.verify(session, session_copy, verbs.default_sandbox())
    assert edited.edited and edited.disagreeing == 4  # both saves, the stages, the final
    assert edited.saves[0].differences[0] == "level L4, not L6"
    assert [s.matches for s in edited.snapshots] == [True, False]
    lines = review.lines(session, session_copy, edited)
    assert lines[0].startswith(
        "EDITED: this record is not what its snapshots grade: 4 claim(s) "
        "disagree with the grades and 1 snapshot(s) do not match"
    )
    assert "Hints asked (the record's word): none" in lines  # deleted: no grade can tell
    assert any(
        line.startswith(
            "The record's word (no grade checks it): the time of every event, the hints"
        )
        for line in lines
    )
    final = next(line for line in lines if line.startswith("Final grade"))
    assert "L6, 100/100 points | graded again: below L4, 0 points: DISAGREES" in final
    assert "  L6       1m 00s   DISAGREES: graded again, never" in lines
    page = review.markdown(session, session_copy, edited)
    assert page.startswith("**EDITED: this record is not what its snapshots grade")
    assert page.count("DISAGREES") >= 3
    checked = review.to_json(session, session_copy, edited)["checked"]
    assert (
        checked["verified"]
        and checked["edited"]
        and [s["check"] for s in checked["saves"]] == ["disagrees", "disagrees"]
        and checked["final"]["check"] == "disagrees"
    )


def test_a_record_whose_stages_were_edited_disagrees(session_copy, staged_verify):
    edit_record(session_copy, lambda data: data["events"].pop(1))  # L5 never opened, it says
    checked = verify.verify(verbs.load(session_copy), session_copy, verbs.default_sandbox())
    assert checked.stages.verdict == "disagrees"
    assert checked.stages.claimed == ((2, "L6"),) and checked.stages.graded == (
        (1, "L5"),
        (2, "L6"),
    )
    assert checked.edited


def test_an_item_the_grade_could_not_judge_leaves_its_claim_unchecked(
    session_copy, staged_verify, monkeypatch
):
    def timing_out(request, on_item=None):
        result = staged_grade(request)
        return replace(
            result, items=[replace(result.items[0], status="timeout"), *result.items[1:]]
        )

    stand_in(monkeypatch, timing_out)
    checked = verify.verify(verbs.load(session_copy), session_copy, verbs.default_sandbox())
    assert [c.verdict for c in checked.saves] == ["unchecked", "unchecked"]
    assert not checked.edited and checked.unchecked >= 2
    assert (
        "claim(s) could not be checked"
        in review.verdict_lines(verbs.load(session_copy), checked)[1]
    )


def test_report_and_replay_verify_through_the_cli(session_copy, staged_verify):
    EDIT(session_copy, REFERENCE)
    code, shown = kata(
        "interview", "replay", "ws", "--verify", "--sandbox", "auto", cwd=session_copy.parent
    )
    lines = shown.decode().splitlines()
    assert code == 0 and lines[0].startswith("--verify: grading 3 snapshot(s) again")
    assert lines[1].startswith("EDITED: this record is not what its snapshots grade")
    assert sum("graded again at stage" in line and "DISAGREES" in line for line in lines) == 2
    code, shown = kata(
        "interview",
        "report",
        "ws",
        "--verify",
        "--sandbox",
        "auto",
        "--json",
        "r.json",
        cwd=session_copy.parent,
    )
    checked = json.loads((session_copy.parent / "r.json").read_text())["checked"]
    assert code == 0 and checked["verified"] and checked["edited"]


def test_verify_grades_a_strangers_files_only_in_bubblewrap_unless_told(
    session_copy, staged, monkeypatch
):
    monkeypatch.setattr("graders.judge.isolation.bwrap_problem", lambda: "no bwrap here")
    code, shown = kata("interview", "report", "ws", "--verify", cwd=session_copy.parent)
    assert code == 2 and shown.decode().count("\n") == 1  # refused before anything runs
    assert "accept the process fallback with --sandbox process" in shown.decode()
    code, shown = kata("interview", "report", "ws", "--sandbox", "process", cwd=session_copy.parent)
    assert code == 2 and "not without --verify" in shown.decode()


# --- answers.md in any encoding ----------------------------------------------------------------


def test_an_answers_md_that_is_not_utf8_is_data_at_the_save_that_opens_L5(tmp_path, staged):
    ws = tmp_path / "ws"
    verbs.start(ws)  # on the real clock: the CLI's save reads it
    hostile = (HOSTILE / "interview_answers_not_utf8.md").read_bytes()
    (ws / "answers.md").write_bytes(hostile)
    write_level(ws, "L4")
    code, shown = kata("interview", "save", "ws", cwd=tmp_path)
    text = shown.decode()
    assert code == 0 and "L4, 10 points, 2 of 2 items pass" in text, text
    assert "stage L5 opens" in text and " ".join(STAGE_PROMPTS["L5"].split()[:6]) in text
    written = (ws / "answers.md").read_bytes()
    assert written.startswith(hostile.rstrip(b"\n"))  # the candidate's bytes, untouched
    assert re.findall(rb"^## (\S+)$", written, re.M) == [
        b"why-only-kv",
        b"no-future-mask",
        b"total-still-quadratic",
        b"cache-ownership",
    ]
    assert verbs.load(ws)["stage"] == "L5"
    code, shown = kata("interview", "report", "ws", cwd=tmp_path)
    assert code == 0 and raw_controls(shown) == []
    assert (
        "Q is used once \\xff\\xfe and never again: caf\\xe9 (latin-1), \\x1b[2J" in shown.decode()
    )
