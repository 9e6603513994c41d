"""DynamicCache's answers to the real-model item's public runs, kept on disk between grades.

They depend on nothing but the runs (fixed seeds), the adapter's `generate` and the torch and
transformers versions: the file's name is a digest of the versions (read from the packages'
metadata, no import) and of the sources that make the runs and the generation, so a change of
any names another file. The first public grade computes them in the reference worker, which
holds no candidate code, and the judge writes them; later public grades read them and start
no reference worker (issue 43's cost: one torch and one transformers import, four
generations). Hidden runs are drawn afresh and always go to the reference worker.

What is read is only what the replies' schema accepts of the reference worker (the item checks
it with graders.judge.replies), and a file that fails is computed and written again. The
folder is the judge's: under bubblewrap the candidate's code sees a read-only tree bound for it
(graders.judge.isolation), never this folder; in the process fallback under a root judge it runs
as a user of its own, and a file or folder that user could have written is not read. A judge
that is not root runs it as itself, which can write this as it can the kata's own files
(docs/decisions.md, "real-model's kept answers").

The folder: $KVKATA_CACHE, else $XDG_CACHE_HOME/kvkata, else ~/.cache/kvkata.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import os
import tempfile
from pathlib import Path

GRADERS = Path(__file__).resolve().parent.parent
# What the public runs and their generation are made of, besides the two packages.
SOURCES = ("dense/items/real_model.py", "worker/real_model.py", "shared/cases.py")
PACKAGES = ("torch", "transformers")


def folder() -> Path:
    if os.environ.get("KVKATA_CACHE"):
        return Path(os.environ["KVKATA_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "kvkata"


def path() -> Path | None:
    """The file of these versions and sources; None when a package has no metadata."""
    digest = hashlib.sha256()
    try:
        for package in PACKAGES:
            digest.update(f"{package} {importlib.metadata.version(package)}\n".encode())
    except importlib.metadata.PackageNotFoundError:
        return None
    for source in SOURCES:
        digest.update((GRADERS / source).read_bytes())
    return folder() / f"real-model-public-{digest.hexdigest()[:20]}.pt"


def kept() -> bool:
    """Whether the public answers of these versions are on disk (read or not, they are checked
    when the item reads them)."""
    where = path()
    return where is not None and where.is_file()


def read() -> object | None:
    """What the file holds, loaded as tensors and plain containers only (no pickled code);
    None when there is no file or it does not load."""
    import torch

    where = path()
    if where is None or not where.is_file() or not _private(where):
        return None
    try:
        return torch.load(where, weights_only=True)
    except Exception:  # a torn or foreign file: computed again
        return None


def _private(where: Path) -> bool:
    """Whether only the judge's own user can have written `where`: it and its folder are owned
    by that user and writable by no group or other user, so a worker run as a user of its own
    (the process fallback under a root judge) cannot have forged it."""
    for part in (where.parent, where):
        status = part.stat()
        if status.st_uid != os.geteuid() or status.st_mode & 0o022:
            return False
    return True


def write(answers: list[dict]) -> None:
    """Keep `answers` (the reference worker's, checked) for the next grade; a folder that cannot
    be written keeps nothing and costs the next grade its reference worker again."""
    import torch

    where = path()
    if where is None:
        return
    try:
        where.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=where.parent, prefix=".real-model-")
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as file:
            torch.save(answers, file)
        os.replace(temporary, where)  # whole or absent: a grade in parallel reads one or none
    except OSError:
        Path(temporary).unlink(missing_ok=True)
