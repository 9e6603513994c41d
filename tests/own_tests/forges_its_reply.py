"""A candidate's test file that answers for the worker: it writes a frame of its own, one that is
no run's outcome, on the pipe its run replies on, and leaves before pytest's result is sent."""

import os
import stat
import struct

for name in os.listdir("/proc/self/fd"):
    fd = int(name)
    try:
        is_pipe = stat.S_ISFIFO(os.fstat(fd).st_mode)
    except OSError:
        continue
    if fd > 2 and is_pipe:
        header = b'{"body": {"counts": "all passed"}, "tensors": []}'
        os.write(fd, struct.pack(">Q", len(header)) + header)
os._exit(0)
