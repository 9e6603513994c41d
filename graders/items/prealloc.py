"""prealloc: single-token appends reallocate the storage O(log n) times, not at every step; the
tell `concat-every-step` when they reallocate it at (nearly) every one.

KVCache() with no capacity takes N=256 single-token appends (B=2, Hkv=2, D=128, float32: 4 KB of
K+V per position, so a few hundred bytes of per-append bookkeeping weigh little). Trusted code in
the worker counts the bytes of every storage each append creates (`plan.append(measure=True)`),
whatever the design. Two criteria, both needed:
- growth events: an append that allocates at least 1/4 of the K+V bytes of the positions then
  held reallocates the cache (or a large share of it). At most 3 of the last 128 appends may:
  growth by a factor r does it about log_r(2) times there (doubling once, 1.5x twice, 1.25x
  three times), fixed-size blocks at most twice, one big buffer never; growth by a constant c
  slots does it 128/c times (+8: 16; constants up to 32 fail, +64 cannot be told from geometric
  growth at this N);
- amortised bytes: all appends together allocate at most 10x the final K+V storage (capacity
  slots, or N if that is larger): growth by r costs r/(r-1) of it (doubling 2x, 1.5x 3x), blocks
  and one buffer 1x, plus 1x per copy of the new token an append makes (the reference gathers
  it once); growth by c costs about N/(2c) (+8: 16x), concatenating about N/2 (128x).
The tell is the toy strategy itself: at least 120 of the last 128 appends reallocate.
Measured (growth events in the last 128 appends; bytes / final storage): reference (doubling) 1,
3.0x; 1.5x growth 2, 3.8x; 1.25x growth 3, 6.0x; blocks of 16 slots 0, 1.0x; blocks of 64 slots
2, 1.0x; one 4096-slot buffer 0, 1.1x; the designs in tests/implementations 0 to 2, 1.0x to
3.0x. Failing: concat baseline 128, 129x (tell); growth to fit (+1 slot) 128, 130x (tell);
+8 slots 16, 18x; +32 slots 4, 5.5x.
Only allocation is judged (correctness belongs to the other items), of a cache that does hold the
N positions: lengths must reach N. Allocations inside `attend` are not measured.
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan

ITEM = "prealloc"

N, B, HKV, D = 256, 2, 2, 128
POSITION_BYTES = 2 * B * HKV * D * 4  # K and V of one position, float32
SHARE = 4  # an append allocating >= 1/SHARE of the K+V held is a growth event
MAX_EVENTS = 3  # growth events allowed in the last N/2 appends
EVERY_STEP = 120  # growth events in the last N/2 appends that show the tell: every step reallocates
MAX_RATIO = 10.0  # bytes allocated by all appends / final K+V storage


def grade(candidate: Candidate) -> str:
    g = cases.generator(730)
    k, v = cases.randn(g, B, HKV, N, D), cases.randn(g, B, HKV, N, D)
    plan = Plan()
    plan.new("c")
    appends = [plan.append("c", k[:, :, t : t + 1], v[:, :, t : t + 1], measure=True)
               for t in range(N)]
    state = plan.state("c")
    results = candidate.run(plan)

    capacity = results[state]["capacity"]
    slots = max(capacity, N) if isinstance(capacity, int) else N
    allocated = [results[i]["bytes"] for i in appends]
    events = [t for t in range(N // 2, N) if allocated[t] * SHARE >= (t + 1) * POSITION_BYTES]
    ratio = sum(allocated) / (slots * POSITION_BYTES)
    summary = (f"{len(events)} of the last {N // 2} appends reallocated (allocated >= 1/{SHARE} of "
               f"the K+V held); all {N} allocated {ratio:.1f}x the final K+V storage")
    every_step = len(events) >= EVERY_STEP
    candidate.tell("concat-every-step", every_step, summary if every_step else
                   "append does not reallocate the storage at every step")

    lengths = results[state]["lengths"]  # its type is append-time-dim's business
    held = lengths.tolist() if isinstance(lengths, torch.Tensor) else lengths
    if held not in ([N] * B, N):
        raise Fail(f"after {N} single-token appends cache.lengths is {held!r}, expected "
                   f"{[N] * B}: allocation is judged on a cache that holds every position")
    if every_step:
        raise Fail(f"{summary}: the storage is copied into a new one at every append, O(n^2) bytes "
                   "for n tokens. Allocate ahead and write in place; when full, grow by a factor")
    if len(events) > MAX_EVENTS:
        raise Fail(f"{summary}; at most {MAX_EVENTS} reallocations allowed there: growth by a "
                   f"constant number of slots reallocates O(n) times. Grow by a factor (doubling)")
    if ratio > MAX_RATIO:
        raise Fail(f"{summary}; at most {MAX_RATIO:g}x allowed: appends allocate O(n) bytes each "
                   "instead of O(1) amortised")
    return summary
