"""Frames on a pipe between the judge and a worker, without torch.

A frame is an 8-byte big-endian header length, the header (UTF-8 JSON) and the tensor bytes its
descriptors count (`graders.worker.wire` encodes and decodes what is inside). Reading and writing
whole frames needs no torch, so the judge can start a worker, and send it its first message,
before it imports torch itself: the two imports overlap.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time

MAX_FRAME_BYTES = 1 << 28  # 256 MiB: more than any case sends, and a cap on what a reply can cost
HEADER = struct.Struct(">Q")


class WireError(Exception):
    """The other side sent something that is not a well-formed frame."""


def write_json(fd: int, body) -> None:
    """A frame holding `body`, JSON values only (no tensors): what `wire.encode` would make of it."""
    header = json.dumps({"body": body, "tensors": []}).encode()
    write_all(fd, HEADER.pack(len(header)) + header)


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_exactly(fd: int, n: int, deadline: float | None = None) -> bytes:
    """`n` bytes from `fd`; WireError on end of file, TimeoutError past `deadline` (monotonic)."""
    parts, remaining = [], n
    while remaining:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError
        chunk = os.read(fd, min(remaining, 1 << 20))
        if not chunk:
            raise WireError("the other side closed the pipe")
        parts.append(chunk)
        remaining -= len(chunk)
    return b"".join(parts)


def read_frame(fd: int, deadline: float | None = None) -> bytes:
    """One whole frame from `fd`; TimeoutError when it is not all there by `deadline`."""
    head = read_exactly(fd, HEADER.size, deadline)
    (header_len,) = HEADER.unpack(head)
    if header_len > MAX_FRAME_BYTES:
        raise WireError("frame header too large")
    header = read_exactly(fd, header_len, deadline)
    return head + header + read_exactly(fd, _payload_size(header), deadline)


def is_one_frame(data: bytes) -> bool:
    """Whether `data` is exactly one whole frame (what a child that finished its answer sent)."""
    try:
        (header_len,) = HEADER.unpack_from(data)
        header = data[HEADER.size : HEADER.size + header_len]
        return len(data) == HEADER.size + header_len + _payload_size(header)
    except (struct.error, WireError):
        return False


def _payload_size(header: bytes) -> int:
    try:
        payload = sum(int(d.get("nbytes", 0)) for d in json.loads(header)["tensors"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise WireError(f"malformed frame header: {exc}") from None
    if not 0 <= payload <= MAX_FRAME_BYTES:
        raise WireError("frame payload too large")
    return payload
