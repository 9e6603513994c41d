"""Hidden reset: reset on a cache never used, reset twice, and three batches in a row.

The public item resets once, after an append, and decodes one new batch. Here, seeded:
- reset on a new cache and again right after: it must stay empty (keys, values, lengths None,
  capacity 0). A reset that wipes or rewinds the storage in place before dropping it fails on a
  cache that has none;
- then three batches through the same cache, each of another shape, the second float64, each
  with chunked appends and an attend after each append, and a reset between them: a reset that
  works once (the second batch fits a leftover of the first) or that keeps anything of the
  batch before (storage, a position counter, a dtype) shows in the third.
After every reset the state must be empty; every output is compared with the float64 reference
(float32 tolerance: the contract's softmax runs in float32 for a float64 cache too).
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, require_close, require_shape
from graders.hidden import _cases

ITEM = "reset"

SEED = _cases.BASE_SEED + 700
DTYPES = (torch.float32, torch.float64, torch.float32)
EMPTY = {"keys": None, "values": None, "lengths": None, "capacity": 0}


def grade(candidate: Candidate) -> str:
    g = cases.generator(SEED)
    batches = []
    for dtype in DTYPES:
        B, H, D = _cases.randint(g, 1, 4), _cases.randint(g, 1, 4), _cases.choice(g, (4, 8, 16))
        appends = _cases.chunks(g, _cases.randint(g, 6, 16), 5)
        batches.append((f"{_cases.shape(B, H, D)}, {str(dtype).removeprefix('torch.')}",
                        appends, cases.sequence(g, B, H, H, sum(appends), D, dtype)))
    case = _cases.name(SEED, "reset on a new cache, twice; then three batches of different "
                             "shapes and dtypes with a reset between")

    plan = Plan()
    plan.new("c")
    resets = [("reset on a new cache", _reset(plan)), ("a second reset in a row", _reset(plan))]
    outputs = []
    for i, (shape, appends, seq) in enumerate(batches):
        if i:
            resets.append((f"reset after batch {i}", _reset(plan)))
        total, ends, indices = 0, [], []
        for t in appends:
            plan.append("c", seq["k"][:, :, total : total + t], seq["v"][:, :, total : total + t])
            total += t
            ends.append(total)
            indices.append(plan.attend("c", seq["q"][:, :, total - 1 : total]))
        outputs.append((f"batch {i + 1} ({shape})", seq, ends, indices))
    results = _cases.run(candidate, plan, case)

    for when, index in resets:
        state = results[index]
        for attr, empty in EMPTY.items():
            if not _is(state[attr], empty):
                raise Fail(f"{case}: after {when}, cache.{attr} is not {empty}: reset must leave "
                           "the cache as if new, whatever it held (or did not hold) before")
    for batch, seq, ends, indices in outputs:
        what = f"{case}, {batch}"
        got = [tensor(results[i], f"{what}: attend's output") for i in indices]
        for out in got:
            require_shape(out, tuple(seq["q"][:, :, :1].shape), f"{what}: attend's output")
        require_close(got, [_cases.newest(seq, end) for end in ends], TOLERANCE[torch.float32],
                      case=what, step_name="append", first_step=1)
    return (f"reset on a new cache (twice) leaves it empty; three batches of different shapes "
            f"and dtypes, reset between, each within {TOLERANCE[torch.float32]} at every append")


def _reset(plan: Plan) -> int:
    plan.reset("c")
    return plan.state("c")


def _is(value, empty) -> bool:
    """`value` is None, or is the number 0 (an int or a one-element tensor, as the public item
    accepts: capacity's type is length-vs-capacity's business)."""
    if empty is None:
        return value is None
    return (isinstance(value, (int, torch.Tensor)) and torch.as_tensor(value).numel() == 1
            and int(value) == empty)
