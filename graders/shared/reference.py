"""The judge's own answers: full (uncached) attention in float64, written apart from any solution.

Nothing here knows about caches. The question's invariant is that cached decoding's newest-token
output equals row t of a full causal forward over the whole sequence; these functions are that
full forward, done the plain way: KV heads expanded by copying, an explicit causal mask, float64.
"""

from __future__ import annotations

import math

import torch


def causal_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, lengths: torch.Tensor | None = None
) -> torch.Tensor:
    """Full causal attention. q [B, Hq, T, D], k and v [B, Hkv, T, D] -> [B, Hq, T, D], float64.

    Query head h reads KV head h // (Hq // Hkv). With `lengths` ([B]), row b uses only its first
    lengths[b] positions; outputs at positions past that are zero.
    """
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # [B, Hq, T, D]
    v = v.repeat_interleave(group, dim=1)
    T = q.shape[2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [B, Hq, T, T]
    allowed = torch.ones(T, T, dtype=torch.bool).tril()  # [T(query), T(key)]
    if lengths is not None:
        valid = torch.arange(T)[None, :] < lengths[:, None]  # [B, T]
        allowed = allowed & valid[:, None, None, :] & valid[:, None, :, None]
    scores = scores.masked_fill(~allowed, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows with nothing allowed -> 0
    return weights @ v


def attention_at(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    positions: torch.Tensor,
    window: int | None = None,
) -> torch.Tensor:
    """Queries at absolute positions over their row's keys, float64 (contract section 8).

    q [B, Hq, t, D], positions int64 [B, t]: the query's position; k, v [B, Hkv, T, D], row b's
    key j at position j. The query at p sees positions max(0, p - window + 1) .. p (0 .. p
    without a window). Returns [B, Hq, t, D].
    """
    q, k, v = q.double(), k.double(), v.double()
    group = q.shape[1] // k.shape[1]
    k = k.repeat_interleave(group, dim=1)  # [B, Hq, T, D]
    v = v.repeat_interleave(group, dim=1)
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])  # [B, Hq, t, T]
    key_at = torch.arange(k.shape[2])[None, None, :]  # [1, 1, T]
    seen = key_at <= positions[:, :, None]  # [B, t, T]
    if window is not None:
        seen = seen & (key_at > positions[:, :, None] - window)
    scores = scores.masked_fill(~seen[:, None], float("-inf"))
    return torch.softmax(scores, dim=-1).nan_to_num(0.0) @ v


def rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotate-half RoPE in float64. x [B, H, T, D], positions [B, T] -> [B, H, T, D].

    Dimension i and i + D/2 form a pair rotated by angle position * base^(-2i/D).
    """
    x = x.double()
    half = x.shape[-1] // 2
    i = torch.arange(half, dtype=torch.float64)
    theta = positions.double()[:, None, :, None] * base ** (
        -2.0 * i / x.shape[-1]
    )  # [B, 1, T, D/2]
    first, second = x[..., :half], x[..., half:]
    return torch.cat(
        (first * theta.cos() - second * theta.sin(), second * theta.cos() + first * theta.sin()),
        dim=-1,
    )


def split_heads(x: torch.Tensor, n_heads: int) -> torch.Tensor:
    """[B, T, H * D] -> [B, H, T, D]."""
    B, T, _ = x.shape
    return x.reshape(B, T, n_heads, -1).transpose(1, 2)


def attention_layer(
    x: torch.Tensor,
    weights: dict,
    n_heads: int,
    n_kv_heads: int,
    rope_base: float,
    positions: torch.Tensor | None = None,
    window: int | None = None,
) -> dict:
    """One attention layer over whole sequences, float64. x [B, T, d_model].

    Returns the layer output [B, T, d_model] and, for the judge's other checks, the projections:
    q and k after RoPE ([B, H, T, D]), q before RoPE, and v; and the attention before wo
    ("attended", [B, Hq, T, D]). With `window`, position p attends p - window + 1 .. p only.
    """
    x = x.double()
    w = {name: weight.double() for name, weight in weights.items()}
    B, T, _ = x.shape
    if positions is None:
        positions = torch.arange(T).expand(B, T)
    q_raw = split_heads(x @ w["wq"].T, n_heads)  # [B, Hq, T, D]
    k_raw = split_heads(x @ w["wk"].T, n_kv_heads)  # [B, Hkv, T, D]
    v = split_heads(x @ w["wv"].T, n_kv_heads)
    q, k = rope(q_raw, positions, rope_base), rope(k_raw, positions, rope_base)
    if window is None:
        attended = causal_attention(q, k, v)  # [B, Hq, T, D]
    else:
        attended = attention_at(q, k, v, torch.arange(T).expand(B, T), window)
    out = attended.transpose(1, 2).reshape(B, T, -1) @ w["wo"].T
    return {"out": out, "q": q, "q_raw": q_raw, "k": k, "v": v, "attended": attended}
