"""Hidden append-time-dim: appends of any size, of non-contiguous tensors, into long caches.

The public item appends 1, 1, 3 and 1 positions to one fixed shape. Here, with seeded shapes:
- random batch, kv_heads and head_dim, and runs of random chunk sizes (t up to 9) into a cache
  that already holds positions: code that handles a multi-position append only as the first one
  (a prompt), or sizes its storage for one more position per call, shows;
- every other append sent as a non-contiguous tensor (a transposed view with the same values):
  code that reshapes its input with `.view`, or copies raw memory, breaks or scrambles it;
- a long cache, ~2000 positions in a few big appends after small ones: storage that grows by a
  fixed step or doubles once per call, or is capped at some fixed size, cannot hold a chunk
  larger than what it holds already.
After every append, keys and values must be [B, Hkv, T, D] holding what was appended, in order,
and lengths int64 [B] equal to T. As in the public item, nothing else is judged: no counts, no
capacity, no attention, no validation.
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, first_divergence, require_shape
from graders.hidden import _cases

ITEM = "append-time-dim"

TOL = TOLERANCE[torch.float32]
SEEDS = [_cases.BASE_SEED + 100 + i for i in range(3)]
LONG_SEED = _cases.BASE_SEED + 110
LONG_APPENDS = (1, 3, 700, 1, 1295)  # 2000 positions; the third append is far larger than the cache


def grade(candidate: Candidate) -> str:
    for seed in SEEDS:
        g = cases.generator(seed)
        B, H, D = _cases.randint(g, 1, 4), _cases.randint(g, 1, 4), _cases.choice(g, (4, 8, 16))
        appends = _cases.chunks(g, _cases.randint(g, 20, 50), 9)
        _check(candidate, g, seed, B, H, D, appends,
               f"{_cases.shape(B, H, D, 'kv head')}, {len(appends)} appends of 1 to 9 positions, "
               "every other one non-contiguous")
    g = cases.generator(LONG_SEED)
    _check(candidate, g, LONG_SEED, 2, 2, 4, LONG_APPENDS,
           f"a long cache: {sum(LONG_APPENDS)} positions, appends of up to {max(LONG_APPENDS)}")
    return (f"{len(SEEDS) + 1} seeded cases (random shapes and chunk sizes, non-contiguous "
            f"inputs, {sum(LONG_APPENDS)} positions): keys, values and lengths right after every "
            "append")


def _check(candidate: Candidate, g: torch.Generator, seed: int, B: int, H: int, D: int,
           appends: tuple[int, ...] | list[int], what: str) -> None:
    case = _cases.name(seed, what)
    seq = cases.sequence(g, B, H, H, sum(appends), D)
    plan = Plan()
    plan.new("c")
    states, total = [], 0
    for i, t in enumerate(appends):
        k, v = seq["k"][:, :, total : total + t], seq["v"][:, :, total : total + t]
        if i % 2:
            k, v = {"noncontiguous": k}, {"noncontiguous": v}
        plan.append("c", k, v)
        total += t
        states.append(plan.state("c"))
    results = _cases.run(candidate, plan, case)

    total = 0
    for i, (t, index) in enumerate(zip(appends, states), start=1):
        total += t
        where = (f"{case}: after append {i} ({t} position{'s' if t > 1 else ''} into a cache "
                 f"holding {total - t}{', sent non-contiguous' if i % 2 == 0 else ''})")
        for attr, part in (("keys", "k"), ("values", "v")):
            got = tensor(results[index][attr], f"{where}, cache.{attr}")
            require_shape(got, (B, H, total, D), f"{where}, cache.{attr}")
            divergence = first_divergence([got], [seq[part][:, :, :total]], TOL)
            if divergence:
                raise Fail(f"{where}: cache.{attr} at row {divergence.row}, head "
                           f"{divergence.head}, time {divergence.position} is not what was "
                           "appended there: keep every appended position, in order, whatever the "
                           "input's memory layout")
        lengths = tensor(results[index]["lengths"], f"{where}, cache.lengths")
        if lengths.dtype != torch.int64 or lengths.tolist() != [total] * B:
            raise Fail(f"{where}: cache.lengths is not int64 [B] counting the {total} positions "
                       "appended so far")
