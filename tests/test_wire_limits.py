"""The wire's limits hold exactly at their edges: a frame, a body or a text at a cap crosses,
one step past it is refused (or cut), and each allowed dtype arrives as itself.

Quick unit tests of graders.worker.wire and graders.worker.frames: no worker process.
"""

from __future__ import annotations

import json
import os
import struct
import tempfile
import time

import pytest
import torch

from graders.worker import frames, ops, wire

# Each name on the allow-list with the dtype it must arrive as (written out, not read from
# wire.DTYPES, so a name mapped to the wrong dtype is caught).
ALLOWED = [
    ("float64", torch.float64),
    ("float32", torch.float32),
    ("float16", torch.float16),
    ("bfloat16", torch.bfloat16),
    ("int64", torch.int64),
    ("int32", torch.int32),
    ("int16", torch.int16),
    ("int8", torch.int8),
    ("uint8", torch.uint8),
    ("bool", torch.bool),
]
DEPTH = 32  # containers one inside another a body may hold (wire.MAX_DEPTH, the documented cap)


def _file_with(data: bytes) -> int:
    """A descriptor that reads `data`, then end of file."""
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        return os.dup(f.fileno())


def _read(data: bytes, caps: frames.Caps) -> bytearray:
    fd = _file_with(data)
    try:
        return frames.read_frame(fd, caps=caps)
    finally:
        os.close(fd)


def _header_of(size: int, descriptors: list[dict] | None = None) -> bytes:
    """A JSON header of exactly `size` bytes (its body a padding string)."""
    descriptors = descriptors or []
    bare = json.dumps({"body": "", "tensors": descriptors}).encode()
    header = json.dumps({"body": "x" * (size - len(bare)), "tensors": descriptors}).encode()
    assert len(header) == size
    return header


def _frame_of(header: bytes, payload: bytes = b"") -> bytes:
    return struct.pack(">Q", len(header)) + header + payload


def _nested(depth: int, kind: str):
    """A body of `depth` containers one inside another: lists, dicts, or both by turns."""
    value = 1
    for level in range(depth):
        as_dict = kind == "dict" or (kind == "mixed" and level % 2)
        value = {"k": value} if as_dict else [value]
    return value


@pytest.mark.parametrize("name, dtype", ALLOWED, ids=[name for name, _ in ALLOWED])
def test_each_allowed_dtype_arrives_as_itself_with_its_data(name, dtype):
    tensor = (torch.arange(-3, 3) * 7).to(dtype)  # [6]
    back = wire.decode(wire.encode(tensor))
    assert type(back) is torch.Tensor and back.dtype == dtype and torch.equal(back, tensor)
    frame = wire.encode(tensor)
    (header_len,) = struct.unpack_from(">Q", frame)
    assert json.loads(frame[8 : 8 + header_len])["tensors"][0]["dtype"] == name


@pytest.mark.parametrize("kind", ["list", "dict", "mixed"])
def test_a_body_nested_exactly_at_the_cap_crosses_and_one_deeper_is_refused_both_ways(kind):
    at_cap, past = _nested(DEPTH, kind), _nested(DEPTH + 1, kind)
    assert wire.decode(wire.encode(at_cap)) == at_cap
    with pytest.raises(ValueError, match="nested"):
        wire.encode(past)
    header = json.dumps({"body": past, "tensors": []}).encode()
    with pytest.raises(frames.WireError, match="nested"):
        wire.decode(_frame_of(header))


def test_a_tensor_of_exactly_max_dims_dimensions_crosses():
    tensor = torch.arange(2.0).reshape([2] + [1] * (wire.MAX_DIMS - 1))  # [2, 1, ..., 1]: 64 dims
    back = wire.decode(wire.encode(tensor))
    assert back.shape == tensor.shape and torch.equal(back, tensor)


def test_a_long_repr_is_cut_to_200_characters():
    class Wordy:
        def __repr__(self):
            return "w" * 5_000

    back = wire.decode(wire.encode([Wordy()]))[0]
    assert isinstance(back, wire.Repr) and back == "w" * 200


def test_a_value_whose_repr_raises_travels_as_a_repr_naming_its_type_and_the_error():
    class Hostile:
        def __repr__(self):
            raise RuntimeError("no repr for you")

    back = wire.decode(wire.encode({"odd": Hostile()}))["odd"]
    assert isinstance(back, wire.Repr)
    assert "Hostile" in back and "RuntimeError" in back


def test_a_disallowed_descriptor_with_a_long_dtype_name_is_refused_with_a_short_message():
    descriptor = {
        "dtype": "d" * 5_000,
        "shape": [1],
        "device": "cpu",
        "type": "torch.Tensor",
        "nbytes": 4,
        "data": True,
    }
    frame = _frame_of(json.dumps({"body": 1, "tensors": [descriptor]}).encode(), b"1234")
    with pytest.raises(frames.WireError, match="not allowed") as refused:
        wire.decode(frame)
    assert len(str(refused.value)) == 200


