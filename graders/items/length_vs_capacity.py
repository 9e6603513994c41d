"""length-vs-capacity: lengths and capacity are tracked separately and correctly.

`lengths` counts each row's valid positions, `capacity` the time slots allocated; `keys` and
`values` are the valid prefix, T = max(lengths), never the whole storage. Three cases:
- `KVCache()` before any append: keys, values and lengths None, capacity 0;
- `KVCache(capacity=16)`: 16 slots after a first append of 3 positions (a cache that ignores the
  request allocates what it needs; one that rounds up to its block size may hold more), the
  same number while appends fit (3, 4, 8, 16 positions), then at least 17; attention after 3 positions must equal the reference (a cache
  that attends over all 16 slots reads 13 empty ones);
- `KVCache()` with ragged `counts`, so max(lengths) differs from some rows' lengths: capacity an
  int >= max(lengths) and keys' time dimension max(lengths) at every step.
No growth factor is required (that is prealloc's business, L6): growing by exactly what an
append needs passes.
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, require_close

ITEM = "length-vs-capacity"

H, D, REQUESTED = 2, 8, 16
PREALLOCATED = (3, 1, 4, 8, 1)  # positions per append to KVCache(capacity=16), B=2: 3, 4, 8, 16, 17
RAGGED = [  # (t, counts) per append to KVCache(), B=3
    (4, (4, 1, 2)),
    (2, (0, 2, 1)),
    (1, (1, 1, 0)),
    (3, (3, 0, 3)),
    (1, (0, 1, 1)),
]


def grade(candidate: Candidate) -> str:
    pre = cases.sequence(cases.generator(400), 2, H, H, sum(PREALLOCATED), D)
    ragged = cases.sequence(cases.generator(401), 3, H, H, 4, D)
    plan = Plan()
    plan.new("empty")
    empty = plan.state("empty")
    plan.new("pre", capacity=REQUESTED)
    pre_states, total = [], 0
    for t in PREALLOCATED:
        plan.append("pre", pre["k"][:, :, total : total + t], pre["v"][:, :, total : total + t])
        total += t
        pre_states.append((total, plan.state("pre")))
        if total == 3:
            attended = plan.attend("pre", pre["q"][:, :, 2:3])
    plan.new("ragged")
    ragged_states, lengths = [], torch.zeros(3, dtype=torch.int64)
    for t, counts in RAGGED:
        plan.append("ragged", ragged["k"][:, :, :t], ragged["v"][:, :, :t], cases.counts(*counts))
        lengths = lengths + cases.counts(*counts)
        ragged_states.append((lengths.tolist(), plan.state("ragged")))
    results = candidate.run(plan)

    state = results[empty]
    for name in ("keys", "values", "lengths"):
        if state[name] is not None:
            raise Fail(f"KVCache() before any append: cache.{name} is {_describe(state[name])}, "
                       "expected None")
    if _capacity(state["capacity"], "KVCache() before any append") != 0:
        raise Fail(f"KVCache() before any append: capacity is {state['capacity']}, expected 0")

    first = None
    for total, index in pre_states:
        where = f"KVCache(capacity={REQUESTED}) after {total} positions"
        capacity = _check(results[index], [total] * 2, where)
        first = capacity if first is None else first
        if total <= REQUESTED and (capacity < REQUESTED or capacity != first):
            hint = ("" if capacity != total else ": it counts the valid positions, not the "
                    "allocated slots")
            raise Fail(f"{where}: capacity is {capacity}, expected {REQUESTED} (KVCache(capacity=N)"
                       " allocates N slots at the first append and keeps them while they suffice)"
                       f"{hint}")

    query, k, v = pre["q"][:, :, 2:3], pre["k"][:, :, :3], pre["v"][:, :, :3]
    empty_slots = torch.zeros(2, H, REQUESTED - 3, D)
    over_capacity = reference.causal_attention(query.expand(-1, -1, REQUESTED, -1),
                                               torch.cat((k, empty_slots), dim=2),
                                               torch.cat((v, empty_slots), dim=2))[:, :, -1:]
    require_close([tensor(results[attended], "attend's output")],
                  [reference.causal_attention(pre["q"][:, :, :3], k, v)[:, :, 2:3]],
                  TOLERANCE[torch.float32],
                  case=f"attend after 3 positions in KVCache(capacity={REQUESTED})",
                  likely={"attending over every allocated slot, not only the valid positions":
                          [over_capacity]})

    for step, (expected, index) in enumerate(ragged_states):
        _check(results[index], expected, f"KVCache() after ragged append {step} (counts "
                                         f"{list(RAGGED[step][1])})")
    return (f"empty cache; KVCache(capacity={REQUESTED}) kept {REQUESTED} slots while they "
            "sufficed; ragged counts: lengths, capacity and keys' time dimension right every step")


def _check(state: dict, expected: list[int], where: str) -> int:
    """Lengths, capacity >= max(lengths) and keys/values time = max(lengths); returns capacity."""
    lengths = tensor(state["lengths"], f"cache.lengths {where}")
    if lengths.dtype != torch.int64 or lengths.tolist() != expected:
        raise Fail(f"{where}: cache.lengths is {lengths.tolist()}, {_describe(lengths)}, "
                   f"expected int64 {expected}")
    capacity = _capacity(state["capacity"], where)
    if capacity < max(expected):
        raise Fail(f"{where}: capacity {capacity} is less than max(lengths) = {max(expected)}: "
                   "capacity counts the allocated time slots")
    for name in ("keys", "values"):
        time = tensor(state[name], f"cache.{name} {where}").shape[2]
        if time != max(expected):
            hint = (": that is the capacity; keys and values are the valid prefix of the storage"
                    if time == capacity else "")
            raise Fail(f"{where}: cache.{name} has time dimension {time}, expected max(lengths) = "
                       f"{max(expected)}{hint}")
    return capacity


def _capacity(value, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise Fail(f"{where}: capacity is {_describe(value)}, expected an int")
    return value


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor ({str(value.dtype).removeprefix('torch.')}, shape {list(value.shape)})"
    return repr(value)
