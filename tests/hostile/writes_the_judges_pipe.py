"""In its first attend, writes a forged status and reply wherever the worker's pipes to the judge
would be: fds 3 and 4 (where they sat in every request child), and fds 3 and 4 of the zygote
that forked it, through /proc. Then answers correctly. A request child holds neither, nor may it
open them: the attack has no effect."""

import os
import tempfile

import kv_cache_base as _base
from kv_cache_base import *  # noqa: F401,F403
from graders.worker import wire

_FLAG = os.path.join(tempfile.gettempdir(), "@TOKEN@")  # the attack is made once
_FORGED = wire.encode({"status": "done"}) + wire.encode({"results": []})


def _write(fd: int) -> None:
    try:
        os.write(fd, _FORGED)
    except OSError:
        pass


def attend(cache, query):
    try:
        os.close(os.open(_FLAG, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return _base.attend(cache, query)
    for fd in (3, 4):
        _write(fd)
        try:
            zygotes = os.open(f"/proc/{os.getppid()}/fd/{fd}", os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            continue
        _write(zygotes)
        os.close(zygotes)
    return _base.attend(cache, query)
