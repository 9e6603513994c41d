"""In its first append, answers the request itself (its index and nonce read from the worker's
stack) with a tensor wherever the plan asks for a state: a dict of the cache's attributes. The
judge once indexed it ('Opaque' object is not subscriptable, exit 4)."""

import os
import sys
import tempfile

import torch

import kv_cache_base as _base
from kv_cache_base import *  # noqa: F401,F403
from graders.worker import wire

_FLAG = os.path.join(tempfile.gettempdir(), "@TOKEN@")  # the attack is made once


def _request() -> dict:
    frame = sys._getframe()
    while frame.f_code.co_name != "_run_child":
        frame = frame.f_back
    return frame.f_locals


def append(cache, new_key, new_value, counts=None):
    try:
        os.close(os.open(_FLAG, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return _base.append(cache, new_key, new_value, counts)
    child = _request()
    ops = child["batch"]["requests"][child["index"]]["plan"]["ops"]
    results = [{"ok": torch.zeros(2, 3) if op["op"] == "state" else None} for op in ops]
    reply = {"index": child["index"], "batch": child["batch"]["batch"],
             "reply": {"results": results}}
    os.write(child["write_fd"], wire.encode(reply))
    os._exit(0)
