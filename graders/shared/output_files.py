"""The files the kata writes for the user: checked before any work, written where the user
pointed, whole or not at all.

`check_writable` lets a command refuse a report path it could not write before it spends a
minute grading; `write_atomically` writes it. What a path names decides how it is written:

- `-` (STDOUT, as the user typed it, not resolved against a folder): standard output.
- a regular file, or nothing yet: a temporary file beside it, renamed over it, so that a reader
  (a CI job, a watcher) never sees half a report; an existing file keeps its permissions.
- a symbolic link: its target, as above (the link is resolved first and still points at it).
- a character device (/dev/null, a terminal) or a FIFO: opened and written through, never
  replaced; so is one of this process's own files (/dev/stdout redirected to a file: the
  report is added after what was printed).
- anything else (a folder, a socket, a block device): OutputError, before any work.

Text is written as UTF-8; a lone surrogate (which UTF-8 cannot hold) is written as its
backslash escape, never a crash.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

STDOUT = Path("-")  # the user's `-`: standard output
STREAMS = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/self/fd/")  # this process's files
_UMASK = os.umask(0o022)
os.umask(_UMASK)  # read once: a new report gets the permissions open() would have given it


class OutputError(ValueError):
    """An output path that cannot be written; the message is one line."""


def check_writable(path: Path) -> None:
    """Raise OutputError unless `path` can be written as this module writes it.

    `-` always can. A symbolic link is judged by its target. An existing target must be a
    regular file, a character device or a FIFO, and writable; a new one needs an existing,
    writable folder. Nothing is created or opened.
    """
    if path == STDOUT:
        return
    try:
        mode = _mode(path)
    except OSError as exc:
        raise OutputError(f"cannot write {path}: {exc.strerror}") from None
    target = _target(path)
    folder = target.parent
    if mode is not None and stat.S_ISDIR(mode):
        raise OutputError(f"cannot write {path}: it is a folder; give a file name")
    if mode is not None and not _written_as_file(mode) and not _written_through(mode):
        raise OutputError(f"cannot write {path}: it is {_kind(mode)}, not a file")
    if mode is None and not folder.is_dir():
        raise OutputError(f"cannot write {path}: the folder {folder} does not exist")
    if mode is None and not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"cannot write {path}: the folder {folder} is not writable")
    if mode is not None and not os.access(path, os.W_OK):
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


def make_folder(folder: Path) -> None:
    """Make `folder` (and its parents) if missing, and prove a file can be created in it by
    creating one and removing it: os.access believes root can write anywhere, /proc included.
    Raise OutputError, in one line, when it cannot be done."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(dir=folder, prefix=".kata-probe-")
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputError(f"cannot write in {folder}: {exc.strerror or exc}") from None


def write_atomically(path: Path, data: str | bytes) -> None:
    """Write `data` (text as UTF-8, lone surrogates backslash-escaped) where `path` points, as
    the module docstring says: standard output for `-`; written through for a character device,
    a FIFO or a file of this process (/dev/stdout); else through a temporary file beside the
    (link's) target and os.replace, so that the target holds either its old content or all of
    `data`, never part. OutputError for a target of any other kind."""
    content = data.encode("utf-8", "backslashreplace") if isinstance(data, str) else data
    if path == STDOUT:
        _write_stdout(content)
        return
    mode = _mode(path)
    if mode is not None and (_written_through(mode) or _of_this_process(path)):
        sys.stdout.flush()  # what the report printed comes first
        with open(path, "ab") as f:  # through any link: /dev/stdout is one to /proc/self/fd/1
            f.write(content)
        return
    if mode is not None and not _written_as_file(mode):
        raise OutputError(f"cannot write {path}: it is {_kind(mode)}, not a file")
    _replace(_target(path), content, stat.S_IMODE(mode) if mode is not None else 0o666 & ~_UMASK)


def _replace(target: Path, content: bytes, mode: int) -> None:
    fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(content)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        os.unlink(temporary)
        raise


def _write_stdout(content: bytes) -> None:
    sys.stdout.flush()
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:  # a text-only stream (a test's capture): the bytes as text
        sys.stdout.write(content.decode("utf-8", "replace"))
    else:
        stream.write(content)
        stream.flush()


def _mode(path: Path) -> int | None:
    """The st_mode of what `path` names, through any link; None when nothing is there yet (or
    a part of its folder is missing or a file: the folder's check says so)."""
    try:
        return path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None


def _target(path: Path) -> Path:
    """What `path` names: the file itself, or the end of its chain of symbolic links."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _of_this_process(path: Path) -> bool:
    """`path` names one of this process's open files (/dev/stdout, /dev/fd/3, /proc/self/fd/1),
    whatever they are: a stream the user redirected (`> out.txt`), to be added to, not
    replaced."""
    return str(path).startswith(STREAMS)


def _written_as_file(mode: int) -> bool:
    return stat.S_ISREG(mode)


def _written_through(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def _kind(mode: int) -> str:
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISBLK(mode):
        return "a block device"
    return "not a regular file"
