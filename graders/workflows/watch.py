"""Re-run something whenever watched files change: `kata grade --watch`, by plain polling."""

from __future__ import annotations

import signal
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

Snapshot = tuple[tuple[int, int] | None, ...]


def watch(
    paths: list[Path],
    run: Callable[[], None],
    *,
    poll: float = 0.1,
    stop: Callable[[], bool] = lambda: False,
) -> int:
    """Call `run()` now, then again after every change to `paths`; return how many runs started.

    Every `poll` seconds the modification time and size of each path are read (a missing file
    counts as a state of its own). A change is run only once the files have stayed unchanged for
    one poll interval, so a save still being written is not run half-done. A change made while
    `run()` is running triggers another run. The loop ends when `stop()` (asked once a poll)
    returns true; on KeyboardInterrupt (Ctrl-C), even during a run; on SIGTERM or SIGHUP (a
    `kill`, a closed terminal) once the run under way is over, so that nothing it started is
    left half-registered for the caller's cleanup. Other exceptions from `run` propagate.
    """
    runs, ended = 0, []
    try:
        with _noted(ended, signal.SIGTERM, signal.SIGHUP):
            seen = ran = _snapshot(paths)
            runs += 1
            run()
            while not ended and not stop():
                time.sleep(poll)
                now = _snapshot(paths)
                if now == seen and now != ran and not ended:
                    ran = now
                    runs += 1
                    run()
                seen = now
    except KeyboardInterrupt:
        pass
    return runs


@contextmanager
def _noted(ended: list, *signals: signal.Signals):
    """Within the block, each of `signals` is appended to `ended` instead of ending the process;
    nothing changes outside the main thread, where Python cannot take a signal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    before = {
        number: signal.signal(number, lambda signum, frame: ended.append(signum))
        for number in signals
    }
    try:
        yield
    finally:
        for number, handler in before.items():
            signal.signal(number, handler)


def _snapshot(paths: list[Path]) -> Snapshot:
    """(mtime in ns, size) of each path, None where the path does not exist."""
    states = []
    for path in paths:
        try:
            stat = path.stat()
        except FileNotFoundError:
            states.append(None)
        else:
            states.append((stat.st_mtime_ns, stat.st_size))
    return tuple(states)
