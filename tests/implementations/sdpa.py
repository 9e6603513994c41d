"""KV cache whose attention goes through torch's fused scaled_dot_product_attention.

Storage is preallocated ([B, Hkv, capacity, D] for K and for V) and written in place; when a row
would overflow, capacity doubles until it fits. Attention is one SDPA call with a boolean mask
built from `lengths` (so unused capacity and stale slots never take part) and `enable_gqa=True`,
which lets query head h read KV head h // (Hq // Hkv) without the cache storing copied heads.
SDPA's softmax runs in the dtype of its inputs, so q, k and v are promoted to at least float32 for
the call (bf16/fp16 caches stay low precision in storage) and the result is cast back.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.nn.functional as F
from torch import Tensor


class KVCache:
    def __init__(self, capacity: int | None = None):
        if capacity is not None:
            if isinstance(capacity, bool):
                raise ValueError("capacity must be an int or None")
            try:
                capacity = operator.index(capacity)
            except TypeError:
                raise ValueError(f"capacity must be an int or None, got {capacity!r}") from None
            if capacity < 0:
                raise ValueError(f"capacity must be >= 0, got {capacity}")
        self.initial_capacity = capacity
        self._k: Tensor | None = None  # [B, Hkv, capacity, D]
        self._v: Tensor | None = None
        self._len: Tensor | None = None  # int64 [B]

    @property
    def capacity(self) -> int:
        return 0 if self._k is None else int(self._k.shape[2])

    @property
    def lengths(self) -> Tensor | None:
        return self._len

    def _prefix(self, store: Tensor | None) -> Tensor | None:
        if store is None:
            return None
        return store[:, :, : int(self._len.max()) if self._len.numel() else 0]

    @property
    def keys(self) -> Tensor | None:
        return self._prefix(self._k)

    @property
    def values(self) -> Tensor | None:
        return self._prefix(self._v)


# ---------------------------------------------------------------------------------------------
# validation (never mutates anything)


def _check_kv(cache: KVCache, new_key, new_value) -> None:
    if not isinstance(new_key, Tensor) or not isinstance(new_value, Tensor):
        raise ValueError("new_key and new_value must be tensors")
    if new_key.dim() != 4 or new_value.dim() != 4:
        raise ValueError(f"rank: key and value must be 4-d [B, Hkv, t, D], got ranks "
                         f"{new_key.dim()} and {new_value.dim()}")
    if new_key.shape != new_value.shape:
        raise ValueError(f"key shape {tuple(new_key.shape)} and value shape "
                         f"{tuple(new_value.shape)} differ")
    if new_key.dtype != new_value.dtype:
        raise ValueError(f"dtype: key is {new_key.dtype}, value is {new_value.dtype}")
    if new_key.device != new_value.device:
        raise ValueError(f"device: key is on {new_key.device}, value on {new_value.device}")
    if not new_key.is_floating_point():
        raise ValueError(f"dtype: keys and values must be floating point, got {new_key.dtype}")
    if new_key.shape[2] < 1:
        raise ValueError("time: an append needs t >= 1 new positions")
    if cache._k is None:
        return
    B, H, _, D = cache._k.shape
    b, h, _, d = new_key.shape
    if b != B:
        raise ValueError(f"batch: cache holds {B} sequences, append has {b}")
    if h != H:
        raise ValueError(f"kv_heads: cache has {H}, append has {h}")
    if d != D:
        raise ValueError(f"head_dim: cache has {D}, append has {d}")
    if new_key.dtype != cache._k.dtype:
        raise ValueError(f"dtype: cache is {cache._k.dtype}, append is {new_key.dtype}")
    if new_key.device != cache._k.device:
        raise ValueError(f"device: cache is on {cache._k.device}, append is on {new_key.device}")


def _check_counts(counts, batch: int, t: int, device) -> Tensor:
    if counts is None:
        return torch.full((batch,), t, dtype=torch.int64, device=device)
    if not isinstance(counts, Tensor):
        raise ValueError(f"counts must be an int64 tensor, got {type(counts).__name__}")
    if counts.dtype != torch.int64:
        raise ValueError(f"counts dtype must be int64, got {counts.dtype}")
    if tuple(counts.shape) != (batch,):
        raise ValueError(f"counts shape must be [{batch}], got {list(counts.shape)}")
    if counts.device.type == "meta":
        raise ValueError("counts device: counts on the meta device hold no values")
    host = counts.detach().cpu()
    if batch and (int(host.min()) < 0 or int(host.max()) > t):
        raise ValueError(f"counts range: each must be in 0..{t}, got {host.tolist()}")
    return counts.detach().to(device)


# ---------------------------------------------------------------------------------------------
# the operations


def _grow(cache: KVCache, needed: int, like: Tensor) -> None:
    """Ensure storage has >= `needed` slots; doubling keeps n appends at O(log n) reallocations."""
    have = cache.capacity
    if cache._k is not None and needed <= have:
        return
    if cache._k is None and cache.initial_capacity is not None and needed <= cache.initial_capacity:
        size = cache.initial_capacity
    else:
        size = max(have, cache.initial_capacity or 0, 1)
        while size < needed:
            size *= 2
    B, H, _, D = like.shape
    k = like.new_zeros(B, H, size, D)  # zeros: masked slots must hold finite numbers
    v = like.new_zeros(B, H, size, D)
    if cache._k is not None:
        k[:, :, :have].copy_(cache._k)
        v[:, :, :have].copy_(cache._v)
    cache._k, cache._v = k, v


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None) -> None:
    _check_kv(cache, new_key, new_value)
    B, _, t, _ = new_key.shape
    counts = _check_counts(counts, B, t, new_key.device)
    # ---- everything below may mutate: all checks passed ----
    start = cache._len if cache._len is not None else torch.zeros(B, dtype=torch.int64,
                                                                   device=new_key.device)
    end = start + counts
    _grow(cache, int(end.max()) if B else 0, new_key)

    offs = torch.arange(t, device=new_key.device)
    keep = offs[None, :] < counts[:, None]  # [B, t] real new positions
    b_idx = torch.arange(B, device=new_key.device)[:, None].expand(B, t)[keep]
    t_src = offs[None, :].expand(B, t)[keep]
    t_dst = (start[:, None] + offs[None, :])[keep]
    # storage viewed as [B, cap, H, D]: index (row, slot) -> [N, H, D]
    cache._k.transpose(1, 2).index_put_((b_idx, t_dst), new_key.transpose(1, 2)[b_idx, t_src])
    cache._v.transpose(1, 2).index_put_((b_idx, t_dst), new_value.transpose(1, 2)[b_idx, t_src])
    cache._len = end


def attend(cache: KVCache, query: Tensor) -> Tensor:
    if cache._k is None:
        raise ValueError("attend on an empty cache: append something first")
    if not isinstance(query, Tensor):
        raise ValueError("query must be a tensor")
    if query.dim() != 4 or query.shape[2] != 1:
        raise ValueError(f"rank: query must be [B, Hq, 1, D], got {tuple(query.shape)}")
    B, Hkv, _, D = cache._k.shape
    b, hq, _, d = query.shape
    if b != B:
        raise ValueError(f"batch: query has {b}, cache has {B}")
    if d != D:
        raise ValueError(f"head_dim: query has {d}, cache has {D}")
    if hq == 0 or hq % Hkv:
        raise ValueError(f"heads: query heads {hq} must be a positive multiple of kv_heads {Hkv}")
    if query.dtype != cache._k.dtype:
        raise ValueError(f"dtype: query is {query.dtype}, cache is {cache._k.dtype}")
    if query.device != cache._k.device:
        raise ValueError(f"device: query is on {query.device}, cache on {cache._k.device}")

    lengths = cache._len
    T = int(lengths.max()) if B else 0
    if T == 0:
        return torch.zeros_like(query)
    work = torch.promote_types(query.dtype, torch.float32)  # float32 softmax (float64 stays)
    q = query.to(work)
    k = cache._k[:, :, :T].to(work)
    v = cache._v[:, :, :T].to(work)
    valid = torch.arange(T, device=query.device)[None, :] < lengths[:, None]  # [B, T]
    empty = lengths == 0
    # A row with nothing to attend would softmax over all -inf; let it see everything and zero it.
    mask = (valid | empty[:, None])[:, None, None, :]  # [B, 1, 1, T]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=1.0 / math.sqrt(D),
                                         enable_gqa=hq != Hkv)  # [B, Hq, 1, D]
    out = out.masked_fill(empty[:, None, None, None], 0.0)
    return out.to(query.dtype)


def reset(cache: KVCache) -> None:
    cache._k = cache._v = cache._len = None


def release(cache: KVCache, index: int) -> None:
    if cache._len is None:
        raise ValueError("release on an empty cache")
    index = operator.index(index)
    B = cache._len.shape[0]
    if not 0 <= index < B:
        raise IndexError(f"release: index {index} out of range for a batch of {B}")
    lengths = cache._len.clone()
    lengths[index] = 0
    cache._len = lengths
    cache._k[index].zero_()  # stale data never takes part anyway; wipe it all the same
    cache._v[index].zero_()


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    if cache._k is None:
        raise ValueError("reorder on an empty cache")
    if not isinstance(beam_idx, Tensor) or beam_idx.dtype != torch.int64 or beam_idx.dim() != 1:
        raise ValueError("beam_idx must be a 1-d int64 tensor")
    if beam_idx.numel() == 0:
        raise ValueError("beam_idx must select at least one row")
    B = cache._k.shape[0]
    host = beam_idx.detach().cpu()
    if int(host.min()) < 0 or int(host.max()) >= B:
        raise ValueError(f"beam_idx values must be in 0..{B - 1}, got {host.tolist()}")
    idx = beam_idx.to(cache._k.device)
    cache._k = cache._k.index_select(0, idx)
    cache._v = cache._v.index_select(0, idx)
    cache._len = cache._len.index_select(0, idx)


def fork(cache: KVCache) -> KVCache:
    twin = KVCache(cache.initial_capacity)
    if cache._k is not None:
        twin._k = cache._k.clone()
        twin._v = cache._v.clone()
        twin._len = cache._len.clone()
    return twin


@torch.no_grad()
def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    if not isinstance(x, Tensor) or x.dim() != 3 or x.shape[1] != 1:
        raise ValueError(f"rank: x must be [B, 1, d_model], got {getattr(x, 'shape', x)}")
    B = x.shape[0]
    if cache._len is not None and cache._len.shape[0] != B:
        raise ValueError(f"batch: x has {B} rows, cache has {cache._len.shape[0]}")
    Hq, Hkv, D = layer.n_heads, layer.n_kv_heads, layer.head_dim

    def heads(proj, n):  # [B, 1, n*D] -> [B, n, 1, D]
        return proj(x).view(B, 1, n, D).transpose(1, 2)

    q, k, v = heads(layer.wq, Hq), heads(layer.wk, Hkv), heads(layer.wv, Hkv)
    pos = (cache._len if cache._len is not None
           else torch.zeros(B, dtype=torch.int64)).to(x.device).view(B, 1)
    q = apply_rope(q, pos, layer.rope_base)
    k = apply_rope(k, pos, layer.rope_base)
    append(cache, k, v, counts)
    out = attend(cache, q)  # [B, Hq, 1, D]
    return layer.wo(out.transpose(1, 2).reshape(B, 1, Hq * D))


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotary position embedding (given; every implementation shares this convention).

    x: [B, H, T, D], D even. positions: int64 [B, T], absolute positions.
    Rotate-half convention of Llama-family models (it matches Hugging Face transformers):
    inv_freq = base ** (-arange(0, D, 2) / D), angles = positions[..., None] * inv_freq,
    emb = cat(angles, angles), out = x * cos(emb) + rotate_half(x) * sin(emb) with
    rotate_half(x) = cat(-x[..., D/2:], x[..., :D/2]). Computed in float32, returned in x's dtype.
    """
    head_dim = x.shape[-1]
    even = torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32)  # [D/2]
    inv_freq = base ** (-even / head_dim)  # [D/2]
    angles = positions.to(device=x.device, dtype=torch.float32)[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat((angles, angles), dim=-1)[:, None]  # [B, 1, T, D], broadcast over heads
    xf = x.float()
    half = head_dim // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)  # rotate_half(x)
    return (xf * emb.cos() + rotated * emb.sin()).to(x.dtype)
