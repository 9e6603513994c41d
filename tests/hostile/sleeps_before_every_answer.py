"""Correct, but every request waits before it answers: the first call of each forked request
sleeps @SLEEP@ s, just under the per-call limit on the clock, using no CPU time. No call times
out, yet a whole grade adds up the sleeps (issue 40: past 400 s at --timeout 10, sleeping 20 s):
only the grade's time budget stops it."""

import time

import kv_cache_base

_slept = []  # each request runs in a fresh fork: the first call of each sleeps


def _sleeps_first(function):
    def waits_then_answers(*args, **kwargs):
        if not _slept:
            _slept.append(True)
            time.sleep(@SLEEP@)
        return function(*args, **kwargs)

    return waits_then_answers


class KVCache(kv_cache_base.KVCache):
    def __init__(self, *args, **kwargs):
        _sleeps_first(lambda: None)()
        super().__init__(*args, **kwargs)


append, attend, reset, release, decode_step, apply_rope, reorder, fork = (
    _sleeps_first(getattr(kv_cache_base, name)) for name in
    ("append", "attend", "reset", "release", "decode_step", "apply_rope", "reorder", "fork"))
