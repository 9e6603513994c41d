"""Fails at import with a message of 4 MB of escapes and text, which every item not run could
copy (before: 76 MB of JSON, 152 MB of JUnit, 4 MB on the terminal)."""

raise ImportError("\x1b[2J" + "no module for you " * (4 * (1 << 20) // 18))
