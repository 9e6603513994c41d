"""Seeded inputs for the graders: every case is generated in the judge from a fixed seed.

A case never depends on the candidate's outputs, so a failure replays exactly. Besides tensors,
hidden cases draw their shapes and schedules here (`randint`, `choice`, `chunks`).

A judge that grades many times in one process (`kata grade --watch`, `kata grade-all`, the test
suite) draws the same public cases each time: `randn` keeps its draws, by the generator's state
before the draw and the draw's arguments, up to KEPT_BYTES (the least recently used go first). A
draw met again puts the generator in its state after that draw and returns a copy of it: the
same values, the same generator, as drawing again would give.
"""

from __future__ import annotations

import ctypes
import math
import threading
from collections import OrderedDict

import torch

KEPT_BYTES = 128 << 20

_kept: OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor]] = OrderedDict()
_kept_bytes = 0
_kept_lock = threading.Lock()  # a batch grades in threads


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def randn(
    g: torch.Generator, *shape: int, dtype: torch.dtype = torch.float32, scale: float = 1.0
) -> torch.Tensor:
    """Standard normal values drawn in float64 from `g`, times `scale`, in `dtype`."""
    key = (_state_bytes(g), shape, dtype, scale)
    with _kept_lock:
        kept = _kept.get(key)
        if kept is not None:
            _kept.move_to_end(key)
    if kept is None:
        drawn = (torch.randn(*shape, generator=g, dtype=torch.float64) * scale).to(dtype)
        kept = drawn, g.get_state()
        _keep(key, kept)
    else:
        g.set_state(kept[1])
    return kept[0].clone()


def _state_bytes(g: torch.Generator) -> bytes:
    """The generator's state as bytes: its ByteTensor [5056] read in place (0.5 us; `tolist`
    takes 50 us, and `.numpy()` needs NumPy, which neither torch nor the kata depends on)."""
    state = g.get_state()  # a fresh contiguous uint8 tensor on the CPU, ours alone
    return ctypes.string_at(state.data_ptr(), state.numel())


def _keep(key: tuple, drawn: tuple[torch.Tensor, torch.Tensor]) -> None:
    global _kept_bytes
    with _kept_lock:
        if key not in _kept:
            _kept[key] = drawn
            _kept_bytes += _size(key, drawn)
        while _kept_bytes > KEPT_BYTES:
            _kept_bytes -= _size(*_kept.popitem(last=False))


def _size(key: tuple, drawn: tuple[torch.Tensor, torch.Tensor]) -> int:
    tensor, state = drawn
    return len(key[0]) + tensor.untyped_storage().nbytes() + state.numel()


def sequence(
    g: torch.Generator,
    B: int,
    Hq: int,
    Hkv: int,
    T: int,
    D: int,
    dtype: torch.dtype = torch.float32,
    scale: float = 1.0,
) -> dict[str, torch.Tensor]:
    """Queries [B, Hq, T, D] and keys, values [B, Hkv, T, D] for T positions of B sequences."""
    return {
        "q": randn(g, B, Hq, T, D, dtype=dtype, scale=scale),
        "k": randn(g, B, Hkv, T, D, dtype=dtype, scale=scale),
        "v": randn(g, B, Hkv, T, D, dtype=dtype),
    }


def randint(g: torch.Generator, low: int, high: int) -> int:
    """A seeded integer in low..high, both included."""
    return int(torch.randint(low, high + 1, (), generator=g))


def choice(g: torch.Generator, options: tuple):
    return options[randint(g, 0, len(options) - 1)]


def chunks(g: torch.Generator, total: int, most: int) -> list[int]:
    """Positions per append, each 1..most, adding up to `total`."""
    sizes = []
    while total > 0:
        sizes.append(min(randint(g, 1, most), total))
        total -= sizes[-1]
    return sizes


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


def layer_weights(
    g: torch.Generator, d_model: int, n_heads: int, n_kv_heads: int, head_dim: int
) -> dict[str, torch.Tensor]:
    """wq, wk, wv, wo as [out_features, in_features] float32, scaled like a trained layer."""
    scale = d_model**-0.5
    return {
        "wq": randn(g, n_heads * head_dim, d_model, scale=scale),
        "wk": randn(g, n_kv_heads * head_dim, d_model, scale=scale),
        "wv": randn(g, n_kv_heads * head_dim, d_model, scale=scale),
        "wo": randn(g, d_model, n_heads * head_dim, scale=(n_heads * head_dim) ** -0.5),
    }


def large_logits(
    g: torch.Generator,
    B: int,
    H: int,
    T: int,
    D: int,
    logit: float,
    spread: float,
    dtype: torch.dtype,
    sideways: float = 0.0,
) -> dict[str, torch.Tensor]:
    """q and k [B, H, T, D] along one direction per (row, head), of norms that put every logit
    q.k / sqrt(D) near `logit`, give or take a few `spread`s; v ordinary. In `dtype`.

    `sideways` > 0 also moves each key that far out along a direction of its own at right angles
    to the shared one: the logits stay where they are, but a query rounded after scaling moves
    each position's logit by a different amount.
    """
    direction = randn(g, B, H, 1, D).double()
    direction = direction / direction.norm(dim=-1, keepdim=True)
    norm = math.sqrt(logit * math.sqrt(D))
    jitter = spread * math.sqrt(D) / norm  # moves each logit by about `spread`
    q = norm * direction + jitter * randn(g, B, H, T, D).double()
    k = norm * direction
    if sideways:
        side = randn(g, B, H, T, D).double()
        side = side - (side * direction).sum(dim=-1, keepdim=True) * direction  # at right angles
        k = k + sideways * side / side.norm(dim=-1, keepdim=True)
    k = k + jitter * randn(g, B, H, T, D).double()
    v = randn(g, B, H, T, D)
    return {"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype)}


EXACT_QUERY = 128  # the large coordinate of `exact_queries`


def exact_queries(g: torch.Generator, *shape: int, D: int) -> torch.Tensor:
    """Integer-valued queries [*shape, D], float32: EXACT_QUERY in the first coordinate, -2..2 in
    the others. With `exact_keys`, every product q.k is an integer float32 holds exactly, so a
    logit is exact whatever the order of the sums (and at D = 16, the scale 1/4 too)."""
    return torch.cat(
        (torch.full((*shape, 1), EXACT_QUERY), torch.randint(-2, 3, (*shape, D - 1), generator=g)),
        dim=-1,
    ).float()


def exact_keys(g: torch.Generator, offsets: torch.Tensor, t: int, D: int) -> torch.Tensor:
    """Integer-valued keys [*offsets.shape, t, D], float32, whose logits q.k / sqrt(D) with
    `exact_queries` sit within a few units of `offsets` (one per head, say): the first coordinate
    carries the offset, the others are -2..2."""
    large = (offsets * math.sqrt(D) / EXACT_QUERY).round()[..., None, None]
    small = torch.randint(-2, 3, (*offsets.shape, t, D - 1), generator=g)
    return torch.cat((large.expand(*offsets.shape, t, 1), small), dim=-1).float()
