"""The wire format carries tensors exactly and refuses anything else."""

from __future__ import annotations

import json
import os
import struct
import tempfile
import time

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graders.worker import frames, wire

DTYPES = list(wire.DTYPES.values())  # every dtype on the allow-list


@settings(max_examples=60, deadline=None, derandomize=True)
@given(
    dtype=st.sampled_from(DTYPES),
    shape=st.lists(st.integers(0, 4), max_size=4),
    seed=st.integers(0, 2**16),
)
def test_tensors_round_trip_exactly(dtype, shape, seed):
    g = torch.Generator().manual_seed(seed)
    t = (torch.randn(shape, generator=g) * 100).to(dtype)
    back = wire.decode(wire.encode({"t": t, "n": [1, 2.5, None, "x"]}))
    assert back["n"] == [1, 2.5, None, "x"]
    assert type(back["t"]) is torch.Tensor and back["t"].dtype == dtype
    assert torch.equal(back["t"], t)


def test_non_contiguous_and_nan_survive():
    t = torch.randn(3, 4).T
    t[0, 0] = float("nan")
    back = wire.decode(wire.encode(t))
    assert back.shape == (4, 3) and torch.isnan(back[0, 0])
    assert torch.equal(back.nan_to_num(), t.nan_to_num())


def test_meta_tensors_and_subclasses_arrive_without_data():
    class Sub(torch.Tensor):
        pass

    meta, sub = wire.decode(
        wire.encode([torch.zeros(2, 3, device="meta"), torch.zeros(2).as_subclass(Sub)])
    )
    assert isinstance(meta, wire.Opaque) and meta.device == "meta" and meta.shape == (2, 3)
    assert isinstance(sub, wire.Opaque) and sub.type_name.endswith("Sub")


def test_other_objects_travel_as_their_repr():
    assert wire.decode(wire.encode(object)) == repr(object)


def _frame(header: dict, payload: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">Q", len(raw)) + raw + payload


@pytest.mark.parametrize(
    "frame",
    [
        b"\x00\x00",
        _frame({"body": {"__tensor__": 0}, "tensors": []}),
        _frame(
            {
                "body": 1,
                "tensors": [
                    {
                        "dtype": "float32",
                        "shape": [2],
                        "device": "cpu",
                        "type": "torch.Tensor",
                        "nbytes": 4,
                        "data": True,
                    }
                ],
            },
            b"1234",
        ),
        _frame(
            {
                "body": 1,
                "tensors": [
                    {
                        "dtype": "object",
                        "shape": [1],
                        "device": "cpu",
                        "type": "torch.Tensor",
                        "nbytes": 8,
                        "data": True,
                    }
                ],
            },
            b"12345678",
        ),
        _frame({"body": 1, "tensors": []}, b"trailing"),
    ],
    ids=["truncated", "dangling-reference", "short-payload", "unknown-dtype", "trailing-bytes"],
)
def test_malformed_frames_are_refused(frame):
    with pytest.raises(frames.WireError):
        wire.decode(frame)


def test_a_frame_of_several_tensors_decodes_each_from_its_own_bytes():
    tensors = {
        "a": torch.arange(5, dtype=torch.int64),
        "b": torch.randn(2, 3),
        "c": torch.tensor([True, False]),
        "d": torch.ones(0, 4),
        "e": torch.arange(3.0),
    }
    back = wire.decode(wire.encode({"t": tensors, "list": [tensors["e"], 7]}))
    for name, tensor in tensors.items():
        assert back["t"][name].dtype == tensor.dtype and torch.equal(back["t"][name], tensor)
    assert torch.equal(back["list"][0], tensors["e"]) and back["list"][1] == 7


def test_a_candidate_dict_that_looks_like_a_tensor_reference_travels_as_its_repr():
    back = wire.decode(wire.encode([torch.ones(1), {"__tensor__": 0}, {"__repr__": "x"}]))
    assert isinstance(back[1], wire.Repr) and isinstance(back[2], wire.Repr)
    assert back[1] == repr({"__tensor__": 0})


def test_the_encoder_refuses_a_value_nested_deeper_than_the_decoder_takes():
    value = [1]
    for _ in range(wire.MAX_DEPTH):
        value = [value]
    with pytest.raises(ValueError, match="nested"):
        wire.encode(value)
    shallow = [1]
    for _ in range(wire.MAX_DEPTH - 2):
        shallow = [shallow]
    assert wire.decode(wire.encode(shallow)) == shallow


