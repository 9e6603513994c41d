"""release: release ends one row; a new sequence in that slot never sees the old one.

Public: three sequences (B=3, H=4, D=8, float32) decode 4 steps; then release(cache, 1). Its
length must be 0 while rows 0 and 2 keep their lengths and stored keys and values, and attend
must give zeros for row 1 and the old answers for rows 0 and 2. Then 3 more steps with counts
all 1: rows 0 and 2 go on, while row 1 starts an unrelated sequence (fresh keys and values) that must equal attention
over its own new positions only. Finally the last row is released, twice in a row, and one more
step with counts (1, 1, 0) leaves it at zeros. This catches a release that does nothing, that
zeroes storage but keeps the length, that clears every row, and one that sets the length to 0
while the next tokens are written after the old sequence's (so the new one reads the old keys).
Every row released (1, then 2) is below kv_heads (4), so a release that clears a head of every
row (`storage[:, index]`) where it means a row raises no IndexError: it shows as rows 0 and 2
changed, in their stored keys and in every output after it.

Hidden, seeded: the public old sequences are ordinary random data, so a released slot whose old
positions are merely down-weighted (a finite mask value added to the scores, -1e4 as in many
model codes) still passes: ordinary logits minus 1e4 weigh nothing. Here 3 to 5 rows decode a
few chunks; the two rows to be released hold old keys a million times larger than usual,
pointing where their new sequences' queries will look (logits around 1e6 against them), with
large old values. Both rows are released; their lengths must be 0 while the other rows keep
theirs, and attend gives zeros for them. Then chunks appended to every row (no counts: the
released rows start new sequences, the others go on), fewer positions than the old sequences
held, so the stale slots stay inside the other rows' length. Every output is compared with the
float64 reference: the released rows over their new positions only.
(Stale slots here are large but finite. Non-finite stale data, say a sequence cancelled because
it went NaN, would poison even the reference, whose masked weights are exactly 0 but multiply
the stale values: 0 * NaN is NaN.)
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from graders.shared import cases, hidden_cases, reference

from graders.dense import decode_loop
from graders.judge.candidate import Candidate
from graders.shared.compare import (
    TOLERANCE,
    UNWRITTEN_SLOTS,
    first_divergence,
    require_close,
    require_shape,
)
from graders.shared.plans import Fail, Plan, Raised, tensor

ITEM = "release"

B, H, D, BEFORE, AFTER = 3, 4, 8, 4, 3  # H > every row released
TOL = TOLERANCE[torch.float32]
HIDDEN_SEED = 900
STALE_KEY_SCALE = 1e6
STALE_VALUE_SCALE = 1e3


class Sequences(NamedTuple):
    """The public case's inputs: each row's original sequence `old` ([B, H, 8, D]) and the
    sequence started in slot 1 after its release, `new` ([1, H, 4, D]), with their full
    float64 attention."""

    old: dict[str, torch.Tensor]
    new: dict[str, torch.Tensor]
    full_old: torch.Tensor
    full_new: torch.Tensor

    def step(self, name: str, t: int, j: int) -> torch.Tensor:
        """Position t of the old sequences, with row 1 at position j of the new: [B, H, 1, D]."""
        x = self.old[name][:, :, t : t + 1].clone()
        x[1] = self.new[name][0, :, j : j + 1]
        return x

    def expected(self, t: int, j: int | None, zero_rows: list[int]) -> torch.Tensor:
        """The answer at old position t, row 1 at new position j (if any), `zero_rows` zeros."""
        out = self.full_old[:, :, t : t + 1].clone()
        if j is not None:
            out[1] = self.full_new[0, :, j : j + 1]
        out[zero_rows] = 0.0
        return out


class Ops(NamedTuple):
    """The public plan's operations to read back: cache states around the releases, the attends,
    and every call after the first release (which may raise), named."""

    before: int
    released: int
    right_after: int
    steps: list[int]
    last_released: int
    twice: int
    final: int
    calls: list[tuple[str, int]]


def grade(candidate: Candidate) -> str:
    seqs = _sequences()
    plan, ops = _plan(seqs)
    results = candidate.run(plan)

    _require_lengths(results[ops.released], [BEFORE, 0, BEFORE], "release(cache, 1)")
    for what, index in ops.calls:
        if isinstance(results[index], Raised):
            raise Fail(f"{what} raised {results[index].type}: {results[index].message[:200]}")
    _require_other_rows_kept(results[ops.before], results[ops.released])
    got = [_output(results[ops.right_after], "attend right after release(cache, 1)")]
    require_close(
        got,
        [seqs.expected(BEFORE - 1, None, [1])],
        TOL,
        case="attend right after "
        "release(cache, 1) (row 1 must give zeros, rows 0 and 2 their old answers)",
    )
    got = [
        _output(results[i], f"attend at step {j} after release(cache, 1)")
        for j, i in enumerate(ops.steps)
    ]
    require_close(
        got,
        [seqs.expected(BEFORE + j, j, []) for j in range(AFTER)],
        TOL,
        case="a new sequence in released row 1 while rows 0 and 2 go on",
        step_name="step after release",
        likely=_likely(seqs),
    )
    t = BEFORE + AFTER
    _require_lengths(results[ops.last_released], [t, AFTER, 0], f"release(cache, {B - 1})")
    _require_lengths(results[ops.twice], [t, AFTER, 0], f"release(cache, {B - 1}) a second time")
    got = [_output(results[ops.final], "attend after releasing the last row")]
    require_close(
        got,
        [seqs.expected(t, AFTER, [2])],
        TOL,
        case="releasing the last row (twice), "
        "then a step with counts (1, 1, 0): row 2 must give zeros",
    )
    return (
        f"release keeps other rows, a released row attends to zeros and a new sequence in its "
        f"slot sees only its own {AFTER} positions (within {TOL}); the last row released twice"
    )


def grade_hidden(candidate: Candidate) -> str:
    case = _stale_case()
    plan, state, steps = _stale_plan(case)
    results = hidden_cases.run(candidate, plan, case.name)

    lengths = tensor(results[state]["lengths"], f"{case.name}: cache.lengths after the releases")
    if lengths.tolist() != [0 if b in case.released else case.prefix for b in range(case.B)]:
        raise Fail(
            f"{case.name}: after releasing two rows, cache.lengths is not 0 for exactly "
            "those rows with every other row's length kept"
        )
    got = [
        tensor(
            results[index],
            f"{case.name}: attend right after the releases"
            if n == 0
            else f"{case.name}: attend's output",
        )
        for n, (index, _) in enumerate(steps)
    ]
    for out in got:
        require_shape(out, tuple(case.old["q"][:, :, :1].shape), f"{case.name}: attend's output")
    divergence = first_divergence(got, [case.expected(end) for _, end in steps], TOL)
    if divergence is None:
        return (
            f"two rows released at once: lengths 0, zeros, then new sequences that never see "
            f"the old ones' huge keys, within {TOL}; other rows untouched"
        )
    when = (
        "right after the releases"
        if divergence.step == 0
        else f"at append {divergence.step} after them"
    )
    row = divergence.row
    why = (
        UNWRITTEN_SLOTS
        if divergence.nonfinite
        else "a released slot's new sequence must attend over its own new positions only: do the "
        "old sequence's keys still take part?"
        if row in case.released
        else "a row that was not released must go on as if nothing happened"
    )
    raise Fail(
        f"{case.name}: {when}, row {row}, head {divergence.head} ({divergence.error(TOL)}): {why}"
    )


def _sequences() -> Sequences:
    g = cases.generator(80)
    old = cases.sequence(g, B, H, H, BEFORE + AFTER + 1, D)
    new = cases.sequence(g, 1, H, H, AFTER + 1, D)
    return Sequences(
        old,
        new,
        reference.causal_attention(old["q"], old["k"], old["v"]),
        reference.causal_attention(new["q"], new["k"], new["v"]),
    )


def _plan(seqs: Sequences) -> tuple[Plan, Ops]:
    """BEFORE steps; release(cache, 1) and an attend; AFTER steps of all rows (row 1 a new
    sequence); the last row released twice; a step with counts (1, 1, 0)."""
    old, calls = seqs.old, []

    def call(what: str, index: int) -> int:
        calls.append((what, index))
        return index

    plan = Plan()
    plan.new("c")
    for t in range(BEFORE):
        plan.append("c", old["k"][:, :, t : t + 1], old["v"][:, :, t : t + 1])
    before = plan.state("c")
    plan.release("c", 1)
    released = plan.state("c")
    right_after = call(
        "attend right after release(cache, 1)",
        plan.attend("c", old["q"][:, :, BEFORE - 1 : BEFORE], may_raise=True),
    )
    steps = []
    for j in range(AFTER):
        t = BEFORE + j
        call(
            f"append at step {j} after release(cache, 1)",
            plan.append(
                "c",
                seqs.step("k", t, j),
                seqs.step("v", t, j),
                cases.counts(1, 1, 1),
                may_raise=True,
            ),
        )
        steps.append(
            call(
                f"attend at step {j} after release(cache, 1)",
                plan.attend("c", seqs.step("q", t, j), may_raise=True),
            )
        )
    plan.release("c", B - 1)
    last_released = plan.state("c")
    plan.release("c", B - 1)  # releasing a row that has already ended is a no-op
    twice = plan.state("c")
    t = BEFORE + AFTER
    call(
        "append with counts (1, 1, 0) after releasing the last row",
        plan.append(
            "c",
            seqs.step("k", t, AFTER),
            seqs.step("v", t, AFTER),
            cases.counts(1, 1, 0),
            may_raise=True,
        ),
    )
    final = call(
        "attend after releasing the last row",
        plan.attend("c", seqs.step("q", t, AFTER), may_raise=True),
    )
    return plan, Ops(before, released, right_after, steps, last_released, twice, final, calls)


def _require_other_rows_kept(before: dict, released: dict) -> None:
    """Rows 0 and 2 of cache.keys and values are untouched by release(cache, 1)."""
    for name in ("keys", "values"):
        was = tensor(before[name], f"cache.{name} before release")
        now = tensor(released[name], f"cache.{name} after release(cache, 1)")
        rows = [0, 2]
        if now.shape[2] < BEFORE or not torch.equal(now[rows, :, :BEFORE], was[rows, :, :BEFORE]):
            raise Fail(
                f"release(cache, 1) changed cache.{name} of rows 0 and 2: other rows "
                "must be untouched"
            )


def _require_lengths(state: dict, want: list[int], what: str) -> None:
    got = tensor(state["lengths"], f"cache.lengths after {what}").tolist()
    if got != want:
        cleared = " (every row was cleared, not only the released one)" if not any(got) else ""
        raise Fail(
            f"after {what}, cache.lengths is {got}, expected {want}{cleared}: the released "
            "row's length becomes 0 and the other rows keep theirs"
        )


def _output(value, what: str) -> torch.Tensor:
    out = tensor(value, what)
    require_shape(out, (B, H, 1, D), what)
    return out


def _likely(seqs: Sequences) -> dict[str, list[torch.Tensor]]:
    """What row 1 would output at each step if the new sequence read the old one's keys."""
    old, new, full_old = seqs.old, seqs.new, seqs.full_old

    def newest(q, k, v):  # attention of one query [1, H, 1, D] over all of k, v [1, H, n, D]
        padded = torch.zeros_like(k).double()
        padded[:, :, -1:] = q
        return reference.causal_attention(padded, k, v)[:, :, -1:]

    mistakes = {
        "the new sequence in row 1 also attends to the released sequence's positions": lambda j: (
            torch.cat((old["k"][1:2, :, :BEFORE], new["k"][:, :, : j + 1]), dim=2),
            torch.cat((old["v"][1:2, :, :BEFORE], new["v"][:, :, : j + 1]), dim=2),
        ),
        "where a new sequence in a released row writes (row 1 reads the released sequence's "
        "first positions, not its new ones)": lambda j: (
            old["k"][1:2, :, : j + 1],
            old["v"][1:2, :, : j + 1],
        ),
    }
    likely = {}
    for label, kv in mistakes.items():
        likely[label] = []
        for j in range(AFTER):
            out = full_old[:, :, BEFORE + j : BEFORE + j + 1].clone()
            out[1] = newest(new["q"][:, :, j : j + 1], *kv(j))[0]
            likely[label].append(out)
    return likely


