"""What a grade shows: the terminal report, the scorecard, Gradescope and JUnit outputs.

The scorecard, Gradescope and JUnit outputs follow their formats: the allowed keys and elements
below are written down from the formats' own specifications: Gradescope's "Autograder
Specifications" (results.json) and the Jenkins xunit plugin's JUnit schema (junit-10.xsd), the
one the common CI reporters read. Every output says what happened: a partial run shows no level,
a cap shows only when it lowered the level, a tell no item looked for is "not checked", and a
file that does not import is reported once.
"""

from __future__ import annotations

import dataclasses
import html
import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from graders.formats.causes import cause_of, evidence
from graders.formats.gradescope import to_gradescope, write_gradescope
from graders.formats.junit import write_junit
from graders.formats.report import partial_verdict, render, to_json
from graders.formats.scorecard import PASS_REASON_CHARS, write_markdown
from graders.judge.result import GradeResult, ItemResult, TellResult, level as level_of
from tests.grading import grade
from graders.shared.plans import Fail, tensor
from graders.shared.rubric import load
from graders.shared.tracks import DENSE
from graders.shared.untrusted import quote
from graders.worker import wire

ROOT = Path(__file__).resolve().parent.parent

ITEMS = [
    ItemResult(
        "append-time-dim", "L4", "pass", 5.0, 5.0, "within 1e-05 + 1e-04*|expected| of *it*"
    ),
    ItemResult(
        "attend-shape",
        "L4",
        "fail",
        0.0,
        5.0,
        "got [B, 1, D] | wanted [B, Hq, 1, D]\nsecond line\r\nthird a\\|b `x` <b>&amp;",
    ),
    ItemResult(
        "prefix-equivalence",
        "L5",
        "error",
        0.0,
        8.0,
        "raised RuntimeError: boom\nstderr: \x00\x1b[31mred\x1b[0m",
    ),
    ItemResult("validate-shapes", "L5", "timeout", 0.0, 5.0, "did not answer in 10 s"),
    ItemResult(
        "validate-dtype-device", "L5", "pass", 4.0, 4.0, "5 mismatches raised; " + "x" * 300
    ),
    ItemResult("reset", "L5", "not_attempted", 0.0, 4.0, "reset still raises NotImplementedError"),
    ItemResult("gqa", "L6", "pass", 6.0, 6.0, "4 head layouts"),
]
TELLS = [
    TellResult("caches-q", False, "no queries found in the cache"),
    TellResult("concat-every-step", True, "append allocated <all> storage | every step"),
    TellResult(
        "shape-only-tests",
        False,
        "not checked: the item that looks for it did not run",
        checked=False,
    ),
]
NOT_IMPORTING = "the file does not import: SyntaxError: expected ':' (kv_cache.py, line 3)"


def made(hidden: bool = False, **changes) -> GradeResult:
    """A full run that reaches no level (its concat-every-step cap lowers nothing), or that
    run with `changes`."""
    result = GradeResult("candidates/kv_cache.py", "below L4", ITEMS, TELLS, hidden)
    return dataclasses.replace(result, **changes)


def not_importing() -> GradeResult:
    """A grade whose worker could not import the file: every item not run, no tell checked."""
    items = [
        dataclasses.replace(
            i,
            status="error",
            points=0.0,
            message="not run: the file does not import",
            unavailable=NOT_IMPORTING,
        )
        for i in ITEMS
    ]
    tells = [
        TellResult(
            t.id, False, "not checked: the item that looks for it did not run", checked=False
        )
        for t in TELLS
    ]
    return made(items=items, tells=tells)


def terminal(result: GradeResult, detail: str = "default") -> str:
    console = Console(width=80, file=io.StringIO(), record=True)
    render(result, console, detail)
    return console.export_text()


def shown(result: GradeResult, tmp_path: Path) -> dict[str, str]:
    """The text of each output people read: the terminal report, the scorecard, and the top of
    Gradescope's results."""
    write_markdown(result, tmp_path / "scorecard.md")
    return {
        "report": terminal(result),
        "scorecard": (tmp_path / "scorecard.md").read_text(),
        "gradescope": to_gradescope(result)["output"],
    }


# --- Markdown scorecard -------------------------------------------------------------------------


