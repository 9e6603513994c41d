"""An interviewer's run grades a stranger's file: `kata grade --hidden` and `kata grade-all`
require bubblewrap unless told `--sandbox process`, and a candidate's plain `kata grade` of
their own file keeps `auto` (docs/decisions.md, "Interviewers' runs require bubblewrap").

Without bubblewrap the refusal is one line, exit 2, that names the package and the option, and
comes before the stranger's file runs (tests/hostile/leaves_a_mark.py writes into the judge's
folder when it runs). A grade in the process fallback says what the fallback does not stop in
its scorecard, and in its report when hidden. The in-process tests take bubblewrap away by
graders.judge.isolation.bwrap_problem; the slow one runs `kata` with bwrap off its PATH.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli import app
from graders.judge.isolation import (
    PROCESS_FALLBACK_GAPS,
    PROCESS_FALLBACK_NOTE,
    worker_user_problem,
)

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()

REFUSAL = (
    "kata: error: bubblewrap cannot run here (bwrap is not installed), and an "
    "interviewer's run (--hidden, grade-all) grades a candidate's file only in its "
    "sandbox: install it (apt-get install bubblewrap), or accept the process fallback "
    f"with --sandbox process ({PROCESS_FALLBACK_GAPS})"
)
# Whether the process fallback runs the file as the judge's own user, which lets it write the
# judge's folder; run as a user of its own (a root judge), it cannot.
RUNS_AS_THE_JUDGE = worker_user_problem() is not None
INTERVIEWERS_RUNS = {
    "grade --hidden": ["grade", "in/alice/kv_cache.py", "--hidden", "--item", "attend-shape"],
    "grade-all": ["grade-all", "in", "--out", "out"],
}


@pytest.fixture
def stranger(tmp_path, monkeypatch, hostile_file) -> Path:
    """The folder the commands run in, holding in/alice/kv_cache.py, a stranger's file that
    leaves tmp_path/mark when it runs; returns the mark's path. No bubblewrap here."""
    monkeypatch.setattr("graders.judge.isolation.bwrap_problem", lambda: "bwrap is not installed")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in" / "alice").mkdir(parents=True)
    mark = tmp_path / "mark"
    written = hostile_file("leaves_a_mark", MARK=mark)
    written.rename(tmp_path / "in" / "alice" / "kv_cache.py")
    return mark


def squeezed(text: str) -> str:
    """`text` with every run of whitespace one space (the terminal wraps long lines)."""
    return " ".join(text.split())


@pytest.mark.parametrize("command", list(INTERVIEWERS_RUNS), ids=list(INTERVIEWERS_RUNS))
def test_without_bubblewrap_an_interviewers_run_refuses_before_the_file_runs(command, stranger):
    result = runner.invoke(app, INTERVIEWERS_RUNS[command])
    assert result.exit_code == 2, result.output
    (line,) = result.output.strip().splitlines()
    assert line.startswith(REFUSAL), line
    assert not stranger.exists(), "the stranger's file ran"
    assert not list(stranger.parent.glob("out/summary.*")), "a refused batch wrote summaries"


@pytest.mark.slow
def test_told_sandbox_process_grade_hidden_runs_and_says_what_the_fallback_does_not_stop(stranger):
    result = runner.invoke(
        app,
        [
            *INTERVIEWERS_RUNS["grade --hidden"],
            "--sandbox",
            "process",
            "--json",
            "r.json",
            "--markdown",
            "card.md",
        ],
    )
    assert result.exit_code == 0, result.output
    graded = json.loads(Path("r.json").read_text())
    assert graded["isolation"] == "process" and graded["hidden"] is True
    assert stranger.exists() == RUNS_AS_THE_JUDGE, "where the fallback lets the file write"
    assert PROCESS_FALLBACK_NOTE in squeezed(result.output)
    assert f"> {PROCESS_FALLBACK_NOTE}" in Path("card.md").read_text().splitlines()


@pytest.mark.slow
def test_told_sandbox_process_grade_all_runs(stranger):
    result = runner.invoke(app, [*INTERVIEWERS_RUNS["grade-all"], "--sandbox", "process"])
    assert result.exit_code == 0, result.output
    assert "alice" in Path("out/summary.csv").read_text()
    assert stranger.exists() == RUNS_AS_THE_JUDGE


def test_a_candidates_own_grade_keeps_auto_and_only_its_scorecard_names_the_fallbacks_gaps(
    stranger,
):
    """The terminal's report of a candidate's own grade keeps its closing line (isolation:
    process); a scorecard is an interviewer's page, and says what the fallback let through."""
    result = runner.invoke(
        app,
        [
            "grade",
            "in/alice/kv_cache.py",
            "--item",
            "attend-shape",
            "--json",
            "r.json",
            "--markdown",
            "card.md",
        ],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(Path("r.json").read_text())["isolation"] == "process"
    assert "isolation: process" in result.output
    assert PROCESS_FALLBACK_NOTE not in squeezed(result.output)
    assert f"> {PROCESS_FALLBACK_NOTE}" in Path("card.md").read_text().splitlines()


def test_told_sandbox_require_the_refusal_is_the_options_own(stranger):
    result = runner.invoke(app, ["grade", "in/alice/kv_cache.py", "--sandbox", "require"])
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "kata: error: --sandbox require: bubblewrap cannot run here (bwrap is not installed); "
        "install the 'bubblewrap' package (apt-get install bubblewrap)"
    )
    assert not stranger.exists()


@pytest.fixture
def path_without_bwrap(tmp_path) -> str:
    """PATH with every folder that holds a `bwrap` replaced by a folder of links to all the
    rest of it: graders.judge.isolation finds bwrap with shutil.which, as a shell would."""
    folders = []
    for number, folder in enumerate(os.environ["PATH"].split(os.pathsep)):
        if not os.path.exists(os.path.join(folder, "bwrap")):
            folders.append(folder)
            continue
        links = tmp_path / f"path-{number}"
        links.mkdir()
        for entry in os.scandir(folder):
            if entry.name != "bwrap":
                (links / entry.name).symlink_to(entry.path)
        folders.append(str(links))
    return os.pathsep.join(folders)


@pytest.mark.slow
@pytest.mark.parametrize("command", list(INTERVIEWERS_RUNS), ids=list(INTERVIEWERS_RUNS))
def test_kata_without_bwrap_on_its_path_refuses_an_interviewers_run(
    command, stranger, path_without_bwrap
):
    done = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), *INTERVIEWERS_RUNS[command]],
        env=dict(os.environ, PATH=path_without_bwrap),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("kata")] == [
        line for line in done.stderr.splitlines() if line.strip()
    ], done.stderr
    assert done.stderr.startswith(REFUSAL), done.stderr
    assert not stranger.exists(), "the stranger's file ran"
