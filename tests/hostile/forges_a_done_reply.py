"""In its first attend, forges the zygote's "done" status and a reply for the next request (index
+1, the same nonce) on every pipe it can write: the judge's (fds 3 and 4, as they were), and its
own reply pipe, then exits. On the judge's pipe this once put every later reply one batch
behind, so later items blamed the wrong operation."""

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
    index, nonce = child["index"], child["batch"]["batch"]
    forged = (wire.encode({"status": "done", "index": index, "batch": nonce})
              + wire.encode({"index": index, "batch": nonce, "reply": {"results": []}})
              + wire.encode({"status": "done", "index": index + 1, "batch": nonce}))
    for fd in (3, 4, child["write_fd"]):
        try:
            os.write(fd, forged)
        except OSError:
            pass
    os._exit(0)