def cells(row: str) -> list[str]:
    """A GFM table row's cells: split at pipes that no backslash escapes."""
    parts, current, chars = [], "", iter(row.strip())
    for ch in chars:
        if ch == "\\":
            current += ch + next(chars, "")
        elif ch == "|":
            parts.append(current)
            current = ""
        else:
            current += ch
    parts.append(current)
    return [p.strip() for p in parts[1:-1]]


def rendered(cell: str) -> str:
    """What Markdown shows for an escaped cell of the kata's own text."""
    return html.unescape(re.sub(r"\\(.)", r"\1", cell))


def code_spans(markdown: str) -> tuple[str, list[str]]:
    """(`markdown` with each code span replaced by a NUL, the spans' contents as shown): a span
    runs from a run of backticks to the next run of the same length (CommonMark 6.1), and
    shows its content less one space at each end when both ends have one."""
    outside, spans, at = [], [], 0
    while at < len(markdown):
        fence = re.match(r"`+", markdown[at:])
        if not fence:
            outside.append(markdown[at])
            at += 1
            continue
        end = re.compile(f"(?<!`){fence.group()}(?!`)").search(markdown, at + len(fence.group()))
        if end is None:
            outside.append(fence.group())
            at += len(fence.group())
            continue
        body = markdown[at + len(fence.group()) : end.start()]
        spans.append(body[1:-1] if body.startswith(" ") and body.endswith(" ") else body)
        outside.append("\0")
        at = end.end()
    return "".join(outside), spans


def quoted(cell: str) -> str:
    """What Markdown shows for a cell of quoted text: code spans joined by <br> (read as a
    newline), `\\|` shown as `|` (GFM unescapes it before it reads the spans); anything of the
    cell outside the spans and the <br>s fails."""
    outside, spans = code_spans(cell)
    assert outside.replace("\0", "").replace("<br>", "") == "", cell
    return "\n".join(span.replace("\\|", "|") for span in spans)


def reasons(scorecard: str) -> list[str]:
    """The reason column of every item row, as Markdown shows it."""
    return [quoted(cells(line)[4]) for line in scorecard.splitlines() if line.startswith("| `")]


@pytest.fixture
def scorecard(tmp_path) -> str:
    path = tmp_path / "scorecard.md"
    write_markdown(made(hidden=False), path)
    return path.read_text()


def test_scorecard_names_the_implementation_level_and_score(scorecard):
    title = scorecard.splitlines()[0]
    assert title.startswith("# ") and "candidates/kv_cache.py" in title
    assert re.search(r"\d{4}-\d{2}-\d{2}", scorecard)
    assert "**Level reached: below L4**" in scorecard and "score 15/37" in scorecard


def test_scorecard_tables_keep_one_row_per_item_whatever_the_message(scorecard):
    lines = scorecard.splitlines()
    rows = [line for line in lines if line.startswith("|")]
    assert all(len(cells(row)) == 5 for row in rows), rows
    body = {cells(row)[0].strip("`"): cells(row) for row in rows if row.startswith("| `")}
    assert list(body) == [i.id for i in ITEMS]
    lead_of = cause_of(made(hidden=False))
    for item in ITEMS:
        shown = quoted(body[item.id][4])
        lead = lead_of.get(item.id, item.id)
        said = (
            item.message
            if lead == item.id  # under another cause: what it saw
            else f"under {lead}: {evidence(item.message)}"
        )
        if len(item.message) > PASS_REASON_CHARS and item.status == "pass":
            assert len(shown) == PASS_REASON_CHARS and shown.endswith("…")
        else:  # a pipe after an odd run of backslashes shows one more (markdown_code)
            assert shown == quote(said).replace("a\\|b", "a\\\\|b")
        assert body[item.id][3] == f"{item.points:g}/{item.max_points:g}"
        assert rendered(body[item.id][1]) == load().item(item.id).title
    for level in ("L4", "L5", "L6"):
        assert any(line.startswith(f"## {level} ") for line in lines)


def test_scorecard_holds_no_control_characters(scorecard):
    assert not re.search(r"[\x00-\x09\x0b-\x1f\x7f]", scorecard)


def test_scorecard_lists_detected_tells_first_with_their_cap(scorecard):
    detected, clear = scorecard.index("`concat-every-step`"), scorecard.index("`caches-q`")
    assert detected < clear < scorecard.index("not checked `shape-only-tests`")
    assert "DETECTED** `concat-every-step`" in scorecard and "caps the level at L5" in scorecard
    assert "`append allocated <all> storage \\| every step`" in scorecard


