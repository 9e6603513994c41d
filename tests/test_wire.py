"""The wire format carries tensors exactly and refuses anything else."""

from __future__ import annotations

import json
import struct

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from graders.worker import frames, wire

DTYPES = list(wire.DTYPES.values())  # every dtype on the allow-list


@settings(max_examples=60, deadline=None, derandomize=True)
@given(dtype=st.sampled_from(DTYPES), shape=st.lists(st.integers(0, 4), max_size=4),
       seed=st.integers(0, 2**16))
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

    meta, sub = wire.decode(wire.encode([torch.zeros(2, 3, device="meta"),
                                         torch.zeros(2).as_subclass(Sub)]))
    assert isinstance(meta, wire.Opaque) and meta.device == "meta" and meta.shape == (2, 3)
    assert isinstance(sub, wire.Opaque) and sub.type_name.endswith("Sub")


def test_other_objects_travel_as_their_repr():
    assert wire.decode(wire.encode(object)) == repr(object)


def _frame(header: dict, payload: bytes = b"") -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack(">Q", len(raw)) + raw + payload


@pytest.mark.parametrize("frame", [
    b"\x00\x00",
    _frame({"body": {"__tensor__": 0}, "tensors": []}),
    _frame({"body": 1, "tensors": [{"dtype": "float32", "shape": [2], "device": "cpu",
                                    "type": "torch.Tensor", "nbytes": 4, "data": True}]}, b"1234"),
    _frame({"body": 1, "tensors": [{"dtype": "object", "shape": [1], "device": "cpu",
                                    "type": "torch.Tensor", "nbytes": 8, "data": True}]}, b"12345678"),
    _frame({"body": 1, "tensors": []}, b"trailing"),
], ids=["truncated", "dangling-reference", "short-payload", "unknown-dtype", "trailing-bytes"])
def test_malformed_frames_are_refused(frame):
    with pytest.raises(frames.WireError):
        wire.decode(frame)
