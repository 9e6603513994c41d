"""An interview's record on disk: `DIR/.kata/session.json` as contract section 7 specifies it,
the snapshots beside it, and the lock that keeps one session to a workspace.

- The record is written whole and atomically (graders.shared.output_files.write_atomically) after
  every event: a session killed at any moment resumes with every completed event.
- A snapshot is the folder `DIR/.kata/NNN-<hash>/` holding the implementation and the
  candidate's test file as they were saved; `<hash>` is the first 8 hex digits of the sha256
  of both files (`content_hash`), so a snapshot is named by its content. A folder left by a
  save that was killed mid-grade has no event and is never numbered over.
- The lock is `DIR/.kata/session.lock`, holding the pid of the process in the session; one
  whose process is gone is stale and taken over.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path

from graders.shared.output_files import write_atomically
from graders.shared.untrusted import quote

VERSION = "1.2"
FOLDER = ".kata"
RECORD = "session.json"
LOCK = "session.lock"
SNAPSHOT = re.compile(r"^(\d{3,})-([0-9a-f]{8})$")


class SessionBusy(Exception):
    """Another live process holds the workspace's session; the message is one line."""


def folder(workspace: Path) -> Path:
    return workspace / FOLDER


def path(workspace: Path) -> Path:
    return folder(workspace) / RECORD


def new(track: str, minutes: float, strict: bool, started: float, stage: str) -> dict:
    """A fresh record, keys in the contract's order; `started` is seconds since the epoch (kept
    to the whole second, which every event's `t` counts from)."""
    return {
        "version": VERSION,
        "track": track,
        "minutes": minutes,
        "strict": strict,
        "started": iso(started),
        "ended": None,
        "stage": stage,
        "events": [],
        "final": None,
    }


def iso(seconds: float) -> str:
    """Seconds since the epoch as the record's UTC time: "2026-12-02T10:00:00Z"."""
    return datetime.fromtimestamp(int(seconds), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(text: str) -> float:
    """The record's UTC time back to seconds since the epoch."""
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def load(workspace: Path) -> object | None:
    """The workspace's record as parsed JSON, None when it has none; ValueError, one line, for
    a file that is not JSON. Whether it is a record is graders.interview.schema's to say."""
    try:
        return json.loads(path(workspace).read_text())
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ValueError(
            f"{quote(str(path(workspace)))} is not a session record: {quote(str(exc))}"
        ) from None


def save(workspace: Path, record: dict) -> None:
    """Write `record` whole, atomically: a reader never sees half of it."""
    write_atomically(path(workspace), json.dumps(record, indent=2) + "\n")


def content_hash(implementation: bytes, tests: bytes | None) -> str:
    """The first 8 hex digits of the sha256 of both files: each file's length (8 bytes, big
    endian; a missing test file counts as empty) then its bytes, so no two pairs collide by
    moving bytes from one file to the other."""
    digest = hashlib.sha256()
    for data in (implementation, tests or b""):
        digest.update(len(data).to_bytes(8, "big"))
        digest.update(data)
    return digest.hexdigest()[:8]


def snapshot(workspace: Path, files: dict[str, bytes]) -> str:
    """Keep `files` (name: bytes, the implementation first, then the tests when there are
    any) as the next snapshot folder; return its name, NNN-<hash>."""
    contents = list(files.values())
    digest = content_hash(contents[0], contents[1] if len(contents) > 1 else None)
    numbers = [
        int(m.group(1)) for p in folder(workspace).iterdir() if (m := SNAPSHOT.match(p.name))
    ]
    name = f"{max(numbers, default=0) + 1:03d}-{digest}"
    target = folder(workspace) / name
    target.mkdir()
    for file_name, data in files.items():
        (target / file_name).write_bytes(data)
    return name


@contextmanager
def locked(workspace: Path):
    """Hold the workspace's session for the block: SessionBusy when another live process holds
    it. A lock whose pid is gone (a killed session) is taken over; this process's own lock is
    re-entered (the interactive verb holds it while it calls the others). The lock appears whole,
    pid and all: it is written under a name of its own, then linked into place. The workspace
    and its .kata folder are made when missing."""
    folder(workspace).mkdir(parents=True, exist_ok=True)
    lock = folder(workspace) / LOCK
    if _holder(lock) == os.getpid():
        yield
        return
    claim = lock.with_name(f"{LOCK}.{os.getpid()}")
    claim.write_text(f"{os.getpid()}\n")
    try:
        while True:
            try:
                os.link(claim, lock)
                break
            except FileExistsError:
                holder = _holder(lock)
                if holder is not None and _alive(holder):
                    raise SessionBusy(
                        f"another session runs in this workspace (pid {holder}): "
                        "one session at a time"
                    ) from None
                lock.unlink(missing_ok=True)  # stale: its process is gone
    finally:
        claim.unlink(missing_ok=True)
    try:
        yield
    finally:
        lock.unlink(missing_ok=True)


def _holder(lock: Path) -> int | None:
    """The pid in `lock`, None when it holds none (half-written, or gone)."""
    try:
        return int(lock.read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True
