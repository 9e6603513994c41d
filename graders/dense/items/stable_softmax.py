"""stable-softmax: large logits give finite, correct outputs.

float32 exp overflows to inf past 88 and underflows to 0 below about -103, so a softmax computed
as exp(s) / sum(exp(s)) gives inf/inf or 0/0 = NaN on logits in the thousands; subtracting each
row's maximum first changes nothing mathematically and keeps every exp in range.

Public: three cases, one position appended per step and every prefix compared with the float64
reference:
- every logit large and positive, near 1000 in row 0 and 3000 in row 1, a few apart so the
  weights mix (exp overflows without the max subtraction);
- the same, large and negative (every exp underflows to 0, then 0/0);
- random keys and queries of large norm: logits of both signs in the thousands, nearly one-hot
  weights.
The rows' different ranges also catch a maximum taken over the whole batch instead of per row.

Hidden, seeded: the public logits stay within a few thousand, and their aligned cases put every
head of a row near the same logit. Here each head of a row sits at its own offset, thousands apart,
from about -30000 to +30000 (some rows with both signs): anything but each (row, head)'s own
maximum subtracted underflows or overflows somewhere, and a guard that clamps the logits to some
"safe" range (±1e4, say) flattens them into uniform weights. Positions come in chunks of up to 40,
150 to 300 in all, compared after every append. The rows have different lengths: the first append
is a prompt of 40 positions with counts, row 0 keeping all of them, every other row 1 to 39, so the
shorter rows' slots past their lengths are masked at every step, and the last row's first head sits
below -15000. Those slots must get weight 0 however low the row's logits: a mask by a finite value
(-1e4, the mask of older fp16 code) lies above them and takes all the weight. A non-finite output
of row 0, which has no masked slot, is named the softmax's; in a shorter row, the slots past its
length, read (torch.empty storage: NaN in the worker). The keys and queries are small integers but
for one large coordinate, and head_dim is 16, so every logit (q . k / 4) is exact in float32
whatever the order of the sums or the place of the scaling: correct implementations agree with the
float64 reference within 9e-7 however large the logits (measured over 20 seeds: the reference, the
concat baseline, and tests/implementations' sdpa, block_chunked and growth_1_5), and the public
tolerance applies with room to spare.
"""

from __future__ import annotations

import math

import torch

from graders.shared import cases, hidden_cases, reference

from graders.dense import decode_loop
from graders.judge.candidate import Candidate
from graders.shared.compare import LARGE_LOGITS_FLOAT32, require_close, require_shape
from graders.shared.plans import Fail, Plan, tensor

ITEM = "stable-softmax"

B, H, D, T = 2, 2, 16, 8
OFFSETS = (1000.0, 3000.0)  # where row b's logits sit in the aligned cases, give or take a sign
SPREAD = 3.0  # their spread around that offset

# float32 logits of size L carry rounding errors of about L * 6e-8, so where the weights are not
# one-hot, outputs differ from the float64 reference by ~1e-4 at L = 1000 and more at 3000. Measured
# max abs error of correct styles (the reference, the concat baseline, a manual max-subtracted
# softmax, scaled_dot_product_attention, pre-scaled queries, einsum, logsumexp): 3.1e-4 on these
# cases, 7.2e-4 the worst over 30 other seeds: compare.LARGE_LOGITS_FLOAT32 keeps a 7x margin.
STABLE_TOLERANCE = LARGE_LOGITS_FLOAT32

HIDDEN_SEEDS = [600 + i for i in range(2)]
PROMPT = 40  # the hidden cases' first append: row 0 keeps all of it, the other rows 1..39


def grade(candidate: Candidate) -> str:
    g = cases.generator(300)
    case_inputs = {
        "every logit large and positive": _aligned(g, sign=1.0),
        "every logit large and negative": _aligned(g, sign=-1.0),
        "random keys and queries of large norm": cases.sequence(g, B, H, H, T, D, scale=40.0),
    }
    plan = Plan()
    steps = {}
    for name, seq in case_inputs.items():
        plan.new(name)
        steps[name] = decode_loop.append_and_attend(plan, seq, [1] * T, name)
    results = candidate.run(plan)

    for name, seq in case_inputs.items():
        got = [
            tensor(results[step.index], f"attend's output ({name}, step {s})")
            for s, step in enumerate(steps[name])
        ]
        for step, out in enumerate(got):
            require_shape(out, (B, H, 1, D), f"attend's output ({name}, step {step})")
            _require_finite(out, seq, step, name)
        full = reference.causal_attention(seq["q"], seq["k"], seq["v"])  # [B, H, T, D]
        require_close(
            got,
            [full[:, :, t : t + 1] for t in range(T)],
            STABLE_TOLERANCE,
            case=name,
            step_name="step",
        )
    return (
        f"{len(case_inputs)} cases with logits in the thousands: every prefix finite and "
        f"within {STABLE_TOLERANCE} of the float64 reference"
    )


def grade_hidden(candidate: Candidate) -> str:
    for seed in hidden_cases.seeds(HIDDEN_SEEDS):
        _check_hidden(candidate, seed)
    return (
        f"{len(HIDDEN_SEEDS)} seeded cases, logits in the tens of thousands, heads thousands "
        f"apart, chunked: every prefix finite and within {LARGE_LOGITS_FLOAT32} of the "
        "float64 reference"
    )


