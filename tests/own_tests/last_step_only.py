"""A candidate's tests that compare with full attention, but only the final step, only at T=2."""

import math

import torch
from kv_cache import KVCache, append, attend


def test_final_step():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 2, 8), torch.randn(1, 2, 2, 8), torch.randn(1, 2, 2, 8)
    cache = KVCache()
    append(cache, k, v)
    out = attend(cache, q[:, :, 1:])
    weights = torch.softmax(q[:, :, 1:] @ k.transpose(-1, -2) / math.sqrt(8), dim=-1)
    assert torch.allclose(out, weights @ v, atol=1e-5)
