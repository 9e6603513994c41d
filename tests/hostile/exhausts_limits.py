"""Runs into a limit in `attend`, the one MODE (filled in by the test) names: "processes" forks
children that sleep until a fork fails, "file" writes one 100 MiB file, "disk" fills $TMPDIR
with 48 MiB files. Everything else is correct."""

import os
import tempfile
import time

import kv_cache_base as _base
from kv_cache_base import KVCache, append, apply_rope, decode_step, fork, release, reorder, reset

MODE = "@MODE@"
_CHUNK = b"\0" * (1 << 20)


def attend(cache, query):
    if MODE == "processes":
        while True:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
    folder = tempfile.mkdtemp()
    for n in range(1 if MODE == "file" else 1000):
        with open(os.path.join(folder, f"f{n}"), "wb") as f:
            for _ in range(100 if MODE == "file" else 48):
                f.write(_CHUNK)
    return _base.attend(cache, query)
