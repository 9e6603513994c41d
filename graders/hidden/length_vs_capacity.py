"""Hidden length-vs-capacity: requested capacities that are not powers of two, long caches, and
lengths that go down as well as up.

The public item requests 16 slots and its lengths only ever grow. Here, seeded:
- `KVCache(capacity=N)` for an N that is no power of two, filled by chunks to exactly N, then
  past it: from the first append to length N the capacity must be at least N and never change
  (allocated once, kept while the rows fit), then any int >= max(lengths). At least N, not
  exactly N: a cache of fixed-size blocks rounds N up to whole blocks, and that is fine;
- the same at length ~2000: N = 1531, three big appends to N, then 600 more positions (a cache
  that caps what it preallocates, or grows while the request still suffices, shows);
- ragged counts on `KVCache()`, then the longest row released: max(lengths) drops, and keys'
  and values' time dimension must drop with it (a high-water mark kept from the appends does
  not). The released row then starts again and grows; one row holds a real all-zero key as its
  last position, so lengths inferred from the data (non-zero slots) come out short.
After every operation: lengths int64 exact, capacity an int >= max(lengths), keys and values
[B, Hkv, max(lengths), D]. No growth factor is required (that is prealloc's business).
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.hidden import _cases

ITEM = "length-vs-capacity"

H, D = 2, 4
CAPACITY_SEED = _cases.BASE_SEED + 1000
LONG_SEED = _cases.BASE_SEED + 1010
LONG_CAPACITY, LONG_APPENDS = 1531, (500, 700, 331, 1, 599)  # 1531 exactly, then 2131
RAGGED_SEED = _cases.BASE_SEED + 1020


def grade(candidate: Candidate) -> str:
    g = cases.generator(CAPACITY_SEED)
    capacity = _cases.choice(g, (24, 37, 45, 51))
    appends = _cases.chunks(g, capacity, 9) + _cases.chunks(g, capacity // 2, 9)
    _preallocated(candidate, g, CAPACITY_SEED, capacity, appends)
    g = cases.generator(LONG_SEED)
    _preallocated(candidate, g, LONG_SEED, LONG_CAPACITY, LONG_APPENDS)
    _ragged_then_release(candidate)
    return (f"KVCache(capacity={capacity}) and KVCache(capacity={LONG_CAPACITY}) kept their "
            f"slots while they sufficed; lengths, capacity and the keys' time dimension right "
            "after ragged appends and a release of the longest row")


def _preallocated(candidate: Candidate, g, seed: int, capacity: int, appends) -> None:
    case = _cases.name(seed, f"KVCache(capacity={capacity}), {len(appends)} appends reaching "
                             f"{sum(appends)} positions")
    seq = cases.sequence(g, 2, H, H, sum(appends), D)
    plan = Plan()
    plan.new("c", capacity=capacity)
    states, total = [], 0
    for t in appends:
        plan.append("c", seq["k"][:, :, total : total + t], seq["v"][:, :, total : total + t])
        total += t
        states.append((total, plan.state("c")))
    results = _cases.run(candidate, plan, case)
    first = None
    for total, index in states:
        where = f"{case}: after {total} positions"
        got = _check(results[index], [total] * 2, where)
        first = got if first is None else first
        if total <= capacity and (got < capacity or got != first):
            raise Fail(f"{where}: capacity is {got}, expected at least {capacity} and the same as "
                       f"after the first append ({first}): KVCache(capacity=N) allocates N slots "
                       "at the first append and keeps them while they suffice")


def _ragged_then_release(candidate: Candidate) -> None:
    g = cases.generator(RAGGED_SEED)
    B = _cases.randint(g, 3, 4)
    longest = _cases.randint(g, 0, B - 1)  # takes every position offered, so it stays the longest
    first = _cases.randint(g, 2, 5)
    steps = [(first, [first if b == longest else _cases.randint(g, 1, first - 1)
                      for b in range(B)])]
    for t in [_cases.randint(g, 1, 5) for _ in range(5)]:
        steps.append((t, [t if b == longest else _cases.randint(g, 0, t) for b in range(B)]))
    lengths = [sum(c[b] for _, c in steps) for b in range(B)]
    case = _cases.name(RAGGED_SEED, f"B={B}, ragged counts, then the longest row released and "
                                    "grown again")
    seq = cases.sequence(g, B, H, H, sum(t for t, _ in steps) + 3, D)
    shortest = min(range(B), key=lengths.__getitem__)
    seq["k"][shortest, :, lengths[shortest] - 1] = 0.0  # a real position with an all-zero key

    plan = Plan()
    plan.new("c")
    checks, done = [], [0] * B
    for step, (t, counts) in enumerate(steps, start=1):
        chunk = {p: torch.stack([seq[p][b, :, done[b] : done[b] + t] for b in range(B)])
                 for p in "kv"}
        plan.append("c", chunk["k"], chunk["v"], cases.counts(*counts))
        done = [n + c for n, c in zip(done, counts)]
        checks.append((f"after ragged append {step}", list(done), plan.state("c")))
    plan.release("c", longest)
    done[longest] = 0
    checks.append(("after releasing the longest row", list(done), plan.state("c")))
    for step in range(3):
        counts = [int(b == longest) for b in range(B)]
        plan.append("c", seq["k"][:, :, step : step + 1], seq["v"][:, :, step : step + 1],
                    cases.counts(*counts))
        done[longest] += 1
        checks.append((f"after {step + 1} positions in the released row", list(done),
                       plan.state("c")))
    results = _cases.run(candidate, plan, case)
    for when, expected, index in checks:
        _check(results[index], expected, f"{case}: {when}")


def _check(state: dict, expected: list[int], where: str) -> int:
    """Lengths exact, capacity an int >= max(lengths), keys/values time = max(lengths); returns
    the capacity."""
    lengths = tensor(state["lengths"], f"{where}, cache.lengths")
    if lengths.dtype != torch.int64 or lengths.tolist() != expected:
        raise Fail(f"{where}: cache.lengths is not int64 holding each row's count of valid "
                   "positions (count what was appended, never what the storage holds)")
    capacity = state["capacity"]
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < max(expected):
        raise Fail(f"{where}: capacity is not an int >= max(lengths)")
    for attr in ("keys", "values"):
        time = tensor(state[attr], f"{where}, cache.{attr}").shape[2]
        if time != max(expected):
            raise Fail(f"{where}: cache.{attr} has time dimension {time}, expected max(lengths) "
                       f"= {max(expected)}: the valid prefix as it is now, not the largest it has "
                       "been")
    return capacity
