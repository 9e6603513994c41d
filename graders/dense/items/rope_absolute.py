"""rope-absolute: cached decoding with RoPE equals a full RoPE forward at every prefix.

decode_step must rotate the new token's q and k at its row's absolute position, cache.lengths[b]
before the append. Every step is compared with graders.shared.reference.attention_layer (float64) over
each row's whole sequence. Public, three cases:
- one token at a time from an empty cache;
- ragged rows through counts 0/1 (a row joins late, another skips steps), so the rows of one
  step sit at different positions: catches one position for the whole batch (the longest row's,
  or the time dimension of cache.keys);
- prompts of 2, 5 and 3 tokens prefilled with `append` (keys rotated by the judge), then
  decode_step: the position comes from lengths, not from a count of decode steps.
Outputs cannot see every position shifted by the same offset: RoPE scores depend only on the
distance between q and k. So the cached keys are compared too, with k rotated at its absolute
position; a mismatch is named when it matches a known mistake (position 0 or no rotation, one
position late, the interleaved convention, the longest row's position).

Hidden, with the same checks, seeded (the public positions stay below 10):
- prompts of 260 to 400 tokens per row, prefilled with `append` (keys rotated by the judge),
  then decode steps with random counts 0/1: every row's positions are past 256, where a cos/sin
  table sized for some maximum position (a `max_position_embeddings`) ends, and where positions
  held in bfloat16 stop being exact integers;
- 24 decode steps from an empty cache, each row taking a token with probability 0.7, so rows
  join late, skip runs of steps and end far apart: every row's position must be its own
  cache.lengths[b] at every step.
float32 RoPE at position 400 is within ~2e-6 of float64 (head_dim 16): measured, the correct
implementations' outputs stay within 1/19 of the tolerance.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases, reference
from graders.shared.compare import TOLERANCE, UNWRITTEN_SLOTS, first_divergence, require_shape
from graders.shared.plans import Fail, Plan, tensor

ITEM = "rope-absolute"

B, D_MODEL, HEADS, HEAD_DIM, BASE = 3, 32, 2, 16, 10000.0
TOL = TOLERANCE[torch.float32]


class Case(NamedTuple):
    """Rows prefilled with `prompts` tokens by append, then decoded with the per-step counts
    (0/1 per row) of `steps`; the layer and tokens drawn from `seed`."""

    seed: int
    name: str
    prompts: tuple[int, ...]
    steps: list[tuple[int, ...]]


CASES = [
    Case(120, "one token at a time from an empty cache", (0, 0, 0), [(1, 1, 1)] * 8),
    Case(
        121,
        "ragged rows: row 1 joins at step 3, row 2 skips steps 2 and 5 (counts 0/1)",
        (0, 0, 0),
        [(1, 0, 1), (1, 0, 1), (1, 0, 0), (1, 1, 1), (1, 1, 1), (1, 1, 0), (1, 1, 1), (1, 1, 1)],
    ),
    Case(
        122,
        "prompts of 2, 5 and 3 tokens prefilled with append, then decode_step",
        (2, 5, 3),
        [(1, 1, 1)] * 5,
    ),
]
LONG_SEED = 1200
RAGGED_SEED = 1210


def grade(candidate: Candidate) -> str:
    for case in CASES:
        _check(candidate, case)
    return (
        f"{len(CASES)} cases (uniform, ragged counts, prefilled prompts): every step within "
        f"{TOL} of a full RoPE forward, cached keys rotated at their absolute positions"
    )


def grade_hidden(candidate: Candidate) -> str:
    long, ragged = _hidden_cases()
    for case in (long, ragged):
        with hidden_cases.labelled(case.name):
            _check(candidate, case)
    return (
        f"positions up to {max(long.prompts) + 6} after long prefilled prompts, and 24 random "
        "ragged steps: outputs and cached keys at every row's own absolute position"
    )


def _hidden_cases() -> tuple[Case, Case]:
    """Long prefilled prompts then 6 ragged steps; 24 random ragged steps from empty."""
    seed = hidden_cases.seed(LONG_SEED)
    g = cases.generator(seed)
    prompts = tuple(cases.randint(g, 260, 400) for _ in range(B))
    name = f"prompts of {min(prompts)} to {max(prompts)} tokens, then ragged decode steps"
    long = Case(seed, hidden_cases.name(seed, name), prompts, _random_steps(g, 6, 0.5))
    seed = hidden_cases.seed(RAGGED_SEED)
    g = cases.generator(seed)
    name = "24 decode steps from an empty cache, rows taking tokens at random"
    ragged = Case(seed, hidden_cases.name(seed, name), (0,) * B, _random_steps(g, 24, 0.7))
    return long, ragged


def _random_steps(g: torch.Generator, n: int, p: float) -> list[tuple[int, ...]]:
    """n steps of counts 0/1, each 1 with probability p, and never all 0."""
    steps = []
    while len(steps) < n:
        counts = tuple(int(u < p) for u in torch.rand(B, generator=g))
        if any(counts):
            steps.append(counts)
    return steps


def _check(candidate: Candidate, case: Case) -> None:
    """Prefill, then decode; Fail unless the cached keys and every output match the full RoPE
    forward."""
    seed, name, prompts, steps = case
    g = cases.generator(seed)
    weights = cases.layer_weights(g, D_MODEL, HEADS, HEADS, HEAD_DIM)
    T = int((torch.tensor(prompts) + torch.tensor(steps).sum(0)).max())
    x = cases.randn(g, B, T + 1, D_MODEL)  # row b's tokens, one spare: rows skipping the last step
    full = reference.attention_layer(x, weights, HEADS, HEADS, BASE)
    plan = Plan()
    plan.layer("L", weights, HEADS, HEADS, HEAD_DIM, BASE)
    plan.new("c")
    if any(prompts):
        _prefill(plan, full, prompts)
    outputs, lengths, longest = _decode(plan, x, prompts, steps)
    state = plan.state("c")
    results = candidate.run(plan)

    keys = tensor(results[state]["keys"], f"{name}: cache.keys")
    keys = keys[:, :, :T] if keys.dim() == 4 else keys  # its time size is length-vs-capacity's
    require_shape(keys, (B, HEADS, T, HEAD_DIM), f"{name}: cache.keys[:, :, :{T}]")
    _check_keys(name, keys, x, weights, lengths, torch.tensor(prompts), longest)
    _check_outputs(name, results, outputs, full["out"])


def _prefill(plan: Plan, full: dict, prompts: tuple[int, ...]) -> None:
    """Append each row's prompt: the judge's keys (after RoPE) and values, padded to the longest
    with zeros, not NaN (whether padding is written is ragged-batch's business)."""
    p = max(prompts)
    k, v = (cases.padded(full[n][:, :, :p].float(), prompts).nan_to_num(0.0) for n in "kv")
    plan.append("c", k, v, cases.counts(*prompts))


class Output(NamedTuple):
    """One decode_step: its index, the rows that took a token ([B] bool) and their positions."""

    index: int
    active: torch.Tensor
    positions: torch.Tensor


def _decode(
    plan: Plan, x: torch.Tensor, prompts: tuple[int, ...], steps: list[tuple[int, ...]]
) -> tuple[list[Output], torch.Tensor, torch.Tensor]:
    """decode_step for each step's counts (all-ones counts not sent): the outputs, the rows'
    final lengths, and where each decoded key would sit if every row were rotated at the longest
    row's position (a known mistake), [B, T+1]."""
    lengths, rows = torch.tensor(prompts), torch.arange(B)
    outputs, longest = [], torch.arange(x.shape[1]).repeat(B, 1)
    for counts in steps:
        active = torch.tensor(counts, dtype=torch.bool)
        counts_arg = None if all(counts) else cases.counts(*counts)
        index = plan.decode_step("L", "c", x[rows, lengths][:, None], counts_arg)
        outputs.append(Output(index, active, lengths))
        longest[rows[active], lengths[active]] = int(lengths.max())
        lengths = lengths + active
    return outputs, lengths, longest


def _check_outputs(name: str, results, outputs: list[Output], full: torch.Tensor) -> None:
    """Every step's output against the full forward's `full` [B, T, d_model] at each active
    row's position; a growing error is named as a RoPE offset."""
    rows, got, expected = torch.arange(B), [], []
    for step, (index, active, positions) in enumerate(outputs):
        out = tensor(results[index]["output"], f"{name}: decode_step's output at step {step}")
        require_shape(out, (B, 1, D_MODEL), f"{name}: decode_step's output at step {step}")
        got.append(out.double().where(active[:, None, None], 0.0))
        expected.append(full[rows, positions][:, None].where(active[:, None, None], 0.0))
    errors = [float((o - e).abs().nan_to_num(float("inf")).max()) for o, e in zip(got, expected)]
    divergence = first_divergence([o[:, None] for o in got], [e[:, None] for e in expected], TOL)
    if divergence:
        grows = errors[0] <= TOL.atol and errors[-1] >= errors[divergence.step]
        raise Fail(
            f"{name}: decode_step's output first differs from the full RoPE forward at "
            f"step {divergence.step}, row {divergence.row}: {divergence.error(TOL)}"
            + (
                f": {UNWRITTEN_SLOTS}"
                if divergence.nonfinite
                else ". Likely mistake: the positions q and k are rotated at (the error grows "
                "with position while a single position is right)"
                if grows
                else ""
            )
        )


def _check_keys(name: str, keys, x, weights, lengths, prompts, longest) -> None:
    """cache.keys against k rotated at its absolute position; positions decode_step wrote only."""
    k_raw = reference.split_heads(x.double() @ weights["wk"].double().T, HEADS)  # [B, H, T+1, D]
    T = keys.shape[2]
    positions = torch.arange(T).repeat(B, 1)
    decoded = (positions >= prompts[:, None]) & (positions < lengths[:, None])  # [B, T]
    mask = decoded[:, None, :, None]

    def rotated(alternative, rope=reference.rope):  # positions of the decoded keys -> masked keys
        return rope(k_raw[:, :, :T], positions.where(~decoded, alternative), BASE).where(mask, 0.0)

    got = keys.double().where(mask, 0.0)
    divergence = first_divergence([got], [rotated(positions)], TOL)
    if divergence is None:
        return
    likely = {
        "the position the cached keys are rotated at (they match keys at position 0, or not "
        "rotated)": rotated(torch.zeros_like(positions)),
        "the position the cached keys are rotated at (they match keys one position late)": rotated(
            positions + 1
        ),
        "how the cached keys are rotated (they match RoPE on pairs 2i, 2i+1, not the given "
        "apply_rope's halves)": rotated(positions, _interleaved_rope),
        "the position each row's keys are rotated at (they match every row at the longest "
        "row's position)": rotated(longest[:, :T]),
    }
    label = next((k for k, v in likely.items() if first_divergence([got], [v], TOL) is None), None)
    raise Fail(
        f"{name}: cache.keys differ from k rotated at its absolute position at row "
        f"{divergence.row}, head {divergence.head}, position {divergence.position}: max abs "
        f"error {divergence.max_abs:.2e} (tolerance {TOL})"
        + (f". Likely mistake: {label}" if label else "")
    )


def _interleaved_rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """The GPT-J / original-paper convention, float64: dimensions 2i and 2i+1 form a pair."""
    x = x.double()
    i = torch.arange(x.shape[-1] // 2, dtype=torch.float64)
    theta = positions.double()[:, None, :, None] * base ** (-2.0 * i / x.shape[-1])
    even, odd = x[..., 0::2], x[..., 1::2]
    return torch.stack(
        (even * theta.cos() - odd * theta.sin(), odd * theta.cos() + even * theta.sin()), dim=-1
    ).flatten(-2)
