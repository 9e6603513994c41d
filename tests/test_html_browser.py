"""The HTML pages in a real browser: headless Chromium (Debian's `chromium`) driven by
Playwright with the system browser, launched once for the module. Each page is opened from its
file: no request may leave it, no console message may be an error, and no script of the
candidate's may run (each payload of tests/hostile/scripts_the_review_page.py would set
`window.kataPwned`; the page is asked afterwards). Stepping shows each snapshot's code and
verdict; without JavaScript every snapshot is on the page; printed on A4 no code is cut.

Screenshots at 1280 px are written to tmp_path, or to $KATA_SCREENSHOTS when it names a
folder (to look at them). Skipped, with the reason, where Playwright or Chromium is missing
(.ci/run installs both).
"""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from graders.formats import grade_page
from graders.interview import page as session_page, session as verbs
from tests.test_html import (
    PAYLOAD_FILE,
    UNBROKEN,
    hostile_grade,
    hostile_session,
    long_session,
    payload_text,
)
from tests.test_safe_formats import HOSTILE as HOSTILE_MESSAGE

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
A4_TEXT_WIDTH = 703  # CSS px inside A4's 210 mm less the page's 2 x 12 mm margins (96 px/inch)

playwright_api = pytest.importorskip(
    "playwright.sync_api", reason="Playwright is not installed (pip install -e '.[browser]')"
)
if not os.access(CHROMIUM, os.X_OK):
    pytest.skip("Chromium is not installed (apt-get install chromium)", allow_module_level=True)


@pytest.fixture(scope="module")
def browser():
    with playwright_api.sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


