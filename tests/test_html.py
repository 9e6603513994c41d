"""The HTML pages without a browser (tests/test_html_browser.py opens them in one): one escaper,
a policy that lets only the kata's own style and script run, nothing of the candidate's as
markup whatever the record, the files, the messages or the answers hold, every snapshot on the
page for reading without JavaScript, and a 60-minute session of 40 saves under 2 MB.

Sessions are driven as tests/test_interview.py drives them: the verbs with a clock the test
sets and a stand-in grade (staged_grade), so building one costs milliseconds.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import re
import runpy
from html.parser import HTMLParser
from pathlib import Path

import pytest

from graders.formats import grade_page, html
from graders.formats.html import Html, el, text
from graders.interview import page as session_page, record, session as verbs, verify
from graders.judge.result import GradeResult, ItemResult, TellResult
from graders.shared import rubric as rubric_data
from graders.shared.mutation import REFERENCE
from graders.shared.tracks import DENSE
from graders.shared.untrusted import html_text
from graders.workflows import batch, grade_all
from tests.test_interview import HOSTILE_ANSWERS, START, Clock, staged_grade
from tests.test_safe_formats import HOSTILE as HOSTILE_MESSAGE
from tests.grading import stand_in

ROOT = Path(__file__).resolve().parent.parent
EDIT = runpy.run_path(str(ROOT / "tests" / "hostile" / "edits_its_interview_record.py"))["edit"]
HOSTILE = ROOT / "tests" / "hostile"
PAYLOAD_FILE = HOSTILE / "scripts_the_review_page.py"
TWO_MB = 2 << 20
UNBROKEN = "x = '" + "A" * 300 + "'"  # a line of code no space breaks: printed, it must wrap
# Every tag the kata's pages are made of: a tag outside it came from someone else.
KATA_TAGS = {
    "html",
    "head",
    "meta",
    "title",
    "style",
    "body",
    "script",
    "h1",
    "h2",
    "h3",
    "h4",
    "p",
    "b",
    "code",
    "ul",
    "ol",
    "li",
    "div",
    "span",
    "details",
    "summary",
    "table",
    "thead",
    "tbody",
    "tr",
    "th",
    "td",
    "pre",
    "section",
    "button",
    "input",
    "output",
    "noscript",
    "a",
    "svg",
    "line",
    "text",
    "polyline",
    "polygon",
    "circle",
    "g",
    "title",
}


def payload_text() -> str:
    """The payloads of tests/hostile/scripts_the_review_page.py, one a line."""
    namespace: dict = {}
    source = PAYLOAD_FILE.read_text().replace("from kv_cache_base import *", "")
    exec(compile(source, str(PAYLOAD_FILE), "exec"), namespace)
    return "\n".join(namespace["PAYLOADS"])


class Parsed(HTMLParser):
    """A page as a browser's parser reads it: its tags with their attributes, the text of its
    scripts and styles, and all its other text."""

    def __init__(self, page: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.raw: dict[str, list[str]] = {"script": [], "style": []}
        self.text: list[str] = []
        self.inside: str | None = None  # the script or style element being read
        self.feed(page)
        self.close()

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        self.inside = tag if tag in self.raw else None

    def handle_endtag(self, tag):
        self.inside = None

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        (self.raw[self.inside] if self.inside else self.text).append(data)

    def handle_comment(self, data):
        raise AssertionError(f"a comment on the page: {data[:80]!r}")


def assert_only_the_katas_markup(page: str) -> Parsed:
    """`page` holds only the kata's tags, no event handler, no link but to the page itself or
    a grade's page, one script and one style (the kata's, which the policy names by hash), and
    a policy that fetches nothing."""
    parsed = Parsed(page)
    assert {tag for tag, _ in parsed.tags} <= KATA_TAGS
    for tag, attrs in parsed.tags:
        assert not [name for name in attrs if name.startswith("on")], (tag, attrs)
        assert "style" not in attrs and "srcdoc" not in attrs and "src" not in attrs
        if "href" in attrs:
            assert re.fullmatch(r"#snap-\d+|pages/\d{3}\.html", attrs["href"]), attrs
    assert parsed.raw == {"script": [html.SCRIPT], "style": [html.STYLE]}
    policy = next(
        a["content"]
        for t, a in parsed.tags
        if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"
    )
    assert policy == html.POLICY and "unsafe" not in policy
    return parsed


# --- the escaper and the builder -------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,shown",
    [
        ("<script>", "&lt;script&gt;"),
        ("a & b", "a &amp; b"),
        ('"x"', "&quot;x&quot;"),
        ("'x'", "&#39;x&#39;"),
        ("&lt;", "&amp;lt;"),
        ("\x1b[2J", "\\x1b[2J"),
        ("\u202eevil", "\\u202eevil"),
        ("lone \ud800", "lone \\ud800"),
        ("tab\tand\nline", "tab\tand\nline"),
    ],
    ids=[
        "tag",
        "ampersand",
        "double-quote",
        "single-quote",
        "entity",
        "escape",
        "bidi",
        "surrogate",
        "tab-newline",
    ],
)
def test_html_text_leaves_no_markup_and_no_control(raw, shown):
    assert html_text(raw) == shown


def test_the_builder_escapes_text_and_attribute_values_and_keeps_its_own_markup():
    built = el(
        "td",
        "<b>",
        el("b", "x"),
        None,
        ["a", "<"],
        cls='c" onclick="x',
        data_step=3,
        open=True,
        hidden=False,
    )
    assert built == (
        '<td class="c&quot; onclick=&quot;x" data-step="3" open>&lt;b&gt;<b>x</b>a&lt;</td>'
    )
    assert isinstance(built, Html) and text("<") == "&lt;"


def test_the_policy_fetches_nothing_and_names_the_katas_style_and_script_by_hash():
    def digest(source: str) -> str:
        return "sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()

    assert html.POLICY.startswith("default-src 'none'; ")
    assert f"style-src '{digest(html.STYLE)}'" in html.POLICY
    assert f"script-src '{digest(html.SCRIPT)}'" in html.POLICY
    assert "img-src 'none'" in html.POLICY and "base-uri 'none'" in html.POLICY


# --- sessions --------------------------------------------------------------------------------


def staged_session(
    workspace: Path,
    saves: list[tuple[float, str, str | None]],
    answers: str | None = None,
    hints: dict[int, str] | None = None,
    minutes: float = 60,
) -> dict:
    """A session of `saves` (minute, kv_cache.py, test_kv_cache.py or None to keep it) graded
    by staged_grade, `hints` asked after the saves of those indices, ended 30 s after the last
    save; `answers` as answers.md."""
    with pytest.MonkeyPatch.context() as patch:
        stand_in(patch, staged_grade)
        clock = Clock()
        verbs.start(workspace, minutes=minutes, clock=clock)
        for n, (minute, code, tests) in enumerate(saves):
            (workspace / "kv_cache.py").write_text(code)
            if tests is not None:
                (workspace / "test_kv_cache.py").write_text(tests)
            clock.now = START + minute * 60
            verbs.save(workspace, clock=clock)
            if hints and n in hints:
                verbs.hint(workspace, hints[n], 1, clock=clock)
        if answers is not None:
            (workspace / "answers.md").write_text(answers)
        clock.advance(30)
        return verbs.end(workspace, clock=clock)


def long_session(workspace: Path) -> dict:
    """A 60-minute session of 40 saves, as long as a candidate's gets: kv_cache.py grows from
    80 lines of the reference to all of it (17 KB) and changes at every save, the tests (10 KB)
    every fourth; L4 after 10 saves, L5 after 20, L6 after 30; two hints."""
    solution = REFERENCE.read_text().splitlines()
    tests = (ROOT / "solutions" / "test_kv_cache.py").read_text()
    saves = []
    for n in range(40):
        level = ("none", "L4", "L5", "L6")[n // 10]
        body = "\n".join(solution[: 80 + n * (len(solution) - 80) // 39])
        saves.append(
            (
                1 + n * 1.45,
                f'STAGED_UP_TO = "{level}"\n# save {n}\n{body}\n',
                f"{tests}\n# edit {n}\n" if n % 4 == 0 else None,
            )
        )
    return staged_session(workspace, saves, hints={5: "ragged-batch", 17: "gqa"})


def hostile_session(workspace: Path) -> dict:
    """Every file of tests/hostile/ saved in turn (the last one reaching L4, so that a stage
    opens), the hostile answers.md with the payloads added, and then the record edited by hand
    as a candidate would, where its schema lets text through: payloads in the final grade's
    messages and its similarity's solution."""
    files = sorted(HOSTILE.glob("*.py"))
    saves = [(1 + n * 0.5, path.read_text(errors="replace"), None) for n, path in enumerate(files)]
    saves.append(
        (
            1 + len(files) * 0.5,
            f'STAGED_UP_TO = "L4"\n{UNBROKEN}\n' + PAYLOAD_FILE.read_text(),
            payload_text(),
        )
    )
    answers = (
        HOSTILE_ANSWERS.read_text()
        + "\n"
        + payload_text()
        + "\n\n## no-future-mask\n\n"
        + payload_text()
        + "\n"
    )
    session = staged_session(workspace, saves, answers=answers, hints={3: "attend-shape"})
    attack = payload_text()
    session["final"]["items"][0]["message"] = attack
    session["final"]["similarity"] = [{"solution": attack, "fraction": 0.5}]
    record.save(workspace, session)
    return session


