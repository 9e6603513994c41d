"""Rewrites the grader at import: appends to the kata's files (KATA, filled in by the test), so
that a later grade would judge differently, and drops a file into the kata's tree."""

import os

from kv_cache_base import *  # noqa: F401,F403

KATA = "@KATA@"
for name in ("graders/shared/compare.py", "solutions/kv_cache.py", "rubric/rubric.toml"):
    try:
        with open(os.path.join(KATA, name), "a") as f:
            f.write("\n# tampered\n")
    except OSError:
        pass
try:
    open(os.path.join(KATA, "graders", "planted.py"), "w").write("PLANTED = True\n")
except OSError:
    pass
