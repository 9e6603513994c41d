"""The items that did not pass when a file was last graded: `kata grade --ff` and `--lf`.

After a grade, `record` keeps the ids of the items that did not pass in `.kata_cache/last.json`
beside the graded file, for each file and track; `plan` reads them back for the next grade,
which runs them first (--ff, and --watch) or alone (--lf), as pytest's `--ff` and `--lf` do.

- The record merges, as pytest's does: an item graded this time is recorded as passing or not;
  one left out (--item, --level, -x, --lf) keeps what was recorded for it.
- A hidden run is not recorded, and `kata grade` plans none from the record (--ff and --lf are
  usage errors with --hidden): its cases are not the candidate's, and the folder it grades is
  the candidate's, not the interviewer's.
- The judge writes the record after the grade, when the candidate's processes are gone, whole
  (a temporary file renamed over it); the folder holds a `.gitignore` that ignores it, as
  `.pytest_cache` does. Where the folder cannot be written, nothing is recorded and the grade
  goes on.
- The record is the judge's, in a folder the candidate controls: `.kata_cache` and the files in
  it are never followed through a symbolic link, neither read nor written (a link could point
  the judge's writes, or its reads, at any folder of the user's), and a file that is not a
  regular one (a FIFO would block the read) is no record. The folder is opened once, without
  following links, and every name is read and written relative to it.
- A record that is missing, unreadable, corrupt or of another version reads as no record. With
  none, or when no chosen item failed last time, every chosen item runs, in rubric order.
- The record only orders and selects the items: a run that leaves items out is partial, and
  a level always needs every item graded.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
from dataclasses import dataclass
from pathlib import Path

from graders.judge.request import GradeRequest
from graders.judge.result import GradeResult
from graders.shared.rubric import selected
from graders.shared.tracks import Track

FOLDER = ".kata_cache"
VERSION = 1
MAX_BYTES = 1 << 20  # a record is a few kB; a larger file is no record
_NO_FOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC
IGNORE_ALL = "# written by `kata grade`: the last grade's failures, for --ff and --lf\n*\n"

Record = dict[str, dict[str, list[str]]]  # file name -> track id -> ids that did not pass


@dataclass(frozen=True)
class Selection:
    """The items a grade runs after the record: `only` (None: every item the request chose)
    and `first`, and the line a report shows about it (empty when there is nothing to say)."""

    only: frozenset[str] | None
    first: frozenset[str]
    note: str

    def apply(self, request: GradeRequest) -> GradeRequest:
        """`request` narrowed to these items, these first."""
        return request.selecting(self.only, self.first)


def cache_file(implementation: Path) -> Path:
    """Where the record of `implementation`'s folder lives."""
    return implementation.parent / FOLDER / "last.json"


def failed(implementation: Path, track: str) -> set[str]:
    """The ids of `track`'s items that did not pass when `implementation` was last graded
    (empty when none did, or when there is no usable record)."""
    return set(_load(cache_file(implementation)).get(implementation.name, {}).get(track, []))


def plan(
    implementation: Path,
    track: Track,
    only: frozenset[str] | None,
    up_to: str | None,
    *,
    last_failed: bool,
) -> Selection:
    """The items chosen by --item (`only`) and --level (`up_to`) that did not pass last time
    run first, or, with `last_failed`, alone; when none of the chosen items failed last time,
    every chosen item runs."""
    chosen = [item.id for item in selected(track, only, up_to)]
    again = [item for item in chosen if item in failed(implementation, track.id)]
    named = ", ".join(again) if len(again) <= 4 else f"the {len(again)} items"
    if not again:
        return Selection(
            only,
            frozenset(),
            "--last-failed: no item failed last time: grading every item" if last_failed else "",
        )
    if last_failed:
        return Selection(
            frozenset(again),
            frozenset(),
            f"--last-failed: grading only {named}, which did not pass last time",
        )
    return Selection(
        only,
        frozenset(again),
        f"--failed-first: grading {named} first, which did not pass last time",
    )


def record(implementation: Path, result: GradeResult) -> None:
    """Merge `result` into the record of `implementation` (nothing for a hidden run, and
    nothing where the folder cannot be written or is a symbolic link)."""
    if result.hidden:
        return
    path = cache_file(implementation)
    data = _load(path)
    tracks = data.setdefault(implementation.name, {})
    graded = {item.id for item in result.items}
    still = set(tracks.get(result.track, [])) - graded
    # L6+ not started (GradeResult.reported leaves it out) is no failure to grade again
    tracks[result.track] = sorted(still | {i.id for i in result.reported if not i.passed})
    try:
        path.parent.mkdir(exist_ok=True)
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | _NO_FOLLOW)
    except OSError:
        return
    try:
        if not _exists(".gitignore", folder):
            _replace(".gitignore", IGNORE_ALL, folder)
        _replace(
            path.name, json.dumps({"version": VERSION, "failed": data}, indent=1) + "\n", folder
        )
    except OSError:
        pass
    finally:
        os.close(folder)


def _load(path: Path) -> Record:
    """The record at `path`, or an empty one when it is missing, unreadable, corrupt, of
    another version, not a regular file, or reached through a symbolic link."""
    try:
        data = json.loads(_read(path))
        if data["version"] != VERSION:
            return {}
        return {
            name: {
                track: [item for item in ids if isinstance(item, str)]
                for track, ids in tracks.items()
                if isinstance(ids, list)
            }
            for name, tracks in data["failed"].items()
            if isinstance(tracks, dict)
        }
    except (OSError, ValueError, LookupError, TypeError, AttributeError, RecursionError):
        return {}


def _read(path: Path) -> bytes:
    """The bytes of the regular file `path` names in `.kata_cache`, neither folder nor file
    followed through a link (OSError otherwise)."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | _NO_FOLLOW)
    try:
        fd = os.open(path.name, os.O_RDONLY | os.O_NONBLOCK | _NO_FOLLOW, dir_fd=folder)
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as file:
        if not stat.S_ISREG(os.fstat(file.fileno()).st_mode):
            raise OSError(f"{path} is not a regular file")
        content = file.read(MAX_BYTES + 1)
    if len(content) > MAX_BYTES:
        raise ValueError(f"{path} is larger than a record")
    return content


def _exists(name: str, folder: int) -> bool:
    try:
        os.stat(name, dir_fd=folder, follow_symlinks=False)
    except FileNotFoundError:
        return False
    return True


def _replace(name: str, text: str, folder: int) -> None:
    """Write `text` as `name` in the open `folder`: a temporary file renamed over the name
    (a link of that name is replaced, never written through)."""
    temporary = f".{name}.{secrets.token_hex(6)}.tmp"
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NO_FOLLOW, 0o644, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(text.encode())
        os.rename(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)  # replaces, on POSIX
    except BaseException:
        os.unlink(temporary, dir_fd=folder)
        raise
