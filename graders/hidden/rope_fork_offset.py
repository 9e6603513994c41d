"""Hidden rope-fork-offset: a fork of an empty cache, and a fork of a fork.

The public item forks once, a cache that holds positions. Here, seeded, with every decode_step
output of every branch compared with a full float64 RoPE forward over that branch's own
sequence, and each branch's lengths checked at the end:
- a cache forked before anything was appended, then the two decoding in turns with different
  tokens: a fork that, with nothing to copy, hands back the same cache (or shares the storage
  it will allocate) mixes the two sequences;
- a chain: the original decodes with ragged counts in a `KVCache()` that grows as it goes, is
  forked, both take turns; the fork is forked in turn, and all three take turns. Each fork must
  continue at the copied lengths, in storage of its own, however it got them.
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, first_divergence, require_shape
from graders.hidden import _cases

ITEM = "rope-fork-offset"

B, D_MODEL, HEADS, HEAD_DIM, BASE, T = 2, 16, 2, 8, 10000.0, 12
TOL = TOLERANCE[torch.float32]
EMPTY_SEED, CHAIN_SEED = _cases.BASE_SEED + 1600, _cases.BASE_SEED + 1610
EMPTY = [("fork", "original", "fork")] + [("step", branch, (1, 1))
                                          for _ in range(4) for branch in ("original", "fork")]
CHAIN = ([("step", "original", (1, 1)), ("step", "original", (0, 1)), ("step", "original", (1, 1)),
          ("step", "original", (1, 0)), ("fork", "original", "fork")]
         + [("step", b, (1, 1)) for _ in range(3) for b in ("original", "fork")]
         + [("fork", "fork", "fork of the fork")]
         + [("step", b, (1, 1)) for _ in range(3)
            for b in ("original", "fork", "fork of the fork")])


def grade(candidate: Candidate) -> str:
    _check(candidate, EMPTY_SEED, "a cache forked while empty, then both decoding in turns", EMPTY)
    _check(candidate, CHAIN_SEED, "ragged steps, a fork, turns, a fork of the fork, turns of "
                                  "all three", CHAIN)
    return (f"a fork of an empty cache and a fork of a fork: every branch equals a full RoPE "
            f"forward over its own sequence (within {TOL}) and keeps its own lengths")


def _check(candidate: Candidate, seed: int, what: str, events: list) -> None:
    case = _cases.name(seed, what)
    g = cases.generator(seed)
    weights = cases.layer_weights(g, D_MODEL, HEADS, HEADS, HEAD_DIM)
    x = {"original": cases.randn(g, B, T, D_MODEL)}  # each branch's tokens, row by row
    lengths = {"original": torch.zeros(B, dtype=torch.int64)}
    rows = torch.arange(B)
    plan = Plan()
    plan.layer("L", weights, HEADS, HEADS, HEAD_DIM, BASE)
    plan.new("original")
    steps = []  # branch, its step number, op index, positions, active rows
    for kind, branch, arg in events:
        if kind == "fork":
            plan.fork(branch, arg)
            lengths[arg] = lengths[branch].clone()
            x[arg] = x[branch].clone()
            for b in range(B):  # the fork shares each row's prefix, then takes its own tokens
                n = int(lengths[arg][b])
                x[arg][b, n:] = cases.randn(g, T - n, D_MODEL)
            continue
        counts = torch.tensor(arg)
        index = plan.decode_step("L", branch, x[branch][rows, lengths[branch]][:, None],
                                 None if all(arg) else counts)
        steps.append((branch, sum(s[0] == branch for s in steps), index, lengths[branch], counts))
        lengths[branch] = lengths[branch] + counts
    states = {branch: plan.state(branch) for branch in x}
    results = _cases.run(candidate, plan, case)

    full = {branch: reference.attention_layer(seq, weights, HEADS, HEADS, BASE)["out"]
            for branch, seq in x.items()}
    for branch, step, index, positions, active in steps:
        where = f"{case}: the {branch}'s decode step {step}"
        got = tensor(results[index]["output"], f"{where}, output")
        require_shape(got, (B, 1, D_MODEL), f"{where}, output")
        mask = active.bool()[:, None, None]
        want = full[branch][rows, positions][:, None]
        divergence = first_divergence([got.double().where(mask, 0.0)[:, None]],
                                      [want.where(mask, 0.0)[:, None]], TOL)
        if divergence:
            raise Fail(f"{where}: the output at row {divergence.row} differs from a full forward "
                       f"over the {branch}'s own sequence (max abs error {divergence.max_abs:.2e}, "
                       f"tolerance {TOL}): each cache continues its rows at their own lengths, in "
                       "storage no other cache writes")
    for branch, state in states.items():
        got = tensor(results[state]["lengths"], f"{case}: the {branch}'s cache.lengths").tolist()
        if got != lengths[branch].tolist():
            raise Fail(f"{case}: at the end, the {branch}'s cache.lengths are not its own: a fork "
                       "copies the lengths, then each cache counts its own appends")
