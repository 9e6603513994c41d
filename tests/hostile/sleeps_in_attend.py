"""attend waits for something that never comes: it uses no CPU time, and never returns."""

import time

from kv_cache_base import KVCache, append, apply_rope, decode_step, fork, release, reorder, reset


def attend(cache, query):
    time.sleep(3600)
