"""In its first attend, answers the request itself, on its own reply pipe, with a frame whose body
is `1`, and exits before the worker's code can answer. The judge once read `1` as a dict (a
TypeError, exit 4)."""

import os
import sys
import tempfile

import kv_cache_base as _base
from kv_cache_base import *  # noqa: F401,F403
from graders.worker import wire

_FLAG = os.path.join(tempfile.gettempdir(), "@TOKEN@")  # the attack is made once


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
    os.write(_reply_pipe(), wire.encode(1))
    os._exit(0)
