"""Beyond the framework: the newest token's attention compiled into fused loops (torch.compile).

A step beside the paged cache, after the preallocated one (solutions/README.md): kv_cache.py with
the math of its `attend` replaced by `fused_attention` below. `attend` still validates the query,
then returns `fused_attention(query, cache.keys, cache.values, cache.lengths)` on the cache's
views; nothing else changes (`kata solution --diff preallocated fused` shows that file).

Eager `attend` launches one kernel per operation: q·Kᵀ writes the scores, then the mask, the
softmax and weights·V each make a pass of their own. On a bf16 or fp16 cache it is worse: the
float32 scores the contract asks for need `keys.float()` first, a float32 copy of the whole cache
written and read again at every step, which costs more than the attention itself.

Written as elementwise products and sums, the same math lets Inductor (torch.compile's CPU code
generator) emit loops that read K and V in place, upcast each row in registers and accumulate in
float32: no cache-sized temporary, whatever the storage dtype. K and V are never copied per
query head either, but each of the G query heads of a group makes its own reduction over the
group's rows (the loop over G is unrolled when compiling): with MHA (G = 1) a step reads each row
of K and V once, with GQA G times, where eager's matmul serves the whole group in one pass (the
bench's GQA float32 row in solutions/README.md). This is what fused attention kernels do
(FlashAttention's decode kernels, vLLM's paged attention), generated here instead of written by
hand.

The compiled function is used only where torch.compile works (it needs a C++ compiler) and
agrees with eager PyTorch on a small case; `kata bench` shows it as the subject "fused".
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from benchmarks.machine import Unavailable


def fused_attention(query: Tensor, keys: Tensor, values: Tensor, lengths: Tensor) -> Tensor:
    """The contract's attend, as math only: [B, Hq, 1, D] over [B, Hkv, T, D] -> [B, Hq, 1, D].

    Row b attends over positions 0 .. lengths[b] - 1 (int64 [B]); float32 scores and softmax; a
    row of length 0 gives zeros; the output has the query's dtype.

    weights·V is summed over T in two stages, `chunk` positions first. Written as one sum over
    T, Inductor generates T as the inner loop and D outside it in steps of 8 lanes: it walks
    down all of a head's rows of V once per step, 16 times for D = 128, and by the next walk
    those rows have left the L1 and L2 caches. Summed a chunk at a time, the 16 walks stay in
    `chunk` rows, which the L1 cache holds. The T % chunk positions after the last whole chunk
    are summed from the last `chunk` rows, those already summed masked out: a slice whose size
    does not depend on T, so that torch.compile does not compile again for a remainder of 0, of
    1 or of more.
    """
    chunk = 64  # positions: 64 rows of D = 128 in float32 are 32 KiB, an L1 cache
    batch, q_heads, _, head_dim = query.shape
    kv_heads, length = keys.shape[1], keys.shape[2]
    groups = q_heads // kv_heads
    q = query.reshape(batch, kv_heads, groups, 1, head_dim).float()  # [B, Hkv, G, 1, D]
    past_end = torch.arange(length, device=keys.device) >= lengths[:, None]  # [B, T]
    last_rows = torch.arange(length - chunk, length, device=keys.device)  # [chunk]: positions
    in_whole_chunk = last_rows < length - length % chunk  # [chunk]: summed with their chunk
    outs = []
    for g in range(groups):  # unrolled when compiled: G reductions over the same rows of K, V
        scores = (keys.float() * q[:, :, g]).sum(-1) / math.sqrt(head_dim)  # [B, Hkv, T]
        scores = scores.masked_fill(past_end[:, None, :], float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        weights = weights.masked_fill((lengths == 0)[:, None, None], 0.0)  # no NaN for length 0
        weighted = weights[..., None] * values.float()  # [B, Hkv, T, D], never materialised
        if length < chunk:
            outs.append(weighted.sum(2))  # [B, Hkv, D]
            continue
        chunks = weighted.unfold(2, chunk, chunk)  # [B, Hkv, T // chunk, D, chunk]: whole ones
        rest = weighted[:, :, length - chunk :].masked_fill(in_whole_chunk[:, None], 0.0)
        outs.append(chunks.sum(-1).sum(2) + rest.sum(2))  # [B, Hkv, D]
    out = torch.stack(outs, dim=2)  # [B, Hkv, G, D]: head h = kv * G + g
    return out.reshape(batch, q_heads, 1, head_dim).to(query.dtype)


def compiled_attention():
    """`fused_attention` compiled for any cache length (dynamic shapes); Unavailable when
    torch.compile fails here or its result differs from eager PyTorch on a small case."""
    gen = torch.Generator().manual_seed(0)
    query = torch.randn(2, 4, 1, 8, generator=gen)
    # Long enough for the chunked sum and a remainder: the graph that long caches run.
    keys, values = torch.randn(2, 2, 2, 150, 8, generator=gen)  # [B, Hkv, T, D] each
    return compile_checked(
        fused_attention, (query, keys, values, torch.tensor([150, 37])), dynamic=True
    )


def compile_checked(function, example: tuple, dynamic: bool | None):
    """`function` compiled (`dynamic` as torch.compile takes it); Unavailable when
    torch.compile fails here or its result on `example` differs from eager PyTorch."""
    # A bench compiles once per dtype and head grouping, and again for a few ranges of lengths:
    # more than torch's default limit of 8 compilations of one function. Past the limit it
    # would run the products above eagerly, a cache-sized temporary each, and report that as
    # compiled; with the limit raised, and failing when hit, a figure is always compiled code.
    torch._dynamo.config.recompile_limit = 64
    torch._dynamo.config.fail_on_recompile_limit_hit = True
    compiled = torch.compile(function, dynamic=dynamic)
    try:
        got = compiled(*example)
    except Exception as exc:  # noqa: BLE001 - a missing compiler surfaces as many exception types
        raise Unavailable(
            f"torch.compile does not work here: {type(exc).__name__}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
        ) from None
    if not torch.allclose(got, function(*example), atol=1e-5):
        raise Unavailable("torch.compile gives a different result from eager PyTorch here")
    return compiled
