"""release: release ends one row; a new sequence in that slot never sees the old one.

Three sequences (B=3, H=2, D=8, float32) decode 4 steps; then release(cache, 1). Its length must
be 0 while rows 0 and 2 keep their lengths and stored keys and values, and attend must give zeros
for row 1 and the old answers for rows 0 and 2. Then 3 more steps with counts all 1: rows 0 and 2
go on, while row 1 starts an unrelated sequence (fresh keys and values) that must equal attention
over its own new positions only. Finally the last row is released, twice in a row, and one more
step with counts (1, 1, 0) leaves it at zeros. This catches a release that does nothing, that
zeroes storage but keeps the length, that clears every row, and one that sets the length to 0
while the next tokens are written after the old sequence's (so the new one reads the old keys).
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, Raised, tensor
from graders.compare import TOLERANCE, require_close, require_shape

ITEM = "release"

B, H, D, BEFORE, AFTER = 3, 2, 8, 4, 3
TOL = TOLERANCE[torch.float32]


def grade(candidate: Candidate) -> str:
    g = cases.generator(80)
    old = cases.sequence(g, B, H, H, BEFORE + AFTER + 1, D)  # each row's original sequence
    new = cases.sequence(g, 1, H, H, AFTER + 1, D)  # the sequence started in slot 1
    full_old = reference.causal_attention(old["q"], old["k"], old["v"])  # [B, H, 8, D]
    full_new = reference.causal_attention(new["q"], new["k"], new["v"])  # [1, H, 4, D]

    def step(name, t, j):  # position t of the old sequences, with row 1 at position j of the new
        x = old[name][:, :, t : t + 1].clone()
        x[1] = new[name][0, :, j : j + 1]
        return x

    def expected(t, j, zero_rows):
        out = full_old[:, :, t : t + 1].clone()
        if j is not None:
            out[1] = full_new[0, :, j : j + 1]
        out[zero_rows] = 0.0
        return out

    plan = Plan()
    plan.new("c")
    for t in range(BEFORE):
        plan.append("c", old["k"][:, :, t : t + 1], old["v"][:, :, t : t + 1])
    before = plan.state("c")
    plan.release("c", 1)
    released = plan.state("c")
    calls = []  # (what, index) of the calls after release, which may raise: shown after lengths

    def call(what, index):
        calls.append((what, index))
        return index

    right_after = call("attend right after release(cache, 1)",
                       plan.attend("c", old["q"][:, :, BEFORE - 1 : BEFORE], may_raise=True))
    steps = []
    for j in range(AFTER):
        t = BEFORE + j
        call(f"append at step {j} after release(cache, 1)", plan.append(
            "c", step("k", t, j), step("v", t, j), cases.counts(1, 1, 1), may_raise=True))
        steps.append(call(f"attend at step {j} after release(cache, 1)",
                          plan.attend("c", step("q", t, j), may_raise=True)))
    plan.release("c", B - 1)
    last_released = plan.state("c")
    plan.release("c", B - 1)  # releasing a row that has already ended is a no-op
    twice = plan.state("c")
    t = BEFORE + AFTER
    call("append with counts (1, 1, 0) after releasing the last row", plan.append(
        "c", step("k", t, AFTER), step("v", t, AFTER), cases.counts(1, 1, 0), may_raise=True))
    final = call("attend after releasing the last row",
                 plan.attend("c", step("q", t, AFTER), may_raise=True))
    results = candidate.run(plan)

    _require_lengths(results[released], [BEFORE, 0, BEFORE], "release(cache, 1)")
    for what, index in calls:
        if isinstance(results[index], Raised):
            raise Fail(f"{what} raised {results[index].type}: {results[index].message[:200]}")
    for name in ("keys", "values"):
        was = tensor(results[before][name], f"cache.{name} before release")
        now = tensor(results[released][name], f"cache.{name} after release(cache, 1)")
        rows = [0, 2]
        if now.shape[2] < BEFORE or not torch.equal(now[rows, :, :BEFORE], was[rows, :, :BEFORE]):
            raise Fail(f"release(cache, 1) changed cache.{name} of rows 0 and 2: other rows "
                       "must be untouched")
    got = [_output(results[right_after], "attend right after release(cache, 1)")]
    require_close(got, [expected(BEFORE - 1, None, [1])], TOL, case="attend right after "
                  "release(cache, 1) (row 1 must give zeros, rows 0 and 2 their old answers)")

    got = [_output(results[i], f"attend at step {j} after release(cache, 1)")
           for j, i in enumerate(steps)]
    require_close(got, [expected(BEFORE + j, j, []) for j in range(AFTER)], TOL,
                  case="a new sequence in released row 1 while rows 0 and 2 go on",
                  step_name="step after release", likely=_likely(old, new, full_old))

    _require_lengths(results[last_released], [t, AFTER, 0], f"release(cache, {B - 1})")
    _require_lengths(results[twice], [t, AFTER, 0], f"release(cache, {B - 1}) a second time")
    got = [_output(results[final], "attend after releasing the last row")]
    require_close(got, [expected(t, AFTER, [2])], TOL, case="releasing the last row (twice), "
                  "then a step with counts (1, 1, 0): row 2 must give zeros")
    return (f"release keeps other rows, a released row attends to zeros and a new sequence in its "
            f"slot sees only its own {AFTER} positions (within {TOL}); the last row released twice")


def _require_lengths(state: dict, want: list[int], what: str) -> None:
    got = tensor(state["lengths"], f"cache.lengths after {what}").tolist()
    if got != want:
        cleared = " (every row was cleared, not only the released one)" if not any(got) else ""
        raise Fail(f"after {what}, cache.lengths is {got}, expected {want}{cleared}: the released "
                   "row's length becomes 0 and the other rows keep theirs")


def _output(value, what: str) -> torch.Tensor:
    out = tensor(value, what)
    require_shape(out, (B, H, 1, D), what)
    return out


def _likely(old: dict, new: dict, full_old: torch.Tensor) -> dict[str, list[torch.Tensor]]:
    """What row 1 would output at each step if the new sequence read the old one's keys."""
    def newest(q, k, v):  # attention of one query [1, H, 1, D] over all of k, v [1, H, n, D]
        padded = torch.zeros_like(k).double()
        padded[:, :, -1:] = q
        return reference.causal_attention(padded, k, v)[:, :, -1:]

    mistakes = {
        "the new sequence in row 1 also attends to the released sequence's positions": lambda j: (
            torch.cat((old["k"][1:2, :, :BEFORE], new["k"][:, :, : j + 1]), dim=2),
            torch.cat((old["v"][1:2, :, :BEFORE], new["v"][:, :, : j + 1]), dim=2)),
        "row 1 reads the released sequence's first positions, not its new ones (new tokens "
        "written after the old sequence's end?)": lambda j: (
            old["k"][1:2, :, : j + 1], old["v"][1:2, :, : j + 1]),
    }
    likely = {}
    for label, kv in mistakes.items():
        likely[label] = []
        for j in range(AFTER):
            out = full_old[:, :, BEFORE + j : BEFORE + j + 1].clone()
            out[1] = newest(new["q"][:, :, j : j + 1], *kv(j))[0]
            likely[label].append(out)
    return likely