def _aligned(g: torch.Generator, sign: float) -> dict[str, torch.Tensor]:
    """Queries along one direction per head and keys along it (sign 1) or against it (sign -1):
    every logit of row b is near sign * OFFSETS[b], give or take a few SPREADs."""
    direction = cases.randn(g, B, H, 1, D).double()
    direction = direction / direction.norm(dim=-1, keepdim=True)
    norm = (torch.tensor(OFFSETS, dtype=torch.float64) * math.sqrt(D)).sqrt()[:, None, None, None]
    jitter = SPREAD * math.sqrt(D) / norm  # moves each logit by about SPREAD
    q = norm * direction + jitter * cases.randn(g, B, H, T, D).double()
    k = sign * norm * direction + jitter * cases.randn(g, B, H, T, D).double()
    return {"q": q.float(), "k": k.float(), "v": cases.randn(g, B, H, T, D)}


def _require_finite(out: torch.Tensor, seq: dict, step: int, name: str) -> None:
    finite = torch.isfinite(out).all(dim=-1)[..., 0]  # [B, H]
    if finite.all():
        return
    row, head = (int(i) for i in (~finite).nonzero()[0])
    scores = seq["k"][:, :, : step + 1].double() @ seq["q"][:, :, step, :, None].double()
    largest = scores.amax(dim=(2, 3)) / math.sqrt(D)  # [B, H]: each row's largest logit
    logit, top = float(largest[row, head]), float(largest.max())
    if logit < top - 80 and finite.flatten()[largest.argmax()]:
        why = (
            f"the row with the batch's largest logit ({top:.0f}) is finite. Likely mistake: "
            "which scores the softmax's maximum is taken over"
        )
    elif logit > 88:  # float32 exp overflows past 88.7
        why = "did the softmax overflow?"
    elif logit < -87:  # and every exp rounds to 0 below about -103
        why = "did the softmax underflow (every exp is 0 in float32, then 0/0)?"
    else:
        why = "does every exp stay in float32's range?"
    raise Fail(
        f"{name}: outputs are not finite for logits around {logit:.0f} (step {step}, "
        f"row {row}, head {head}): {why}"
    )


def _check_hidden(candidate: Candidate, seed: int) -> None:
    """Logits near one offset per (row, head), rows of different lengths, appended in chunks:
    every output finite and within the tolerance of attention over the row's own positions."""
    g = cases.generator(seed)
    B, H = cases.randint(g, 2, 3), cases.randint(g, 2, 4)
    appends = [PROMPT] + cases.chunks(g, cases.randint(g, 150, 300) - PROMPT, 40)
    prompt = [PROMPT] + [cases.randint(g, 1, PROMPT - 1) for _ in range(B - 1)]  # its counts
    case = hidden_cases.name(
        seed,
        f"{hidden_cases.shape(B, H)}, logits in the tens of thousands, "
        "each head of a row thousands apart, rows of different "
        "lengths, chunked appends",
    )
    seq = _per_head_offsets(g, B, H, sum(appends))
    plan = Plan()
    plan.new("c")
    plan.append("c", seq["k"][:, :, :PROMPT], seq["v"][:, :, :PROMPT], cases.counts(*prompt))
    steps = [decode_loop.Step(plan.attend("c", seq["q"][:, :, PROMPT - 1 : PROMPT]), PROMPT)]
    rest = {name: x[:, :, PROMPT:] for name, x in seq.items()}  # every row keeps all of it
    steps += [
        step._replace(end=PROMPT + step.end)
        for step in decode_loop.append_and_attend(plan, rest, appends[1:])
    ]
    results = hidden_cases.run(candidate, plan, case)

    got = decode_loop.outputs(
        results, steps, (B, H, 1, D), lambda n, step: f"{case}: attend's output at append {n + 1}"
    )
    # A row that holds every position sent has no masked slot: an output of it that is not
    # finite is the softmax's. In a shorter row it may be the slots past its length, read.
    longest = [b for b, kept in enumerate(prompt) if kept == PROMPT]
    for n, out in enumerate(got):
        bad = (~torch.isfinite(out[longest])).nonzero()
        if len(bad):
            row, head = longest[int(bad[0][0])], int(bad[0][1])
            raise Fail(
                f"{case}: attend's output at append {n + 1}: not finite at row {row}, "
                f"head {head}: every exp underflowed or overflowed there. Likely mistake: "
                "which scores the softmax's maximum is taken over"
            )
    require_close(
        got,
        [_own_positions(seq, prompt, step.end) for step in steps],
        LARGE_LOGITS_FLOAT32,
        case=case,
        step_name="append",
        first_step=1,
    )


def _own_positions(seq: dict[str, torch.Tensor], prompt: list[int], end: int) -> torch.Tensor:
    """The float64 answer once `end` positions were sent: the query sent then, row b's over its
    own positions (the first prompt[b] of the prompt and all sent after it). [B, H, 1, D]."""
    rows = []
    for b, kept in enumerate(prompt):
        k, v = (
            torch.cat((x[b : b + 1, :, :kept], x[b : b + 1, :, PROMPT:end]), dim=2)
            for x in (seq["k"], seq["v"])
        )  # [1, H, n, D]
        rows.append(reference.causal_attention(seq["q"][b : b + 1, :, end - 1 : end], k, v))
    return torch.cat(rows)  # [B, H, 1, D]


def _per_head_offsets(g: torch.Generator, B: int, H: int, T: int) -> dict[str, torch.Tensor]:
    """Integer-valued q and k ([B, H, T, D], `cases.exact_queries` and `exact_keys`) whose
    logits sit near one offset per (row, head): consecutive heads of a row 3000 to 10000 apart,
    from about -30000; the last row's first head below -15000."""
    start = torch.randint(-30000, 1, (B, 1), generator=g)
    start[-1] = torch.randint(-30000, -15000, (1,), generator=g)
    gap = torch.randint(3000, 10001, (B, 1), generator=g)
    offsets = start + gap * torch.arange(H)  # [B, H]
    q = cases.exact_queries(g, B, H, T, D=D)
    return {"q": q, "k": cases.exact_keys(g, offsets, T, D), "v": cases.randn(g, B, H, T, D)}