def test_scorecard_has_every_interviewer_prompt_and_a_decision_line_to_fill(scorecard):
    for item in load().interviewer:
        listed = f"- [ ] {item.prompt} — notes: ____" in scorecard
        assert listed == (item.level != "batching"), item.id  # the batching track's are its own
    decision = [line for line in scorecard.splitlines() if line.startswith("**Decision:**")]
    assert len(decision) == 1
    for blank in ("hire / no hire: ___", "level: ___", "interviewer: ___", "date: ___"):
        assert blank in decision[0]


# --- Gradescope results.json --------------------------------------------------------------------

VISIBILITIES = {"hidden", "after_due_date", "after_published", "visible"}
TOP_KEYS = {
    "score",
    "execution_time",
    "output",
    "output_format",
    "test_output_format",
    "test_name_format",
    "visibility",
    "stdout_visibility",
    "extra_data",
    "tests",
    "leaderboard",
}
TEST_KEYS = {
    "score",
    "max_score",
    "status",
    "name",
    "name_format",
    "number",
    "output",
    "output_format",
    "tags",
    "visibility",
    "extra_data",
}
NUMBER = (int, float)
TOP_REQUIRED = {
    "score": NUMBER,
    "output": str,
    "visibility": str,
    "stdout_visibility": str,
    "extra_data": dict,
    "tests": list,
}
TEST_REQUIRED = {
    "name": str,
    "number": str,
    "score": NUMBER,
    "max_score": NUMBER,
    "status": str,
    "output": str,
    "visibility": str,
    "tags": list,
}


def gradescope_errors(results: dict) -> list[str]:
    """What in `results` the spec does not allow, or what this kata promises and is missing."""
    errors = [f"unknown key {k}" for k in set(results) - TOP_KEYS]
    errors += _typed(results, TOP_REQUIRED, "top")
    for key in ("visibility", "stdout_visibility"):
        if results.get(key) not in VISIBILITIES:
            errors.append(f"{key}: {results.get(key)!r}")
    for n, test in enumerate(results.get("tests", [])):
        errors += [f"test {n}: unknown key {k}" for k in set(test) - TEST_KEYS]
        errors += _typed(test, TEST_REQUIRED, f"test {n}")
        if test.get("status") not in {"passed", "failed"}:
            errors.append(f"test {n}: status {test.get('status')!r}")
        if test.get("visibility") not in VISIBILITIES:
            errors.append(f"test {n}: visibility {test.get('visibility')!r}")
        if not all(isinstance(tag, str) for tag in test.get("tags", [])):
            errors.append(f"test {n}: tags must be strings")
    return errors


def _typed(obj: dict, required: dict, where: str) -> list[str]:
    return [
        f"{where}: {key} missing or not {kind}"
        for key, kind in required.items()
        if not isinstance(obj.get(key), kind) or isinstance(obj.get(key), bool)
    ]


@pytest.mark.parametrize("hidden", [False, True])
def test_gradescope_results_follow_the_spec(hidden):
    results = json.loads(json.dumps(to_gradescope(made(hidden))))
    assert gradescope_errors(results) == []
    assert sum(t["score"] for t in results["tests"]) == results["score"] == 15.0
    assert (
        sum(t["max_score"] for t in results["tests"]) == results["extra_data"]["max_score"] == 37.0
    )
    assert results["visibility"] == "visible" and results["stdout_visibility"] == "hidden"
    expected = "after_published" if hidden else "visible"
    assert {t["visibility"] for t in results["tests"]} == {expected}


def test_gradescope_tests_name_number_and_explain_each_item():
    rubric = load()
    results = to_gradescope(made(hidden=False))
    assert "below L4" in results["output"] and "concat-every-step" in results["output"]
    numbers = [int(t["number"]) for t in results["tests"]]
    assert numbers == sorted(set(numbers))
    for item, test in zip(ITEMS, results["tests"]):
        info = rubric.item(item.id)
        assert test["name"] == f"{item.level} {item.id}: {info.title}"
        assert test["tags"] == [item.level]
        assert test["status"] == ("passed" if item.status == "pass" else "failed")
        lead = cause_of(made(hidden=False)).get(item.id)
        if lead is None:
            assert test["output"] == quote(item.message)
        else:  # the cause in one line, then what the item saw
            cause, message = test["output"].split("\n\n", 1)
            assert cause.startswith(f"Cause: {'this item' if lead == item.id else lead}")
            assert "\n" not in cause
            assert message.startswith(
                quote(item.message if lead == item.id else evidence(item.message))
            )
        assert (info.hints[0] in test["output"]) == (lead == item.id), "the lead's hint only"


