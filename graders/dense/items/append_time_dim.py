"""append-time-dim: append grows the time dimension; keys, values and lengths have the right shapes.

Public: appends of 1, 1, 3 and 1 positions to one batch (B=2, Hkv=3, D=8: every dimension a different
size, so a wrong shape names the dimension that grew). After each append, `keys` and `values`
must be [B, Hkv, T, D] with T the positions appended so far, holding exactly the appended keys
and values in order along time, and `lengths` an int64 [B] tensor equal to T. Appending along
the heads (`dim=1`) shows from the second append, code that assumes one position per call at
the 3-position append, a time dimension as long as the allocated storage at any step. Nothing
else is judged here (L4): no validation, no `counts`, no capacity, no attention.

Hidden, seeded (an append that raises is then the implementation's error, not a judged
outcome):
- random batch, kv_heads and head_dim, and runs of random chunk sizes (t up to 9) into a cache
  that already holds positions: code that handles a multi-position append only as the first one
  (a prompt), or sizes its storage for one more position per call, shows;
- every other append sent as a non-contiguous tensor (a transposed view with the same values):
  code that reshapes its input with `.view`, or copies raw memory, breaks or scrambles it;
- a long cache, ~2000 positions in a few big appends after small ones: storage that grows by a
  fixed step or doubles once per call, or is capped at some fixed size, cannot hold a chunk
  larger than what it holds already.
After every append, keys and values must be [B, Hkv, T, D] holding what was appended, in order,
and lengths int64 [B] equal to T.
"""

from __future__ import annotations

import torch

from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases
from graders.shared.compare import TOLERANCE, first_divergence, require_shape
from graders.shared.plans import Fail, Plan, Raised, tensor

ITEM = "append-time-dim"

B, HKV, D = 2, 3, 8
APPENDS = (1, 1, 3, 1)  # positions per append
DIMS = ("batch", "kv_heads", "time", "head_dim")

TOL = TOLERANCE[torch.float32]
HIDDEN_SEEDS = [100 + i for i in range(3)]
LONG_SEED = 110
LONG_APPENDS = (1, 3, 700, 1, 1295)  # 2000 positions; the third append is far larger than the cache


def grade(candidate: Candidate) -> str:
    seq = cases.sequence(cases.generator(100), B, HKV, HKV, sum(APPENDS), D)
    plan = Plan()
    plan.new("c")
    ops, total = [], 0
    for t in APPENDS:
        appended = plan.append(
            "c",
            seq["k"][:, :, total : total + t],
            seq["v"][:, :, total : total + t],
            may_raise=True,
        )
        ops.append((appended, plan.state("c")))
        total += t
    results = candidate.run(plan)

    total = 0
    for step, (t, (appended, state)) in enumerate(zip(APPENDS, ops), start=1):
        total += t
        where = f"after append {step} ({t} position{'s' if t > 1 else ''}, {total} in all)"
        if isinstance(results[appended], Raised):
            raised = results[appended]
            raise Fail(
                f"append {step} ({t} position{'s' if t > 1 else ''} after {total - t}) "
                f"raised {raised.type}: {raised.message}"
            )
        for name, part in (("keys", "k"), ("values", "v")):
            got = tensor(results[state][name], f"cache.{name} {where}")
            expected = (B, HKV, total, D)
            require_shape(got, expected, f"cache.{name} {where}", _shape_hint(got, expected))
            divergence = first_divergence(
                [got], [seq[part][:, :, :total]], TOLERANCE[torch.float32]
            )
            if divergence:
                raise Fail(
                    f"cache.{name} {where}: row {divergence.row}, head {divergence.head}, "
                    f"time {divergence.position} is not what was appended there (max abs "
                    f"error {divergence.max_abs:.2e}). Likely mistake: what append keeps of "
                    "the cache, and where it writes"
                )
        lengths = tensor(results[state]["lengths"], f"cache.lengths {where}")
        if lengths.dtype != torch.int64 or tuple(lengths.shape) != (B,):
            raise Fail(
                f"cache.lengths {where} is {str(lengths.dtype).removeprefix('torch.')} "
                f"{list(lengths.shape)}, expected int64 [{B}] (one length per row)"
            )
        if lengths.tolist() != [total] * B:
            raise Fail(f"cache.lengths {where} is {lengths.tolist()}, expected {[total] * B}")
    return (
        f"appends of {', '.join(map(str, APPENDS))} positions: keys and values grew along "
        "time holding what was appended, lengths int64 [B] right after each"
    )


