"""The files the kata writes for the user: checked before any work, written whole or not at all.

`check_writable` lets a command refuse a report path it could not write before it spends a
minute grading; `write_atomically` writes a temporary file beside the target and renames it over
the target, so that a reader (a CI job, a watcher) never sees half a report.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once: a new report gets the permissions open() would have given it


class OutputError(ValueError):
    """An output path that cannot be written; the message is one line."""


def check_writable(path: Path) -> None:
    """Raise OutputError unless `path` can be written as a file.

    It must not be a folder, its folder must exist and be writable, and if the file exists it
    must be writable. Nothing is created.
    """
    folder = path.parent
    if path.is_dir():
        raise OutputError(f"cannot write {path}: it is a folder; give a file name")
    if not folder.is_dir():
        raise OutputError(f"cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: the folder {folder} is not writable")
    if path.exists() and not os.access(path, os.W_OK):
        raise OutputError(f"cannot write {path}: it is read-only")


def check_writable_folder(folder: Path) -> None:
    """Raise OutputError unless files can be written in `folder`, or `folder` can be made.

    It must be a writable folder, or missing below a writable folder. Nothing is created.
    """
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir():
        raise OutputError(f"cannot write in {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write in {folder}: the folder {existing} is not writable")


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8, written as is) to `path` through a temporary file in the same
    folder and os.replace: `path` holds either its old content or all of `data`, never part."""
    content = data.encode() if isinstance(data, str) else data
    mode = path.stat().st_mode & 0o7777 if path.exists() else 0o666 & ~_UMASK
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        os.unlink(temporary)
        raise
