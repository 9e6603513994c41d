"""sliding-window: KVCache(window=W) attends the last W positions, in W + t - 1 slots.

Mistral's convention: the query at absolute position p attends max(0, p - W + 1) .. p, in
attend, attend_chunk and decode_step alike, and RoPE stays at absolute positions. The cache
holds min(positions, W) positions after single tokens and up to W + t - 1 right after a chunk of
t (the chunk's first query still needs its W - 1 predecessors), and its storage never passes
W + t - 1 slots for the largest chunk t appended: a ring buffer, whose slots are out of time
order once it has wrapped, so `keys` must give them back oldest first. Every output is compared
with float64 attention restricted to the window (graders.dense.chunks); a failure names the
mistake it matches (a window one too wide or narrow, no window at all, a chunk seeing its own
future).

Public:
- W = 4, three rows: a ragged prompt of 5, 1 and 9 positions through counts, 10 single tokens
  each attended, chunks of 3 and 5 verified with attend_chunk, one token attended right after
  the chunk (it sees 4 of the 8 positions its row holds); keys, lengths, positions and capacity
  checked after the single tokens and after the chunk; then row 1 released and decoded again,
  then `reset` and a batch of two rows of another head layout;
- W = 1 (each query sees itself alone), single tokens and a chunk of 3;
- W = 64, larger than the run: equal to full causal attention;
- decode_step on a KVCache(window=3) for 24 steps over two rows: every step equals a float64
  RoPE forward restricted to the window, long after the wrap, so RoPE must rotate at positions,
  not at what the cache holds.

Hidden, seeded: a window of 1, a small one and one larger than the run, B 1-3, MHA, GQA or MQA;
W + 2 single tokens, then one that row 0 skips (counts 0: it still holds W), then ragged
appends, single tokens and chunks of 1-6 across the wrap, a release; every output, lengths and
capacity checked; and a decode_step run of 30-50 steps with W 2-5, row 1 skipping every fifth
step through counts.
"""

from __future__ import annotations

import torch

from graders.dense.chunks import TOL, Run, lengths_of, require_checks
from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases, reference
from graders.shared.compare import first_divergence, require_shape
from graders.shared.plans import Fail, Plan, Results, tensor

ITEM = "sliding-window"

HEAD_DIM, D_MODEL, BASE = 8, 32, 10000.0
DECODE_WINDOW, DECODE_STEPS = 3, 24
HIDDEN_SEEDS = (4400, 4410, 4420)
HIDDEN_DECODE_SEED = 4430


class Watch:
    """State snapshots of a run, each with what the contract says of it."""

    def __init__(self, run: Run):
        self.run, self.points = run, []

    def now(self, what: str, after_chunk: int = 1) -> None:
        """A snapshot; `after_chunk`: the t of the append just made (1 for single tokens)."""
        run = self.run
        seen = run.positions
        held = [min(p, run.window + after_chunk - 1) for p in seen]
        k, v = run.history()
        self.points.append(
            (run.state(), what, seen, held, run.window + run.largest_chunk - 1, k, v)
        )


def grade(candidate: Candidate) -> str:
    g = cases.generator(440)
    plan = Plan()
    run = Run(plan, g, 3, 2, 2, HEAD_DIM, window=4)
    watch = Watch(run)
    run.append([5, 1, 9])
    for step in range(10):
        run.append([1, 1, 1])
        run.attend(f"attend after single token {step}")
    watch.now("after 10 single tokens")
    run.chunk(3, "attend_chunk of a chunk of 3 across the wrap")
    run.chunk(5, "attend_chunk of a chunk of 5 across the wrap")
    watch.now("right after the chunk of 5", after_chunk=5)
    run.attend("attend right after the chunk of 5 (the newest query sees 4 of 8 held)")
    run.release(1)
    for step in range(6):
        run.append([1, 1, 1])
        run.attend(f"attend {step} after release(1)")
    watch.now("after release(1) and 6 tokens")
    after_reset = _reset_then(plan, g)
    results = candidate.run(plan)
    require_checks(results, run.checks, "W=4")
    _check_states(results, watch, "W=4")
    _check_after_reset(results, *after_reset)

    for window, t in ((1, 3), (64, 4)):
        plan = Plan()
        run = Run(plan, g, 2, 4, 2, HEAD_DIM, window=window)
        watch = Watch(run)
        run.append([3, 2])
        for step in range(5):
            run.append([1, 1])
            run.attend(f"attend after single token {step}")
        run.chunk(t, f"attend_chunk of a chunk of {t}")
        watch.now(f"right after the chunk of {t}", after_chunk=t)
        results = candidate.run(plan)
        require_checks(results, run.checks, f"W={window}")
        _check_states(results, watch, f"W={window}")

    _check_decode(
        candidate,
        cases.generator(441),
        DECODE_WINDOW,
        DECODE_STEPS,
        "decode_step, W=3",
        skips=False,
    )
    return (
        "windows of 4, 1 and 64 (larger than the run): single tokens and chunks across the "
        f"wrap over ragged rows equal attention over the last W positions (within {TOL}), "
        "keys in time order, storage within W + t - 1 slots, release and reset; decode_step "
        f"with RoPE at absolute positions for {DECODE_STEPS} steps at W=3"
    )


