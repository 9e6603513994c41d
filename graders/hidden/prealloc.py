"""Hidden prealloc: a longer run, in chunks: 128 appends of 8 positions each, 1024 in all.

The public item measures 256 single-token appends, where growth by a constant 64 slots cannot
be told from geometric growth, and where no append ever brings more than one position. Here,
with the public item's criteria and the same measurement (the bytes of every storage an append
creates, counted in the worker), `KVCache()` takes 128 appends of t = 8 (B=1, Hkv=2, D=16):
- growth events (an append allocating at least 1/4 of the K+V bytes then held): at most 3 in
  the last 64 appends, where the cache doubles from 512 to 1024 positions. Growth by a constant
  64 slots reallocates 8 times there, and a cache that takes multi-position appends by another
  path (`torch.cat` for a chunk, say, in place only for single tokens) at every one;
- all appends together allocate at most 10x the final K+V storage.
Only allocation is judged, of a cache that holds the 1024 positions.
"""

from __future__ import annotations

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.hidden import _cases
from graders.items.prealloc import MAX_EVENTS, MAX_RATIO, SHARE

ITEM = "prealloc"

SEED = _cases.BASE_SEED + 1800
APPENDS, T, B, HKV, D = 128, 8, 1, 2, 16
POSITION_BYTES = 2 * B * HKV * D * 4  # K and V of one position, float32


def grade(candidate: Candidate) -> str:
    n = APPENDS * T
    case = _cases.name(SEED, f"{APPENDS} appends of {T} positions, {n} in all")
    g = cases.generator(SEED)
    k, v = cases.randn(g, B, HKV, n, D), cases.randn(g, B, HKV, n, D)
    plan = Plan()
    plan.new("c")
    appends = [plan.append("c", k[:, :, i * T : (i + 1) * T], v[:, :, i * T : (i + 1) * T],
                           measure=True) for i in range(APPENDS)]
    state = plan.state("c")
    results = _cases.run(candidate, plan, case)

    lengths = tensor(results[state]["lengths"], f"{case}: cache.lengths at the end")
    if lengths.tolist() != [n] * B:
        raise Fail(f"{case}: cache.lengths at the end is not {n}: allocation is judged on a cache "
                   "that holds every position")
    capacity = results[state]["capacity"]
    slots = max(capacity, n) if isinstance(capacity, int) else n
    allocated = [results[i]["bytes"] for i in appends]
    events = [i for i in range(APPENDS // 2, APPENDS)
              if allocated[i] * SHARE >= (i + 1) * T * POSITION_BYTES]
    ratio = sum(allocated) / (slots * POSITION_BYTES)
    summary = (f"{len(events)} of the last {APPENDS // 2} appends reallocated, all {APPENDS} "
               f"allocated {ratio:.1f}x the final K+V storage")
    if len(events) > MAX_EVENTS:
        raise Fail(f"{case}: {summary}; at most {MAX_EVENTS} reallocations allowed there: storage "
                   "must grow by a factor, whatever the number of positions an append brings")
    if ratio > MAX_RATIO:
        raise Fail(f"{case}: {summary}; at most {MAX_RATIO:g}x allowed: appends allocate more "
                   "than O(1) amortised bytes per position")
    return f"chunked appends of {T}, {n} positions: {summary}"
