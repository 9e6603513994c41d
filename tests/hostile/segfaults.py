"""attend reads address 0: the process dies of SIGSEGV."""

import ctypes

from kv_cache_base import KVCache, append, apply_rope, decode_step, fork, release, reorder, reset


def attend(cache, query):
    return ctypes.string_at(0)