def beyond_the_schema(session: dict) -> dict:
    """`session` with payloads where the record's schema refuses them on load (a refusal's
    fields, the final's implementation): the page, handed the dict, shows them as text too."""
    attack = payload_text()
    edited = copy.deepcopy(session)
    edited["events"].append({"t": 2000.0, "kind": "refused", "what": attack, "item": attack})
    edited["final"]["implementation"] = attack
    return edited


@pytest.fixture(scope="module")
def hostile_page(tmp_path_factory) -> tuple[dict, Path, str]:
    workspace = tmp_path_factory.mktemp("hostile") / "ws"
    hostile_session(workspace)
    session = beyond_the_schema(verbs.load(workspace))
    return session, workspace, session_page.page(session, workspace)


def test_the_session_page_has_only_the_katas_markup_whatever_the_workspace_holds(hostile_page):
    session, workspace, page = hostile_page
    parsed = assert_only_the_katas_markup(page)
    shown = "".join(parsed.text)
    for line in payload_text().splitlines():
        assert line in shown  # as text, every character of it
    for path in sorted(HOSTILE.glob("*.py")):
        lines = [
            line
            for line in path.read_text().splitlines()
            if line.isascii() and line.isprintable() and line.strip()
        ]
        assert all(line in shown for line in lines[:40]), path.name