# --- JUnit XML ----------------------------------------------------------------------------------

# Jenkins xunit plugin, junit-10.xsd: each element's attributes, required ones, and children.
ATTRIBUTES = {
    "testsuites": {"name", "time", "tests", "failures", "errors"},
    "testsuite": {
        "name",
        "tests",
        "failures",
        "errors",
        "group",
        "time",
        "skipped",
        "timestamp",
        "hostname",
        "id",
        "package",
        "file",
        "log",
        "url",
    },
    "properties": set(),
    "property": {"name", "value"},
    "testcase": {"name", "time", "classname", "group"},
    "failure": {"type", "message"},
    "error": {"type", "message"},
    "skipped": {"type", "message"},
    "system-out": set(),
    "system-err": set(),
}
REQUIRED = {
    "testsuite": {"name", "tests", "failures", "errors"},
    "property": {"name", "value"},
    "testcase": {"name"},
}
CHILDREN = {
    "testsuites": {"testsuite"},
    "testsuite": {"testsuite", "properties", "testcase", "system-out", "system-err"},
    "properties": {"property"},
    "testcase": {
        "skipped",
        "error",
        "failure",
        "rerunFailure",
        "rerunError",
        "flakyFailure",
        "flakyError",
        "system-out",
        "system-err",
    },
}
SUREFIRE_TIME = re.compile(r"(([0-9]{0,3},)*[0-9]{3}|[0-9]{0,3})*(\.[0-9]*)?")


def junit_errors(root: ET.Element) -> list[str]:
    errors = [] if root.tag in ("testsuites", "testsuite") else [f"root {root.tag}"]
    for parent in root.iter():
        attrs = set(parent.attrib)
        errors += [
            f"{parent.tag}@{a} not allowed" for a in attrs - ATTRIBUTES.get(parent.tag, set())
        ]
        errors += [f"{parent.tag}@{a} missing" for a in REQUIRED.get(parent.tag, set()) - attrs]
        if "time" in attrs and not SUREFIRE_TIME.fullmatch(parent.get("time")):
            errors.append(f"{parent.tag}@time {parent.get('time')!r}")
        errors += [
            f"<{child.tag}> in <{parent.tag}>"
            for child in parent
            if child.tag not in CHILDREN.get(parent.tag, set())
        ]
    return errors


def counted(cases: list[ET.Element], kind: str) -> str:
    return str(sum(case.find(kind) is not None for case in cases))


@pytest.mark.parametrize("hidden", [False, True])
def test_junit_parses_follows_the_schema_and_counts_right(tmp_path, hidden):
    path = tmp_path / "junit.xml"
    write_junit(made(hidden), path)
    root = ET.parse(path).getroot()
    assert junit_errors(root) == []
    suites = root.findall("testsuite")
    assert root.tag == "testsuites" and len(suites) == 1 and suites[0].get("name") == "kvkata"
    cases = suites[0].findall("testcase")
    for element in (root, suites[0]):
        assert element.get("tests") == str(len(cases)) == str(len(ITEMS))
        assert element.get("failures") == counted(cases, "failure") == "2"
        assert element.get("errors") == counted(cases, "error") == "2"
    assert suites[0].get("skipped") == counted(cases, "skipped") == "0"
    props = {p.get("name"): p.get("value") for p in suites[0].iter("property")}
    assert props["implementation"] == "candidates/kv_cache.py" and props["level"] == "below L4"
    assert (props["score"], props["max_score"], props["hidden"]) == (
        "15",
        "37",
        str(hidden).lower(),
    )
    assert "tell.concat-every-step" in props and "tell.caches-q" not in props


