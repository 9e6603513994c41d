"""ragged-batch: rows of different lengths attend only to their own positions.

Public: three sequences (B=3) with prompts of 5, 2 and 3 positions, sent as ONE append of t=5 with
counts [5, 2, 3] whose padding positions are NaN: a cache that ignores counts stores NaN where
attention sees it. Then single-position steps for every row, steps where one row has counts 0
(a finished sequence: it must not grow, and its output stays attention over its own positions
for the same query), and a padded 2-position append mid-stream. Every step checks lengths, and
every row's output against the float64 reference for that row's own sequence. A cache that
masks by max(lengths) or by capacity rather than each row's length shows on the shorter rows.
The last position of row 2's prompt is a real token whose key is all zeros, while the padding
(whole rows of it where counts is 0) is NaN, never zero: a cache that decides which slots are
valid from the data (a zero key taken for an empty slot, or a length read off the last non-zero
key) rather than from `lengths` drops that token and shows at the first step. This is the item
for it, rather than prefix-equivalence, because which of a row's slots are valid is what this
item judges: only `lengths` can say, once rows differ and slots hold padding.

Hidden, seeded: 3 to 5 rows, a padded prompt append (every row at least one position) then 12 to
20 appends of t = 1 to 6 (one case up to 30) with each row's count drawn from 0..t (never all
0), padding positions NaN, so rows drift far apart and often sit out a step at counts 0. After
every append, lengths and every row's output against the float64 reference over that row's own
positions, one row again holding a real all-zero key (at a random place). What the public steps
cannot show: every append's key and value are sent back after the call and must be exactly what
was sent, NaN padding included: a cache that cleans the padding (`new_key[b, :, n:] = 0`) writes
into the caller's tensors.
MHA only; no row is ever empty (zero-length rows are release's concern).
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
    close,
    first_divergence,
    require_shape,
)
from graders.shared.plans import Fail, Plan, tensor

ITEM = "ragged-batch"

B, H, D, TOTAL = 3, 2, 8, 12
STEPS = [  # (t, counts)
    (5, (5, 2, 3)),  # three prompts in one padded append
    (1, (1, 1, 1)),
    (1, (1, 1, 1)),
    (1, (1, 0, 1)),  # row 1 skips a step
    (1, (0, 1, 1)),
    (2, (2, 0, 1)),
]
ZERO_KEY = (2, 2)  # (row, position): the last of row 2's 3 prompt positions has an all-zero key
TOL = TOLERANCE[torch.float32]
NAN_PAST_LENGTH = (
    f"{UNWRITTEN_SLOTS}; here the NaN past a row's length is the padding past "
    "counts[b], stored, or memory never written (torch.empty)"
)
ZERO_KEY_LEFT_OUT = (
    "a real position whose key is all zeros was left out: where a slot's validity is read from"
)
HIDDEN_CASES = [  # seed, largest t after the prompt
    (800, 6),
    (801, 30),
]


def grade(candidate: Candidate) -> str:
    seq = cases.sequence(cases.generator(500), B, H, H, TOTAL, D)
    seq["k"][ZERO_KEY[0], :, ZERO_KEY[1]] = 0.0  # a real token, not an empty slot
    full = reference.causal_attention(seq["q"], seq["k"], seq["v"])  # [B, H, TOTAL, D]
    rows = range(B)
    plan = Plan()
    plan.new("c")
    ops, expected, lengths = [], [], [0] * B
    for t, counts in STEPS:
        new = {
            part: cases.padded(
                torch.stack([seq[part][b, :, lengths[b] : lengths[b] + t] for b in rows]),
                list(counts),
            )
            for part in ("k", "v")
        }  # [B, H, t, D], NaN past counts[b]
        plan.append("c", new["k"], new["v"], cases.counts(*counts))
        previous, lengths = lengths, [n + c for n, c in zip(lengths, counts)]
        query = torch.stack([seq["q"][b, :, n - 1 : n] for b, n in zip(rows, lengths)])
        ops.append((previous, lengths, plan.state("c"), plan.attend("c", query)))
        expected.append(torch.stack([full[b, :, n - 1 : n] for b, n in zip(rows, lengths)]))
    results = candidate.run(plan)

    got = []
    for step, ((t, counts), (previous, lengths, state, attended)) in enumerate(zip(STEPS, ops)):
        where = f"step {step} (t={t}, counts {list(counts)})"
        found = tensor(results[state]["lengths"], f"cache.lengths after {where}")
        if found.dtype != torch.int64 or found.tolist() != lengths:
            ignored = found.tolist() == [n + t for n in previous]
            hint = (
                ". Likely mistake: how append uses counts (every row grew by t)" if ignored else ""
            )
            raise Fail(
                f"cache.lengths after {where} is {str(found.dtype).removeprefix('torch.')} "
                f"{found.tolist()}, expected int64 {lengths}{hint}"
            )
        got.append(tensor(results[attended], f"attend's output after {where}"))
        require_shape(got[-1], (B, H, 1, D), f"attend's output after {where}")

    divergence = first_divergence(got, expected, TOLERANCE[torch.float32])
    if divergence is None:
        return (
            f"{len(STEPS)} ragged steps (padded prompts, rows with counts 0): lengths and "
            f"every row within {TOLERANCE[torch.float32]} of attention over its own sequence"
        )
    step = divergence.step
    t, counts = STEPS[step]
    lengths = ops[step][1]
    message = (
        f"step {step} (t={t}, counts {list(counts)}, lengths {lengths}): row "
        f"{divergence.row}, head {divergence.head} is not attention over that row's own "
        f"{lengths[divergence.row]} positions ({divergence.error(TOL)})"
    )
    if divergence.nonfinite:
        raise Fail(f"{message}: {NAN_PAST_LENGTH}")
    row = divergence.row
    if _left_out(seq, ZERO_KEY, got[step][row], row, lengths[row]):
        raise Fail(f"{message}. Likely mistake: {ZERO_KEY_LEFT_OUT}")
    raise Fail(message + _likely(got[step], expected[step], lengths, step))


def grade_hidden(candidate: Candidate) -> str:
    for seed, most in hidden_cases.seeded(HIDDEN_CASES):
        _check_hidden(candidate, seed, most)
    return (
        f"{len(HIDDEN_CASES)} seeded ragged runs (random counts, NaN padding, a real all-zero "
        f"key): lengths and every row within {TOL} after every append, inputs untouched"
    )


def _likely(got: torch.Tensor, expected: torch.Tensor, lengths: list[int], step: int) -> str:
    """A likely-mistake label from which rows of the first wrong step are wrong (every output
    finite where the reference is), and how."""
    wrong = [b for b in range(B) if not close(got[b], expected[b], TOLERANCE[torch.float32]).all()]
    if not all(lengths[b] < max(lengths) for b in wrong):
        return ""
    if step == 0:  # the rows already differ in length at the prompts
        return (
            ". Likely mistake: which positions each row attends (only rows shorter than "
            "the longest are wrong)"
        )
    return (
        ". Likely mistake: where each row's new positions are written (only rows shorter "
        "than the longest go wrong, after the prompts were right)"
    )


class Ragged(NamedTuple):
    """A hidden case: its name, sequence ([B, H, T, D] q, k, v), appends (t, counts per row),
    and the real position whose key is all zeros (row, position)."""

    name: str
    seq: dict[str, torch.Tensor]
    steps: list[tuple[int, list[int]]]
    zero_key: tuple[int, int]


def _hidden_case(seed: int, most: int) -> Ragged:
    """A padded prompt, then 12 to 20 appends of 1 to `most` positions with random counts."""
    g = cases.generator(seed)
    B, H, D = cases.randint(g, 3, 5), cases.randint(g, 1, 3), cases.choice(g, (4, 8))
    prompt = cases.randint(g, 3, 8)
    steps = [(prompt, [cases.randint(g, 1, prompt) for _ in range(B)])]
    appends = 1 + cases.randint(g, 12, 20)
    while len(steps) < appends:
        t = cases.randint(g, 1, most)
        counts = [cases.randint(g, 0, t) for _ in range(B)]
        if any(counts):  # a step where every row has counts 0 is finished-beams' concern
            steps.append((t, counts))
    name = hidden_cases.name(
        seed,
        f"{hidden_cases.shape(B, H, D)}, {len(steps)} ragged appends "
        f"of up to {max(t for t, _ in steps)} positions, NaN padding",
    )
    seq = cases.sequence(g, B, H, H, sum(t for t, _ in steps), D)
    zero_row = cases.randint(g, 0, B - 1)
    zero_at = cases.randint(g, 0, steps[0][1][zero_row] - 1)
    seq["k"][zero_row, :, zero_at] = 0.0
    return Ragged(name, seq, steps, (zero_row, zero_at))


def _check_hidden(candidate: Candidate, seed: int, most: int) -> None:
    """Every append: its inputs back untouched, lengths, then every row's output."""
    case = _hidden_case(seed, most)
    B, H, _, D = case.seq["q"].shape
    plan = Plan()
    plan.new("c")
    ops, lengths = [], [0] * B
    for t, counts in case.steps:
        new = {
            part: cases.padded(
                torch.stack([case.seq[part][b, :, lengths[b] : lengths[b] + t] for b in range(B)]),
                counts,
            )
            for part in ("k", "v")
        }  # [B, H, t, D], NaN past counts[b]
        appended = plan.append("c", new["k"], new["v"], cases.counts(*counts), return_inputs=True)
        lengths = [n + c for n, c in zip(lengths, counts)]
        query = torch.stack([case.seq["q"][b, :, n - 1 : n] for b, n in enumerate(lengths)])
        ops.append((t, new, lengths, appended, plan.state("c"), plan.attend("c", query)))
    results = hidden_cases.run(candidate, plan, case.name)

    got, expected = [], []
    for step, (t, new, lengths, appended, state, attended) in enumerate(ops, start=1):
        where = f"{case.name}: append {step} (t={t})"
        _require_unchanged(
            {"key": new["k"], "value": new["v"]},
            results.inputs_after(appended),
            f"append {step}",
            case.name,
        )
        found = tensor(results[state]["lengths"], f"{where}, cache.lengths")
        if found.dtype != torch.int64 or found.tolist() != lengths:
            raise Fail(
                f"{where}: cache.lengths is not each row's own count of positions: every "
                "row grows by exactly its counts[b]"
            )
        got.append(tensor(results[attended], f"{where}, attend's output"))
        require_shape(got[-1], (B, H, 1, D), f"{where}, attend's output")
        expected.append(torch.cat([_own(case.seq, b, n) for b, n in enumerate(lengths)]))
    divergence = first_divergence(got, expected, TOL)
    if divergence is not None:
        step, row = divergence.step, divergence.row
        raise Fail(
            f"{case.name}: after append {step + 1}, row {row}, head {divergence.head} is "
            f"not attention over that row's own positions ({divergence.error(TOL)})"
            + (
                f": {NAN_PAST_LENGTH}"
                if divergence.nonfinite
                else f": {ZERO_KEY_LEFT_OUT}"
                if _left_out(case.seq, case.zero_key, got[step][row], row, ops[step][2][row])
                else ""
            )
        )


