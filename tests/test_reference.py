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
    assert torch.allclose(
        out[1, :, :3], reference.causal_attention(q[1:, :, :3], k[1:, :, :3], v[1:, :, :3])[0]
    )
    assert torch.equal(out[1, :, 3:], torch.zeros(2, 3, 4, dtype=torch.float64))


def rope_as_the_contract_writes_it(x, positions, base):
    D = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = positions.double()[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat((angles, angles), dim=-1)[:, None]  # [B, 1, T, D]
    rotated = torch.cat((-x[..., D // 2 :], x[..., : D // 2]), dim=-1)
    return x * emb.cos() + rotated * emb.sin()


def test_rope_is_the_contracts_rotate_half_and_keeps_norms():
    x, positions = randn(2, 3, 4, 8), torch.tensor([[0, 1, 2, 3], [7, 100, 5000, 2]])
    rotated = reference.rope(x, positions, 10000.0)
    assert torch.allclose(rotated, rope_as_the_contract_writes_it(x, positions, 10000.0))
    assert torch.allclose(rotated.norm(dim=-1), x.norm(dim=-1))
    assert torch.allclose(rotated[0, :, 0], x[0, :, 0]), "position 0 is not rotated"


def test_an_attention_layers_earlier_outputs_never_see_later_tokens():
    g = torch.Generator().manual_seed(0)
    weights = {
        name: torch.randn(rows, 16, generator=g, dtype=torch.float64) / 4
        for name, rows in (("wq", 16), ("wk", 8), ("wv", 8), ("wo", 16))
    }
    weights["wo"] = torch.randn(16, 16, generator=g, dtype=torch.float64) / 4
    x = randn(1, 6, 16, seed=5)
    changed = x.clone()
    changed[:, 4:] += 1.0
    full = reference.attention_layer(x, weights, 4, 2, 10000.0)
    other = reference.attention_layer(changed, weights, 4, 2, 10000.0)
    assert full["out"].shape == (1, 6, 16) and full["k"].shape == (1, 2, 6, 4)
    assert torch.allclose(full["out"][:, :4], other["out"][:, :4])
    assert not torch.allclose(full["out"][:, 4:], other["out"][:, 4:])


def window_by_loops(q, k, v, positions, window) -> torch.Tensor:
    """Each query at its position over keys max(0, p - window + 1) .. p (0 .. p without one)."""
    B, Hq, t, D = q.shape
    group = Hq // k.shape[1]
    out = torch.zeros_like(q)
    for b in range(B):
        for h in range(Hq):
            for i in range(t):
                p = int(positions[b, i])
                lo = 0 if window is None else max(0, p - window + 1)
                if p < 0:
                    continue  # sees nothing: zeros
                keys, values = k[b, h // group, lo : p + 1], v[b, h // group, lo : p + 1]
                out[b, h, i] = torch.softmax(keys @ q[b, h, i] / math.sqrt(D), dim=0) @ values
    return out


@pytest.mark.parametrize("window", [None, 1, 3, 100])
@pytest.mark.parametrize("hq, hkv", [(4, 4), (4, 2), (4, 1)], ids=["mha", "gqa", "mqa"])
def test_attention_at_sees_each_querys_window_of_its_own_row(window, hq, hkv):
    """Section 8's answers: queries at ragged positions (one of them -1: nothing seen)."""
    q, k, v = randn(2, hq, 3, 8, seed=4), randn(2, hkv, 9, 8, seed=5), randn(2, hkv, 9, 8, seed=6)
    positions = torch.tensor([[6, 7, 8], [-1, 2, 5]])
    got = reference.attention_at(q, k, v, positions, window)
    assert torch.allclose(got, window_by_loops(q, k, v, positions, window))


def test_an_attention_layers_window_is_attention_at_its_positions():
    g = torch.Generator().manual_seed(7)
    weights = {
        name: torch.randn(*shape, generator=g, dtype=torch.float64) * 0.3
        for name, shape in (("wq", (16, 8)), ("wk", (8, 8)), ("wv", (8, 8)), ("wo", (8, 16)))
    }
    x = randn(2, 7, 8, seed=8)
    full = reference.attention_layer(x, weights, 2, 1, 10000.0)
    windowed = reference.attention_layer(x, weights, 2, 1, 10000.0, window=3)
    assert torch.allclose(
        full["attended"], reference.causal_attention(full["q"], full["k"], full["v"])
    )
    assert torch.allclose(
        windowed["attended"],
        window_by_loops(
            windowed["q"], windowed["k"], windowed["v"], torch.arange(7).expand(2, 7), 3
        ),
    )
    assert not torch.allclose(windowed["out"][:, 3:], full["out"][:, 3:])
    assert torch.allclose(windowed["out"][:, :3], full["out"][:, :3])  # within the window


def test_an_attention_layer_s_keys_come_from_wk_and_its_values_from_wv():
    """With wk zero every score is 0: each position's attention is the mean of the values up to
    it, the values being x @ wv.T (split into heads), whatever wv is."""
    g = torch.Generator().manual_seed(3)
    weights = {
        "wq": torch.randn(8, 8, generator=g, dtype=torch.float64),
        "wk": torch.zeros(4, 8, dtype=torch.float64),
        "wv": torch.randn(4, 8, generator=g, dtype=torch.float64),
        "wo": torch.eye(8, dtype=torch.float64),
    }
    x = randn(1, 5, 8, seed=4)
    layer = reference.attention_layer(x, weights, 2, 1, 10000.0)
    values = (x @ weights["wv"].T)[0]  # [T, D]: one KV head of head_dim 4
    means = values.cumsum(0) / torch.arange(1, 6, dtype=torch.float64)[:, None]  # [T, D]
    for head in range(2):
        assert torch.allclose(layer["attended"][0, head], means)
