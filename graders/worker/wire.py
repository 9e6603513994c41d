"""The bytes that cross between the judge and a worker process.

A message is JSON plus raw tensor bytes, never pickle: unpickling what a candidate's process sends
would let it run code in the judge. A frame is

    8-byte big-endian header length | header (UTF-8 JSON) | tensor bytes, back to back

The header is ``{"body": ..., "tensors": [descriptor, ...]}``; inside the body a tensor stands as
``{"__tensor__": i}``. A descriptor says the dtype, shape, device and exact Python type of what the
sender held. Only plain CPU tensors carry data; anything else (a meta tensor, a Tensor subclass)
travels as its descriptor alone, so the judge can say what was wrong with it.

This module is the codec; `graders.worker.frames` reads and writes the frames. The decoder checks
every descriptor against the allow-list and the byte count, and builds fresh
tensors that own their memory: what arrives is data, never behaviour.
"""

from __future__ import annotations

import ctypes
import json
import math
import struct
from dataclasses import dataclass

import torch

from graders.worker.frames import HEADER as _HEADER
from graders.worker.frames import WireError, write_all

DTYPES = {
    "float64": torch.float64,
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int64": torch.int64,
    "int32": torch.int32,
    "int16": torch.int16,
    "int8": torch.int8,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
DTYPE_NAMES = {dtype: name for name, dtype in DTYPES.items()}

@dataclass(frozen=True)
class Opaque:
    """A tensor that arrived without data: on another device, of an unknown dtype, or a subclass.

    `dtype` is the dtype's name (``"float32"``, or torch's repr when it is not on the allow-list),
    `type_name` the sender's exact Python type.
    """

    dtype: str
    shape: tuple[int, ...]
    device: str
    type_name: str


def encode(body) -> bytes:
    """One frame holding `body` (JSON-able values, tensors anywhere inside lists and dicts)."""
    descriptors: list[dict] = []
    chunks: list[bytes] = []

    def walk(value):
        if isinstance(value, torch.Tensor):
            descriptors.append(_describe_and_copy(value, chunks))
            return {"__tensor__": len(descriptors) - 1}
        if isinstance(value, dict):
            return {str(k): walk(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v) for v in value]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return {"__repr__": _safe_repr(value)}

    header = json.dumps({"body": walk(body), "tensors": descriptors}).encode()
    return b"".join([_HEADER.pack(len(header)), header, *chunks])


def decode(frame: bytes):
    """The body of `frame`, tensors rebuilt as fresh CPU tensors (or `Opaque` when data-less)."""
    try:
        (header_len,) = _HEADER.unpack_from(frame)
        header = json.loads(frame[_HEADER.size : _HEADER.size + header_len])
        body, descriptors = header["body"], header["tensors"]
    except (struct.error, ValueError, KeyError, TypeError) as exc:
        raise WireError(f"malformed frame header: {exc}") from None
    offset = _HEADER.size + header_len
    tensors = []
    for descriptor in descriptors:
        tensor, offset = _rebuild(descriptor, frame, offset)
        tensors.append(tensor)
    if offset != len(frame):
        raise WireError("frame has trailing bytes")

    def walk(value):
        if isinstance(value, dict):
            if set(value) == {"__tensor__"}:
                index = value["__tensor__"]
                if not isinstance(index, int) or not 0 <= index < len(tensors):
                    raise WireError("tensor reference out of range")
                return tensors[index]
            if set(value) == {"__repr__"}:
                return Repr(str(value["__repr__"]))
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(body)


class Repr(str):
    """The repr of a value that is neither JSON nor a tensor (a candidate's odd return value)."""


def write_frame(fd: int, body) -> None:
    write_all(fd, encode(body))



def _describe_and_copy(tensor: torch.Tensor, chunks: list[bytes]) -> dict:
    type_name = f"{type(tensor).__module__}.{type(tensor).__qualname__}"
    descriptor = {
        "dtype": DTYPE_NAMES.get(tensor.dtype, str(tensor.dtype)),
        "shape": list(tensor.shape),
        "device": str(tensor.device),
        "type": type_name,
        "nbytes": 0,
    }
    plain = type(tensor) is torch.Tensor
    if plain and tensor.device.type == "cpu" and tensor.dtype in DTYPE_NAMES:
        data = tensor.detach().contiguous()
        nbytes = data.numel() * data.element_size()
        chunks.append(ctypes.string_at(data.data_ptr(), nbytes) if nbytes else b"")
        descriptor["nbytes"] = nbytes
        descriptor["data"] = True
    return descriptor


def _rebuild(descriptor: dict, frame: bytes, offset: int):
    try:
        dtype_name = str(descriptor["dtype"])
        shape = tuple(int(n) for n in descriptor["shape"])
        device = str(descriptor["device"])
        type_name = str(descriptor["type"])
        nbytes = int(descriptor["nbytes"])
        has_data = descriptor.get("data") is True
    except (KeyError, TypeError, ValueError) as exc:
        raise WireError(f"malformed tensor descriptor: {exc}") from None
    if any(n < 0 for n in shape) or nbytes < 0:
        raise WireError("negative size in tensor descriptor")
    if not has_data:
        if nbytes:
            raise WireError("data-less tensor descriptor with bytes")
        return Opaque(dtype_name, shape, device, type_name), offset
    dtype = DTYPES.get(dtype_name)
    if dtype is None or device != "cpu" or type_name != "torch.Tensor":
        raise WireError(f"tensor descriptor not allowed with data: {dtype_name} on {device}")
    numel = math.prod(shape)
    if nbytes != numel * torch.empty((), dtype=dtype).element_size():
        raise WireError("tensor byte count does not match its shape")
    data = frame[offset : offset + nbytes]
    if len(data) != nbytes:
        raise WireError("frame shorter than its tensors")
    if numel == 0:
        return torch.empty(shape, dtype=dtype), offset + nbytes
    tensor = torch.frombuffer(bytearray(data), dtype=dtype).reshape(shape).clone()
    return tensor, offset + nbytes


def _safe_repr(value) -> str:
    try:
        return repr(value)[:200]
    except Exception as exc:  # a candidate's object whose __repr__ raises
        return f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"
