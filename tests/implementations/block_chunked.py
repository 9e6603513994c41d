"""KV cache stored as a list of fixed-size time blocks, attended block by block.

Each cache owns two Python lists of blocks, `k_blocks` and `v_blocks`, each block a
[B, Hkv, BLOCK, D] tensor holding positions i*BLOCK .. (i+1)*BLOCK - 1 of every row. Appends
write into the blocks that cover each row's new positions and add zero-filled blocks at the end
when a row needs more room; old blocks are never copied, so a run of n single-token appends
allocates one block pair per BLOCK tokens and copies nothing. capacity = len(blocks) * BLOCK.

attend walks the blocks with an online (running-max) float32 softmax, as flash-decoding does, so
it never concatenates the cache. `keys` / `values` are properties that concatenate the blocks and
cut them to max(lengths): a fresh tensor, built only when someone asks for it.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

BLOCK = 16


class KVCache:
    def __init__(self, capacity: int | None = None):
        if capacity is not None and (type(capacity) is not int or capacity < 0):
            raise ValueError(f"capacity must be None or an int >= 0, got {capacity!r}")
        self.reserve = capacity
        self.k_blocks: list[Tensor] = []
        self.v_blocks: list[Tensor] = []
        self.lens: Tensor | None = None  # int64 [B]; None while the cache is empty
        # (batch, kv_heads, head_dim, dtype, device) fixed by the first append
        self.spec: tuple | None = None

    @property
    def capacity(self) -> int:
        return len(self.k_blocks) * BLOCK

    @property
    def lengths(self) -> Tensor | None:
        return self.lens

    def _joined(self, blocks: list[Tensor]) -> Tensor | None:
        if self.spec is None:
            return None
        B, H, D, dtype, device = self.spec
        T = int(self.lens.max()) if B else 0
        if not blocks:
            return torch.zeros(B, H, 0, D, dtype=dtype, device=device)
        return torch.cat(blocks, dim=2)[:, :, :T]

    @property
    def keys(self) -> Tensor | None:
        return self._joined(self.k_blocks)

    @property
    def values(self) -> Tensor | None:
        return self._joined(self.v_blocks)


def _require(ok: bool, message: str) -> None:
    if not ok:
        raise ValueError(message)


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None) -> None:
    _require(isinstance(new_key, Tensor) and isinstance(new_value, Tensor),
             "new_key and new_value must be tensors")
    _require(new_key.dim() == 4, f"rank: new_key must be [B, Hkv, t, D], got {new_key.dim()} dims")
    _require(new_value.dim() == 4, f"rank: new_value must be [B, Hkv, t, D], got {new_value.dim()} dims")
    _require(new_key.shape == new_value.shape,
             f"key and value shapes differ: {list(new_key.shape)} vs {list(new_value.shape)}")
    _require(new_key.dtype == new_value.dtype,
             f"dtype: key {new_key.dtype} and value {new_value.dtype} differ")
    _require(new_key.device == new_value.device,
             f"device: key {new_key.device} and value {new_value.device} differ")
    _require(new_key.is_floating_point(), f"dtype: keys must be floating point, not {new_key.dtype}")
    B, H, t, D = new_key.shape
    _require(t >= 1, "time: append at least one position")
    if cache.spec is not None:
        cB, cH, cD, cdtype, cdevice = cache.spec
        _require(B == cB, f"batch: the cache holds {cB} rows, got {B}")
        _require(H == cH, f"kv_heads: the cache has {cH}, got {H}")
        _require(D == cD, f"head_dim: the cache has {cD}, got {D}")
        _require(new_key.dtype == cdtype, f"dtype: the cache is {cdtype}, got {new_key.dtype}")
        _require(new_key.device == cdevice, f"device: the cache is on {cdevice}, got {new_key.device}")
    if counts is None:
        take = torch.full((B,), t, dtype=torch.int64)
    else:
        _require(isinstance(counts, Tensor), "counts must be an int64 tensor")
        _require(counts.dtype == torch.int64, f"counts dtype must be int64, got {counts.dtype}")
        _require(tuple(counts.shape) == (B,), f"counts shape must be [{B}], got {list(counts.shape)}")
        _require(counts.device.type != "meta", "counts device: meta tensors have no values")
        take = counts.detach().cpu()
        _require(bool(((take >= 0) & (take <= t)).all()),
                 f"counts range: each must be in 0..{t}, got {take.tolist()}")

    # ---- valid: from here on the cache changes ----
    if cache.spec is None:
        cache.spec = (B, H, D, new_key.dtype, new_key.device)
        cache.lens = torch.zeros(B, dtype=torch.int64, device=new_key.device)
        if cache.reserve:
            _add_blocks(cache, -(-cache.reserve // BLOCK))
    start = cache.lens.cpu()
    end = start + take
    needed = int(end.max()) if B else 0
    if needed > cache.capacity:
        _add_blocks(cache, -(-needed // BLOCK) - len(cache.k_blocks))

    # every real (row, j) goes to absolute position start[row] + j: block pos // BLOCK, slot pos % BLOCK
    j = torch.arange(t)
    real = j[None, :] < take[:, None]  # [B, t]
    rows = torch.arange(B)[:, None].expand(B, t)[real]
    src = j[None, :].expand(B, t)[real]
    pos = (start[:, None] + j[None, :])[real]
    blk, slot = pos // BLOCK, pos % BLOCK
    dev = new_key.device
    for i in torch.unique(blk).tolist():
        sel = blk == i
        r, s, o = rows[sel].to(dev), slot[sel].to(dev), src[sel].to(dev)
        cache.k_blocks[i][r, :, s] = new_key[r, :, o]
        cache.v_blocks[i][r, :, s] = new_value[r, :, o]
    cache.lens = end.to(dev)


def _add_blocks(cache: KVCache, n: int) -> None:
    B, H, D, dtype, device = cache.spec
    for _ in range(n):
        cache.k_blocks.append(torch.zeros(B, H, BLOCK, D, dtype=dtype, device=device))
        cache.v_blocks.append(torch.zeros(B, H, BLOCK, D, dtype=dtype, device=device))


def attend(cache: KVCache, query: Tensor) -> Tensor:
    _require(cache.spec is not None, "attend on an empty cache")
    _require(isinstance(query, Tensor) and query.dim() == 4 and query.shape[2] == 1,
             f"rank: query must be [B, Hq, 1, D], got {getattr(query, 'shape', query)}")
    cB, Hkv, cD, cdtype, cdevice = cache.spec
    B, Hq, _, D = query.shape
    _require(B == cB, f"batch: query has {B} rows, the cache {cB}")
    _require(D == cD, f"head_dim: query has {D}, the cache {cD}")
    _require(Hq > 0 and Hq % Hkv == 0, f"heads: {Hq} query heads are not a multiple of {Hkv} kv_heads")
    _require(query.dtype == cdtype, f"dtype: query is {query.dtype}, the cache {cdtype}")
    _require(query.device == cdevice, f"device: query is on {query.device}, the cache on {cdevice}")

    G = Hq // Hkv
    q = query.reshape(B, Hkv, G, D).float() / math.sqrt(D)  # [B, Hkv, G, D]
    lens = cache.lens.view(B, 1, 1, 1)
    run_max = torch.full((B, Hkv, G, 1), -math.inf, dtype=torch.float32, device=cdevice)
    run_sum = torch.zeros((B, Hkv, G, 1), dtype=torch.float32, device=cdevice)
    acc = torch.zeros((B, Hkv, G, D), dtype=torch.float32, device=cdevice)
    used = -(-int(cache.lens.max()) // BLOCK) if B else 0
    for i in range(used):
        k = cache.k_blocks[i].float()  # [B, Hkv, BLOCK, D]
        v = cache.v_blocks[i].float()
        here = (torch.arange(BLOCK, device=cdevice) + i * BLOCK).view(1, 1, 1, BLOCK) < lens
        s = (q @ k.transpose(-1, -2)).masked_fill(~here, -math.inf)  # [B, Hkv, G, BLOCK]
        new_max = torch.maximum(run_max, s.amax(dim=-1, keepdim=True))
        pivot = torch.where(torch.isinf(new_max), torch.zeros_like(new_max), new_max)
        p = torch.exp(s - pivot)  # masked: exactly 0
        scale_old = torch.exp(run_max - pivot)
        v = v.masked_fill(~here.view(B, 1, BLOCK, 1), 0.0)
        acc = acc * scale_old + p @ v  # [B, Hkv, G, BLOCK] @ [B, Hkv, BLOCK, D]
        run_sum = run_sum * scale_old + p.sum(dim=-1, keepdim=True)
        run_max = new_max
    out = torch.where(run_sum > 0, acc / run_sum.clamp_min(1e-30), torch.zeros_like(acc))
    return out.reshape(B, Hq, 1, D).to(query.dtype)


def reset(cache: KVCache) -> None:
    cache.k_blocks, cache.v_blocks = [], []
    cache.lens = None
    cache.spec = None


def release(cache: KVCache, index: int) -> None:
    _require(cache.spec is not None, "release on an empty cache")
    B = cache.spec[0]
    i = int(index)
    if not 0 <= i < B:
        raise IndexError(f"release: index {index} is not a row of a batch of {B}")
    lens = cache.lens.clone()
    lens[i] = 0
    cache.lens = lens
    for block in cache.k_blocks + cache.v_blocks:
        block[i].zero_()


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    _require(cache.spec is not None, "reorder on an empty cache")
    _require(isinstance(beam_idx, Tensor) and beam_idx.dtype == torch.int64 and beam_idx.dim() == 1,
             "beam_idx must be a 1-d int64 tensor")
    B, H, D, dtype, device = cache.spec
    picks = beam_idx.detach().cpu()
    _require(picks.numel() > 0 and bool(((picks >= 0) & (picks < B)).all()),
             f"beam_idx must be non-empty with values in 0..{B - 1}, got {picks.tolist()}")
    idx = picks.to(device)
    cache.k_blocks = [blk.index_select(0, idx) for blk in cache.k_blocks]
    cache.v_blocks = [blk.index_select(0, idx) for blk in cache.v_blocks]
    cache.lens = cache.lens.index_select(0, idx)
    cache.spec = (picks.numel(), H, D, dtype, device)


def fork(cache: KVCache) -> KVCache:
    child = KVCache(cache.reserve)
    child.k_blocks = [blk.clone() for blk in cache.k_blocks]
    child.v_blocks = [blk.clone() for blk in cache.v_blocks]
    child.lens = None if cache.lens is None else cache.lens.clone()
    child.spec = cache.spec
    return child


@torch.no_grad()
def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    _require(isinstance(x, Tensor) and x.dim() == 3 and x.shape[1] == 1,
             f"rank: x must be [B, 1, d_model], got {getattr(x, 'shape', x)}")
    B = x.shape[0]
    _require(cache.spec is None or cache.spec[0] == B,
             f"batch: x has {B} rows, the cache {cache.spec and cache.spec[0]}")
    n_q, n_kv, d = layer.n_heads, layer.n_kv_heads, layer.head_dim
    q = layer.wq(x).unflatten(-1, (n_q, d)).transpose(1, 2)  # [B, n_q, 1, d]
    k = layer.wk(x).unflatten(-1, (n_kv, d)).transpose(1, 2)  # [B, n_kv, 1, d]
    v = layer.wv(x).unflatten(-1, (n_kv, d)).transpose(1, 2)
    now = cache.lens if cache.lens is not None else torch.zeros(B, dtype=torch.int64)
    positions = now.to(x.device).unsqueeze(-1)  # [B, 1]: the new token's absolute position
    q = apply_rope(q, positions, layer.rope_base)
    k = apply_rope(k, positions, layer.rope_base)
    append(cache, k, v, counts)
    o = attend(cache, q).transpose(1, 2).flatten(2)  # [B, 1, n_q * d]
    return layer.wo(o)


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