def test_junit_testcases_map_each_status(tmp_path):
    """A TODO is a failure (type not_attempted), never a skip: the untouched starter must not
    show green in a CI dashboard."""
    path = tmp_path / "junit.xml"
    write_junit(made(hidden=False), path)
    cases = ET.parse(path).getroot().iter("testcase")
    expected = {
        "pass": None,
        "fail": ("failure", "fail"),
        "error": ("error", "error"),
        "timeout": ("error", "timeout"),
        "not_attempted": ("failure", "not_attempted"),
    }
    for item, case in zip(ITEMS, cases, strict=True):
        assert (case.get("classname"), case.get("name")) == (f"kvkata.{item.level}", item.id)
        outcome = list(case)
        if expected[item.status] is None:
            assert outcome == []
            continue
        assert [(o.tag, o.get("type")) for o in outcome] == [expected[item.status]]
        assert outcome[0].get("message") == quote(item.message).splitlines()[0]
    error = ET.parse(path).getroot().find(".//testcase[@name='prefix-equivalence']/error")
    assert error.text == "raised RuntimeError: boom\nstderr: \\x00\\x1b[31mred\\x1b[0m"


# --- what happened: partial runs, caps, tells not checked, a file that does not import ----------

PARTIAL = {"level": None, "partial": True, "items": ITEMS[:2]}


def test_a_partial_run_says_which_items_pass_and_shows_no_level(tmp_path):
    for output, text in shown(made(**PARTIAL), tmp_path).items():
        assert (
            "Partial run: item append-time-dim passes; item attend-shape does not pass" in text
        ), f"{output}:\n{text}"
        assert not re.search(r"Level( reached)?:", text), f"{output} shows a level:\n{text}"


def test_the_json_of_a_partial_run_has_a_null_level_and_says_how_it_was_isolated():
    report = to_json(made(isolation="bwrap", **PARTIAL))
    assert (report["level"], report["partial"], report["isolation"]) == (None, True, "bwrap")
    assert to_json(made())["partial"] is False


def test_junit_and_gradescope_of_a_partial_run_carry_no_level(tmp_path):
    result = made(**PARTIAL)
    write_junit(result, tmp_path / "junit.xml")
    root = ET.parse(tmp_path / "junit.xml").getroot()
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert junit_errors(root) == [] and "level" not in props and props["partial"] == "true"
    results = json.loads(json.dumps(to_gradescope(result)))
    assert gradescope_errors(results) == []
    assert results["extra_data"]["level"] is None and results["extra_data"]["partial"] is True


@pytest.mark.parametrize(
    "statuses, says",
    [
        (["pass"], "item a passes"),
        (["pass", "pass"], "items a, b pass"),
        (["pass", "fail", "timeout"], "item a passes; items b, c do not pass"),
        (["fail"] * 5, "5 items do not pass"),
    ],
    ids=["one", "two", "mixed", "a-count-past-four"],
)
def test_partial_verdict_names_what_passes_and_what_does_not(statuses, says):
    items = [ItemResult(chr(ord("a") + n), "L4", s, 0.0, 1.0, "") for n, s in enumerate(statuses)]
    assert partial_verdict(items) == says


@pytest.mark.parametrize(
    "reached, detected, level, capped_by",
    [
        ("L6", ["concat-every-step"], "L5", ["concat-every-step"]),
        ("L6", ["caches-q", "concat-every-step"], "L4", ["caches-q"]),
        ("L4", ["concat-every-step"], "L4", []),
        (None, ["caches-q"], "below L4", []),
    ],
    ids=["lowered", "the-lowest-cap-wins", "cap-above-the-level", "no-level-reached"],
)
def test_the_level_names_only_the_tells_that_lowered_it(reached, detected, level, capped_by):
    rubric = load()
    top = rubric.levels.index(reached) if reached else -1
    items = [
        ItemResult(
            i.id,
            i.level,
            "pass" if rubric.levels.index(i.level) <= top else "fail",
            0.0,
            i.points,
            "",
        )
        for i in rubric.track(DENSE)
    ]
    tells = [TellResult(t.id, t.id in detected, "") for t in rubric.tells]
    assert level_of(DENSE, items, tells) == (level, capped_by)


@pytest.mark.parametrize(
    "level, capped_by, says",
    [
        ("L5", ["concat-every-step"], "capped at L5 by concat-every-step"),
        ("L4", [], None),
    ],
    ids=["lowered", "not-lowered"],
)
def test_a_cap_shows_only_when_it_lowered_the_level(tmp_path, level, capped_by, says):
    for output, text in shown(made(level=level, capped_by=capped_by), tmp_path).items():
        if says:
            assert says in text, f"{output}:\n{text}"
        else:
            assert "capped" not in text, f"{output} names a cap that lowered nothing:\n{text}"


