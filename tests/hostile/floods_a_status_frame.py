"""In its first attend, sends a 32 MiB frame of `{}` (a JSON list of 11 million empty dicts) on
every pipe it can write (the judge's fds 3 and 4, as they were, and its own reply pipe), then
exits. Parsed whole, it once took the judge's peak memory from 0.29 to 1.82 GiB."""

import os
import struct
import sys
import tempfile

import kv_cache_base as _base
from kv_cache_base import *  # noqa: F401,F403

_FLAG = os.path.join(tempfile.gettempdir(), "@TOKEN@")  # the attack is made once
_SIZE = 32 << 20


def _reply_pipe() -> int:
    frame = sys._getframe()
    while frame.f_code.co_name != "_run_child":
        frame = frame.f_back
    return frame.f_locals["write_fd"]


def attend(cache, query):
    try:
        os.close(os.open(_FLAG, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return _base.attend(cache, query)
    empties = b",".join([b"{}"] * ((_SIZE - 64) // 3))
    header = b'{"body": {"status": "done"}, "tensors": [], "x": [' + empties + b"]}"
    frame = struct.pack(">Q", len(header)) + header
    for fd in (3, 4, _reply_pipe()):
        try:
            os.write(fd, frame)
        except OSError:
            pass
    os._exit(0)
