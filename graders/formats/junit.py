"""A grade as JUnit XML, for CI test reporters (Jenkins, GitLab, GitHub Actions).

One `<testsuites>` holding one `<testsuite name="kvkata">`: a `<properties>` block
(implementation, level -- absent for a partial run, which has none --, partial "true|false",
score, max_score, hidden, and `tell.<id>` for each detected tell), then one
`<testcase classname="kvkata.<level>" name="<id>">` per item. A pass has no child; fail is
`<failure type="fail">`, error and timeout are `<error type="error|timeout">`, not_attempted is
`<skipped>`, each with the message's first line as `message` and the whole message as text (an
item the worker could not run gives the worker's reason too). The suite counts its tests,
failures, errors and skipped. A GradeResult carries no durations, so `time` is 0.

Messages can quote the candidate's output, so characters XML 1.0 cannot hold are replaced.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

from graders import rubric as rubric_data
from graders.grade import GradeResult
from graders.output_files import write_atomically

OUTCOME = {"fail": "failure", "error": "error", "timeout": "error", "not_attempted": "skipped"}

_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def write_junit(result: GradeResult, path: Path) -> None:
    """Write `result` to `path` as JUnit XML."""
    rubric = rubric_data.load()
    kinds = [OUTCOME.get(i.status) for i in result.items]
    counts = {"name": "kvkata", "tests": str(len(kinds)), "failures": str(kinds.count("failure")),
              "errors": str(kinds.count("error"))}
    root = ET.Element("testsuites", counts, time="0")
    suite = ET.SubElement(root, "testsuite", counts, skipped=str(kinds.count("skipped")), time="0")
    properties = ET.SubElement(suite, "properties")
    level = [] if result.level is None else [("level", result.level)]
    for name, value in [("implementation", result.implementation), *level,
                        ("partial", str(result.partial).lower()),
                        ("score", f"{result.score:g}"), ("max_score", f"{result.max_score:g}"),
                        ("hidden", str(result.hidden).lower())]:
        ET.SubElement(properties, "property", name=name, value=_xml(value))
    for tell in (t for t in result.tells if t.detected):
        value = f"caps the level at {rubric.tell(tell.id).caps}: {tell.message}"
        ET.SubElement(properties, "property", name=f"tell.{tell.id}", value=_xml(value))
    for item, kind in zip(result.items, kinds):
        case = ET.SubElement(suite, "testcase", classname=f"kvkata.{item.level}", name=item.id)
        if kind:
            message = _xml(item.full_message)
            outcome = ET.SubElement(case, kind, message=(message.splitlines() or [""])[0])
            outcome.text = message
            if kind != "skipped":
                outcome.set("type", item.status)
    ET.indent(root)
    write_atomically(path, ET.tostring(root, encoding="utf-8", xml_declaration=True))


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)
