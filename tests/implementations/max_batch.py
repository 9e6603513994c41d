"""A static cache sized for a maximum batch, as a server sets one up: rows to spare, time-major.

The first append allocates one buffer for K and one for V of MAX_BATCH rows (or the batch, if it
is larger) and DEFAULT_SLOTS time slots (or `capacity` slots for KVCache(capacity=N); more if
the first append alone needs more), in the layout [rows, slots, Hkv, D]: a row's positions one
after the other, the heads inside each (gpt-fast's `setup_caches(max_batch_size, max_seq_length)`
allocates this way, once for the whole serving session). A batch of 2 leaves 30 rows unused: that
is over-provisioning, paid once. When a row outgrows the slots, the slots double (one copy,
O(log n) of them for n appends); rows are never given back. `keys` / `values` are views of the
first B rows and max(lengths) slots, transposed to [B, Hkv, T, D]. attend reads those views with
einsum, grouping query heads as h // (Hq // Hkv) and never copying K or V per query head.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

MAX_BATCH = 32
DEFAULT_SLOTS = 2048


class KVCache:
    def __init__(self, capacity: int | None = None):
        if capacity is not None and (isinstance(capacity, bool) or not isinstance(capacity, int)
                                     or capacity < 0):
            raise ValueError(f"capacity must be None or an int >= 0, got {capacity!r}")
        self.slots_wanted = DEFAULT_SLOTS if capacity is None else capacity
        self.k_buf: Tensor | None = None  # [rows, slots, Hkv, D], rows >= batch
        self.v_buf: Tensor | None = None
        self.batch = 0
        self.lengths: Tensor | None = None  # int64 [batch]

    @property
    def capacity(self) -> int:
        return 0 if self.k_buf is None else self.k_buf.shape[1]

    def _view(self, buf: Tensor | None) -> Tensor | None:
        if buf is None:
            return None
        return buf[: self.batch, : int(self.lengths.max())].transpose(1, 2)  # [B, Hkv, T, D]

    @property
    def keys(self) -> Tensor | None:
        return self._view(self.k_buf)

    @property
    def values(self) -> Tensor | None:
        return self._view(self.v_buf)


def _check(cache: KVCache, key: Tensor, value: Tensor, counts) -> Tensor:
    """The counts (int64 [B]) of a valid append; ValueError, before any change, otherwise."""
    if not isinstance(key, Tensor) or not isinstance(value, Tensor):
        raise ValueError("new_key and new_value must be tensors")
    if key.dim() != 4 or value.dim() != 4:
        raise ValueError(f"rank: keys and values are [B, Hkv, t, D], got {key.dim()} and "
                         f"{value.dim()} dims")
    if key.shape != value.shape:
        raise ValueError(f"key shape {list(key.shape)} and value shape {list(value.shape)} differ")
    if key.dtype != value.dtype or key.device != value.device:
        raise ValueError("key and value differ in dtype or device")
    B, H, t, D = key.shape
    if t < 1:
        raise ValueError("time: an append brings at least one position")
    if cache.k_buf is not None:
        for what, mine, theirs in (("batch", cache.batch, B), ("kv_heads", cache.k_buf.shape[2], H),
                                   ("head_dim", cache.k_buf.shape[3], D),
                                   ("dtype", cache.k_buf.dtype, key.dtype),
                                   ("device", cache.k_buf.device, key.device)):
            if mine != theirs:
                raise ValueError(f"{what}: the cache has {mine}, the new key {theirs}")
    if counts is None:
        return torch.full((B,), t, dtype=torch.int64)
    if not isinstance(counts, Tensor) or counts.dtype != torch.int64:
        raise ValueError(f"counts dtype must be int64, got {getattr(counts, 'dtype', counts)!r}")
    if tuple(counts.shape) != (B,):
        raise ValueError(f"counts shape must be [{B}], got {list(counts.shape)}")
    if counts.device.type == "meta":
        raise ValueError("counts device: a meta tensor holds no counts")
    counts = counts.cpu()
    if bool((counts < 0).any()) or bool((counts > t).any()):
        raise ValueError(f"counts range: each in 0..{t}, got {counts.tolist()}")
    return counts


def _make_room(cache: KVCache, needed: int, like: Tensor) -> None:
    """Slots for `needed` positions per row: the buffers on the first append, doubled after."""
    B, H, _, D = like.shape
    if cache.k_buf is None:
        wanted = cache.slots_wanted
        slots = wanted if wanted >= needed else max(needed, 2 * wanted)
        shape = (max(MAX_BATCH, B), slots, H, D)
        cache.k_buf = torch.zeros(shape, dtype=like.dtype, device=like.device)
        cache.v_buf = torch.zeros(shape, dtype=like.dtype, device=like.device)
        cache.batch = B
        return
    old = cache.capacity
    if needed <= old:
        return
    slots = max(2 * old, needed)
    for name in ("k_buf", "v_buf"):
        buf = getattr(cache, name)
        grown = buf.new_zeros(buf.shape[0], slots, *buf.shape[2:])  # [rows, slots, Hkv, D]
        grown[:, :old] = buf
        setattr(cache, name, grown)


def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None):
    counts = _check(cache, new_key, new_value, counts)  # [B], on the CPU
    B, _, t, _ = new_key.shape
    start = cache.lengths.cpu() if cache.lengths is not None else torch.zeros(B, dtype=torch.int64)
    end = start + counts  # [B]
    _make_room(cache, int(end.max()), new_key)
    keep = torch.arange(t)[None, :] < counts[:, None]  # [B, t]
    row, j = keep.nonzero(as_tuple=True)  # [N] each: the real new positions
    slot = start[row] + j  # [N]
    dev = new_key.device
    row, j, slot = row.to(dev), j.to(dev), slot.to(dev)
    cache.k_buf[row, slot] = new_key[row, :, j]  # [N, Hkv, D]
    cache.v_buf[row, slot] = new_value[row, :, j]
    cache.lengths = end.to(dev)


def attend(cache: KVCache, query: Tensor) -> Tensor:
    if cache.k_buf is None:
        raise ValueError("attend: the cache is empty")
    if not isinstance(query, Tensor) or query.dim() != 4 or query.shape[2] != 1:
        raise ValueError(f"rank: query must be [B, Hq, 1, D], got {getattr(query, 'shape', query)}")
    B, Hq, _, D = query.shape
    H = cache.k_buf.shape[2]
    for what, mine, theirs in (("batch", cache.batch, B), ("head_dim", cache.k_buf.shape[3], D),
                               ("dtype", cache.k_buf.dtype, query.dtype),
                               ("device", cache.k_buf.device, query.device)):
        if mine != theirs:
            raise ValueError(f"{what}: the cache has {mine}, the query {theirs}")
    if Hq % H:
        raise ValueError(f"heads: {Hq} query heads are not a multiple of {H} kv heads")
    T = int(cache.lengths.max())
    k = cache.k_buf[:B, :T]  # [B, T, Hkv, D]
    v = cache.v_buf[:B, :T]
    q = query.reshape(B, H, Hq // H, D)  # [B, Hkv, G, D]: head h is (h // G, h % G)
    scores = torch.einsum("bhgd,bthd->bhgt", q.float(), k.float()) / math.sqrt(D)
    live = torch.arange(T, device=query.device)[None, :] < cache.lengths[:, None]  # [B, T]
    scores = scores.masked_fill(~live[:, None, None, :], -math.inf)
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # a row of length 0: all zeros
    out = torch.einsum("bhgt,bthd->bhgd", weights, v.float())  # [B, Hkv, G, D]
    return out.reshape(B, Hq, 1, D).to(query.dtype)


def reset(cache: KVCache) -> None:
    cache.k_buf = cache.v_buf = cache.lengths = None
    cache.batch = 0


def release(cache: KVCache, index: int) -> None:
    if cache.lengths is None:
        raise ValueError("release: the cache is empty")
    if not 0 <= index < cache.batch:
        raise IndexError(f"release: no row {index} in a batch of {cache.batch}")
    lengths = cache.lengths.clone()
    lengths[index] = 0
    cache.lengths = lengths


def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    if cache.k_buf is None:
        raise ValueError("reorder: the cache is empty")
    if not isinstance(beam_idx, Tensor) or beam_idx.dtype != torch.int64 or beam_idx.dim() != 1:
        raise ValueError("beam_idx must be a 1-d int64 tensor")
    idx = beam_idx.to(cache.k_buf.device)
    rows = len(idx)
    for name in ("k_buf", "v_buf"):
        buf = getattr(cache, name)
        picked = buf[idx]  # [B', slots, Hkv, D], a copy: rows may repeat or swap
        if rows > buf.shape[0]:
            buf = buf.new_zeros(rows, *buf.shape[1:])
            setattr(cache, name, buf)
        buf[:rows] = picked
    cache.lengths = cache.lengths[idx]
    cache.batch = rows


def fork(cache: KVCache) -> KVCache:
    copy = KVCache()
    copy.slots_wanted = cache.slots_wanted
    if cache.k_buf is not None:
        copy.k_buf, copy.v_buf = cache.k_buf.clone(), cache.v_buf.clone()
        copy.lengths, copy.batch = cache.lengths.clone(), cache.batch
    return copy


def apply_rope(x: Tensor, positions: Tensor, base: float = 10000.0) -> Tensor:
    """Rotary position embedding, as given in the starter."""
    head_dim = x.shape[-1]
    even = torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32)  # [D/2]
    inv_freq = base ** (-even / head_dim)  # [D/2]
    angles = positions.to(device=x.device, dtype=torch.float32)[..., None] * inv_freq  # [B, T, D/2]
    emb = torch.cat((angles, angles), dim=-1)[:, None]  # [B, 1, T, D], broadcast over heads
    xf = x.float()
    half = head_dim // 2
    rotated = torch.cat((-xf[..., half:], xf[..., :half]), dim=-1)  # rotate_half(x)
    return (xf * emb.cos() + rotated * emb.sin()).to(x.dtype)


@torch.no_grad()
def decode_step(layer, cache: KVCache, x: Tensor, counts: Tensor | None = None) -> Tensor:
    if x.dim() != 3 or x.shape[1] != 1:
        raise ValueError(f"rank: x must be [B, 1, d_model], got {tuple(x.shape)}")
    B = x.shape[0]
    if cache.lengths is not None and cache.batch != B:
        raise ValueError(f"batch: x has {B} rows, the cache {cache.batch}")
    Hq, H, D = layer.n_heads, layer.n_kv_heads, layer.head_dim
    q = layer.wq(x).view(B, 1, Hq, D).transpose(1, 2)  # [B, Hq, 1, D]
    k = layer.wk(x).view(B, 1, H, D).transpose(1, 2)  # [B, Hkv, 1, D]
    v = layer.wv(x).view(B, 1, H, D).transpose(1, 2)
    start = cache.lengths if cache.lengths is not None else torch.zeros(B, dtype=torch.int64)
    positions = start.to(x.device)[:, None]  # [B, 1]: each row's next absolute position
    q = apply_rope(q, positions, layer.rope_base)
    k = apply_rope(k, positions, layer.rope_base)
    append(cache, k, v, counts)
    out = attend(cache, q)  # [B, Hq, 1, D]
    return layer.wo(out.transpose(1, 2).reshape(B, 1, Hq * D))