def _descriptor(**changes) -> dict:
    base = {
        "dtype": "float32",
        "shape": [2],
        "device": "cpu",
        "type": "torch.Tensor",
        "nbytes": 8,
        "data": True,
    }
    return {k: v for k, v in {**base, **changes}.items() if v is not None}


def _nested(depth: int) -> bytes:
    return _frame_raw(b'{"tensors": [], "body": ' + b"[" * depth + b"]" * depth + b"}")


def _frame_raw(header: bytes, payload: bytes = b"") -> bytes:
    return struct.pack(">Q", len(header)) + header + payload


# Every raise of wire.decode, each by a frame that takes it (the message names which).
@pytest.mark.parametrize(
    "frame, says",
    [
        (b"\x00\x00", "malformed frame header"),
        (_frame_raw(b"{not json"), "malformed frame header"),
        (_frame_raw(b'{"body": 1}'), "malformed frame header"),
        (_frame_raw(b'{"body": 1, "tensors": 5}'), "malformed frame header"),
        (_frame_raw(b"[1, 2]"), "malformed frame header"),
        (_nested(200_000), "malformed frame header"),
        (
            _frame({"body": 1, "tensors": [_descriptor(dtype=None)]}, b"12345678"),
            "malformed tensor descriptor",
        ),
        (_frame({"body": 1, "tensors": [[1, 2]]}), "malformed tensor descriptor"),
        (
            _frame({"body": 1, "tensors": [_descriptor(shape=[1] * 65, nbytes=4)]}, b"1234"),
            "dimensions",
        ),
        (_frame({"body": 1, "tensors": [_descriptor(shape=[2.0])]}, b"12345678"), "not integers"),
        (_frame({"body": 1, "tensors": [_descriptor(shape=["2"])]}, b"12345678"), "not integers"),
        (_frame({"body": 1, "tensors": [_descriptor(shape=[-2], nbytes=0)]}), "out of range"),
        (
            _frame({"body": 1, "tensors": [_descriptor(shape=[1 << 62], nbytes=0, data=None)]}),
            "out of range",
        ),
        (_frame({"body": 1, "tensors": [_descriptor(data=None)]}, b"12345678"), "data-less"),
        (_frame({"body": 1, "tensors": [_descriptor(dtype="object")]}, b"12345678"), "not allowed"),
        (_frame({"body": 1, "tensors": [_descriptor(device="meta")]}, b"12345678"), "not allowed"),
        (_frame({"body": 1, "tensors": [_descriptor(type="m.Sub")]}, b"12345678"), "not allowed"),
        (_frame({"body": 1, "tensors": [_descriptor(nbytes=4)]}, b"1234"), "byte count"),
        (_frame({"body": 1, "tensors": [_descriptor()]}, b"1234"), "shorter"),
        (_frame({"body": 1, "tensors": []}, b"trailing"), "trailing"),
        (_nested(wire.MAX_DEPTH + 1), "nested"),
        (_frame({"body": {"__tensor__": 0}, "tensors": []}), "out of range"),
        (
            _frame({"body": {"__tensor__": True}, "tensors": [_descriptor()]}, b"12345678"),
            "out of range",
        ),
    ],
    ids=[
        "truncated",
        "not-json",
        "no-tensors",
        "tensors-not-a-list",
        "header-not-a-dict",
        "nested-200000-deep",
        "descriptor-lacks-dtype",
        "descriptor-not-a-dict",
        "65-dimensions",
        "float-size",
        "string-size",
        "negative-size",
        "huge-size",
        "data-less-with-bytes",
        "unknown-dtype",
        "meta-with-data",
        "subclass-with-data",
        "byte-count",
        "short-payload",
        "trailing-bytes",
        "too-deep",
        "dangling-reference",
        "bool-reference",
    ],
)
def test_every_malformed_frame_is_a_wire_error_that_says_what(frame, says):
    with pytest.raises(frames.WireError, match=says):
        wire.decode(frame)


def _file_with(data: bytes) -> int:
    """A descriptor that reads `data`, then end of file (a pipe holds only 64 KiB unread)."""
    with tempfile.TemporaryFile() as f:
        f.write(data)
        f.seek(0)
        return os.dup(f.fileno())


