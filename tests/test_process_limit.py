"""The process limit counts what RLIMIT_NPROC counts: processes by their real user id.

The worker's zygote is not dumpable (so that its pipes to the judge cannot be opened through
/proc), and the kernel then shows the files under /proc/<pid> as owned by root whatever the
process's user (on some kernels the folder too). `limits._processes_of` reads the real user id
from /proc/<pid>/status, as RLIMIT_NPROC counts, so such a process still counts as its user's:
a user's process limit is set to what it runs already plus the candidate's share.
"""

from __future__ import annotations

import ctypes
import os
import signal
import time

import pytest

from graders.worker import limits

NOBODY = 65534


def count_as_nobody() -> tuple[int, int, int]:
    """In a forked child that became NOBODY: (its processes counted before, counted while a
    child of its own that made itself not dumpable runs, the owner of that one's
    /proc/<pid>/status)."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read_end)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            before = limits._processes_of(NOBODY)
            ready_r, ready_w = os.pipe()
            hidden = os.fork()
            if hidden == 0:
                ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
                os.write(ready_w, b"1")
                time.sleep(30)
                os._exit(0)
            os.read(ready_r, 1)
            during = limits._processes_of(NOBODY)
            owner = os.stat(f"/proc/{hidden}/status").st_uid
            os.kill(hidden, signal.SIGKILL)
            os.waitpid(hidden, 0)
            os.write(write_end, f"{before} {during} {owner}".encode())
        finally:
            os._exit(0)
    os.close(write_end)
    with os.fdopen(read_end) as answer:
        text = answer.read()
    os.waitpid(pid, 0)
    before, during, owner = map(int, text.split())
    return before, during, owner


PR_SET_DUMPABLE = 4


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a process as another user")
def test_a_process_that_is_not_dumpable_counts_as_its_users():
    before, during, owner = count_as_nobody()
    assert owner == 0  # what /proc shows of a process that is not dumpable
    assert during == before + 1


def test_real_uid_reads_the_first_field_of_the_uid_line():
    status = "Name:\tpython\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n"
    assert limits._real_uid(status) == 1000
    assert limits._real_uid("Name:\tx\n") is None