def test_an_exception_s_texts_are_cut_to_4000_characters_in_the_worker():
    try:
        raise ValueError("m" * 10_000)
    except ValueError as exc:
        described = ops._describe_exception(exc)
    assert described["message"] == "m" * 4_000
    assert len(described["traceback"]) == 4_000


def test_a_frame_written_by_write_json_is_read_back_whole_and_once():
    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # a writer that repeats itself fills the pipe and fails
    try:
        frames.write_json(write_end, {"status": "ok", "tail": ["a", "b"]})
        frame = frames.read_frame(read_end, time.monotonic() + 1, caps=frames.STATUSES)
        assert wire.decode(bytes(frame)) == {"status": "ok", "tail": ["a", "b"]}
        os.set_blocking(read_end, False)
        with pytest.raises(BlockingIOError):
            os.read(read_end, 1)  # nothing after the frame
    finally:
        os.close(read_end)
        os.close(write_end)


CAPS = frames.Caps(header=300, frame=1_000)


def test_a_frame_whose_header_is_exactly_at_the_header_cap_is_read():
    frame = _frame_of(_header_of(CAPS.header))
    assert _read(frame, CAPS) == frame
    assert frames.fits(frame, CAPS)
    buffer = frames.FrameBuffer(CAPS)
    buffer.feed(frame)
    assert buffer.whole and buffer.frame() == frame


def test_a_header_one_byte_past_its_cap_is_refused_on_its_length():
    frame = _frame_of(_header_of(CAPS.header + 1))
    with pytest.raises(frames.WireError, match="frame header of 301 bytes"):
        _read(frame, CAPS)
    assert not frames.fits(frame, CAPS)
    with pytest.raises(frames.WireError, match="frame header of 301 bytes"):
        frames.FrameBuffer(CAPS).feed(frame[:8])


def _at_frame_cap(extra: int) -> bytes:
    """A frame of CAPS.frame + `extra` bytes: a 200-byte header and the tensor bytes it counts."""
    payload = CAPS.frame - 8 - 200 + extra
    descriptor = {
        "dtype": "uint8",
        "shape": [payload],
        "device": "cpu",
        "type": "torch.Tensor",
        "nbytes": payload,
        "data": True,
    }
    return _frame_of(_header_of(200, [descriptor]), b"p" * payload)


def test_a_frame_exactly_at_its_size_cap_is_read_and_one_byte_more_is_refused():
    at_cap, past = _at_frame_cap(0), _at_frame_cap(1)
    assert len(at_cap) == CAPS.frame and _read(at_cap, CAPS) == at_cap
    assert frames.fits(at_cap, CAPS) and not frames.fits(past, CAPS)
    with pytest.raises(frames.WireError, match="1,001 bytes, more than the 1,000 allowed"):
        _read(past, CAPS)


def test_a_status_frame_is_capped_at_128_kib_by_header_and_by_size():
    at_cap = _frame_of(_header_of((1 << 17) - 8))
    assert _read(at_cap, frames.STATUSES) == at_cap
    with pytest.raises(frames.WireError, match="131,073 bytes, more than the 131,072"):
        _read(_frame_of(_header_of((1 << 17) - 7)), frames.STATUSES)
    with pytest.raises(frames.WireError, match="frame header of 131,073 bytes"):
        _read(struct.pack(">Q", (1 << 17) + 1), frames.STATUSES)


def test_a_frame_buffer_fed_byte_by_byte_is_whole_exactly_at_its_last_byte():
    frame = wire.encode({"t": torch.arange(4.0), "n": "text"})
    buffer = frames.FrameBuffer()
    assert not buffer.whole
    for index in range(len(frame)):
        assert not buffer.whole
        buffer.feed(frame[index : index + 1])
    assert buffer.whole and buffer.frame() == frame


@pytest.mark.parametrize(
    "descriptor",
    [
        {"dtype": "float32", "shape": [2], "device": "meta", "type": "torch.Tensor"},
        {"dtype": "float32", "shape": [2], "device": "meta", "type": "torch.Tensor", "nbytes": 0},
    ],
    ids=["without-nbytes", "nbytes-0"],
)
def test_a_descriptor_without_bytes_counts_none(descriptor):
    frame = _frame_of(json.dumps({"body": 1, "tensors": [descriptor]}).encode())
    assert _read(frame, frames.REPLIES) == frame


def test_a_deadline_already_past_times_out_at_once():
    read_end, write_end = os.pipe()
    try:
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            frames.read_frame(read_end, start - 1)
        assert time.monotonic() - start < 0.5
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_byte_count_that_is_a_long_string_is_quoted_by_its_first_20_characters():
    descriptor = {
        "dtype": "float32",
        "shape": [2],
        "device": "cpu",
        "type": "torch.Tensor",
        "nbytes": "n" * 5_000,
        "data": True,
    }
    frame = _frame_of(json.dumps({"body": 1, "tensors": [descriptor]}).encode())
    with pytest.raises(frames.WireError, match="malformed frame header") as refused:
        _read(frame, frames.REPLIES)
    assert "n" * 20 in str(refused.value) and "n" * 21 not in str(refused.value)