@pytest.mark.parametrize(
    "frame, says",
    [
        (struct.pack(">Q", (1 << 20) + 1), "frame header of 1,048,577 bytes"),
        (_frame({"body": 1, "tensors": [_descriptor(nbytes=64 << 20)]}), "more than the"),
        (_frame_raw(b"{not json"), "malformed frame header"),
        (_frame_raw(b'{"tensors": {"a": 1}}'), "malformed frame header"),
        (_frame({"body": 1, "tensors": [_descriptor(nbytes="8")]}), "malformed frame header"),
        (_frame({"body": 1, "tensors": [_descriptor(nbytes=-8)]}), "malformed frame header"),
        (_frame({"body": 1, "tensors": [5]}), "malformed frame header"),
        (_nested(200_000), "malformed frame header"),
        (b"", "closed"),
        (_frame({"body": 1, "tensors": [_descriptor()]}, b"1234"), "closed"),
    ],
    ids=[
        "header-past-cap",
        "payload-past-cap",
        "not-json",
        "tensors-not-a-list",
        "string-nbytes",
        "negative-nbytes",
        "descriptor-not-a-dict",
        "nested-200000-deep",
        "empty-pipe",
        "cut-short",
    ],
)
def test_a_reader_refuses_a_frame_past_its_caps_or_cut_short_before_reading_it(frame, says):
    fd = _file_with(frame)
    try:
        with pytest.raises(frames.WireError, match=says):
            frames.read_frame(fd, caps=frames.REPLIES)
    finally:
        os.close(fd)


def test_a_reader_stops_at_its_deadline():
    read_end, write_end = os.pipe()
    os.write(write_end, _frame({"body": 1, "tensors": []})[:5])
    try:
        with pytest.raises(TimeoutError):
            frames.read_frame(read_end, time.monotonic() + 0.05)
    finally:
        os.close(read_end)
        os.close(write_end)


def test_a_frame_fits_its_caps_by_header_and_by_size():
    frame = wire.encode({"t": torch.zeros(4)})
    assert frames.fits(frame, frames.REPLIES)
    assert not frames.fits(frame, frames.Caps(header=8, frame=1 << 20))
    assert not frames.fits(frame, frames.Caps(header=1 << 20, frame=len(frame) - 1))


def test_a_frame_buffer_takes_the_first_frame_and_parses_its_header_once(monkeypatch):
    parsed = []
    monkeypatch.setattr(
        frames,
        "payload_size",
        lambda header, caps: (
            parsed.append(header) or sum(d["nbytes"] for d in json.loads(header)["tensors"])
        ),
    )
    first = wire.encode({"t": torch.arange(1 << 18, dtype=torch.float32)})  # 1 MiB of data
    second = wire.encode({"forged": True})
    buffer = frames.FrameBuffer()
    data = first + second
    for start in range(0, len(data), 1000):
        buffer.feed(data[start : start + 1000])
    assert buffer.whole and buffer.frame() == first and len(parsed) == 1


@pytest.mark.parametrize(
    "data, says",
    [
        (struct.pack(">Q", 32 << 20), "more than the"),
        (_nested(200_000), "malformed frame header"),
        (_frame({"body": 1, "tensors": [_descriptor(nbytes=65 << 20)]}), "more than the"),
    ],
    ids=["32-MiB-header", "nested-200000-deep", "payload-past-cap"],
)
def test_a_frame_buffer_refuses_what_cannot_be_a_frame_within_its_caps(data, says):
    with pytest.raises(frames.WireError, match=says):
        frames.FrameBuffer(frames.REPLIES).feed(data)


_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats()
    | st.text(max_size=8)
    | st.sampled_from(["float32", "int64", "cpu", "meta", "torch.Tensor", "__tensor__"]),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(
            st.sampled_from(
                [
                    "dtype",
                    "shape",
                    "device",
                    "type",
                    "nbytes",
                    "data",
                    "__tensor__",
                    "__repr__",
                    "body",
                    "tensors",
                ]
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None, derandomize=True)
@given(
    field=st.sampled_from(["dtype", "shape", "device", "type", "nbytes", "data", None]),
    value=_JSON,
    body=_JSON,
    cut=st.integers(0, 9),
)
def test_whatever_a_header_holds_the_decoder_returns_a_body_or_raises_wire_error(
    field, value, body, cut
):
    descriptor = _descriptor(shape=[3])
    descriptor = {**descriptor, "nbytes": 12} if field is None else {**descriptor, field: value}
    frame = _frame({"body": body, "tensors": [descriptor]}, b"x" * (12 - cut))
    try:
        wire.decode(frame)
    except frames.WireError:
        pass
    buffer = frames.FrameBuffer(frames.REPLIES)
    try:
        buffer.feed(frame)
    except frames.WireError:
        pass