def test_a_tell_no_item_looked_for_is_not_checked_rather_than_clear(tmp_path):
    texts = dict(shown(made(), tmp_path), verbose=terminal(made(), "verbose"))
    for output in ("verbose", "scorecard"):
        lines = [line for line in texts[output].splitlines() if "shape-only-tests" in line]
        assert lines and all("not checked" in line and "clear" not in line for line in lines), lines
    assert (
        "Other tells: clear (caches-q); not checked (shape-only-tests: no item that looks for "
        "it ran)"
    ) in " ".join(texts["report"].split())
    tell = to_json(made())["tells"][2]
    assert tell["detected"] is False and tell["message"].startswith("not checked")


def test_a_file_that_does_not_import_is_reported_once_and_its_items_say_not_run(tmp_path):
    result = not_importing()
    for output, text in shown(result, tmp_path).items():
        assert text.count("SyntaxError") == 1, f"{output} does not give the error once:\n{text}"
    report = terminal(result)
    assert f"Items not run ({len(ITEMS)}):" in report and "hint:" not in report, report
    assert terminal(result, "verbose").count("not run:") == len(ITEMS), "every item, with -v"
    assert set(reasons(shown(result, tmp_path)["scorecard"])) == {
        "not run: the file does not import"
    }
    assert {i["message"] for i in to_json(result)["items"]} == {f"not run: {NOT_IMPORTING}"}


@pytest.mark.parametrize("status, detail", [("pass", "verbose"), ("fail", "default")])
def test_long_messages_wrap_in_the_report_rather_than_being_cut(status, detail):
    words = " ".join(f"w{n}" for n in range(120))
    token = "x" * 100 + "END"
    item = ItemResult("gqa", "L6", status, 6.0, 6.0, f"{words} {token}")
    text = terminal(made(items=[item]), detail)
    assert "…" not in text
    assert set(re.findall(r"\bw\d+\b", text)) == {f"w{n}" for n in range(120)}
    assert token in re.sub(r"[\s│]", "", text), "a word longer than the column folds, whole"


@pytest.mark.parametrize(
    "opaque, says",
    [
        (
            wire.Opaque("float32", (2, 3), "cpu", "kv_cache.Agreeable"),
            "a float32 tensor [2, 3] of type kv_cache.Agreeable (a torch.Tensor subclass)",
        ),
        (wire.Opaque("float32", (2, 3), "meta", "torch.Tensor"), "a float32 tensor [2, 3] on meta"),
    ],
    ids=["subclass", "other-device"],
)
def test_a_tensor_that_arrived_without_data_is_named_once(opaque, says):
    with pytest.raises(Fail) as caught:
        tensor(opaque, "attend's output")
    assert (
        str(caught.value) == f"attend's output is {says}, expected a plain torch.Tensor on the CPU"
    )


# --- real grades --------------------------------------------------------------------------------


def test_a_real_grade_writes_all_three_formats(tmp_path):
    result = grade(ROOT / "solutions/kv_cache.py", only={"append-time-dim", "attend-shape"})
    assert [i.status for i in result.items] == ["pass", "pass"]
    assert result.partial and result.level is None
    write_markdown(result, tmp_path / "scorecard.md")
    write_gradescope(result, tmp_path / "results.json")
    write_junit(result, tmp_path / "junit.xml")
    scorecard = (tmp_path / "scorecard.md").read_text()
    assert "`append-time-dim`" in scorecard and "`attend-shape`" in scorecard
    assert "**Partial run: items append-time-dim, attend-shape pass**" in scorecard
    results = json.loads((tmp_path / "results.json").read_text())
    assert (
        gradescope_errors(results) == []
        and results["score"] == results["extra_data"]["max_score"] == 10.0
    )
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert junit_errors(root) == [] and root.find("testsuite").get("tests") == "2"


def test_a_real_file_that_does_not_import_gives_its_error_once_in_a_short_report():
    result = grade(ROOT / "tests/hostile/syntax_error.py")
    assert not result.partial and {i.status for i in result.reported} == {"error"}
    assert {i.message for i in result.reported} == {"not run: the file does not import"}
    assert not result.plus_started  # L6+: not started, one line
    assert "SyntaxError: expected ':' (syntax_error.py, line 3)" in result.unavailable
    assert not any(t.checked for t in result.tells)
    text = terminal(result)
    assert text.count("SyntaxError") == 1, text
    assert len(text) < 8_000, f"{len(text)} characters: the error once, not once an item"
    assert all("\n" not in i["message"] for i in to_json(result)["items"])
