"""A candidate's workspace: a folder holding their kv_cache.py, their tests and a README.

`init_workspace` makes one from the starter files, never the solutions or the graders; `kata grade`
run inside one grades it (`default_target`).
"""

from __future__ import annotations

import shutil
from pathlib import Path

STARTER = Path(__file__).resolve().parent.parent / "starter"
IMPLEMENTATION = "kv_cache.py"
TESTS = "test_kv_cache.py"

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
kata grade                            # the full report, items grouped by level
kata grade --watch                    # grade again every time you save
kata grade --item prefix-equivalence  # one item (ids are in the report)
kata grade --level L5                 # the items of one level
kata grade -x                         # stop at the first item that does not pass
python -m pytest -q test_kv_cache.py  # only your own tests
```

## Hints

A failing item shows a first hint. `kata hint ITEM` shows it too, and `kata hint ITEM --step 2`,
`--step 3`, ... go further, step by step, from a nudge to nearly the answer: take one at a time.

## The rubric

`kata rubric` lists every item, its level, its points and what it checks.
"""


def init_workspace(target: Path) -> list[Path]:
    """Make `target` (and its parents, if missing) a fresh workspace; return the paths written.

    Writes the starter's kv_cache.py and test_kv_cache.py and a README.md for the candidate.
    Raises FileExistsError, writing nothing, if any of the three is already there: a
    candidate's work is never overwritten.
    """
    files = [target / IMPLEMENTATION, target / TESTS, target / "README.md"]
    existing = [path.name for path in files if path.exists()]
    if existing:
        raise FileExistsError(f"{target} already holds {', '.join(existing)}; not overwriting "
                              "a workspace: choose another folder or remove them")
    target.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(STARTER / IMPLEMENTATION, files[0])
    shutil.copyfile(STARTER / TESTS, files[1])
    files[2].write_text(README)
    return files


def default_target(cwd: Path) -> tuple[Path, Path | None]:
    """What `kata grade` with no PATH grades from `cwd`: (implementation, tests or None).

    In a workspace (cwd holds a kv_cache.py), ./kv_cache.py; otherwise starter/kv_cache.py under
    cwd. The tests are the test_kv_cache.py beside it, None if there is none.
    """
    folder = cwd if (cwd / IMPLEMENTATION).is_file() else cwd / "starter"
    tests = folder / TESTS
    return folder / IMPLEMENTATION, tests if tests.is_file() else None