@dataclass
class Opened:
    """A page opened from a file, and what it did: every request, console message, uncaught
    error and dialog."""

    page: object
    requests: list[str] = field(default_factory=list)
    console: list[tuple[str, str]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    dialogs: list[str] = field(default_factory=list)

    def assert_quiet(self, path: Path) -> None:
        """Nothing but the page itself was requested, nothing logged an error, no dialog
        opened, no payload ran."""
        assert self.requests == [path.as_uri()]
        assert [text for kind, text in self.console if kind in ("error", "warning")] == []
        assert self.errors == [] and self.dialogs == []
        assert self.page.evaluate("typeof window.kataPwned") == "undefined"


@pytest.fixture
def open_file(browser):
    contexts = []

    def opened(path: Path, javascript: bool = True, width: int = 1280) -> Opened:
        context = browser.new_context(
            java_script_enabled=javascript, viewport={"width": width, "height": 900}
        )
        contexts.append(context)
        page = context.new_page()
        seen = Opened(page)
        context.on("request", lambda request: seen.requests.append(request.url))
        page.on("console", lambda message: seen.console.append((message.type, message.text)))
        page.on("pageerror", lambda error: seen.errors.append(str(error)))
        page.on("dialog", lambda dialog: (seen.dialogs.append(dialog.message), dialog.dismiss()))
        page.goto(path.as_uri())
        page.wait_for_load_state("load")
        return seen

    yield opened
    for context in contexts:
        context.close()


@pytest.fixture(scope="module")
def hostile_file(tmp_path_factory) -> Path:
    workspace = tmp_path_factory.mktemp("hostile") / "ws"
    hostile_session(workspace)
    path = workspace.parent / "session.html"
    session_page.write_html(verbs.load(workspace), workspace, path)
    return path


@pytest.fixture(scope="module")
def long_file(tmp_path_factory) -> tuple[dict, Path]:
    workspace = tmp_path_factory.mktemp("long") / "ws"
    session = long_session(workspace)
    path = workspace.parent / "session.html"
    session_page.write_html(session, workspace, path)
    return session, path


def screenshot(page, tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get("KATA_SCREENSHOTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page.screenshot(path=str(path), full_page=True)
    (width,) = struct.unpack(">I", path.read_bytes()[16:20])  # the PNG's IHDR
    assert width == 1280
    return path


def test_a_hostile_session_loads_quietly_and_shows_every_payload_as_text(
    hostile_file, open_file, tmp_path
):
    opened = open_file(hostile_file)
    opened.assert_quiet(hostile_file)
    page = opened.page
    assert page.evaluate("document.scripts.length") == 1
    assert (
        page.evaluate(
            "document.querySelectorAll('img, iframe, link, base, object, embed, "
            "meta[http-equiv=refresh], [onerror], [onload]').length"
        )
        == 0
    )
    assert page.evaluate("getComputedStyle(document.body).display") == "block"
    page.click("[data-go=next]")  # the second snapshot: answers and files of every kind on it
    shown = page.evaluate("document.body.textContent")
    for line in payload_text().splitlines():
        assert line in shown
    page.mouse.move(300, 300)  # an onmouseover, if any had become live
    opened.assert_quiet(hostile_file)
    screenshot(page, tmp_path, "hostile-session.png")


def test_stepping_shows_each_snapshots_code_and_verdict(long_file, open_file, tmp_path):
    session, path = long_file
    saves = [e for e in session["events"] if e["kind"] == "save"]
    opened = open_file(path)
    page = opened.page
    shown = """() => {
        const visible = Array.from(document.querySelectorAll('section.snapshot'))
            .filter(s => s.getClientRects().length);
        return {ids: visible.map(s => s.id),
                code: visible.map(s => s.querySelector('pre.code').innerText),
                passing: visible.map(s => Array.from(s.querySelectorAll('.verdict .badge.pass'))
                    .filter(b => b.getClientRects().length).map(b => b.nextSibling.textContent)),
                label: document.querySelector('[data-stepper] output').textContent};
    }"""
    for n, event in enumerate(saves):
        if n:
            page.click("[data-go=next]")
        now = page.evaluate(shown)
        assert now["ids"] == [f"snap-{n + 1}"]
        assert now["code"][0].split("\n")[:2] == [
            f'STAGED_UP_TO = "{("none", "L4", "L5", "L6")[n // 10]}"',
            f"# save {n}",
        ]
        assert now["passing"] == [event["passing"]]
        assert now["label"].startswith(f"snapshot {n + 1} of {len(saves)}")
    page.keyboard.press("ArrowLeft")
    assert page.locator("section.snapshot:visible").get_attribute("id") == f"snap-{len(saves) - 1}"
    page.locator(".timeline .save").nth(20).dispatch_event("click")
    page.wait_for_function("location.hash === '#snap-21'")
    assert page.locator("section.snapshot:visible").get_attribute("id") == "snap-21"
    assert page.locator(".timeline .save.current").get_attribute("data-step") == "20"
    opened.assert_quiet(path)
    page.evaluate("window.scrollTo(0, 0)")
    screenshot(page, tmp_path, "session-snapshot-21.png")


def test_without_javascript_every_snapshot_is_on_the_page(long_file, open_file):
    session, path = long_file
    page = open_file(path, javascript=False).page
    saves = [e for e in session["events"] if e["kind"] == "save"]
    assert page.locator("section.snapshot:visible").count() == len(saves)
    assert page.locator("[data-stepper]:visible").count() == 0
    assert page.locator("pre.code:visible").count() >= len(saves)


def test_printed_on_a4_no_line_of_code_is_cut(hostile_file, open_file):
    page = open_file(hostile_file, width=A4_TEXT_WIDTH).page
    page.emulate_media(media="print")
    page.evaluate(
        "document.querySelectorAll('section.snapshot').forEach(s => s.classList.add('current'))"
    )  # every snapshot laid out, as printed
    overflowing = page.evaluate("""Array.from(document.querySelectorAll('pre, .msg'))
        .filter(e => e.getClientRects().length && e.scrollWidth > e.clientWidth + 1)
        .map(e => e.className + ': ' + e.textContent.slice(0, 60))""")
    assert overflowing == []
    assert len(UNBROKEN) * 7 > A4_TEXT_WIDTH  # a line wider than the page, with no space
    assert page.pdf(format="A4")[:5] == b"%PDF-"


def test_a_grade_page_loads_quietly_and_shows_the_payloads_as_text(tmp_path, open_file):
    path = tmp_path / "grade.html"
    grade_page.write_html(hostile_grade(HOSTILE_MESSAGE + "\n" + payload_text()), path)
    opened = open_file(path)
    opened.assert_quiet(path)
    page = opened.page
    page.locator("details").first.click()  # hints unfold
    assert page.locator("details[open] li").count() >= 1
    assert page.locator("text=Similarity to the bundled solutions").count() == 1
    screenshot(page, tmp_path, "grade.png")


def test_the_index_sorts_by_level_and_by_score(tmp_path, open_file):
    from graders.shared.tracks import DENSE

    entries = [
        grade_page.IndexEntry(name, f"pages/{n:03d}.html", level, score, 100.0)
        for n, (name, level, score) in enumerate(
            [("a", "L5", 60.0), ("b", "below L4", 10.0), ("c", "L6", 100.0), ("d", "L4", 20.0)], 1
        )
    ]
    path = tmp_path / "index.html"
    path.write_text(grade_page.index_page(entries, DENSE, None))
    opened = open_file(path)
    page = opened.page

    def names() -> list[str]:
        return page.locator("tbody tr td:first-child").all_inner_texts()

    assert names() == ["a", "b", "c", "d"]
    page.click("th[data-sort=level]")
    assert names() == ["c", "a", "d", "b"]
    page.click("th[data-sort=level]")
    assert names() == ["b", "d", "a", "c"]
    page.click("th[data-sort=score]")
    assert names() == ["c", "a", "d", "b"]
    opened.assert_quiet(path)


@pytest.mark.slow  # one real grade of the hostile file, in a process of its own (about 10 s)
def test_a_hostile_file_graded_for_real_makes_a_page_where_nothing_of_it_runs(tmp_path, open_file):
    """The grade runs as `kata grade` does, in its own process: a grade in this one would reap
    the children it did not start, Playwright's driver among them."""
    from graders.shared.mutation import REFERENCE
    from tests.conftest import BOOTSTRAP

    candidate = tmp_path / "kv_cache.py"
    candidate.write_text(BOOTSTRAP.format(source=REFERENCE.read_text()) + PAYLOAD_FILE.read_text())
    path = tmp_path / "grade.html"
    done = subprocess.run(
        [sys.executable, str(ROOT / "cli.py"), "grade", str(candidate), "--html", str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    opened = open_file(path)
    opened.assert_quiet(path)
    shown = opened.page.evaluate("document.body.textContent")
    assert '<script>window.kataPwned = "script"</script>' in shown
    assert opened.page.locator("text=ERROR").count() >= 1
