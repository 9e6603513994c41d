"""Reads a file of the judge's by path at import (PATH, filled in by the test), and raises with
what it read, or why it could not."""

try:
    with open("@PATH@") as f:
        found = f"read: {f.read()}"
except OSError as exc:
    found = f"unreadable: {type(exc).__name__}"
raise ImportError(found)
