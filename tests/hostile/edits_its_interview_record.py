"""A candidate's hand edit of a session folder they send in (issue 40): every save of the record
claims L6 with every item passing, the final grade claims 100/100 at L6, the hint asked is
deleted, and the last snapshot's kv_cache.py is swapped for the reference solution (its folder
keeps its name). Nothing here is the kata's: the record's format is public (contract section 7).
tests/test_interview_verify.py and tests/test_interview_record.py apply it with `edit`."""

import json
from pathlib import Path


def edit(workspace: Path, reference: Path) -> None:
    path = workspace / ".kata" / "session.json"
    record = json.loads(path.read_text())
    final = record["final"]
    every_item = [item["id"] for item in final["items"]]
    for event in record["events"]:
        if event["kind"] == "save":
            event.update(level="L6", score=100.0, passing=every_item)
    record["events"] = [e for e in record["events"] if e["kind"] != "hint"]
    for item in final["items"]:
        item.update(status="pass", points=item["max_points"], message="passed")
    for tell in final["tells"]:
        tell.update(detected=False)
    final.update(level="L6", score=100.0, max_score=100.0)
    last = [e for e in record["events"] if e["kind"] == "save"][-1]["snapshot"]
    (workspace / ".kata" / last / "kv_cache.py").write_bytes(reference.read_bytes())
    path.write_text(json.dumps(record, indent=2) + "\n")
