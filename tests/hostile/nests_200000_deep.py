"""In its first attend, answers the request itself with a frame whose body is a list nested
200,000 deep (400 KB of JSON), and exits. Parsing it once raised RecursionError, which neither
the frames nor the decoder caught (exit 4)."""

import os
import struct
import sys
import tempfile

import kv_cache_base as _base
from kv_cache_base import *  # noqa: F401,F403

_FLAG = os.path.join(tempfile.gettempdir(), "@TOKEN@")  # the attack is made once
_DEPTH = 200_000


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
    header = b'{"tensors": [], "body": ' + b"[" * _DEPTH + b"]" * _DEPTH + b"}"
    os.write(_reply_pipe(), struct.pack(">Q", len(header)) + header)
    os._exit(0)
