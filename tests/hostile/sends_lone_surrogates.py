"""A correct cache whose attend raises a message that is not valid Unicode text: lone surrogates
(which UTF-8 cannot hold), characters XML 1.0 forbids (NUL, vertical tab, U+FFFE) and an
undecodable byte kept by surrogateescape."""

from kv_cache_base import *  # noqa: F401,F403 - correct, so only the message attacks

BROKEN = "lone \ud800 high, \udfff low, nul \x00 vt \x0b noncharacter \ufffe byte \udcff"


def attend(cache, query):
    raise RuntimeError(BROKEN)
