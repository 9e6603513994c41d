"""attend returns a Tensor subclass whose comparisons and conversions all lie."""

import torch

import kv_cache_base as _base
from kv_cache_base import KVCache, append, apply_rope, decode_step, fork, release, reorder, reset


class Agreeable(torch.Tensor):
    def __eq__(self, other):
        return torch.ones_like(self.as_subclass(torch.Tensor), dtype=torch.bool)

    def __sub__(self, other):
        return torch.zeros_like(self.as_subclass(torch.Tensor))


def attend(cache, query):
    return torch.zeros_like(query).as_subclass(Agreeable)
