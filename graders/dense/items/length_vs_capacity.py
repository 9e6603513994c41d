"""length-vs-capacity: lengths and capacity are tracked separately and correctly.

`lengths` counts each row's valid positions, `capacity` the time slots allocated; `keys` and
`values` are the valid prefix, T = max(lengths), never the whole storage. No growth factor is
required (that is prealloc's business, L6): growing by exactly what an append needs passes.

Public, four cases:
- `KVCache()` before any append: keys, values and lengths None, capacity 0;
- `KVCache(capacity=16)`: 16 slots after a first append of 3 positions (a cache that ignores the
  request allocates what it needs; one that rounds up to its block size may hold more), the
  same number while appends fit (3, 4, 8, 16 positions), then at least 17; attention after 3
  positions must equal the reference (a cache that attends over all 16 slots reads 13 empty
  ones);
- `KVCache()` with ragged `counts`, so max(lengths) differs from some rows' lengths: capacity an
  int >= max(lengths) and keys' time dimension max(lengths) at every step;
- chunks that cross the capacity part-way, not from exactly full: `KVCache(capacity=16)` and
  `KVCache()` take appends of 3 to 15 positions, most of which start below the capacity and end
  past it (from 14 of 16 to 18, say), and after each the keys and values held must be every
  position appended, in order. Storage that grows only when an append starts exactly at the
  capacity overflows here.
Keys or values shorter than max(lengths) while capacity is too are named as what they are: a
fixed-size cache that dropped the positions appended past its last slot (lengths still count
them), not a capacity reported wrong.

Hidden, seeded (the public cases request 16 slots and their lengths only ever grow):
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
[B, Hkv, max(lengths), D].
"""

from __future__ import annotations

import torch

from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases, reference
from graders.shared.compare import TOLERANCE, require_close
from graders.shared.plans import Fail, Plan, tensor

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
CROSSING = (5, 9, 4, 7, 10, 3, 15)  # positions per append: 5, 14, 18, 25, 35, 38, 53
HIDDEN_D = 4
CAPACITY_SEED = 1000
LONG_SEED = 1010
LONG_CAPACITY, LONG_APPENDS = 1531, (500, 700, 331, 1, 599)  # 1531 exactly, then 2131
RAGGED_SEED = 1020
# Keys shorter than lengths claim, with storage no larger: a fixed-size cache that drops writes.
DROPPED = (
    "positions appended past the last slot were dropped while lengths still count them? An "
    "append that does not fit must grow the storage (capacity >= max(lengths) always), "
    "never lose positions"
)


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
    crossing = _crossing(plan)
    ragged_states, lengths = [], torch.zeros(3, dtype=torch.int64)
    for t, counts in RAGGED:
        plan.append("ragged", ragged["k"][:, :, :t], ragged["v"][:, :, :t], cases.counts(*counts))
        lengths = lengths + cases.counts(*counts)
        ragged_states.append((lengths.tolist(), plan.state("ragged")))
    results = candidate.run(plan)

    state = results[empty]
    for name in ("keys", "values", "lengths"):
        if state[name] is not None:
            raise Fail(
                f"KVCache() before any append: cache.{name} is {_describe(state[name])}, "
                "expected None"
            )
    if _capacity(state["capacity"], "KVCache() before any append") != 0:
        raise Fail(f"KVCache() before any append: capacity is {state['capacity']}, expected 0")

    first = None
    for total, index in pre_states:
        where = f"KVCache(capacity={REQUESTED}) after {total} positions"
        capacity = _check(results[index], [total] * 2, where)
        first = capacity if first is None else first
        if total <= REQUESTED and (capacity < REQUESTED or capacity != first):
            hint = (
                ""
                if capacity != total
                else ": it counts the valid positions, not the allocated slots"
            )
            raise Fail(
                f"{where}: capacity is {capacity}, expected {REQUESTED} (KVCache(capacity=N)"
                " allocates N slots at the first append and keeps them while they suffice)"
                f"{hint}"
            )

    query, k, v = pre["q"][:, :, 2:3], pre["k"][:, :, :3], pre["v"][:, :, :3]
    empty_slots = torch.zeros(2, H, REQUESTED - 3, D)
    over_capacity = reference.causal_attention(
        query.expand(-1, -1, REQUESTED, -1),
        torch.cat((k, empty_slots), dim=2),
        torch.cat((v, empty_slots), dim=2),
    )[:, :, -1:]
    require_close(
        [tensor(results[attended], "attend's output")],
        [reference.causal_attention(pre["q"][:, :, :3], k, v)[:, :, 2:3]],
        TOLERANCE[torch.float32],
        case=f"attend after 3 positions in KVCache(capacity={REQUESTED})",
        likely={
            "which slots attention reads (the output matches every allocated slot's)": [
                over_capacity
            ]
        },
    )

    for step, (expected, index) in enumerate(ragged_states):
        _check(
            results[index],
            expected,
            f"KVCache() after ragged append {step} (counts {list(RAGGED[step][1])})",
        )
    _check_crossing(results, crossing)
    return (
        f"empty cache; KVCache(capacity={REQUESTED}) kept {REQUESTED} slots while they "
        "sufficed; ragged counts: lengths, capacity and keys' time dimension right every "
        "step; chunks crossing the capacity part-way kept every position"
    )


