"""A correct cache whose attend raises a message of Trojan Source: bidi overrides and isolates
(U+202E, U+2066-U+2069) that show text in another order than it is, and zero-width characters."""

from kv_cache_base import *  # noqa: F401,F403 - correct, so only the message attacks

TROJAN = "access_level != \"user\u202e \u2066// check if admin\u2069 \u2066\" \u200b\u2060"


def attend(cache, query):
    raise RuntimeError(TROJAN)