def _left_out(
    seq: dict, zero_key: tuple[int, int], got: torch.Tensor, row: int, length: int
) -> bool:
    """Whether row `row`'s output `got` ([H, 1, D], over its `length` positions) is attention
    without the real all-zero key at `zero_key` (row, position): validity read from the data."""
    zero_row, zero_at = zero_key
    return (
        row == zero_row
        and length > zero_at
        and bool(close(got, _without(seq, row, length, zero_at), TOL).all())
    )


def _own(seq: dict, b: int, n: int) -> torch.Tensor:
    """Row b's newest-token output over its own first n positions: [1, H, 1, D]."""
    return decode_loop.newest({part: x[b : b + 1] for part, x in seq.items()}, n)


def _without(seq: dict, b: int, n: int, dropped: int) -> torch.Tensor:
    """Row b's newest-token output over its first n positions but `dropped`: [H, 1, D]."""
    keep = torch.arange(n) != dropped
    k, v = (seq[part][b : b + 1, :, :n][:, :, keep] for part in "kv")
    return reference.causal_attention(seq["q"][b : b + 1, :, n - 1 : n], k, v)[0]


def _require_unchanged(sent: dict[str, torch.Tensor], after: dict, call: str, case: str) -> None:
    """Fail unless every input in `sent` came back from `call` (`Results.inputs_after`) with the
    same shape, dtype and values (NaN where NaN was sent)."""
    for arg, original in sent.items():
        back = after.get(arg)
        same = (
            isinstance(back, torch.Tensor)
            and back.shape == original.shape
            and back.dtype == original.dtype
            and bool(((back == original) | (back.isnan() & original.isnan())).all())
        )
        if not same:
            raise Fail(
                f"{case}: {call} modified its `{arg}` argument in place; the caller still "
                "owns it (an in-place op on the argument, or on a view of it?)"
            )
