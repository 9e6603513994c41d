"""Hidden finished-beams: rows finishing at random steps of multi-position appends, and a step in
which every row has finished.

The public item finishes two of three rows, one token per step, and always has a row going on.
Here, seeded:
- 4 to 6 rows after a prompt; each row finishes at a random step; every step appends t = 1 to 4
  positions, all of them real for the rows still going, NaN padding for the finished ones;
- then a last append in which every row has counts 0 (a batch loop that runs one step after its
  last sequence ended): nothing may grow, and a cache that sizes its storage from the slots it is
  about to write, or takes the largest of them, has none to look at;
- the same through decode_step (finite padding tokens), rows finishing at random, ending with a
  step of counts all 0.
After every append lengths must be exact and every row's output, for its newest real token's
query (a finished row keeps asking its last one), equal to the float64 reference over its own
positions; after every decode_step lengths must be exact and a finished row's cached keys
exactly what they were when it stopped.
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, first_divergence, require_shape
from graders.hidden import _cases

ITEM = "finished-beams"

APPEND_SEED = _cases.BASE_SEED + 1500
DECODE_SEED = _cases.BASE_SEED + 1510
STEPS = 8  # appends after the prompt, before the one in which every row has finished
TOL = TOLERANCE[torch.float32]


def grade(candidate: Candidate) -> str:
    _check_append(candidate)
    _check_decode(candidate)
    return (f"rows finishing at random over {STEPS} multi-position appends, then all of them: "
            f"lengths kept and outputs unchanged (within {TOL}); through decode_step too")


def _finishing(g: torch.Generator, B: int, steps: int) -> list[list[int]]:
    """Per step, 1 for the rows still going, 0 for the finished: each row finishes at a random
    step, the last step has every row finished."""
    ends = [_cases.randint(g, 1, steps - 1) for _ in range(B)]
    return [[int(s < end) for end in ends] for s in range(steps)] + [[0] * B]


def _check_append(candidate: Candidate) -> None:
    g = cases.generator(APPEND_SEED)
    B, H, D = _cases.randint(g, 4, 6), _cases.randint(g, 1, 3), _cases.choice(g, (4, 8))
    prompt = _cases.randint(g, 2, 5)
    going = _finishing(g, B, STEPS)
    sizes = [_cases.randint(g, 1, 4) for _ in going]
    case = _cases.name(APPEND_SEED, f"{_cases.shape(B, H)}, rows finishing at random in appends of "
                                    "1 to 4 positions, then a step with every row finished")
    seq = cases.sequence(g, B, H, H, prompt + sum(sizes), D)
    plan = Plan()
    plan.new("c")
    plan.append("c", seq["k"][:, :, :prompt], seq["v"][:, :, :prompt])
    lengths, ops = [prompt] * B, []
    for active, t in zip(going, sizes):
        counts = [t * a for a in active]
        new = {p: cases.padded(torch.stack([seq[p][b, :, n : n + t]
                                            for b, n in enumerate(lengths)]), counts)
               for p in "kv"}
        plan.append("c", new["k"], new["v"], cases.counts(*counts))
        lengths = [n + c for n, c in zip(lengths, counts)]
        query = torch.stack([seq["q"][b, :, n - 1 : n] for b, n in enumerate(lengths)])
        ops.append((counts, lengths, plan.state("c"), plan.attend("c", query)))
    results = _cases.run(candidate, plan, case)

    for step, (counts, lengths, state, attended) in enumerate(ops, start=1):
        where = f"{case}: append {step}" + (" (every row finished)" if not any(counts) else "")
        if tensor(results[state]["lengths"], f"{where}, cache.lengths").tolist() != lengths:
            raise Fail(f"{where}: cache.lengths is not what it should be: a row with counts 0 "
                       "takes no position, the others take their counts")
        out = tensor(results[attended], f"{where}, attend's output")
        require_shape(out, (B, H, 1, D), f"{where}, attend's output")
        expected = torch.cat([_cases.newest({p: x[b : b + 1] for p, x in seq.items()}, n)
                              for b, n in enumerate(lengths)])
        divergence = first_divergence([out], [expected], TOL)
        if divergence is not None:
            row = divergence.row
            doing = "has finished" if not counts[row] else "takes positions"
            raise Fail(f"{where}: row {row}, which {doing}, is not attention over its own "
                       f"positions (max abs error {divergence.max_abs:.2e}, tolerance {TOL}): a "
                       "row with counts 0 must write nothing and keep its output")


def _check_decode(candidate: Candidate) -> None:
    g = cases.generator(DECODE_SEED)
    B, H, D, d_model = 4, 2, 8, 16
    going = _finishing(g, B, 6)
    case = _cases.name(DECODE_SEED, f"decode_step, B={B}, rows finishing at random, then a step "
                                    "with every row finished")
    weights = cases.layer_weights(g, d_model, H, H, D)
    x = cases.randn(g, B, len(going), d_model)
    plan = Plan()
    plan.layer("L", weights, H, H, D, 10000.0)
    plan.new("c")
    states, lengths = [], [0] * B
    for t, counts in enumerate(going):
        plan.decode_step("L", "c", x[:, t : t + 1], cases.counts(*counts))
        lengths = [n + c for n, c in zip(lengths, counts)]
        states.append((counts, lengths, plan.state("c")))
    results = _cases.run(candidate, plan, case)

    previous = None
    for t, (counts, lengths, state) in enumerate(states):
        where = f"{case}: after decode_step {t}"
        if tensor(results[state]["lengths"], f"{where}, cache.lengths").tolist() != lengths:
            raise Fail(f"{where}: cache.lengths is not what it should be: a row with counts 0 "
                       "takes no position")
        keys = tensor(results[state]["keys"], f"{where}, cache.keys")
        require_shape(keys, (B, H, max(lengths), D), f"{where}, cache.keys")
        for b, n in enumerate(lengths):
            if not counts[b] and not torch.equal(keys[b, :, :n], previous[b, :, :n]):
                raise Fail(f"{where}: row {b} has finished (counts 0), yet its cached keys "
                           "changed: a row with counts 0 must write nothing")
        previous = keys
