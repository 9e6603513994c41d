"""A grade as JUnit XML, for CI test reporters (Jenkins, GitLab, GitHub Actions).

One `<testsuites>` holding one `<testsuite name="kvkata">`: a `<properties>` block
(implementation, level -- absent for a partial run, which has none --, partial "true|false",
score, max_score, plus_score, plus_max_score (L6+), hidden, and `tell.<id>` for each detected
tell), then one `<testcase classname="kvkata.<level>" name="<id>">` per item (the L6+ items
only once L6+ is started: GradeResult.reported). A pass has no child; fail is
`<failure type="fail">`, not_attempted (a TODO) is `<failure type="not_attempted">` -- work not
done must not show green in a CI dashboard, as a skip does --, error and timeout are
`<error type="error|timeout">`, each with the message's first line as `message` and the whole
message as text (an item the worker could not run gives the worker's reason too). The suite
counts its tests, failures, errors and skipped (always 0). A GradeResult carries no durations,
so `time` is 0.

Messages can quote the candidate's output: each is as graders.shared.untrusted.quote shows it (escaped,
at most MAX_QUOTE characters), with only characters XML 1.0 can hold (graders.shared.untrusted.xml_text).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

from graders.judge.result import GradeResult
from graders.shared import rubric as rubric_data
from graders.shared.output_files import write_atomically
from graders.shared.untrusted import quote, xml_text

OUTCOME = {"fail": "failure", "error": "error", "timeout": "error", "not_attempted": "failure"}


def write_junit(result: GradeResult, path: Path) -> None:
    """Write `result` to `path` as JUnit XML."""
    rubric = rubric_data.load()
    items = result.reported  # L6+ not started: not a test case each
    kinds = [OUTCOME.get(i.status) for i in items]
    counts = {
        "name": "kvkata",
        "tests": str(len(kinds)),
        "failures": str(kinds.count("failure")),
        "errors": str(kinds.count("error")),
    }
    root = ET.Element("testsuites", counts, time="0")
    suite = ET.SubElement(root, "testsuite", counts, skipped="0", time="0")
    properties = ET.SubElement(suite, "properties")
    level = [] if result.level is None else [("level", result.level)]
    for name, value in [
        ("implementation", result.implementation),
        *level,
        ("partial", str(result.partial).lower()),
        ("score", f"{result.score:g}"),
        ("max_score", f"{result.max_score:g}"),
        ("plus_score", f"{result.plus_score:g}"),
        ("plus_max_score", f"{result.plus_max_score:g}"),
        ("hidden", str(result.hidden).lower()),
    ]:
        ET.SubElement(properties, "property", name=name, value=xml_text(value))
    for tell in (t for t in result.tells if t.detected):
        value = f"caps the level at {rubric.tell(tell.id).caps}: {quote(tell.message)}"
        ET.SubElement(properties, "property", name=f"tell.{tell.id}", value=xml_text(value))
    for item, kind in zip(items, kinds):
        case = ET.SubElement(suite, "testcase", classname=f"kvkata.{item.level}", name=item.id)
        if kind:
            message = xml_text(quote(item.full_message))
            outcome = ET.SubElement(
                case, kind, message=(message.splitlines() or [""])[0], type=item.status
            )
            outcome.text = message
    ET.indent(root)
    write_atomically(path, ET.tostring(root, encoding="utf-8", xml_declaration=True))
