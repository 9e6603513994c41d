"""reset: reset forgets the old batch entirely; a batch of another shape and dtype then works.

Public: a cache is decoded for a few steps (B=2, H=2, D=8, float32), reset, and must then look exactly
like a new one: keys, values and lengths None, capacity 0. Then a batch of every other shape and
dtype (B=3, H=4, D=16, float64) is decoded through the same cache and compared with full causal
attention at every prefix. The usual mistakes: rewinding lengths but keeping the storage (whose
shape and dtype then reject the new batch, or whose capacity lingers), clearing the storage but
not a separately kept capacity or dtype, or clearing lengths only.

Hidden, seeded (the public case resets once, after an append, and decodes one new batch):
- reset on a new cache and again right after: it must stay empty (keys, values, lengths None,
  capacity 0). A reset that wipes or rewinds the storage in place before dropping it fails on a
  cache that has none;
- then three batches through the same cache, each of another shape, the second float64, each
  with chunked appends and an attend after each append, and a reset between them: a reset that
  works once (the second batch fits a leftover of the first) or that keeps anything of the
  batch before (storage, a position counter, a dtype) shows in the third.
After every reset the state must be empty; every output is compared with the float64 reference.

Tolerance: compare.TOLERANCE[float64], which is float32's: the contract's softmax runs in float32
even for a float64 cache.
"""

from __future__ import annotations

import torch

from graders.shared import cases, hidden_cases, reference

from graders.dense import decode_loop
from graders.judge.candidate import Candidate
from graders.shared.compare import TOLERANCE, require_close, require_shape
from graders.shared.plans import Fail, Plan, Raised, tensor
from graders.worker.ops import Missing

ITEM = "reset"

OLD = dict(B=2, H=2, D=8, steps=3, dtype=torch.float32)
NEW = dict(B=3, H=4, D=16, steps=5, dtype=torch.float64)
HIDDEN_SEED = 700
HIDDEN_DTYPES = (torch.float32, torch.float64, torch.float32)
EMPTY = {"keys": None, "values": None, "lengths": None, "capacity": 0}


def grade(candidate: Candidate) -> str:
    g = cases.generator(70)
    old = cases.sequence(g, OLD["B"], OLD["H"], OLD["H"], OLD["steps"], OLD["D"], OLD["dtype"])
    new = cases.sequence(g, NEW["B"], NEW["H"], NEW["H"], NEW["steps"], NEW["D"], NEW["dtype"])
    plan = Plan()
    plan.new("c")
    for t in range(OLD["steps"]):
        plan.append("c", old["k"][:, :, t : t + 1], old["v"][:, :, t : t + 1])
    plan.reset("c")
    after_reset = plan.state("c")
    steps = []  # (append, attend) per step; both may raise if reset kept the old batch's shape
    for t in range(NEW["steps"]):
        steps.append(
            (
                plan.append(
                    "c", new["k"][:, :, t : t + 1], new["v"][:, :, t : t + 1], may_raise=True
                ),
                plan.attend("c", new["q"][:, :, t : t + 1], may_raise=True),
            )
        )
    results = candidate.run(plan)

    state = results[after_reset]
    for name in ("keys", "values", "lengths", "capacity"):
        value = state[name]
        empty = _is_zero(value) if name == "capacity" else value is None
        if not empty:
            if isinstance(value, torch.Tensor) and value.dim():
                value = f"a tensor of shape {list(value.shape)}"
            elif value == repr(Missing):
                value = "unreadable (reading it raised AttributeError)"
            raise Fail(
                f"after reset, cache.{name} is {value}, expected "
                f"{0 if name == 'capacity' else None}: reset must forget everything, as if "
                "the cache were new"
            )
    shape = [NEW["B"], NEW["H"], 1, NEW["D"]]
    got = []
    for t, (append, attend) in enumerate(steps):
        for op, index in (("append", append), ("attend", attend)):
            if isinstance(results[index], Raised):
                raised = results[index]
                raise Fail(
                    f"after reset, {op} at step {t} of a new batch {shape} float64 raised "
                    f"{raised.type}: {raised.message[:200]}; the first append after reset "
                    "fixes batch, heads, head_dim and dtype anew"
                )
        out = tensor(results[attend], f"attend's output at step {t} after reset")
        require_shape(out, tuple(shape), f"attend's output at step {t} after reset")
        got.append(out)
    full = reference.causal_attention(new["q"], new["k"], new["v"])
    require_close(
        got,
        [full[:, :, t : t + 1] for t in range(NEW["steps"])],
        TOLERANCE[torch.float64],
        case=f"a new batch {shape} float64 after reset",
        step_name="prefix length",
    )
    return (
        f"after reset the cache is empty; a new batch {shape} float64 decodes within "
        f"{TOLERANCE[torch.float64]} of full causal attention at every prefix"
    )