def grade_hidden(candidate: Candidate) -> str:
    for seed, window in zip(hidden_cases.seeds(HIDDEN_SEEDS), ("one", "small", "large")):
        g = cases.generator(seed)
        batch = cases.randint(g, 1, 3)
        hkv = cases.choice(g, (1, 2))
        hq = hkv * cases.choice(g, (1, 2))
        w = {"one": 1, "small": cases.randint(g, 2, 6), "large": 100}[window]
        case = hidden_cases.name(seed, f"W={w}, B={batch}, {hidden_cases.layout(hq, hkv)}")
        plan = Plan()
        run = Run(plan, g, batch, hq, hkv, HEAD_DIM, window=w)
        watch = Watch(run)
        run.append([cases.randint(g, 1, 9) for _ in range(batch)])
        for _ in range(w + 2):
            run.append([1] * batch)
        run.append([0] + [1] * (batch - 1))  # row 0 takes nothing: it keeps what it holds
        run.attend("attend after an append that row 0 skipped")
        for step in range(12):
            kind = cases.randint(g, 0, 2)
            if kind == 0:
                run.append([1] * batch)
                run.attend(f"attend after step {step}")
                watch.now(f"after step {step}")
            elif kind == 1:
                t = cases.randint(g, 1, 6)
                run.chunk(t, f"attend_chunk of {t} at step {step}")
                watch.now(f"right after the chunk of step {step}", after_chunk=t)
            else:
                run.append([cases.randint(g, 0, 1) for _ in range(batch)])
            if step == 6:
                run.release(batch - 1)
        results = hidden_cases.run(candidate, plan, case)
        require_checks(results, run.checks, case)
        _check_states(results, watch, case)
    g = cases.generator(hidden_cases.seed(HIDDEN_DECODE_SEED))
    w, steps = cases.randint(g, 2, 5), cases.randint(g, 30, 50)
    _check_decode(
        candidate,
        g,
        w,
        steps,
        hidden_cases.name(hidden_cases.seed(HIDDEN_DECODE_SEED), f"decode_step, W={w}"),
    )
    return "seeded windows of 1, a few and more than the run, chunks across the wrap, a release, and a long decode"


def _reset_then(plan: Plan, g: torch.Generator) -> tuple[int, torch.Tensor, int]:
    """`reset`, then two rows of 4/1 heads take 6 positions and attend (the window kept): the
    attend's index, the judge's answer and a state snapshot's index."""
    plan.reset("c")
    k, v = cases.randn(g, 2, 1, 6, HEAD_DIM), cases.randn(g, 2, 1, 6, HEAD_DIM)
    plan.append("c", k, v)
    q = cases.randn(g, 2, 4, 1, HEAD_DIM)
    want = reference.attention_at(q, k, v, torch.full((2, 1), 5), 4)
    return plan.attend("c", q), want, plan.state("c")


def _check_after_reset(results: Results, index: int, want: torch.Tensor, state: int) -> None:
    got = tensor(results[index], "W=4: attend after reset")
    require_shape(got, (2, 4, 1, HEAD_DIM), "W=4: attend after reset and a batch of 2 rows")
    if first_divergence([got.double()], [want], TOL):
        raise Fail(
            "W=4: after reset, a batch of 2 rows, 6 positions each: attend differs from "
            "attention over the last 4 (a reset keeps the window, forgets the rest)"
        )
    if lengths_of(results[state], "W=4: after reset") != [6, 6]:
        raise Fail(
            "W=4: after reset and a chunk of 6 positions, cache.lengths is not [6, 6] "
            "(right after a chunk of t a row holds min(positions, W + t - 1))"
        )


