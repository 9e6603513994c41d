"""Hidden attend-shape: attend's output is [B, Hq, 1, D] for shapes and lengths no public case has.

The public item uses three small MHA shapes of at most 5 positions. Here, seeded:
- random batch (1 to 6), heads (1 to 6) and head_dim (2 to 64, even), with chunked appends into
  a non-empty cache and an attend after each: code that squeezes or reshapes by a dimension that
  happened to be 1 or equal to another in the public shapes, or returns one output per position
  of the last append, shows;
- a long cache (712 positions, in appends that never more than double it: how storage grows is
  append-time-dim's business): code that builds its mask or scores from a fixed-size buffer (a
  `block_size` of 512, say) cannot answer past it.
Only the shape is judged (values are prefix-equivalence's business); MHA only (GQA is gqa's).
"""

from __future__ import annotations

from graders import cases
from graders.candidate import Candidate, Plan, tensor
from graders.compare import require_shape
from graders.hidden import _cases

ITEM = "attend-shape"

SEEDS = [_cases.BASE_SEED + 200 + i for i in range(4)]
LONG_SEED = _cases.BASE_SEED + 210
LONG_APPENDS = (5, 11, 16, 32, 64, 128, 256, 200)


def grade(candidate: Candidate) -> str:
    outputs = 0
    for seed in SEEDS:
        g = cases.generator(seed)
        B, H = _cases.randint(g, 1, 6), _cases.randint(g, 1, 6)
        D = _cases.choice(g, (2, 6, 12, 24, 64))
        appends = _cases.chunks(g, _cases.randint(g, 6, 20), 6)
        outputs += _check(candidate, g, seed, B, H, D, appends,
                          f"{_cases.shape(B, H, D)}, chunked appends")
    g = cases.generator(LONG_SEED)
    outputs += _check(candidate, g, LONG_SEED, 2, 3, 8, LONG_APPENDS,
                      f"a long cache of {sum(LONG_APPENDS)} positions")
    return f"{outputs} outputs over {len(SEEDS) + 1} seeded shapes and lengths, each [B, Hq, 1, D]"


def _check(candidate: Candidate, g, seed: int, B: int, H: int, D: int, appends, what: str) -> int:
    case = _cases.name(seed, what)
    seq = cases.sequence(g, B, H, H, sum(appends), D)
    plan = Plan()
    plan.new("c")
    ops, total = [], 0
    for t in appends:
        plan.append("c", seq["k"][:, :, total : total + t], seq["v"][:, :, total : total + t])
        total += t
        ops.append((t, total, plan.attend("c", seq["q"][:, :, total - 1 : total])))
    results = _cases.run(candidate, plan, case)
    for t, total, index in ops:
        what = (f"{case}: attend's output with {total} cached positions (the last append "
                f"brought {t})")
        require_shape(tensor(results[index], what), (B, H, 1, D), what)
    return len(ops)