class Stale(NamedTuple):
    """The hidden case: B rows of `old` sequences appended in chunks `before`, then rows
    `released` released and every row appended in chunks `after`: the released rows from `new`
    (the others go on with `old`). q, k, v are [B, H, T, D]."""

    name: str
    old: dict[str, torch.Tensor]
    new: dict[str, torch.Tensor]
    released: list[int]
    before: list[int]
    after: list[int]

    @property
    def B(self) -> int:
        return self.old["q"].shape[0]

    @property
    def prefix(self) -> int:
        """Positions of every row before the releases."""
        return sum(self.before)

    def mixed(self, part: str, start: int, end: int) -> torch.Tensor:
        """Positions start..end-1 after the release: old rows go on, released rows are new."""
        x = self.old[part][:, :, self.prefix + start : self.prefix + end].clone()
        x[self.released] = self.new[part][self.released, :, start:end]
        return x

    def expected(self, end: int) -> torch.Tensor:
        """The answer once `end` positions were appended after the releases: [B, H, 1, D]."""
        out = decode_loop.newest(self.old, self.prefix + end)
        if end == 0:
            out[self.released] = 0.0
        else:
            out[self.released] = decode_loop.newest(
                {p: self.new[p][self.released] for p in self.new}, end
            )
        return out


def _stale_case() -> Stale:
    """Seeded shapes and chunks; the released rows' old keys huge and where their new queries
    look (q . direction is about 4 > 0), their old values large."""
    seed = hidden_cases.seed(HIDDEN_SEED)
    g = cases.generator(seed)
    B, H, D = cases.randint(g, 3, 5), cases.choice(g, (1, 2, 4)), cases.choice(g, (8, 16))
    before = cases.chunks(g, cases.randint(g, 10, 20), 5)
    after = cases.chunks(g, cases.randint(g, 4, 8), 3)
    released = torch.randperm(B, generator=g)[:2].tolist()
    prefix = sum(before)
    name = hidden_cases.name(
        seed,
        f"{hidden_cases.shape(B, H, D)}, two rows released "
        "whose old keys are huge, new sequences started by "
        "chunked appends",
    )
    old = cases.sequence(g, B, H, H, prefix + sum(after), D)  # the rows not released go on
    new = cases.sequence(g, B, H, H, sum(after), D)  # used in the released rows only
    direction = cases.randn(g, B, H, 1, D)
    direction = direction / direction.norm(dim=-1, keepdim=True)
    new["q"] = new["q"] + 4.0 * direction
    for b in released:
        old["k"][b, :, :prefix] = STALE_KEY_SCALE * direction[b]
        old["v"][b, :, :prefix] *= STALE_VALUE_SCALE
    return Stale(name, old, new, released, before, after)


def _stale_plan(case: Stale) -> tuple[Plan, int, list[tuple[int, int]]]:
    """The plan; the state's index right after the releases; (attend's index, positions
    appended after the releases) for the attend right after them and after each chunk."""
    plan = Plan()
    plan.new("c")
    total = 0
    for t in case.before:
        plan.append(
            "c", case.old["k"][:, :, total : total + t], case.old["v"][:, :, total : total + t]
        )
        total += t
    for b in case.released:
        plan.release("c", b)
    state = plan.state("c")
    steps = [(plan.attend("c", case.old["q"][:, :, total - 1 : total]), 0)]
    total = 0
    for t in case.after:
        plan.append("c", case.mixed("k", total, total + t), case.mixed("v", total, total + t))
        total += t
        steps.append((plan.attend("c", case.mixed("q", total - 1, total)), total))
    return plan, state, steps
