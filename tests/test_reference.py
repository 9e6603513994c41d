"""graders.shared.reference: the judge's float64 answers, checked against the contract's formulas
written out here a second time, the slow way."""

from __future__ import annotations

import math

import pytest
import torch

from graders.shared import reference


def randn(*shape, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def attention_by_loops(q, k, v) -> torch.Tensor:
    """Causal attention one query position at a time, query head h reading KV head h // group."""
    B, Hq, T, D = q.shape
    group = Hq // k.shape[1]
    out = torch.zeros_like(q)
    for b in range(B):
        for h in range(Hq):
            for t in range(T):
                keys, values = k[b, h // group, : t + 1], v[b, h // group, : t + 1]  # [t+1, D]
                weights = torch.softmax(keys @ q[b, h, t] / math.sqrt(D), dim=0)
                out[b, h, t] = weights @ values
    return out


@pytest.mark.parametrize("hq, hkv", [(4, 4), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
def test_causal_attention_equals_attention_one_position_at_a_time(hq, hkv):
    q, k, v = randn(2, hq, 5, 8, seed=1), randn(2, hkv, 5, 8, seed=2), randn(2, hkv, 5, 8, seed=3)
    assert torch.allclose(reference.causal_attention(q, k, v), attention_by_loops(q, k, v))


def test_lengths_keep_each_row_to_its_own_positions_and_zero_the_rest():
    q, k, v = randn(2, 2, 6, 4, seed=1), randn(2, 2, 6, 4, seed=2), randn(2, 2, 6, 4, seed=3)
    out = reference.causal_attention(q, k, v, lengths=torch.tensor([6, 3]))
    assert torch.allclose(out[0], reference.causal_attention(q, k, v)[0])
    assert torch.allclose(out[1, :, :3], reference.causal_attention(q[1:, :, :3], k[1:, :, :3],
                                                                    v[1:, :, :3])[0])
    assert torch.equal(out[1, :, 3:], torch.zeros(2, 3, 4, dtype=torch.float64))


def rope_as_the_contract_writes_it(x, positions, base):
    D = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = positions.double()[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat((angles, angles), dim=-1)[:, None]  # [B, 1, T, D]
    rotated = torch.cat((-x[..., D // 2:], x[..., : D // 2]), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def test_rope_is_the_contracts_rotate_half_and_keeps_norms():
    x, positions = randn(2, 3, 4, 8), torch.tensor([[0, 1, 2, 3], [7, 100, 5000, 2]])
    rotated = reference.rope(x, positions, 10000.0)
    assert torch.allclose(rotated, rope_as_the_contract_writes_it(x, positions, 10000.0))
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1))
    assert torch.allclose(rotated[0, :, 0], x[0, :, 0]), "position 0 is not rotated"


def test_an_attention_layers_earlier_outputs_never_see_later_tokens():
    g = torch.Generator().manual_seed(0)
    weights = {name: torch.randn(rows, 16, generator=g, dtype=torch.float64) / 4
               for name, rows in (("wq", 16), ("wk", 8), ("wv", 8), ("wo", 16))}
    weights["wo"] = torch.randn(16, 16, generator=g, dtype=torch.float64) / 4
    x = randn(1, 6, 16, seed=5)
    changed = x.clone()
    changed[:, 4:] += 1.0
    full = reference.attention_layer(x, weights, 4, 2, 10000.0)
    other = reference.attention_layer(changed, weights, 4, 2, 10000.0)
    assert full["out"].shape == (1, 6, 16) and full["k"].shape == (1, 2, 6, 4)
    assert torch.allclose(full["out"][:, :4], other["out"][:, :4])
    assert not torch.allclose(full["out"][:, 4:], other["out"][:, 4:])
