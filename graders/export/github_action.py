"""`kata export github-action DIR`: a GitHub Actions workflow that grades a candidate's or
student's repository on every push, as GitHub Classroom's autograding does.

The workflow (WORKFLOW, in DIR/.github/workflows/) installs torch's CPU build and the kata by
name, runs `kata grade` on the track's file at the repository's root, and publishes the
interviewer scorecard (Markdown) as the job's summary and the JSON and JUnit reports as an
artifact, even when the grade fails. Public cases only: it never runs --hidden, and nothing of
an interviewer's private graders goes into the repository.
"""

from __future__ import annotations

from pathlib import Path

from graders.shared.output_files import make_folder, write_atomically
from graders.shared.tracks import Track

WORKFLOW = Path(".github") / "workflows" / "kata.yml"
INSTALL_STEP = "Install the kata"  # the one step that needs the network
REPORTS = ("kata-report.json", "kata-junit.xml", "kata-summary.md")

TEMPLATE = """\
# Written by `kata export github-action`: grade @FILE@ on every push, with the public cases only
# (the hidden graders never go into this repository). The scorecard is the job's summary; the
# JSON and JUnit reports are the artifact kata-report.
name: kata grade
on:
  push:
  pull_request:
  workflow_dispatch:
permissions:
  contents: read
jobs:
  grade:
    runs-on: ubuntu-24.04
    timeout-minutes: 20
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with:
          python-version: "3.12"
      - name: @INSTALL@
        run: |
          python -m pip install "torch==@TORCH@" --index-url https://download.pytorch.org/whl/cpu
          python -m pip install "@PACKAGE@"
      - name: Grade @FILE@
        run: kata grade @FILE@ --track @TRACK@ --json @JSON@ --junit @JUNIT@ --markdown @SUMMARY@
      - name: Job summary
        if: always()
        run: |
          if [ -f @SUMMARY@ ]; then
            cat @SUMMARY@ >> "$GITHUB_STEP_SUMMARY"
          else
            echo "No report: the grade did not run (see its log)." >> "$GITHUB_STEP_SUMMARY"
          fi
      - name: Upload the reports
        if: always()
        uses: actions/upload-artifact@v4
        with:
          name: kata-report
          path: |
            @JSON@
            @JUNIT@
            @SUMMARY@
          if-no-files-found: warn
"""


def workflow(track: Track, torch: str, package: str) -> str:
    """The workflow's YAML for `track`, installing `torch` (a version) and `package` (a pip
    requirement: kvkata==VERSION, or a URL)."""
    report, junit, summary = REPORTS
    return (
        TEMPLATE.replace("@FILE@", track.implementation)
        .replace("@TRACK@", track.id)
        .replace("@INSTALL@", INSTALL_STEP)
        .replace("@TORCH@", torch)
        .replace("@PACKAGE@", package)
        .replace("@JSON@", report)
        .replace("@JUNIT@", junit)
        .replace("@SUMMARY@", summary)
    )


def export(directory: Path, track: Track, torch: str, package: str) -> Path:
    """Write the workflow into the repository `directory`; its path."""
    path = directory / WORKFLOW
    make_folder(path.parent)
    write_atomically(path, workflow(track, torch, package))
    return path
