"""Hidden stable-softmax: logits in the tens of thousands, thousands apart between the heads of
one row, over a few hundred positions appended in chunks.

The public item's logits stay within a few thousand, and its aligned cases put every head of a
row near the same logit. Here each head of a row sits at its own offset, thousands apart, from
about -30000 to +30000 (some rows with both signs): anything but each (row, head)'s own maximum
subtracted underflows or overflows somewhere, and a guard that clamps the logits to some
"safe" range (±1e4, say) flattens them into uniform weights. Positions come in chunks of up to
40, 150 to 300 in all, compared after every append.

The keys and queries are small integers but for one large coordinate, and head_dim is 16, so
every logit (q . k / 4) is exact in float32 whatever the order of the sums or the place of the
scaling: correct implementations agree with the float64 reference within 5e-7 however large the
logits, and the public item's tolerance (compare.LARGE_LOGITS_FLOAT32) applies with room to
spare.
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan
from graders.compare import LARGE_LOGITS_FLOAT32, require_close
from graders.hidden import _cases

ITEM = "stable-softmax"

SEEDS = [_cases.BASE_SEED + 600 + i for i in range(2)]
D = 16  # 1/sqrt(D) = 1/4 and its square root 1/2 are exact
LARGE = 128  # the query's large coordinate; the key's is about offset * 4 / LARGE


def grade(candidate: Candidate) -> str:
    for seed in SEEDS:
        _check(candidate, seed)
    return (f"{len(SEEDS)} seeded cases, logits in the tens of thousands, heads thousands apart, "
            f"chunked: every prefix finite and within {LARGE_LOGITS_FLOAT32} of the float64 "
            "reference")


def _check(candidate: Candidate, seed: int) -> None:
    g = cases.generator(seed)
    B, H = _cases.randint(g, 2, 3), _cases.randint(g, 2, 4)
    appends = _cases.chunks(g, _cases.randint(g, 150, 300), 40)
    case = _cases.name(seed, f"{_cases.shape(B, H)}, logits in the tens of thousands, each head of "
                             "a row thousands apart, chunked appends")
    seq = _sequence(g, B, H, sum(appends))
    plan = Plan()
    plan.new("c")
    steps = _cases.attend_after_each_chunk(plan, seq, appends)
    results = _cases.run(candidate, plan, case)

    got = _cases.outputs(results, steps, (B, H, 1, D), case)
    for out, (_, end) in zip(got, steps):
        bad = (~torch.isfinite(out)).nonzero()
        if len(bad):
            row, head = int(bad[0][0]), int(bad[0][1])
            raise Fail(f"{case}: attend's output at prefix length {end}: not finite at row {row}, "
                       f"head {head}. Every exp underflowed or overflowed there: is the maximum "
                       "subtracted per row AND head, over that row's positions only?")
    require_close(got, [_cases.newest(seq, end) for _, end in steps], LARGE_LOGITS_FLOAT32,
                  case=case, step_name="append", first_step=1)


def _sequence(g: torch.Generator, B: int, H: int, T: int) -> dict[str, torch.Tensor]:
    """Integer-valued q and k ([B, H, T, D]) whose logits sit near one offset per (row, head)."""
    start = torch.randint(-30000, 1, (B, 1), generator=g)
    gap = torch.randint(3000, 10001, (B, 1), generator=g)
    offsets = start + gap * torch.arange(H)  # [B, H]: consecutive heads `gap` apart

    def small():  # the other D - 1 coordinates, in -2..2
        return torch.randint(-2, 3, (B, H, T, D - 1), generator=g)

    q = torch.cat((torch.full((B, H, T, 1), LARGE), small()), dim=-1)
    k_large = (offsets * 4 / LARGE).round().long()[:, :, None, None].expand(B, H, T, 1)
    k = torch.cat((k_large, small()), dim=-1)
    return {"q": q.float(), "k": k.float(), "v": cases.randn(g, B, H, T, D)}