def grade_hidden(candidate: Candidate) -> str:
    batches = _hidden_batches()
    seed = hidden_cases.seed(HIDDEN_SEED)
    case = hidden_cases.name(
        seed,
        "reset on a new cache, twice; then three batches of "
        "different shapes and dtypes with a reset between",
    )
    plan = Plan()
    plan.new("c")
    resets = [("reset on a new cache", _reset(plan)), ("a second reset in a row", _reset(plan))]
    steps = []
    for i, (_, appends, seq) in enumerate(batches):
        if i:
            resets.append((f"reset after batch {i}", _reset(plan)))
        steps.append(decode_loop.append_and_attend(plan, seq, appends))
    results = hidden_cases.run(candidate, plan, case)

    for when, index in resets:
        for attr, empty in EMPTY.items():
            value = results[index][attr]
            if not (value is None if empty is None else _is_zero(value)):
                raise Fail(
                    f"{case}: after {when}, cache.{attr} is not {empty}: reset must leave "
                    "the cache as if new, whatever it held (or did not hold) before"
                )
    for i, ((shape, _, seq), batch_steps) in enumerate(zip(batches, steps)):
        what = f"{case}, batch {i + 1} ({shape})"
        got = decode_loop.outputs(
            results,
            batch_steps,
            tuple(seq["q"][:, :, :1].shape),
            lambda n, step: f"{what}: attend's output",
        )
        require_close(
            got,
            decode_loop.expected(seq, batch_steps),
            TOLERANCE[torch.float32],
            case=what,
            step_name="append",
            first_step=1,
        )
    return (
        f"reset on a new cache (twice) leaves it empty; three batches of different shapes "
        f"and dtypes, reset between, each within {TOLERANCE[torch.float32]} at every append"
    )


def _hidden_batches() -> list[tuple[str, list[int], dict[str, torch.Tensor]]]:
    """Three batches (shape in words, appends, sequence) of random shapes, the second float64."""
    seed = hidden_cases.seed(HIDDEN_SEED)
    g = cases.generator(seed)
    batches = []
    for dtype in HIDDEN_DTYPES:
        B, H, D = cases.randint(g, 1, 4), cases.randint(g, 1, 4), cases.choice(g, (4, 8, 16))
        appends = cases.chunks(g, cases.randint(g, 6, 16), 5)
        batches.append(
            (
                f"{hidden_cases.shape(B, H, D)}, {str(dtype).removeprefix('torch.')}",
                appends,
                cases.sequence(g, B, H, H, sum(appends), D, dtype),
            )
        )
    return batches


def _reset(plan: Plan) -> int:
    plan.reset("c")
    return plan.state("c")


def _is_zero(value) -> bool:
    """Whether `value` is the number 0 (an int, or a one-element tensor)."""
    return (
        isinstance(value, (int, torch.Tensor))
        and torch.as_tensor(value).numel() == 1
        and int(value) == 0
    )
