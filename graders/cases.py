"""Seeded inputs for the graders: every case is generated in the judge from a fixed seed.

A case never depends on the candidate's outputs, so a failure replays exactly.
"""

from __future__ import annotations

import torch


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32,
          scale: float = 1.0) -> torch.Tensor:
    return (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)


def sequence(g: torch.Generator, B: int, Hq: int, Hkv: int, T: int, D: int,
             dtype: torch.dtype = torch.float32, scale: float = 1.0) -> dict[str, torch.Tensor]:
    """Queries [B, Hq, T, D] and keys, values [B, Hkv, T, D] for T positions of B sequences."""
    return {
        "q": randn(g, B, Hq, T, D, dtype=dtype, scale=scale),
        "k": randn(g, B, Hkv, T, D, dtype=dtype, scale=scale),
        "v": randn(g, B, Hkv, T, D, dtype=dtype),
    }


def counts(*values: int) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int64)


def padded(x: torch.Tensor, row_counts: list[int]) -> torch.Tensor:
    """A copy of x [B, H, t, D] whose positions past row_counts[b] in row b are NaN.

    Those positions are not real tokens: an implementation that ignores `counts` stores NaN where
    it will be seen.
    """
    x = x.clone()
    for b, n in enumerate(row_counts):
        x[b, :, n:] = float("nan")
    return x


def layer_weights(g: torch.Generator, d_model: int, n_heads: int, n_kv_heads: int,
                  head_dim: int) -> dict[str, torch.Tensor]:
    """wq, wk, wv, wo as [out_features, in_features] float32, scaled like a trained layer."""
    scale = d_model ** -0.5
    return {
        "wq": randn(g, n_heads * head_dim, d_model, scale=scale),
        "wk": randn(g, n_kv_heads * head_dim, d_model, scale=scale),
        "wv": randn(g, n_kv_heads * head_dim, d_model, scale=scale),
        "wo": randn(g, d_model, n_heads * head_dim, scale=(n_heads * head_dim) ** -0.5),
    }
