"""A candidate's workspace: a folder holding their kv_cache.py, their tests, a README and a
.gitignore.

`init_workspace` makes one from the starter files, never the solutions or the graders; `kata grade`
run inside one grades it (`default_target`). Paths given here are absolute: the CLI resolves what
the user typed against the folder the command runs in.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from graders.shared import bundled
from graders.shared.tracks import BATCHING, DENSE, SERVING, Track

STARTER = bundled.STARTER

README = """\
# Your KV cache kata

## What to implement

`kv_cache.py` is incremental decoding for one attention layer: keep the keys and values of
earlier tokens in a `KVCache`, `append` the newest token's, and `attend` with its query over
the cache, so that the newest token's output equals a full causal forward over the same prefix,
at every prefix. Each function is a stub whose docstring is its contract; `apply_rope` is given.
Levels: **L4** `append` grows the time dimension and `attend` returns the right shape; **L5**
outputs equal full causal attention, with validation, a stable float32 softmax, `reset`,
`release`, lengths apart from capacity, ragged batches, a `decode_step` that caches only K and
V, and tests of your own in `test_kv_cache.py` that catch real mistakes; **L6** GQA/MQA, RoPE at
absolute positions, `reorder` and `fork` for beam search, finished beams, bf16/fp16 caches, and
an `append` that does not reallocate on every step.

## Grading

Run these inside this folder: `kata grade` grades `./kv_cache.py` with `./test_kv_cache.py`.

```bash
kata grade                            # a line per item that passes, details for the rest
kata grade --watch                    # grade again every time you save, failures first
kata grade --lf                       # only the items that did not pass last time (--ff: first)
kata grade --item prefix-equivalence  # one item (ids are in the report)
kata grade --level L5                 # the items up to a level: L4's and L5's
kata grade -x                         # stop at the first item that does not pass
python -m pytest -q test_kv_cache.py  # only your own tests
```

`-v` explains every item, passes included; `-q` prints only the closing lines. `kata grade`
keeps what did not pass in `.kata_cache/`, which `.gitignore` leaves out of git.

## Hints

A failing item shows a first hint. `kata hint ITEM` shows it too, and `kata hint ITEM --step 2`,
`--step 3`, ... go further, step by step, from a nudge to nearly the answer: take one at a time.

To practise the interview itself (the question in stages, a clock, conceptual questions), run
`kata interview .` here.

## The serving track

Past L6: `paged_kv_cache.py` is a paged cache for many sequences (blocks of one shared pool,
copy-on-write forks, admission on future growth, eviction, int8 KV). Its docstring explains the
layout. Grade it with `kata grade --track serving`.

## The batching track

The question's "related" topic: `scheduler.py` is the scheduler of a serving engine
(continuous batching, as vLLM and Orca do it): at every step it chooses which requests run and
how many tokens each, and manages their KV blocks; the kata's own small model runs each step it
returns. Its docstrings give the rules. Grade it with `kata grade --track batching`.

## The rubric

`kata rubric` lists every item, its level, its points and what it checks.
"""

GITIGNORE = """\
.kata_cache/
__pycache__/
.pytest_cache/
"""


def init_workspace(target: Path) -> list[Path]:
    """Make `target` (and its parents, if missing) a fresh workspace; return the paths written.

    Writes the starter's kv_cache.py, test_kv_cache.py, paged_kv_cache.py and scheduler.py and a
    README.md
    for the candidate, and a .gitignore (for kata grade's `.kata_cache/` and Python's and
    pytest's caches) unless `target` has one, which is left as it is. Raises FileExistsError,
    writing nothing, if any of the others is already there (a candidate's work is never
    overwritten; a link, even to nothing, counts: it is never written through) or if `target`
    or one of its parents is a file.
    When writing fails (or is interrupted), what this call wrote and the folders it made are
    removed before the error propagates: a failed init leaves nothing behind.
    """
    files = [
        target / DENSE.implementation,
        target / DENSE.tests,
        target / SERVING.implementation,
        target / BATCHING.implementation,
        target / "README.md",
    ]
    blocking = next((p for p in (target, *target.parents) if p.exists() and not p.is_dir()), None)
    if blocking is not None:
        raise FileExistsError(
            f"{blocking} is a file, not a folder: choose another place for the workspace"
        )
    existing = [path.name for path in files if os.path.lexists(path)]  # a link to nothing too
    if existing:
        raise FileExistsError(
            f"{target} already holds {', '.join(existing)}; not overwriting "
            "a workspace: choose another folder or remove them"
        )
    made = [folder for folder in (target, *target.parents) if not folder.exists()]
    ignore = target / ".gitignore"
    written = files + ([] if os.path.lexists(ignore) else [ignore])
    try:
        target.mkdir(parents=True, exist_ok=True)
        for path in files[:-1]:
            shutil.copyfile(STARTER / path.name, path)
        files[-1].write_text(README)
        if ignore in written:
            ignore.write_text(GITIGNORE)
    except BaseException:
        _remove(written, made)
        raise
    return written


def _remove(files: list[Path], folders: list[Path]) -> None:
    """Remove `files` (those there) and then `folders`, innermost first, those left empty."""
    for path in files:
        path.unlink(missing_ok=True)
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:
            pass


def default_target(cwd: Path, track: Track = DENSE) -> tuple[Path, Path | None] | None:
    """What `kata grade` with no PATH grades from `cwd`: (implementation, tests or None).

    In a workspace (cwd holds the track's file: kv_cache.py, paged_kv_cache.py for the serving
    track, scheduler.py for the batching track), that file; else, in a checkout of the kata,
    the one in cwd/starter/; else None. The tests are the track's test file beside it, None if
    there is none (the serving and batching tracks have none).
    """
    folder = next((f for f in (cwd, cwd / "starter") if (f / track.implementation).is_file()), None)
    if folder is None:
        return None
    tests = folder / track.tests if track.tests else None
    return folder / track.implementation, tests if tests and tests.is_file() else None
