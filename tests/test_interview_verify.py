"""`kata interview report --verify`, graded for real (issue 40): a session recorded by the kata
agrees with every grade of its snapshots; the same session edited by hand
(tests/hostile/edits_its_interview_record.py: every save L6, the final 100/100, the hint
deleted, the last snapshot's file swapped for the reference) is named as edited in the terminal,
the Markdown and the JSON, and its swapped snapshot is named even without --verify.

One session is recorded for the module (three saves, a hint, the end) and verified twice: as
recorded, in the suite's warm process fallback, and edited, through the CLI in the sandbox
--verify requires by default (bubblewrap).
"""

from __future__ import annotations

import json
import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graders.interview import session as verbs, verify
from graders.judge.isolation import Sandbox, bwrap_problem
from graders.shared import transformers_extra
from graders.shared.mutation import REFERENCE
from tests.test_interview import Clock, wrong_file
from tests.test_interview_record import live_markup, raw_controls

pytestmark = pytest.mark.slow  # a session and two verifications, graded for real

ROOT = Path(__file__).resolve().parent.parent
EDIT = runpy.run_path(str(ROOT / "tests" / "hostile" / "edits_its_interview_record.py"))["edit"]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A session as the kata records it: an L4 file (opens L5), an L5 file with a wrong GQA and
    the reference tests (opens L6), a hint, the same files again at L6, the end."""
    clock, ws = Clock(), tmp_path_factory.mktemp("recorded") / "ws"
    verbs.start(ws, clock=clock)
    (ws / "kv_cache.py").write_text(wrong_file("reset-rewinds-lengths"))
    clock.advance(300)
    verbs.save(ws, clock=clock)
    (ws / "kv_cache.py").write_text(wrong_file("gqa-head-mapping-modulo"))
    shutil.copy(ROOT / "solutions" / "test_kv_cache.py", ws / "test_kv_cache.py")
    clock.advance(600)
    verbs.save(ws, clock=clock)
    clock.advance(60)
    verbs.hint(ws, "gqa", 1, clock=clock)
    clock.advance(60)
    verbs.save(ws, clock=clock)  # the same files, graded with L6's items
    clock.advance(60)
    verbs.end(ws, clock=clock)
    return ws


def test_a_recorded_session_agrees_with_every_grade_of_its_snapshots(recorded, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(recorded, ws)
    session = verbs.load(ws)
    assert [e["level"] for e in session["events"] if e["kind"] == "save"] == ["L4", "L5", "L5"]
    assert session["final"]["level"] == "L5"
    checked = verify.verify(session, ws, Sandbox(mode="auto"))
    assert [c.verdict for c in checked.saves] == ["agrees"] * 3, checked.saves
    assert [c.stage for c in checked.saves] == ["L4", "L5", "L6"]
    assert checked.stages.verdict == "agrees" and checked.final.verdict == "agrees", checked.final
    assert not checked.edited and checked.unchecked == 0


@pytest.mark.skipif(
    bwrap_problem() is not None,
    reason="--verify's default sandbox is bubblewrap, which cannot run here",
)
def test_a_hand_edited_session_is_named_edited_in_every_format(recorded, tmp_path):
    ws = tmp_path / "ws"
    shutil.copytree(recorded, ws)
    EDIT(ws, REFERENCE)
    last = [e for e in verbs.load(ws)["events"] if e["kind"] == "save"][-1]["snapshot"]

    def kata(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "cli.py"), "interview", *args],
            cwd=tmp_path,
            capture_output=True,
            timeout=600,
            env={**os.environ, "COLUMNS": "1000"},
        )  # a line each: no wrap

    plain = kata("report", "ws")
    lines = plain.stdout.decode().splitlines()
    assert plain.returncode == 0 and lines[0].startswith("This report shows the record as written")
    assert lines[1].startswith(f"EDITED: 1 snapshot(s) do not match their names: snapshot {last}'s")
    assert "Final grade (--hidden, seed " in plain.stdout.decode()  # shown, as written

    done = kata("report", "ws", "--verify", "--markdown", "r.md", "--json", "r.json")
    assert done.returncode == 0 and done.stderr == b"", done.stderr.decode()
    assert raw_controls(done.stdout) == []
    lines = done.stdout.decode().splitlines()
    # The swapped reference grades L6, 100 at stage L6, and L6+ in the final where the real-model
    # item can run: the edit's "every item passes" then also claims the L6+ items at save 3, the
    # stages miss the L6+ opening, and the final claims L6.
    plus = transformers_extra.problem() is None
    assert lines[1].startswith(
        f"EDITED: this record is not what its snapshots grade: {5 if plus else 4} claim(s) "
        "disagree with the grades and 1 snapshot(s) do not match"
    ), lines
    saves = [line for line in lines if line.startswith("  0")]
    assert [("DISAGREES" in line, "EDITED: snapshot" in line) for line in saves] == [
        (True, False),
        (True, False),
        (True, True),
    ]
    assert "graded again at stage L6: L6, 100 points, 19 items pass: DISAGREES" in saves[2]
    assert "graded again at stage L4: L4, 10 points, 2 items pass: DISAGREES" in saves[0]
    assert "graded again at stage L5: L5, 60 points, 12 items pass: DISAGREES" in saves[1]
    assert any(
        line.startswith(
            "Stages opened: L5 after save 1, L6 after save 2 | the grades open: L5 after save 1, "
            + (
                "L6 after save 2, L6+ after save 3: DISAGREES"
                if plus
                else "L6 after save 2: agrees"
            )
        )
        for line in lines
    )
    final = next(line for line in lines if line.startswith("Final grade"))
    # The reference swapped in grades L6, 100/100 as claimed: the swap is named by its hash,
    # and by the share of the bundled solution found in it (which other solutions' shares
    # disagree too depends on how close they are to the reference, so only its own is pinned).
    assert (
        "L6, 100/100 points | graded again: "
        + (
            "L6+, 100 points: DISAGREES (level L6+, not L6; "
            if plus
            else "L6, 100 points: DISAGREES ("
        )
        + "similarity to solutions/"
        in final
        and "solutions/kv_cache.py 100%, not " in final
    )
    assert f"EDITED: snapshot {last}'s files do not match its name" in final
    assert "Hints asked (the record's word): none" in lines
    assert any(line.startswith("The record's word (no grade checks it)") for line in lines)

    page = (tmp_path / "r.md").read_text()
    assert page.startswith("**EDITED: this record is not what its snapshots grade")
    assert page.count("DISAGREES") >= 2 and live_markup(page) == []
    report = json.loads((tmp_path / "r.json").read_text())
    checked = report["checked"]
    assert checked["verified"] and checked["edited"]
    assert [s["check"] for s in checked["saves"]] == ["disagrees"] * 3
    assert checked["final"]["check"] == "disagrees"
    assert checked["stages"]["check"] == ("disagrees" if plus else "agrees")
    assert [s["matches"] for s in checked["snapshots"]] == [True, True, False]
    assert checked["verdict"][0].startswith("EDITED")
