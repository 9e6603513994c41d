"""Correct, but noisy: writes to stdout and fd 1 at import and on every call, and leaves a
sleeping child process behind that holds every inherited file descriptor."""

import os
import subprocess
import sys

import kv_cache_base as _base
from kv_cache_base import KVCache, append, apply_rope, decode_step, fork, release, reorder, reset

print("hello from import")
os.write(1, b"\x00\x00\x00\x00\x00\x00\x00\x10garbage on fd 1")


def attend(cache, query):
    print("PASSED everything")
    os.write(1, b"PASSED")
    subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], close_fds=False)
    return _base.attend(cache, query)
