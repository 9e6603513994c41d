"""The fused step's math (benchmarks/fused_attention.py), eager, against the judge's float64
attention: the chunked sum over V must give the same output at every length, whatever the
remainder past the last whole chunk."""

from __future__ import annotations

import pytest
import torch

from benchmarks.fused_attention import fused_attention
from graders.shared.reference import causal_attention

CHUNK = 64  # fused_attention's chunk: its first stage sums 64 positions
LENGTHS = [1, CHUNK - 1, CHUNK, CHUNK + 1, 2 * CHUNK - 1, 2 * CHUNK, 3 * CHUNK + 17]


def newest_token_attention(query, keys, values, lengths):
    """Row b's output at its last position lengths[b] - 1 of a full causal forward (float64), with
    the query at every position: [B, Hq, 1, D]; zeros for a row of length 0."""
    batch, q_heads, _, head_dim = query.shape
    full = causal_attention(
        query.expand(batch, q_heads, keys.shape[2], head_dim), keys, values, lengths
    )  # [B, Hq, T, D]
    last = (lengths - 1).clamp(min=0)
    out = full[torch.arange(batch), :, last][:, :, None]  # [B, Hq, 1, D]
    return out.masked_fill((lengths == 0)[:, None, None, None], 0.0)


@pytest.mark.parametrize("length", LENGTHS, ids=[f"T={t}" for t in LENGTHS])
@pytest.mark.parametrize("q_heads", [2, 8], ids=["mha", "gqa"])
def test_fused_attention_matches_float64_attention(length, q_heads):
    gen = torch.Generator().manual_seed(length)
    query = torch.randn(3, q_heads, 1, 16, generator=gen)
    keys, values = torch.randn(2, 3, 2, length, 16, generator=gen)  # [B, Hkv, T, D] each
    lengths = torch.tensor([length, length // 2, 0])  # ragged, and a row of length 0
    got = fused_attention(query, keys, values, lengths)
    want = newest_token_attention(query, keys, values, lengths)
    # float32 against float64 over at most 209 positions: the error measured is below 5e-7.
    assert (got.double() - want).abs().max() < 1e-5, (got.double() - want).abs().max()
