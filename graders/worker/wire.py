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
tensors that own their memory: what arrives is data, never behaviour. Whatever the bytes, it
returns a body or raises WireError: a body nests at most MAX_DEPTH containers deep, a tensor has
at most MAX_DIMS dimensions. The encoder refuses a body nested deeper (a candidate's return
value), so what one side sends the other accepts. What a body must hold is the judge's to check
(`graders.judge.replies`).
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
# Containers (lists, dicts) one inside another in a body. The deepest legitimate reply measured
# (every item of both tracks with --hidden) nests 8; the rest is for a candidate's own return
# values (a list of lists).
MAX_DEPTH = 32
MAX_DIMS = 64  # what torch allows a tensor
# Characters of one text the candidate's code made (an exception's message, an import error)
# that a worker sends: a reply stays small; the judge shows at most 2,000 of them
# (graders.shared.untrusted.MAX_QUOTE), and says how many it cut of those that arrived.
TEXT_CHARS = 4_000
REPR_CHARS = 200  # of the repr of a value that is neither JSON nor a tensor: it names the value
_MAX_DIM = 1 << 62  # the largest size of one dimension
# Keys that mark a tensor or a repr in an encoded body: a candidate's dict holding exactly one of
# them travels as its repr, so it cannot stand for a tensor it did not return.
_MARKS = ({"__tensor__"}, {"__repr__"})


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

    def walk(value, depth):
        if isinstance(value, torch.Tensor):
            descriptors.append(_describe_and_copy(value, chunks))
            return {"__tensor__": len(descriptors) - 1}
        if isinstance(value, (dict, list, tuple)) and depth >= MAX_DEPTH:
            raise ValueError(f"the value is nested more than {MAX_DEPTH} lists or dicts deep")
        if isinstance(value, dict) and set(value) not in _MARKS:
            return {str(k): walk(v, depth + 1) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, depth + 1) for v in value]
        if value is None or isinstance(value, (bool, int, float, str)):
            return value
        return {"__repr__": _safe_repr(value)}

    header = json.dumps({"body": walk(body, 0), "tensors": descriptors}).encode()
    return b"".join([_HEADER.pack(len(header)), header, *chunks])


def decode(frame: bytes):
    """The body of `frame`, tensors rebuilt as fresh CPU tensors (or `Opaque` when data-less).
    WireError for any frame that is not what `encode` makes."""
    try:
        (header_len,) = _HEADER.unpack_from(frame)
        header = json.loads(frame[_HEADER.size : _HEADER.size + header_len])
        body, descriptors = header["body"], header["tensors"]
        if not isinstance(descriptors, list):
            raise TypeError("the tensor descriptors are not a list")
    except (struct.error, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise WireError(f"malformed frame header: {type(exc).__name__}: {exc}"[:200]) from None
    offset = _HEADER.size + header_len
    tensors = []
    for descriptor in descriptors:
        tensor, offset = _rebuild(descriptor, frame, offset)
        tensors.append(tensor)
    if offset != len(frame):
        raise WireError("frame has trailing bytes")

    def walk(value, depth):
        if isinstance(value, (dict, list)) and depth >= MAX_DEPTH:
            raise WireError(f"a body nested more than {MAX_DEPTH} lists or dicts deep")
        if isinstance(value, dict):
            if set(value) == {"__tensor__"}:
                index = value["__tensor__"]
                if type(index) is not int or not 0 <= index < len(tensors):
                    raise WireError("tensor reference out of range")
                return tensors[index]
            if set(value) == {"__repr__"}:
                return Repr(str(value["__repr__"]))
            return {k: walk(v, depth + 1) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v, depth + 1) for v in value]
        return value

    return walk(body, 0)


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
        shape = tuple(descriptor["shape"])
        device = str(descriptor["device"])
        type_name = str(descriptor["type"])
        nbytes = descriptor["nbytes"]
        has_data = descriptor.get("data") is True
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise WireError(f"malformed tensor descriptor: {type(exc).__name__}: {exc}"[:200]) from None
    if len(shape) > MAX_DIMS:
        raise WireError(f"a tensor descriptor with {len(shape)} dimensions, more than {MAX_DIMS}")
    if any(type(n) is not int for n in (*shape, nbytes)):
        raise WireError("a tensor descriptor whose sizes are not integers")
    if any(not 0 <= n < _MAX_DIM for n in shape) or nbytes < 0:
        raise WireError("a tensor descriptor with a size out of range")
    if not has_data:
        if nbytes:
            raise WireError("data-less tensor descriptor with bytes")
        return Opaque(dtype_name, shape, device, type_name), offset
    dtype = DTYPES.get(dtype_name)
    if dtype is None or device != "cpu" or type_name != "torch.Tensor":
        raise WireError(f"tensor descriptor not allowed with data: {dtype_name} on {device}"[:200])
    numel = math.prod(shape)
    if nbytes != numel * torch.empty((), dtype=dtype).element_size():
        raise WireError("tensor byte count does not match its shape")
    if offset + nbytes > len(frame):
        raise WireError("frame shorter than its tensors")
    if numel == 0:
        return torch.empty(shape, dtype=dtype), offset + nbytes
    data = bytearray(memoryview(frame)[offset : offset + nbytes])  # the one copy, owned
    return torch.frombuffer(data, dtype=dtype).reshape(shape), offset + nbytes


def _safe_repr(value) -> str:
    try:
        return repr(value)[:REPR_CHARS]
    except Exception as exc:  # a candidate's object whose __repr__ raises
        return f"<{type(value).__name__} whose repr raised {type(exc).__name__}>"
