"""Hidden ragged-batch: many ragged steps of random sizes, a real all-zero key, padding that
must come back untouched.

The public item runs six fixed steps on three rows. Here, seeded: 3 to 5 rows, a padded prompt
append (every row at least one position) then 12 to 20 appends of t = 1 to 6 (one case up to
30) with each row's count drawn from 0..t (never all 0), padding positions NaN, so rows drift
far apart and often sit out a step at counts 0. After every append, lengths and every row's
output against the float64 reference over that row's own positions. Two things the public item
cannot show:
- one row holds a real position whose key is all zeros: a cache that decides which slots are
  valid from the data (a zero key taken for an empty slot) rather than from `lengths` drops it;
- every append's key and value are sent back after the call and must be exactly what was sent,
  NaN padding included: a cache that cleans the padding (`new_key[b, :, n:] = 0`) writes into
  the caller's tensors.
MHA only; no row is ever empty (zero-length rows are release's concern).
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, close, first_divergence, require_shape
from graders.hidden import _cases

ITEM = "ragged-batch"

TOL = TOLERANCE[torch.float32]
CASES = [  # seed, largest t after the prompt
    (_cases.BASE_SEED + 800, 6),
    (_cases.BASE_SEED + 801, 30),
]


def grade(candidate: Candidate) -> str:
    for seed, most in CASES:
        _check(candidate, seed, most)
    return (f"{len(CASES)} seeded ragged runs (random counts, NaN padding, a real all-zero key): "
            f"lengths and every row within {TOL} after every append, inputs untouched")


def _check(candidate: Candidate, seed: int, most: int) -> None:
    g = cases.generator(seed)
    B, H, D = _cases.randint(g, 3, 5), _cases.randint(g, 1, 3), _cases.choice(g, (4, 8))
    prompt = _cases.randint(g, 3, 8)
    steps = [(prompt, [_cases.randint(g, 1, prompt) for _ in range(B)])]
    appends = 1 + _cases.randint(g, 12, 20)
    while len(steps) < appends:
        t = _cases.randint(g, 1, most)
        counts = [_cases.randint(g, 0, t) for _ in range(B)]
        if any(counts):  # a step where every row has counts 0 is finished-beams' concern
            steps.append((t, counts))
    case = _cases.name(seed, f"{_cases.shape(B, H, D)}, {len(steps)} ragged appends of "
                             f"up to {max(t for t, _ in steps)} positions, NaN padding")
    seq = cases.sequence(g, B, H, H, sum(t for t, _ in steps), D)
    zero_row = _cases.randint(g, 0, B - 1)
    zero_at = _cases.randint(g, 0, steps[0][1][zero_row] - 1)
    seq["k"][zero_row, :, zero_at] = 0.0

    plan = Plan()
    plan.new("c")
    ops, lengths = [], [0] * B
    for t, counts in steps:
        new = {part: cases.padded(torch.stack([seq[part][b, :, lengths[b] : lengths[b] + t]
                                               for b in range(B)]), counts)
               for part in ("k", "v")}  # [B, H, t, D], NaN past counts[b]
        appended = plan.append("c", new["k"], new["v"], cases.counts(*counts), return_inputs=True)
        lengths = [n + c for n, c in zip(lengths, counts)]
        query = torch.stack([seq["q"][b, :, n - 1 : n] for b, n in enumerate(lengths)])
        ops.append((t, new, lengths, appended, plan.state("c"), plan.attend("c", query)))
    results = _cases.run(candidate, plan, case)

    got, expected = [], []
    for step, (t, new, lengths, appended, state, attended) in enumerate(ops, start=1):
        where = f"{case}: append {step} (t={t})"
        _cases.require_unchanged({"key": new["k"], "value": new["v"]},
                                 results.inputs_after(appended), f"append {step}", case)
        found = tensor(results[state]["lengths"], f"{where}, cache.lengths")
        if found.dtype != torch.int64 or found.tolist() != lengths:
            raise Fail(f"{where}: cache.lengths is not each row's own count of positions: every "
                       "row grows by exactly its counts[b]")
        got.append(tensor(results[attended], f"{where}, attend's output"))
        require_shape(got[-1], (B, H, 1, D), f"{where}, attend's output")
        expected.append(torch.cat([_own(seq, b, n) for b, n in enumerate(lengths)]))

    divergence = first_divergence(got, expected, TOL)
    if divergence is not None:
        step, row = divergence.step, divergence.row
        hint = ""
        if not torch.isfinite(got[step][row]).all():
            hint = ": NaN padding (positions past counts[b]) stored where attention sees it?"
        elif row == zero_row and close(got[step][row], _without(seq, row, ops[step][2][row],
                                                                 zero_at), TOL).all():
            hint = (": a real position whose key is all zeros was left out. Is a slot's validity "
                    "read from its data rather than from lengths?")
        raise Fail(f"{case}: after append {step + 1}, row {row}, head {divergence.head} is not "
                   f"attention over that row's own positions (max abs error "
                   f"{divergence.max_abs:.2e}, tolerance {TOL}){hint}")


def _own(seq: dict, b: int, n: int) -> torch.Tensor:
    """Row b's newest-token output over its own first n positions: [1, H, 1, D]."""
    return _cases.newest({part: x[b : b + 1] for part, x in seq.items()}, n)


def _without(seq: dict, b: int, n: int, dropped: int) -> torch.Tensor:
    """Row b's newest-token output over its first n positions but `dropped`: [H, 1, D]."""
    keep = torch.arange(n) != dropped
    k, v = (seq[part][b : b + 1, :, :n][:, :, keep] for part in "kv")
    return reference.causal_attention(seq["q"][b : b + 1, :, n - 1 : n], k, v)[0]