def grade_hidden(candidate: Candidate) -> str:
    seed = hidden_cases.seed(CAPACITY_SEED)
    g = cases.generator(seed)
    capacity = cases.choice(g, (24, 37, 45, 51))
    appends = cases.chunks(g, capacity, 9) + cases.chunks(g, capacity // 2, 9)
    _preallocated(candidate, g, seed, capacity, appends)
    g = cases.generator(hidden_cases.seed(LONG_SEED))
    _preallocated(candidate, g, hidden_cases.seed(LONG_SEED), LONG_CAPACITY, LONG_APPENDS)
    _ragged_then_release(candidate)
    return (
        f"KVCache(capacity={capacity}) and KVCache(capacity={LONG_CAPACITY}) kept their "
        f"slots while they sufficed; lengths, capacity and the keys' time dimension right "
        "after ragged appends and a release of the longest row"
    )


def _crossing(plan: Plan) -> list[tuple[str, torch.Tensor, list[tuple[int, int]]]]:
    """CROSSING's appends into KVCache(capacity=REQUESTED) and into KVCache(): for each cache,
    its constructor's words, the sequence's keys and values ([2, 2, H, T, D]) and (positions
    held, state index) after each append."""
    found = []
    for seed, capacity in ((402, REQUESTED), (403, None)):
        seq = cases.sequence(cases.generator(seed), 2, H, H, sum(CROSSING), D)
        name = f"crossing{seed}"
        plan.new(name, capacity=capacity)
        states, total = [], 0
        for t in CROSSING:
            plan.append(name, seq["k"][:, :, total : total + t], seq["v"][:, :, total : total + t])
            total += t
            states.append((total, plan.state(name)))
        made = "KVCache()" if capacity is None else f"KVCache(capacity={capacity})"
        found.append((made, torch.stack((seq["k"], seq["v"])), states))
    return found


def _check_crossing(results, crossing) -> None:
    """After each append of `_crossing`: lengths, capacity and the time dimension (`_check`),
    and keys and values holding every position appended, in order."""
    for made, kv, states in crossing:
        previous = 0
        for total, index in states:
            where = f"{made} after appending {total - previous} positions at length {previous}"
            capacity = _check(results[index], [total] * 2, where)
            for n, name in enumerate(("keys", "values")):
                held = tensor(results[index][name], f"cache.{name} {where}")
                if not torch.equal(held, kv[n, :, :, :total]):
                    raise Fail(
                        f"{where} (capacity now {capacity}): cache.{name} is not every "
                        "position appended, in order: an append that crosses the "
                        "capacity part-way must keep what is stored and write the rest "
                        "into the grown storage"
                    )
            previous = total


def _check(state: dict, expected: list[int], where: str) -> int:
    """Lengths, capacity >= max(lengths) and keys/values time = max(lengths); returns capacity."""
    lengths = tensor(state["lengths"], f"cache.lengths {where}")
    if lengths.dtype != torch.int64 or lengths.tolist() != expected:
        raise Fail(
            f"{where}: cache.lengths is {lengths.tolist()}, {_describe(lengths)}, "
            f"expected int64 {expected}"
        )
    capacity = _capacity(state["capacity"], where)
    for name in ("keys", "values"):
        time = tensor(state[name], f"cache.{name} {where}").shape[2]
        if time < max(expected) and capacity < max(expected):
            raise Fail(
                f"{where}: lengths are right, but cache.{name} holds only {time} positions "
                f"(capacity {capacity}) where max(lengths) = {max(expected)}: {DROPPED}"
            )
        if time != max(expected):
            hint = (
                ": that is the capacity; keys and values are the valid prefix of the storage"
                if time == capacity
                else ""
            )
            raise Fail(
                f"{where}: cache.{name} has time dimension {time}, expected max(lengths) = "
                f"{max(expected)}{hint}"
            )
    if capacity < max(expected):
        raise Fail(
            f"{where}: capacity {capacity} is less than max(lengths) = {max(expected)}: "
            "capacity counts the allocated time slots"
        )
    return capacity


def _capacity(value, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise Fail(f"{where}: capacity is {_describe(value)}, expected an int")
    return value


def _describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"a tensor ({str(value.dtype).removeprefix('torch.')}, shape {list(value.shape)})"
    return repr(value)


def _preallocated(candidate: Candidate, g, seed: int, capacity: int, appends) -> None:
    """KVCache(capacity) filled by `appends`: its capacity at least `capacity` and unchanged
    while the rows fit."""
    case = hidden_cases.name(
        seed,
        f"KVCache(capacity={capacity}), {len(appends)} appends reaching {sum(appends)} positions",
    )
    seq = cases.sequence(g, 2, H, H, sum(appends), HIDDEN_D)
    plan = Plan()
    plan.new("c", capacity=capacity)
    states, total = [], 0
    for t in appends:
        plan.append("c", seq["k"][:, :, total : total + t], seq["v"][:, :, total : total + t])
        total += t
        states.append((total, plan.state("c")))
    results = hidden_cases.run(candidate, plan, case)
    first = None
    for total, index in states:
        where = f"{case}: after {total} positions"
        got = _check_hidden(results[index], [total] * 2, where)
        first = got if first is None else first
        if total <= capacity and (got < capacity or got != first):
            raise Fail(
                f"{where}: capacity is {got}, expected at least {capacity} and the same as "
                f"after the first append ({first}): KVCache(capacity=N) allocates N slots "
                "at the first append and keeps them while they suffice"
            )


def _ragged_then_release(candidate: Candidate) -> None:
    """Ragged appends, the longest row released, then grown again: the state after each."""
    seed = hidden_cases.seed(RAGGED_SEED)
    g = cases.generator(seed)
    B = cases.randint(g, 3, 4)
    longest = cases.randint(g, 0, B - 1)  # takes every position offered, so it stays the longest
    steps = _ragged_steps(g, B, longest)
    lengths = [sum(c[b] for _, c in steps) for b in range(B)]
    case = hidden_cases.name(
        seed, f"B={B}, ragged counts, then the longest row released and grown again"
    )
    seq = cases.sequence(g, B, H, H, sum(t for t, _ in steps) + 3, HIDDEN_D)
    shortest = min(range(B), key=lengths.__getitem__)
    seq["k"][shortest, :, lengths[shortest] - 1] = 0.0  # a real position with an all-zero key

    plan = Plan()
    plan.new("c")
    checks, done = [], [0] * B
    for step, (t, counts) in enumerate(steps, start=1):
        chunk = {
            p: torch.stack([seq[p][b, :, done[b] : done[b] + t] for b in range(B)]) for p in "kv"
        }
        plan.append("c", chunk["k"], chunk["v"], cases.counts(*counts))
        done = [n + c for n, c in zip(done, counts)]
        checks.append((f"after ragged append {step}", list(done), plan.state("c")))
    plan.release("c", longest)
    done[longest] = 0
    checks.append(("after releasing the longest row", list(done), plan.state("c")))
    for step in range(3):
        counts = [int(b == longest) for b in range(B)]
        plan.append(
            "c",
            seq["k"][:, :, step : step + 1],
            seq["v"][:, :, step : step + 1],
            cases.counts(*counts),
        )
        done[longest] += 1
        checks.append(
            (f"after {step + 1} positions in the released row", list(done), plan.state("c"))
        )
    results = hidden_cases.run(candidate, plan, case)
    for when, expected, index in checks:
        _check_hidden(results[index], expected, f"{case}: {when}")


def _ragged_steps(g: torch.Generator, B: int, longest: int) -> list[tuple[int, list[int]]]:
    """Six appends (t, counts): row `longest` takes every position offered, the others fewer
    (at least one in the first)."""
    first = cases.randint(g, 2, 5)
    steps = [(first, [first if b == longest else cases.randint(g, 1, first - 1) for b in range(B)])]
    for t in [cases.randint(g, 1, 5) for _ in range(5)]:
        steps.append((t, [t if b == longest else cases.randint(g, 0, t) for b in range(B)]))
    return steps


def _check_hidden(state: dict, expected: list[int], where: str) -> int:
    """Lengths exact, capacity an int >= max(lengths), keys/values time = max(lengths); returns
    the capacity."""
    lengths = tensor(state["lengths"], f"{where}, cache.lengths")
    if lengths.dtype != torch.int64 or lengths.tolist() != expected:
        raise Fail(
            f"{where}: cache.lengths is not int64 holding each row's count of valid "
            "positions (count what was appended, never what the storage holds)"
        )
    capacity = state["capacity"]
    is_int = isinstance(capacity, int) and not isinstance(capacity, bool)
    if not is_int or capacity < max(expected):
        short = is_int and any(
            tensor(state[attr], f"{where}, cache.{attr}").shape[2] < max(expected)
            for attr in ("keys", "values")
        )
        raise Fail(
            f"{where}: "
            + (
                "lengths are right, but cache.keys or cache.values hold fewer positions than "
                f"max(lengths), and capacity is below it too: {DROPPED}"
                if short
                else "capacity is not an int >= max(lengths)"
            )
        )
    for attr in ("keys", "values"):
        time = tensor(state[attr], f"{where}, cache.{attr}").shape[2]
        if time != max(expected):
            raise Fail(
                f"{where}: cache.{attr} has time dimension {time}, expected max(lengths) "
                f"= {max(expected)}: the valid prefix as it is now, not the largest it has "
                "been"
            )
    return capacity
