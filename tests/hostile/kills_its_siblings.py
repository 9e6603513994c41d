"""attend kills every other child of the process that forked it: the child the worker forked
ahead for the next call among them. The next call must still run, in a child forked anew."""

import os
import signal
import time

from kv_cache_base import KVCache, append, apply_rope, decode_step, fork, release, reorder, reset
from kv_cache_base import attend as _attend


def _siblings() -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == os.getppid() and int(pid) != os.getpid():
            found.append(int(pid))
    return found


def attend(cache, query):
    deadline = time.monotonic() + 0.5  # the spare is forked as this call starts
    while not (siblings := _siblings()) and time.monotonic() < deadline:
        time.sleep(0.005)
    for pid in siblings:
        os.kill(pid, signal.SIGKILL)
    return _attend(cache, query)