def _check_states(results: Results, watch: Watch, case: str) -> None:
    for state, what, seen, held, slots, k, v in watch.points:
        where = f"{case}, {what}"
        got = results[state]
        if lengths_of(got, where, "positions") != seen:
            raise Fail(
                f"{where}: cache.positions is {lengths_of(got, where, 'positions')}, "
                f"expected {seen}: the tokens each row has appended (a window does not "
                "lower it)"
            )
        if lengths_of(got, where) != held:
            raise Fail(
                f"{where}: cache.lengths is {lengths_of(got, where)}, expected {held}: "
                "the positions each row holds (min(positions, W) after single tokens, up "
                "to W + t - 1 right after a chunk of t)"
            )
        capacity = got["capacity"]
        if type(capacity) is not int or capacity > slots:
            raise Fail(
                f"{where}: cache.capacity is {capacity!r}, more than the W + t - 1 = {slots} "
                "slots a window needs (a ring buffer overwrites the oldest position)"
            )
        for name, history in (("keys", k), ("values", v)):
            value = tensor(got[name], f"{where}: cache.{name}")
            if value.dim() != 4 or value.shape[2] < max(held):
                raise Fail(
                    f"{where}: cache.{name} has shape {list(value.shape)}, expected "
                    f"[B, Hkv, {max(held)}, D]"
                )
            for b in range(len(held)):
                want = history[b, :, seen[b] - held[b] : seen[b]]  # [Hkv, held, D]
                if not torch.allclose(value[b, :, : held[b]].double(), want.double(), atol=1e-6):
                    raise Fail(
                        f"{where}: cache.{name}[{b}] are not the {held[b]} positions the row "
                        "holds in time order, oldest first. Likely mistake: a ring "
                        "buffer's slots given back in storage order (once it has wrapped, "
                        "the oldest position is not in slot 0)"
                    )


def _check_decode(
    candidate: Candidate, g: torch.Generator, window: int, steps: int, case: str, skips: bool = True
) -> None:
    """decode_step for `steps` steps on a KVCache(window) of two rows, row 1 skipping every
    fifth step when `skips`: each output against a float64 forward restricted to the window."""
    weights = cases.layer_weights(g, D_MODEL, 4, 2, HEAD_DIM)
    x = cases.randn(g, 2, steps, D_MODEL)
    plan = Plan()
    plan.layer("L", weights, 4, 2, HEAD_DIM, BASE)
    plan.new("c", window=window)
    lengths, checks = [0, 0], []
    for step in range(steps):
        counts = [1, int(step % 5 != 4 or not skips)]
        rows = torch.tensor(lengths)
        index = plan.decode_step(
            "L",
            "c",
            x[torch.arange(2), rows][:, None],
            None if all(counts) else cases.counts(*counts),
        )
        checks.append((index, list(lengths), counts))
        lengths = [n + c for n, c in zip(lengths, counts)]
    state = plan.state("c")
    results = hidden_cases.run(candidate, plan, case)
    capacity = results[state]["capacity"]
    if type(capacity) is not int or capacity > window:
        raise Fail(
            f"{case}: after {steps} single tokens, cache.capacity is {capacity!r}, more "
            f"than the W = {window} slots a window of single tokens needs (a ring buffer "
            "overwrites the oldest position)"
        )
    full = reference.attention_layer(x, weights, 4, 2, BASE, window=window)["out"]  # [B, T, d]
    for step, (index, at, counts) in enumerate(checks):
        got = tensor(results[index]["output"], f"{case}: decode_step {step}")
        require_shape(got, (2, 1, D_MODEL), f"{case}: decode_step {step}")
        for b in range(2):
            if counts[b] and first_divergence(
                [got[b : b + 1, None].double()], [full[b : b + 1, at[b]][:, None, None]], TOL
            ):
                raise Fail(
                    f"{case}: decode_step {step}, row {b} (position {at[b]}) differs from "
                    f"a forward restricted to the last {window} positions. Likely mistake: "
                    "RoPE at what the cache holds (lengths) rather than at positions, or "
                    "the window's edge"
                )