def test_every_snapshot_is_on_the_page_for_reading_without_javascript(hostile_page):
    session, workspace, page = hostile_page
    parsed = Parsed(page)
    saves = [e for e in session["events"] if e["kind"] == "save"]
    sections = [a for t, a in parsed.tags if t == "section" and a.get("class") == "snapshot"]
    assert [a["id"] for a in sections] == [f"snap-{n}" for n in range(1, len(saves) + 1)]
    code = [a for t, a in parsed.tags if t == "pre" and a.get("class") == "code"]
    assert len(code) >= len(saves)  # each snapshot's kv_cache.py (and its tests when changed)


def test_a_snapshot_name_the_kata_does_not_make_is_named_and_never_read(tmp_path):
    workspace = tmp_path / "ws"
    staged_session(workspace, [(1, 'STAGED_UP_TO = "none"\n', None)])
    secret = tmp_path / "secret"
    (secret / "kv_cache.py").parent.mkdir()
    (secret / "kv_cache.py").write_text("SECRET_KEY = 'do not show'\n")
    session = verbs.load(workspace)
    session["events"][0]["snapshot"] = "../../secret"
    page = session_page.page(session, workspace)
    assert "do not show" not in page and "its folder is not read" in page


def test_a_file_that_links_outside_the_session_is_named_and_never_read(tmp_path):
    workspace = tmp_path / "ws"
    staged_session(workspace, [(1, 'STAGED_UP_TO = "none"\n', None)])
    (tmp_path / "key").write_text("PRIVATE KEY of the interviewer\n")
    session = verbs.load(workspace)
    snapshot = record.folder(workspace) / session["events"][0]["snapshot"] / "kv_cache.py"
    snapshot.unlink()
    snapshot.symlink_to(tmp_path / "key")
    (workspace / "answers.md").unlink()
    (workspace / "answers.md").symlink_to(tmp_path / "key")
    page = session_page.page(session, workspace)
    assert "PRIVATE KEY" not in page
    assert "a link to a file outside the session&#39;s folder: not read" in page
    assert "answers.md is not a file inside the workspace" in page


