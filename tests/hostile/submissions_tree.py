"""A folder of submissions an attacker prepared for `kata grade-all`: not a candidate file, but
the tree a test builds with `build`.

Folder names that are spreadsheet formulas (a name with a "/" is a nested folder: its path
starts the row), terminal escapes and HTML or Markdown, and one that is not UTF-8: each is a
plain submission, graded as any other and shown escaped. Then what reaches outside the folder:
a kv_cache.py that is a link to a secret file, a test file that is one, a folder that is a link
to a folder holding a kv_cache.py, and a kv_cache.py that is a FIFO (whoever opens it to read
waits forever). A link that stays inside the folder is graded.
"""

from __future__ import annotations

import os
from pathlib import Path

NAMES = [
    '=HYPERLINK("https:evil.example","click me")',
    "+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(A1:A9)",
    "esc\x1b]0;owned\x07\x1b[2J\rfake",
    "<img src=x onerror=alert(1)>",
    "[link](https:evil.example)|x| cell",
]
UNDECODABLE = b"not-utf8-\xff\xfe"  # a folder name that no UTF-8 decoder accepts
INSIDE_LINK = "alias"  # kv_cache.py links to plain's, inside the folder: graded
SKIPPED = {  # the folder, and what the summary says about it
    "links-a-secret": "kv_cache.py is a link to a file outside",
    "links-a-secret-test": "test_kv_cache.py is a link to a file outside",
    "team-outside": "a link to a folder outside",
    "fifo": "kv_cache.py is not a regular file",
}


def build(root: Path, outside: Path, source: str, secret: str) -> list[str]:
    """Make the tree in `root` (each submission's kv_cache.py is `source`) and the secret files
    in `outside`, each holding `secret`; return the names of the submissions to be graded (the
    undecodable one as os.fsdecode gives it), sorted as grade-all sorts them."""
    outside.mkdir(parents=True, exist_ok=True)
    (outside / "id_rsa").write_text(f"{secret}\n")
    (outside / "team").mkdir()
    (outside / "team" / "kv_cache.py").write_text(f"{secret} = 1 +\n")
    graded = [*NAMES, "plain", INSIDE_LINK]
    for name in (*NAMES, "plain", "links-a-secret-test"):
        (root / name).mkdir(parents=True)
        (root / name / "kv_cache.py").write_text(source)
    undecodable = os.path.join(os.fsencode(root), UNDECODABLE)
    os.mkdir(undecodable)
    with open(os.path.join(undecodable, b"kv_cache.py"), "w") as f:
        f.write(source)
    (root / INSIDE_LINK).mkdir()
    (root / INSIDE_LINK / "kv_cache.py").symlink_to(Path("..", "plain", "kv_cache.py"))
    (root / "links-a-secret").mkdir()
    (root / "links-a-secret" / "kv_cache.py").symlink_to(outside / "id_rsa")
    (root / "links-a-secret-test" / "test_kv_cache.py").symlink_to(outside / "id_rsa")
    (root / "team-outside").symlink_to(outside / "team", target_is_directory=True)
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "kv_cache.py")
    return sorted([*graded, os.fsdecode(UNDECODABLE)], key=lambda name: Path(name).parts)
