"""rope-fork-offset: a forked cache continues at its absolute positions, independently.

Two rows decode 5 steps through decode_step, row 1 skipping one (lengths 5 and 4, in a
KVCache(capacity=16), so later writes land in storage that already exists). Then
`fork(cache)`, and the original and the fork take turns for 4 steps with different tokens.
Every step of each branch must equal graders.reference.attention_layer (float64, RoPE) over that
branch's whole sequence; at the end each branch's lengths, keys (rotated at their absolute
positions) and values must be its own. Taking turns means every write of one branch comes
before a read of the other, so this catches a fork that shares storage (the same tensors or the
same object), one that forgets lengths or restarts at position 0, and one that shares the
lengths tensor with an append that grows it in place.
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, first_divergence, require_shape

ITEM = "rope-fork-offset"

B, D_MODEL, HEADS, HEAD_DIM, BASE, CAPACITY = 2, 32, 2, 16, 10000.0, 16
PREFIX = [(1, 1), (1, 0), (1, 1), (1, 1), (1, 1)]  # counts before the fork: lengths 5 and 4
AFTER = 4  # steps of each branch after the fork
TOL = TOLERANCE[torch.float32]


def grade(candidate: Candidate) -> str:
    g = cases.generator(130)
    weights = cases.layer_weights(g, D_MODEL, HEADS, HEADS, HEAD_DIM)
    at_fork = torch.tensor(PREFIX).sum(0)  # [B]
    T = int(at_fork.max()) + AFTER
    x = {"original": cases.randn(g, B, T, D_MODEL)}
    x["fork"] = x["original"].clone()
    for b in range(B):  # the fork shares each row's prefix, then takes its own tokens
        x["fork"][b, int(at_fork[b]):] = cases.randn(g, T - int(at_fork[b]), D_MODEL)
    full = {branch: reference.attention_layer(seq, weights, HEADS, HEADS, BASE)
            for branch, seq in x.items()}

    plan = Plan()
    plan.layer("L", weights, HEADS, HEADS, HEAD_DIM, BASE)
    plan.new("original", capacity=CAPACITY)
    rows, lengths, steps = torch.arange(B), torch.zeros(B, dtype=torch.int64), []
    for counts in PREFIX:
        index = plan.decode_step("L", "original", x["original"][rows, lengths][:, None],
                                 cases.counts(*counts))
        steps.append(("original", None, index, lengths, torch.tensor(counts)))
        lengths = lengths + torch.tensor(counts)
    plan.fork("original", "fork")
    for j in range(AFTER):
        for branch in ("original", "fork"):
            index = plan.decode_step("L", branch, x[branch][rows, lengths + j][:, None])
            steps.append((branch, j, index, lengths + j, torch.ones(B)))
    states = {branch: plan.state(branch) for branch in ("original", "fork")}
    results = candidate.run(plan)

    for branch, j, index, positions, active in steps:
        when = "before the fork" if j is None else f"step {j} after the fork"
        got = tensor(results[index]["output"], f"decode_step's output on the {branch} {when}")
        require_shape(got, (B, 1, D_MODEL), f"decode_step's output on the {branch} {when}")
        want = full[branch]["out"][rows, positions][:, None]
        mask = active.bool()[:, None, None]
        divergence = first_divergence([got.double().where(mask, 0.0)[:, None]],
                                      [want.where(mask, 0.0)[:, None]], TOL)
        if divergence:
            raise Fail(f"the {branch}, {when}: decode_step's output at row {divergence.row} "
                       f"(position {int(positions[divergence.row])}) differs from a full forward "
                       f"over the {branch}'s own sequence: max abs error {divergence.max_abs:.2e} "
                       f"(tolerance {TOL}). " + _HINT["before" if j is None else branch])
    for branch, state in states.items():
        _check_state(branch, results[state], full[branch], at_fork + AFTER)
    return (f"fork after 5 ragged steps, then {AFTER} alternating steps on each branch: both equal "
            f"full RoPE forwards (within {TOL}), and each cache holds only its own tokens")


_HINT = {
    "before": "decode_step is already off before any fork (ragged rows' positions: see rope-absolute)",
    "original": "The fork's writes must never show in the original (does the fork share storage?)",
    "fork": "The fork continues each row at its copied length, in storage of its own",
}


def _check_state(branch: str, state: dict, full: dict, lengths: torch.Tensor) -> None:
    got = tensor(state["lengths"], f"the {branch}'s cache.lengths").tolist()
    if got != lengths.tolist():
        raise Fail(f"after {AFTER} steps on each branch, the {branch}'s cache.lengths is {got}, "
                   f"expected {lengths.tolist()}: each branch continues from the copied lengths")
    T = int(lengths.max())
    mask = (torch.arange(T) < lengths[:, None])[:, None, :, None]  # [B, 1, T, 1]
    for name, want in (("keys", full["k"]), ("values", full["v"])):
        value = tensor(state[name], f"the {branch}'s cache.{name}")
        value = value[:, :, :T] if value.dim() == 4 else value  # its time size: length-vs-capacity
        require_shape(value, (B, HEADS, T, HEAD_DIM), f"the {branch}'s cache.{name}[:, :, :{T}]")
        divergence = first_divergence([value.double().where(mask, 0.0)],
                                      [want[:, :, :T].where(mask, 0.0)], TOL)
        if divergence:
            raise Fail(f"at the end, the {branch}'s cache.{name} differ from its own sequence's "
                       f"{'keys rotated at their absolute positions' if name == 'keys' else name} "
                       f"at row {divergence.row}, position {divergence.position}: max abs error "
                       f"{divergence.max_abs:.2e} (tolerance {TOL})")
