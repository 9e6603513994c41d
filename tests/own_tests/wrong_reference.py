"""A candidate's tests whose own reference forgets the 1/sqrt(D) scale: they fail on correct code."""

import torch
from kv_cache import KVCache, append, attend


def test_against_unscaled_reference():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 1, 8), torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8)
    cache = KVCache()
    append(cache, k, v)
    expected = torch.softmax(q @ k.transpose(-1, -2), dim=-1) @ v
    assert torch.allclose(attend(cache, q), expected, atol=1e-5)
