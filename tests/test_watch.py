"""`kata grade --watch`: one run at start, one more per settled change, none without a change."""

import threading
import time

from graders.watch import watch

POLL = 0.05


def wait_for(condition, timeout=1.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(POLL / 5)
    return condition()


def test_runs_at_start_then_once_per_change_and_stops(tmp_path):
    path = tmp_path / "kv_cache.py"
    path.write_text("a")
    runs, stop, returned = [], threading.Event(), []
    thread = threading.Thread(target=lambda: returned.append(
        watch([path], lambda: runs.append(1), poll=POLL, stop=stop.is_set)))
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
