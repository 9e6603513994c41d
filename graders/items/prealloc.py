"""prealloc: single-token appends reallocate the storage O(log n) times, not at every step; the
tell `concat-every-step` when they reallocate it at (nearly) every one.

Public: KVCache() with no capacity takes N=256 single-token appends (B=2, Hkv=2, D=128, float32: 4 KB of
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

Hidden: a longer run, in chunks, with the same criteria and measurement: `KVCache()` takes 128
appends of t = 8 (B=1, Hkv=2, D=16), 1024 positions. At most 3 growth events in the last 64
appends, where the cache doubles from 512 to 1024 positions: growth by a constant 64 slots
reallocates 8 times there, and a cache that takes multi-position appends by another path
(`torch.cat` for a chunk, say, in place only for single tokens) at every one. All appends
together allocate at most 10x the final K+V storage.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from graders import cases, hidden_cases
from graders.candidate import Candidate, Fail, Plan, tensor

ITEM = "prealloc"

SHARE = 4  # an append allocating >= 1/SHARE of the K+V held is a growth event
MAX_EVENTS = 3  # growth events allowed in the last half of the appends
EVERY_STEP = 120  # growth events in the last 128 single-token appends that show the tell
MAX_RATIO = 10.0  # bytes allocated by all appends / final K+V storage


class Run(NamedTuple):
    """`appends` appends of t positions each to a KVCache() of batch B, Hkv heads, head_dim D,
    float32."""

    appends: int
    t: int
    B: int
    Hkv: int
    D: int

    @property
    def positions(self) -> int:
        return self.appends * self.t

    @property
    def position_bytes(self) -> int:
        return 2 * self.B * self.Hkv * self.D * 4  # K and V of one position, float32


class Measured(NamedTuple):
    """What a run allocated: the growth events among the last half of its appends (indices),
    all appends' bytes / the final K+V storage, and the cache's state at the end."""

    events: list[int]
    ratio: float
    state: dict


PUBLIC = Run(appends=256, t=1, B=2, Hkv=2, D=128)
N = PUBLIC.appends
HIDDEN = Run(appends=128, t=8, B=1, Hkv=2, D=16)
HIDDEN_SEED = hidden_cases.BASE_SEED + 1800


def grade(candidate: Candidate) -> str:
    measured = _measure(candidate, PUBLIC, 730)
    summary = (f"{len(measured.events)} of the last {N // 2} appends reallocated (allocated >= "
               f"1/{SHARE} of the K+V held); all {N} allocated {measured.ratio:.1f}x the final K+V "
               "storage")
    every_step = len(measured.events) >= EVERY_STEP
    candidate.tell("concat-every-step", every_step, summary if every_step else
                   "append does not reallocate the storage at every step")

    lengths = measured.state["lengths"]  # its type is append-time-dim's business
    held = lengths.tolist() if isinstance(lengths, torch.Tensor) else lengths
    if held not in ([N] * PUBLIC.B, N):
        raise Fail(f"after {N} single-token appends cache.lengths is {held!r}, expected "
                   f"{[N] * PUBLIC.B}: allocation is judged on a cache that holds every position")
    if every_step:
        raise Fail(f"{summary}: the storage is copied into a new one at every append, O(n^2) bytes "
                   "for n tokens. Allocate ahead and write in place; when full, grow by a factor")
    if len(measured.events) > MAX_EVENTS:
        raise Fail(f"{summary}; at most {MAX_EVENTS} reallocations allowed there: growth by a "
                   f"constant number of slots reallocates O(n) times. Grow by a factor (doubling)")
    if measured.ratio > MAX_RATIO:
        raise Fail(f"{summary}; at most {MAX_RATIO:g}x allowed: appends allocate O(n) bytes each "
                   "instead of O(1) amortised")
    return summary


def grade_hidden(candidate: Candidate) -> str:
    n = HIDDEN.positions
    case = hidden_cases.name(HIDDEN_SEED, f"{HIDDEN.appends} appends of {HIDDEN.t} positions, "
                                          f"{n} in all")
    with hidden_cases.labelled(case):
        measured = _measure(candidate, HIDDEN, HIDDEN_SEED)
    lengths = tensor(measured.state["lengths"], f"{case}: cache.lengths at the end")
    if lengths.tolist() != [n] * HIDDEN.B:
        raise Fail(f"{case}: cache.lengths at the end is not {n}: allocation is judged on a cache "
                   "that holds every position")
    summary = (f"{len(measured.events)} of the last {HIDDEN.appends // 2} appends reallocated, "
               f"all {HIDDEN.appends} allocated {measured.ratio:.1f}x the final K+V storage")
    if len(measured.events) > MAX_EVENTS:
        raise Fail(f"{case}: {summary}; at most {MAX_EVENTS} reallocations allowed there: storage "
                   "must grow by a factor, whatever the number of positions an append brings")
    if measured.ratio > MAX_RATIO:
        raise Fail(f"{case}: {summary}; at most {MAX_RATIO:g}x allowed: appends allocate more "
                   "than O(1) amortised bytes per position")
    return f"chunked appends of {HIDDEN.t}, {n} positions: {summary}"


def _measure(candidate: Candidate, run: Run, seed: int) -> Measured:
    """Make `run`'s appends with the bytes of every storage each creates counted in the worker
    (`plan.append(measure=True)`); its growth events and byte ratio."""
    g = cases.generator(seed)
    n, t = run.positions, run.t
    k, v = cases.randn(g, run.B, run.Hkv, n, run.D), cases.randn(g, run.B, run.Hkv, n, run.D)
    plan = Plan()
    plan.new("c")
    appends = [plan.append("c", k[:, :, i * t : (i + 1) * t], v[:, :, i * t : (i + 1) * t],
                           measure=True) for i in range(run.appends)]
    state = plan.state("c")
    results = candidate.run(plan)

    allocated = [results[i]["bytes"] for i in appends]
    events = [i for i in range(run.appends // 2, run.appends)
              if allocated[i] * SHARE >= (i + 1) * t * run.position_bytes]
    capacity = results[state]["capacity"]
    slots = max(capacity, n) if isinstance(capacity, int) else n
    return Measured(events, sum(allocated) / (slots * run.position_bytes), results[state])
