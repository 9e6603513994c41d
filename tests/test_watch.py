"""`kata grade --watch`: one run at start, one more per settled change, none without a change;
each run's summary opens with a rule and the time, and wraps its messages rather than cut them."""

import io
import os
import re
import signal
import threading
import time

import pytest
from rich.console import Console

from graders.formats.report import render_summary
from graders.judge.result import GradeResult, ItemResult
from graders.workflows.watch import watch

POLL = 0.05
WORDS = " ".join(f"w{n}" for n in range(80))


def wait_for(condition, timeout=5.0):
    """Whether `condition` holds within `timeout` s: returns as soon as it does, so a loaded
    machine costs the wait only where it is slow."""
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(POLL / 5)
    return condition()


def test_runs_at_start_then_once_per_change_and_stops(tmp_path):
    path = tmp_path / "kv_cache.py"
    path.write_text("a")
    runs, stop, returned = [], threading.Event(), []
    thread = threading.Thread(
        target=lambda: returned.append(
            watch([path], lambda: runs.append(1), poll=POLL, stop=stop.is_set)
        )
    )
    thread.start()
    try:
        assert wait_for(lambda: len(runs) == 1)
        time.sleep(4 * POLL)
        assert len(runs) == 1  # no change, no run
        path.write_text("a change")
        assert wait_for(lambda: len(runs) == 2)
        time.sleep(4 * POLL)
        assert len(runs) == 2  # exactly one run for one change
    finally:
        stop.set()
        thread.join(timeout=1)
    assert not thread.is_alive() and returned == [2]


def test_a_save_still_being_written_is_run_once_it_settles(tmp_path):
    """Driven by `stop`, asked once a poll: writes on two polls in a row, then quiet."""
    path = tmp_path / "kv_cache.py"
    path.write_text("")
    runs, polls = [], []

    def tick():
        polls.append(len(runs))
        if len(polls) <= 2:
            path.write_text("x" * len(polls))  # half a save, then the rest
        return len(polls) > 4

    assert watch([path], lambda: runs.append(1), poll=0.01, stop=tick) == 2
    assert polls == [1, 1, 1, 2, 2]  # no run while the file was changing, one after it settled


def summary(*items: ItemResult) -> str:
    console = Console(width=60, file=io.StringIO(), record=True)
    render_summary(GradeResult("kv_cache.py", "below L4", list(items), [], False), console)
    return console.export_text()


def test_each_summary_opens_with_a_rule_and_the_time():
    first = summary(ItemResult("gqa", "L6", "pass", 6.0, 6.0, "ok")).splitlines()[0]
    assert re.fullmatch(r"\d\d:\d\d:\d\d ─+", first.rstrip()), first


def test_the_summary_wraps_messages_and_never_cuts_them():
    text = summary(ItemResult("gqa", "L6", "fail", 0.0, 6.0, f"{WORDS}\nsecond line"))
    assert "…" not in text
    assert set(re.findall(r"\bw\d+\b", text)) == {f"w{n}" for n in range(80)}, text
    assert "second line" not in text, "the summary gives each message's first line"


def test_the_summary_says_once_why_items_were_not_run():
    reason = "the file does not import: SyntaxError: expected ':' (kv_cache.py, line 3)"
    items = [
        ItemResult(name, "L4", "error", 0.0, 5.0, "not run: the file does not import", reason)
        for name in ("append-time-dim", "attend-shape")
    ]
    text = summary(*items)
    assert text.count("SyntaxError") == 1 and "append-time-dim" not in text, text


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_kill_or_a_closed_terminal_ends_it_after_the_run_under_way(tmp_path, signum):
    """The watch ends once the run under way is over (what the run started is then the caller's
    to clean up, whole), and the signal's handler from before the watch is back afterwards."""
    path = tmp_path / "kv_cache.py"
    path.write_text("x = 1\n")
    before = signal.getsignal(signum)
    assert watch([path], lambda: os.kill(os.getpid(), signum), poll=0.01) == 1
    assert signal.getsignal(signum) is before