def grade_hidden(candidate: Candidate) -> str:
    for seed in hidden_cases.seeds(HIDDEN_SEEDS):
        g = cases.generator(seed)
        b, h, d = cases.randint(g, 1, 4), cases.randint(g, 1, 4), cases.choice(g, (4, 8, 16))
        appends = cases.chunks(g, cases.randint(g, 20, 50), 9)
        _check_chunked(
            candidate,
            g,
            seed,
            (b, h, d),
            appends,
            f"{hidden_cases.shape(b, h, d, 'kv head')}, {len(appends)} appends of 1 to "
            "9 positions, every other one non-contiguous",
        )
    g = cases.generator(hidden_cases.seed(LONG_SEED))
    _check_chunked(
        candidate,
        g,
        hidden_cases.seed(LONG_SEED),
        (2, 2, 4),
        LONG_APPENDS,
        f"a long cache: {sum(LONG_APPENDS)} positions, appends of up to {max(LONG_APPENDS)}",
    )
    return (
        f"{len(HIDDEN_SEEDS) + 1} seeded cases (random shapes and chunk sizes, non-contiguous "
        f"inputs, {sum(LONG_APPENDS)} positions): keys, values and lengths right after every "
        "append"
    )


def _check_chunked(
    candidate: Candidate,
    g: torch.Generator,
    seed: int,
    shape: tuple[int, int, int],
    appends,
    what: str,
) -> None:
    """Append a sequence of `shape` (batch, kv_heads, head_dim) in chunks of `appends`
    positions, every other chunk non-contiguous; Fail unless keys, values and lengths are right
    after each."""
    case = hidden_cases.name(seed, what)
    b, h, d = shape
    seq = cases.sequence(g, b, h, h, sum(appends), d)
    plan = Plan()
    plan.new("c")
    states, total = [], 0
    for i, t in enumerate(appends):
        k, v = seq["k"][:, :, total : total + t], seq["v"][:, :, total : total + t]
        if i % 2:
            k, v = {"noncontiguous": k}, {"noncontiguous": v}
        plan.append("c", k, v)
        total += t
        states.append(plan.state("c"))
    results = hidden_cases.run(candidate, plan, case)

    total = 0
    for i, (t, index) in enumerate(zip(appends, states), start=1):
        total += t
        where = (
            f"{case}: after append {i} ({t} position{'s' if t > 1 else ''} into a cache "
            f"holding {total - t}{', sent non-contiguous' if i % 2 == 0 else ''})"
        )
        for attr, part in (("keys", "k"), ("values", "v")):
            got = tensor(results[index][attr], f"{where}, cache.{attr}")
            require_shape(got, (b, h, total, d), f"{where}, cache.{attr}")
            divergence = first_divergence([got], [seq[part][:, :, :total]], TOL)
            if divergence:
                raise Fail(
                    f"{where}: cache.{attr} at row {divergence.row}, head "
                    f"{divergence.head}, time {divergence.position} is not what was "
                    "appended there. Likely mistake: how append reads its input (a "
                    "non-contiguous layout)"
                )
        lengths = tensor(results[index]["lengths"], f"{where}, cache.lengths")
        if lengths.dtype != torch.int64 or lengths.tolist() != [total] * b:
            raise Fail(
                f"{where}: cache.lengths is not int64 [B] counting the {total} positions "
                "appended so far"
            )


def _shape_hint(got: torch.Tensor, expected: tuple[int, ...]) -> str:
    """Which dimension went wrong, when `got` is not `expected` ([B, Hkv, T, D])."""
    if got.dim() != 4:
        return ": keys and values are 4-d, [batch, kv_heads, time, head_dim]"
    if tuple(got.shape) == (expected[0], expected[2], expected[1], expected[3]):
        return (
            ": that is [batch, time, kv_heads, head_dim]; the layout is "
            "[batch, kv_heads, time, head_dim]"
        )
    wrong = [d for d in (0, 1, 3) if got.shape[d] != expected[d]]
    if wrong and got.shape[wrong[0]] > expected[wrong[0]] and got.shape[2] < expected[2]:
        return (
            f". Likely mistake: which dimension append grows (dim {wrong[0]}, "
            f"{DIMS[wrong[0]]}, grew; time did not)"
        )
    if wrong:
        return (
            f". Likely mistake: which dimension append grows (dim {wrong[0]}, "
            f"{DIMS[wrong[0]]}, changed)"
        )
    if got.shape[2] > expected[2]:
        return (
            ". Likely mistake: what keys and values expose (their time dimension is longer "
            "than the positions appended)"
        )
    return ". Likely mistake: what append keeps of the cache (appended positions are missing)"