@pytest.fixture
def staged_verify(monkeypatch):
    """Grades, --verify's too, are staged_grade's, and --verify starts no workers ahead."""
    stand_in(monkeypatch, staged_grade)
    monkeypatch.setattr("graders.interview.verify._Ahead.start", lambda self, event, stage: None)


def provenance_and_badges(page: str) -> tuple[str, list[str]]:
    """The page's provenance block's class, and each save's check badge's title, in order."""
    parsed = Parsed(page)
    block = next(a["class"] for t, a in parsed.tags if "provenance" in a.get("class", ""))
    checks = [
        a["title"]
        for t, a in parsed.tags
        if t == "span"
        and "title" in a
        and a.get("class", "") in ("badge verified", "badge edited", "badge written")
    ]
    return block, checks


def test_the_page_shows_the_record_as_written_or_each_claim_verified(tmp_path, staged_verify):
    workspace = tmp_path / "ws"
    staged_session(
        workspace,
        [(1, 'STAGED_UP_TO = "L4"\n', None), (2, 'STAGED_UP_TO = "L5"\n', None)],
        hints={0: "gqa"},
    )
    session = verbs.load(workspace)
    written = session_page.page(session, workspace)
    assert_only_the_katas_markup(written)
    assert "Shown as written. " in written and "no snapshot was graded again" in written
    assert provenance_and_badges(written) == ("provenance written", [])
    honest = session_page.page(
        session, workspace, verify.verify(session, workspace, verbs.default_sandbox())
    )
    assert_only_the_katas_markup(honest)
    assert "<b>Verified: every snapshot graded again" in honest
    assert provenance_and_badges(honest) == ("provenance verified", ["agrees", "agrees"])
    assert honest.count("Graded again at stage L") == 2
    assert "Graded again with --hidden at seed " in honest and "The record&#39;s word" in honest

    EDIT(workspace, REFERENCE)  # every save L6, the final 100/100, the hint deleted, a swap
    session = verbs.load(workspace)
    last = [e for e in session["events"] if e["kind"] == "save"][-1]["snapshot"]
    swapped = f"snapshot {last}&#39;s files do not match its name: they hash to "
    written = session_page.page(session, workspace)  # the name check runs without --verify
    assert "Shown as written. " in written and written.count(swapped) == 3  # top, save, final
    assert provenance_and_badges(written) == ("provenance edited", [])
    assert 'class="badge edited">EDITED</span>' in written
    edited = session_page.page(
        session, workspace, verify.verify(session, workspace, verbs.default_sandbox())
    )
    assert_only_the_katas_markup(edited)
    assert "<b>EDITED: this record is not what its snapshots grade: 4 claim(s) disagree" in edited
    block, checks = provenance_and_badges(edited)
    assert block == "provenance edited" and [c.split(" (")[0] for c in checks] == [
        "DISAGREES",
        "DISAGREES",
    ]
    assert "level L4, not L6" in checks[0]
    assert (
        "Graded again at stage L4: L4, 10 points, 2 items pass: DISAGREES (level L4, not "
        "L6" in edited
    )
    assert (
        "Graded again with --hidden at seed " in edited
        and ": below L4, 0 points: DISAGREES (" in edited
    )
    assert (
        "Stages opened: L5 after save 1, L6 after save 2 | the grades open: L5 after save "
        "1: DISAGREES" in edited
    )


