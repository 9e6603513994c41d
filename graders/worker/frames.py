"""Frames on a pipe between the judge and a worker, without torch.

A frame is an 8-byte big-endian header length, the header (UTF-8 JSON) and the tensor bytes its
descriptors count (`graders.worker.wire` encodes and decodes what is inside). Reading and writing
whole frames needs no torch, so the judge can start a worker, and send it its first message,
before it imports torch itself: the two imports overlap.

What a reader accepts is bounded by `Caps`, checked before the bytes are read: a header length
past the cap is refused on its 8 bytes, and a payload past it on the header that counts it, so a
reader's memory never holds more than the cap. A frame is read into one buffer of its size (time
and memory linear in the frame), or fed chunk by chunk to a `FrameBuffer`, which parses its
header once.
"""

from __future__ import annotations

import json
import os
import select
import struct
import time
from dataclasses import dataclass

HEADER = struct.Struct(">Q")
CHUNK = 1 << 20  # bytes read from a pipe at a time


@dataclass(frozen=True)
class Caps:
    """The most a reader accepts: `header` bytes of JSON, `frame` bytes in all."""

    header: int
    frame: int


# What the judge sends (plans with their tensors inline; a hidden prealloc plan holds 65,536 of
# them): trusted, bounded only against a bug.
REQUESTS = Caps(header=1 << 28, frame=1 << 28)
# What a worker's request child sends back. The largest legitimate reply measured (every item of
# both tracks with --hidden, seeds 1 and 2, and the own-tests runs) is 0.88 MB in all, with a
# header of 56 KB (tests/test_reply_boundary.py measures it again): the caps leave 70x and 18x.
# A header is JSON that the judge parses into Python objects, about 60 bytes each for the
# smallest (`{}`), so its cap is the tighter one.
REPLIES = Caps(header=1 << 20, frame=64 << 20)
# A status frame from a worker's zygote (a few fields and the tail of what a child printed) and
# the frames of its start (an import error: two lines of at most 4,000 characters, 12 bytes each
# as JSON escapes at worst): no tensors.
STATUSES = Caps(header=1 << 17, frame=1 << 17)


class WireError(Exception):
    """The other side sent something that is not a well-formed frame, or one past its caps."""


class PipeClosed(WireError):
    """The other side closed its end of the pipe (it ended, or is done with us)."""


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
    buffer = bytearray(n)
    _read_into(fd, memoryview(buffer), deadline)
    return bytes(buffer)


def read_frame(fd: int, deadline: float | None = None, caps: Caps = REQUESTS) -> bytearray:
    """One whole frame from `fd`; WireError when it breaks `caps` (before reading past them),
    TimeoutError when it is not all there by `deadline`."""
    head = read_exactly(fd, HEADER.size, deadline)
    (header_len,) = HEADER.unpack(head)
    if header_len > caps.header:
        raise WireError(
            f"a frame header of {header_len:,} bytes, more than the {caps.header:,} allowed"
        )
    header = read_exactly(fd, header_len, deadline)
    size = HEADER.size + header_len + payload_size(header, caps)
    frame = bytearray(size)
    frame[: HEADER.size + header_len] = head + header
    _read_into(fd, memoryview(frame)[HEADER.size + header_len :], deadline)
    return frame


def fits(frame: bytes, caps: Caps) -> bool:
    """Whether the whole frame `frame` (as `wire.encode` made it) is within `caps`."""
    (header_len,) = HEADER.unpack_from(frame)
    return header_len <= caps.header and len(frame) <= caps.frame


class FrameBuffer:
    """One frame arriving in chunks (what a request child sends its zygote). Its header is
    parsed once, when it is all there, so the whole frame costs time linear in its size;
    WireError as soon as what arrived cannot start a frame within `caps`."""

    def __init__(self, caps: Caps = REPLIES):
        self.caps = caps
        self.data = bytearray()
        self.size: int | None = None  # of the whole frame, once its header arrived

    def feed(self, chunk: bytes) -> None:
        self.data += chunk
        if self.size is None and len(self.data) >= HEADER.size:
            (header_len,) = HEADER.unpack_from(self.data)
            if header_len > self.caps.header:
                raise WireError(
                    f"a frame header of {header_len:,} bytes, more than the "
                    f"{self.caps.header:,} allowed"
                )
            if len(self.data) >= HEADER.size + header_len:
                header = bytes(self.data[HEADER.size : HEADER.size + header_len])
                self.size = HEADER.size + header_len + payload_size(header, self.caps)

    @property
    def whole(self) -> bool:
        """Whether a whole frame arrived (bytes after it are not part of it)."""
        return self.size is not None and len(self.data) >= self.size

    def frame(self) -> bytes:
        """The frame, once `whole`."""
        return bytes(memoryview(self.data)[: self.size])


def payload_size(header: bytes, caps: Caps = REQUESTS) -> int:
    """The tensor bytes the frame whose JSON header is `header` carries after it; WireError
    when the header is not JSON with a list of tensor descriptors, or the frame would break
    `caps`."""
    try:
        descriptors = json.loads(header)["tensors"]
        if not isinstance(descriptors, list):
            raise TypeError("the tensors are not a list")
        payload = sum(_nbytes(d) for d in descriptors)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise WireError(f"malformed frame header: {type(exc).__name__}: {exc}"[:200]) from None
    if not 0 <= payload <= caps.frame - HEADER.size - len(header):
        raise WireError(
            f"a frame of {HEADER.size + len(header) + payload:,} bytes, more than "
            f"the {caps.frame:,} allowed"
        )
    return payload


def _nbytes(descriptor: dict) -> int:
    nbytes = descriptor.get("nbytes", 0)
    if type(nbytes) is not int or nbytes < 0:
        raise TypeError(f"a tensor's byte count is {type(nbytes).__name__} {str(nbytes)[:20]}")
    return nbytes


def _read_into(fd: int, view: memoryview, deadline: float | None) -> None:
    """Fill `view` from `fd`; WireError on end of file, TimeoutError past `deadline`."""
    while view:
        if deadline is not None:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError
        n = os.readv(fd, [view[:CHUNK]])
        if not n:
            raise PipeClosed("the other side closed the pipe")
        view = view[n:]
