"""A stranger's file that writes into the judge's folders at import (MARK, filled in by the
test), then is the reference: the mark shows whether a grade ran it at all, and where it could
write. Under bubblewrap the write fails (nothing outside the private /tmp is writable)."""

from kv_cache_base import *  # noqa: F401,F403

try:
    with open("@MARK@", "w") as mark:
        mark.write("a stranger's file ran with this user's rights\n")
except OSError:
    pass
