"""Exhausts memory in `attend`, the way MODE (filled in by the test) says: "list" grows a list
without end, "tensor" allocates a 64 GiB tensor, "reply" returns a 300 MiB tensor (under the
memory limit, over what a reply may carry) once, then the right answers. Everything else is
correct."""

import torch

import kv_cache_base as _base
from kv_cache_base import KVCache, append, apply_rope, decode_step, fork, release, reorder, reset

MODE = "@MODE@"
_hoard = []


def attend(cache, query):
    if MODE == "list":
        while True:
            _hoard.append(bytearray(1 << 24))
    if MODE == "tensor":
        return torch.empty(64 << 30, dtype=torch.uint8)
    if not _hoard:
        _hoard.append("replied")
        return torch.zeros(300 << 20, dtype=torch.uint8)
    return _base.attend(cache, query)
