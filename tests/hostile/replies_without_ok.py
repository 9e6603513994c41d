"""In its first attend, answers the request itself with a reply that names the request (its
index and the batch's nonce, read from the worker's stack) but whose results hold neither a
value nor an exception. The judge once read result["ok"] (a KeyError, exit 4)."""

import os
import sys
import tempfile

import kv_cache_base as _base
from kv_cache_base import *  # noqa: F401,F403
from graders.worker import wire

_FLAG = os.path.join(tempfile.gettempdir(), "@TOKEN@")  # the attack is made once


def _request() -> dict:
    frame = sys._getframe()
    while frame.f_code.co_name != "_run_child":
        frame = frame.f_back
    return frame.f_locals


def attend(cache, query):
    try:
        os.close(os.open(_FLAG, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return _base.attend(cache, query)
    child = _request()
    ops = child["batch"]["requests"][child["index"]]["plan"]["ops"]
    reply = {"index": child["index"], "batch": child["batch"]["batch"],
             "reply": {"results": [{} for _ in ops]}}
    os.write(child["write_fd"], wire.encode(reply))
    os._exit(0)
