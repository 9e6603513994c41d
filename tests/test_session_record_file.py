"""graders/interview/record.py on its own: the record's file, a snapshot's name, the lock.

These are the module's own tests for benchmarks.mutation_score (tests/test_interview.py drives
the same code through whole sessions); each states a promise of record.py's docstrings.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest

from graders.interview import record


def test_a_record_that_is_not_json_is_one_line_naming_it(tmp_path):
    record.folder(tmp_path).mkdir()
    record.path(tmp_path).write_bytes(b"{\xff not json")
    with pytest.raises(ValueError, match=r"session\.json.* is not a session record") as raised:
        record.load(tmp_path)
    assert "\n" not in str(raised.value)


def test_a_workspace_with_no_record_loads_as_none(tmp_path):
    assert record.load(tmp_path) is None


def test_the_content_hash_is_the_documented_sha256_of_lengths_and_bytes():
    implementation, tests = b"def attend(): ...\n", b"def test(): ...\n"
    digest = hashlib.sha256(
        len(implementation).to_bytes(8, "big")
        + implementation
        + len(tests).to_bytes(8, "big")
        + tests
    ).hexdigest()
    assert record.content_hash(implementation, tests) == digest[:8]
    # A missing test file counts as empty; moving bytes between the files changes the hash.
    assert record.content_hash(implementation, None) == record.content_hash(implementation, b"")
    assert record.content_hash(b"ab", b"c") != record.content_hash(b"a", b"bc")


@pytest.mark.parametrize(
    "files",
    [
        {"kv_cache.py": b"one\n"},
        {"kv_cache.py": b"one\n", "test_kv_cache.py": b"two\n"},
    ],
    ids=["implementation-alone", "with-its-tests"],
)
def test_a_snapshot_is_numbered_after_the_last_and_named_by_its_content(tmp_path, files):
    record.folder(tmp_path).mkdir()
    (record.folder(tmp_path) / "007-0123abcd").mkdir()  # an earlier save's folder
    name = record.snapshot(tmp_path, files)
    contents = list(files.values())
    assert name == f"008-{record.content_hash(contents[0], (contents + [None])[1])}"
    assert {p.name: p.read_bytes() for p in (record.folder(tmp_path) / name).iterdir()} == files


def test_a_live_holder_is_refused_and_left_running(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        record.folder(tmp_path).mkdir()
        (record.folder(tmp_path) / record.LOCK).write_text(f"{holder.pid}\n")
        with pytest.raises(record.SessionBusy, match=f"pid {holder.pid}"):
            with record.locked(tmp_path):
                pass
        with pytest.raises(subprocess.TimeoutExpired):  # asking if it lives sent no signal
            holder.wait(timeout=1)
    finally:
        holder.kill()
        holder.wait()


def test_a_holder_of_another_user_counts_as_alive(tmp_path, monkeypatch):
    """os.kill(pid, 0) on another user's process raises PermissionError: it lives."""

    def not_ours(pid, signal):
        raise PermissionError(1, "Operation not permitted")

    record.folder(tmp_path).mkdir()
    (record.folder(tmp_path) / record.LOCK).write_text(f"{os.getpid() + 1}\n")
    monkeypatch.setattr(record.os, "kill", not_ours)
    with pytest.raises(record.SessionBusy):
        with record.locked(tmp_path):
            pass