def test_a_verified_page_shows_the_records_strings_as_text(tmp_path, staged_verify):
    """The hostile session (payloads in a refusal, the final's messages, its implementation and
    its similarity's solution), verified: the checks quote the record, and stay text."""
    workspace = tmp_path / "ws"
    hostile_session(workspace)
    session = verbs.load(workspace)
    checked = verify.verify(session, workspace, verbs.default_sandbox())
    assert checked.final is not None and checked.final.verdict == "disagrees"
    page = session_page.page(session, workspace, checked)
    shown = "".join(assert_only_the_katas_markup(page).text)
    for line in payload_text().splitlines():
        assert line in shown


def test_a_session_just_started_has_a_page_with_no_snapshot_and_no_model_answer_yet(tmp_path):
    with pytest.MonkeyPatch.context() as patch:
        stand_in(patch, staged_grade)
        verbs.start(tmp_path / "ws", clock=Clock())
    page = session_page.page(verbs.load(tmp_path / "ws"), tmp_path / "ws")
    assert_only_the_katas_markup(page)
    assert "No save yet" in page and "Not yet: the session has not ended" in page
    assert "(shown when the session ends)" in page and 'class="snapshot"' not in page


def test_a_snapshots_code_marks_the_lines_its_save_wrote(tmp_path):
    before = "".join(f"line {n}\n" for n in range(10))
    after = before.replace("line 4\n", "line four\n") + "line 10\n"
    workspace = tmp_path / "ws"
    staged_session(workspace, [(1, before, None), (2, after, None)])
    shots = session_page.snapshots(verbs.load(workspace), workspace)
    lines = [
        attrs
        for tag, attrs in Parsed(session_page._file("kv_cache.py", after, shots[1], shots)).tags
        if tag == "span"
    ]
    assert [n for n, attrs in enumerate(lines) if attrs.get("class") == "a"] == [4, 10]
    assert shots[0].changed["kv_cache.py"] == set()  # the first snapshot: nothing before it


def test_a_file_of_megabytes_shows_its_first_100000_characters(tmp_path):
    workspace = tmp_path / "ws"
    huge = "".join(f"# line {n} {'x' * 60}\n" for n in range(50_000))  # 3.5 MB
    staged_session(workspace, [(1, huge, None), (2, huge + "# one more\n", None)])
    page = session_page.page(verbs.load(workspace), workspace)
    assert len(huge) > 30 * session_page.MAX_FILE_CHARS
    assert len(page.encode()) < 6 * session_page.MAX_FILE_CHARS
    assert "more characters cut]" in page


def test_a_60_minute_session_of_40_saves_makes_a_page_under_2_mb(tmp_path):
    workspace = tmp_path / "ws"
    session = long_session(workspace)
    page = session_page.page(session, workspace)
    assert len([e for e in session["events"] if e["kind"] == "save"]) == 40
    assert session_page.snapshots(session, workspace)[-1].event["t"] > 55 * 60
    assert len(page.encode()) < TWO_MB, f"{len(page.encode()):,} bytes"


def test_the_report_command_writes_the_page(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cli import app

    staged_session(tmp_path / "ws", [(1, 'STAGED_UP_TO = "L4"\n', None)])
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["interview", "report", "ws", "--html", "session.html"])
    assert done.exit_code == 0 and done.output.rstrip().endswith("/session.html")
    assert_only_the_katas_markup((tmp_path / "session.html").read_text())
    folder = CliRunner().invoke(app, ["interview", "report", "ws", "--html", "ws"])
    assert folder.exit_code == 2 and folder.output.startswith("kata: error: --html")
    piped = CliRunner().invoke(app, ["interview", "report", "ws", "--html", "-"])
    assert piped.exit_code == 0 and "<!DOCTYPE html>" in piped.output
    both = CliRunner().invoke(app, ["interview", "report", "ws", "--json", "-", "--html", "-"])
    assert both.exit_code == 2 and both.output == (
        "kata: error: --json and --html both write to standard output (-): give one of them a "
        "file\n"
    )


# --- a grade, and a batch's index ------------------------------------------------------------


