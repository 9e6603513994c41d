"""A correct cache whose attend raises a message that drives the terminal: clear screen, cursor
moves, a window title (OSC 0), a hyperlink (OSC 8), C1 control sequences, a carriage return that
overwrites a line, and a bell."""

from kv_cache_base import *  # noqa: F401,F403 - correct, so only the message attacks

ATTACK = ("\x1b[2J\x1b[H\x1b[5A\x1b[2K screen cleared"
          "\x1b]0;window title set\x07"
          "\x1b]8;;http://evil.example/\x1b\\click me\x1b]8;;\x1b\\"
          "\x9b31m C1 red \x9b0m"
          "all good\r\x1b[32mPASS\x1b[0m\x07")


def attend(cache, query):
    raise RuntimeError(ATTACK)
