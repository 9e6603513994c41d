"""Floods its output: 400 MB to stdout and stderr at import and 8 MB in every attend, then
answers correctly."""

import os
import sys

from kv_cache_base import *  # noqa: F401,F403
import kv_cache_base as _base

_LINE = b"x" * (1 << 20)


def _flood(mib: int):
    for _ in range(mib):
        os.write(1, _LINE)
        os.write(2, _LINE)


_flood(200)


def attend(cache, query):
    _flood(4)
    return _base.attend(cache, query)