def hostile_grade(message: str, hidden: bool = True) -> GradeResult:
    """A dense grade where a few items pass and the others fail with `message`, every tell
    detected with it, hidden, with a similarity naming `message` as a solution."""
    rubric = rubric_data.load()
    items = [
        ItemResult(
            i.id,
            i.level,
            "pass" if n % 3 == 0 else "fail",
            i.points if n % 3 == 0 else 0.0,
            i.points,
            "fine" if n % 3 == 0 else message,
        )
        for n, i in enumerate(rubric.track(DENSE))
    ]
    tells = [TellResult(t.id, True, message) for t in rubric.tells]
    return GradeResult(
        message,
        "below L4",
        items,
        tells,
        hidden,
        isolation="bwrap",
        seed=7,
        similarity=[{"solution": message, "fraction": 0.25}] if hidden else None,
    )


def test_the_grade_page_shows_failures_first_hints_folded_and_only_the_katas_markup():
    attack = HOSTILE_MESSAGE + "\n" + payload_text()
    page = grade_page.page(hostile_grade(attack))
    parsed = assert_only_the_katas_markup(page)
    rows = [a["id"].removeprefix("item-") for t, a in parsed.tags if t == "tr" and "id" in a]
    statuses = {i.id: i.status for i in hostile_grade(attack).items}
    for level in rubric_data.load().levels:
        ours = [r for r in rows if rubric_data.load().item(r).level == level]
        assert ours == sorted(ours, key=lambda r: statuses[r] == "pass")
    assert page.count("<details>") == sum(s != "pass" for s in statuses.values())
    assert "Similarity to the bundled solutions" in page and "seed 7" in page
    assert "For the interviewer to mark" in page


def test_the_grade_page_of_a_public_run_has_no_similarity_or_checklist():
    page = grade_page.page(hostile_grade("x", hidden=False))
    assert "Similarity" not in page and "For the interviewer to mark" not in page


def test_grade_all_writes_each_grade_a_page_and_an_index_sortable_by_level_and_score(tmp_path):
    attack = payload_text()
    names = ["alice", attack.splitlines()[3], "carol"]
    submissions = [batch.Submission(name, tmp_path / name / "kv_cache.py", None) for name in names]
    results = [
        hostile_grade(attack, hidden=False),
        GradeResult(
            "x", "L5", [ItemResult("append-time-dim", "L4", "pass", 5, 5, "ok")], [], False
        ),
    ]
    done = [
        batch.Outcome(submissions[0], results[0], seconds=3.0),
        batch.Outcome(submissions[1], results[1], seconds=4.0),
        batch.Outcome(submissions[2], error="grading raised: boom"),
    ]
    numbers = {s.name: n for n, s in enumerate(submissions, 1)}
    for n in range(len(done)):
        grade_all.write_pages(
            done[n], done[: n + 1], [batch.Skipped("dave", "a link")], tmp_path, numbers, DENSE
        )
    index = (tmp_path / "index.html").read_text()
    parsed = assert_only_the_katas_markup(index)
    links = [a["href"] for t, a in parsed.tags if t == "a"]
    assert sorted(links) == ["pages/001.html", "pages/002.html"]
    assert sorted(p.name for p in (tmp_path / "pages").iterdir()) == ["001.html", "002.html"]
    for name in ("001.html", "002.html"):
        assert_only_the_katas_markup((tmp_path / "pages" / name).read_text())
    rows = [a for t, a in parsed.tags if t == "tr" and "data-level" in a]
    by_name = dict(zip(names, (*results, None)))
    expected = [
        (str(grade_page.level_rank(by_name[n].level, DENSE)), str(by_name[n].score))
        if by_name.get(n)
        else ("-1", "-1")
        for n in sorted([*names, "dave"])
    ]
    assert [(r["data-level"], r["data-score"]) for r in rows] == expected
    assert [th.get("data-sort") for t, th in parsed.tags if t == "th"][1:3] == ["level", "score"]


def test_the_final_grade_of_a_record_the_kata_did_not_write_is_a_one_line_error():
    with pytest.raises(ValueError, match="the final grade is not one the kata wrote"):
        grade_page.result_from_json({"items": "x"}, "dense")
