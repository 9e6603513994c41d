"""rope-fork-offset: a forked cache continues at its absolute positions, independently.

Public: two rows decode 5 steps through decode_step, row 1 skipping one (lengths 5 and 4, in a
KVCache(capacity=16), so later writes land in storage that already exists). Then
`fork(cache)`, and the original and the fork take turns for 4 steps with different tokens.
Every step of each branch must equal graders.shared.reference.attention_layer (float64, RoPE) over that
branch's whole sequence; at the end each branch's lengths, keys (rotated at their absolute
positions) and values must be its own. Taking turns means every write of one branch comes
before a read of the other, so this catches a fork that shares storage (the same tensors or the
same object), one that forgets lengths or restarts at position 0, and one that shares the
lengths tensor with an append that grows it in place.

Hidden, seeded (the public case forks once, a cache that holds positions), with every
decode_step output of every branch compared with a full float64 RoPE forward over that branch's
own sequence, and each branch's lengths checked at the end:
- a cache forked before anything was appended, then the two decoding in turns with different
  tokens: a fork that, with nothing to copy, hands back the same cache (or shares the storage
  it will allocate) mixes the two sequences;
- a chain: the original decodes with ragged counts in a `KVCache()` that grows as it goes, is
  forked, both take turns; the fork is forked in turn, the fork of the fork releases a row at
  once (parallel samples of one prompt, one of them ended), and all three take turns. Each fork
  must continue at the copied lengths, in storage of its own, however it got them, and a release
  on one cache ends that row in it alone: a fork that shares its source's lengths tensor with a
  `release` that zeroes it in place ends the row in both;
- the same chain on a long cache: 1,000 to 1,200 positions appended in chunks of up to 300
  (keys rotated by the judge at their positions; a rope_base of 256, whose frequencies float32
  holds exactly), then the ragged decode steps, the forks, the release and the turns. The released row's new sequence writes over the first positions of
  storage: a cache that keeps old positions apart (segments, a quantized prefix) and copies only
  its newest part on a fork shares the rest, and the write shows in the other branches.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases, reference
from graders.shared.compare import TOLERANCE, UNWRITTEN_SLOTS, first_divergence, require_shape
from graders.shared.plans import Fail, Plan, tensor

ITEM = "rope-fork-offset"

B, D_MODEL, HEADS, HEAD_DIM, BASE, CAPACITY = 2, 32, 2, 16, 10000.0, 16
PREFIX = [(1, 1), (1, 0), (1, 1), (1, 1), (1, 1)]  # counts before the fork: lengths 5 and 4
AFTER = 4  # steps of each branch after the fork
TOL = TOLERANCE[torch.float32]

# The hidden cases: events ("fork", src, dst), ("step", branch, counts) or ("release", branch,
# row), on a smaller layer.
HIDDEN_D_MODEL, HIDDEN_HEAD_DIM, HIDDEN_T = 16, 8, 12
EMPTY_SEED, CHAIN_SEED, LONG_SEED = 1600, 1610, 1620
LONG_POSITIONS, LONG_CHUNK = (1000, 1200), 300  # the long chain's prefix, appended in chunks
# The long chain's rope_base: 256 ** (-2i / 8) is a power of two, so every frequency, and every
# angle position * frequency, is exact in float32. With 10000, apply_rope's float32 frequencies
# are off by a few ulps, which at positions past 1,000 moved every correct design's outputs up
# to 0.95 of the tolerance (seed 42, all four designs alike); with 256, 0.02.
LONG_BASE = 256.0
EMPTY = [("fork", "original", "fork")] + [
    ("step", branch, (1, 1)) for _ in range(4) for branch in ("original", "fork")
]
CHAIN = (
    [("step", "original", counts) for counts in ((1, 1), (0, 1), (1, 1), (1, 0))]
    + [("fork", "original", "fork")]
    + [("step", b, (1, 1)) for _ in range(3) for b in ("original", "fork")]
    + [("fork", "fork", "fork of the fork"), ("release", "fork of the fork", 0)]
    + [("step", b, (1, 1)) for _ in range(3) for b in ("original", "fork", "fork of the fork")]
)


def grade(candidate: Candidate) -> str:
    g = cases.generator(130)
    weights = cases.layer_weights(g, D_MODEL, HEADS, HEADS, HEAD_DIM)
    at_fork = torch.tensor(PREFIX).sum(0)  # [B]
    T = int(at_fork.max()) + AFTER
    x = {"original": cases.randn(g, B, T, D_MODEL)}
    x["fork"] = x["original"].clone()
    for b in range(B):  # the fork shares each row's prefix, then takes its own tokens
        x["fork"][b, int(at_fork[b]) :] = cases.randn(g, T - int(at_fork[b]), D_MODEL)
    full = {
        branch: reference.attention_layer(seq, weights, HEADS, HEADS, BASE)
        for branch, seq in x.items()
    }

    plan = Plan()
    plan.layer("L", weights, HEADS, HEADS, HEAD_DIM, BASE)
    plan.new("original", capacity=CAPACITY)
    rows, lengths, steps = torch.arange(B), torch.zeros(B, dtype=torch.int64), []
    for counts in PREFIX:
        index = plan.decode_step(
            "L", "original", x["original"][rows, lengths][:, None], cases.counts(*counts)
        )
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
        divergence = first_divergence(
            [got.double().where(mask, 0.0)[:, None]], [want.where(mask, 0.0)[:, None]], TOL
        )
        if divergence:
            raise Fail(
                f"the {branch}, {when}: decode_step's output at row {divergence.row} "
                f"(position {int(positions[divergence.row])}) differs from a full forward "
                f"over the {branch}'s own sequence: {divergence.error(TOL)}"
                + (
                    f": {UNWRITTEN_SLOTS}"
                    if divergence.nonfinite
                    else f". {_HINT['before' if j is None else branch]}"
                )
            )
    for branch, state in states.items():
        _check_state(branch, results[state], full[branch], at_fork + AFTER)
    return (
        f"fork after 5 ragged steps, then {AFTER} alternating steps on each branch: both equal "
        f"full RoPE forwards (within {TOL}), and each cache holds only its own tokens"
    )


def grade_hidden(candidate: Candidate) -> str:
    _check_events(
        candidate,
        hidden_cases.seed(EMPTY_SEED),
        "a cache forked while empty, then both decoding in turns",
        EMPTY,
    )
    _check_events(
        candidate,
        hidden_cases.seed(CHAIN_SEED),
        "ragged steps, a fork, turns, a fork of the fork that releases a row, turns of all three",
        CHAIN,
    )
    _check_events(
        candidate,
        hidden_cases.seed(LONG_SEED),
        "the same chain after a long prefix appended in chunks",
        CHAIN,
        long=True,
    )
    return (
        f"a fork of an empty cache and a fork of a fork that releases a row, on a short "
        f"cache and after a prefix of {LONG_POSITIONS[0]} to {LONG_POSITIONS[1]} positions: "
        f"every branch equals a full RoPE forward over its own sequence (within {TOL}) and "
        "keeps its own lengths"
    )


_HINT = {
    "before": "decode_step is already off before any fork (ragged rows' positions: see rope-absolute)",
    "original": "The fork's writes must never show in the original (does the fork share storage?)",
    "fork": "The fork continues each row at its copied length, in storage of its own",
}


def _check_state(branch: str, state: dict, full: dict, lengths: torch.Tensor) -> None:
    got = tensor(state["lengths"], f"the {branch}'s cache.lengths").tolist()
    if got != lengths.tolist():
        raise Fail(
            f"after {AFTER} steps on each branch, the {branch}'s cache.lengths is {got}, "
            f"expected {lengths.tolist()}: each branch continues from the copied lengths"
        )
    T = int(lengths.max())
    mask = (torch.arange(T) < lengths[:, None])[:, None, :, None]  # [B, 1, T, 1]
    for name, want in (("keys", full["k"]), ("values", full["v"])):
        value = tensor(state[name], f"the {branch}'s cache.{name}")
        value = value[:, :, :T] if value.dim() == 4 else value  # its time size: length-vs-capacity
        require_shape(value, (B, HEADS, T, HEAD_DIM), f"the {branch}'s cache.{name}[:, :, :{T}]")
        divergence = first_divergence(
            [value.double().where(mask, 0.0)], [want[:, :, :T].where(mask, 0.0)], TOL
        )
        if divergence:
            raise Fail(
                f"at the end, the {branch}'s cache.{name} differ from its own sequence's "
                f"{'keys rotated at their absolute positions' if name == 'keys' else name} "
                f"at row {divergence.row}, position {divergence.position}: max abs error "
                f"{divergence.max_abs:.2e} (tolerance {TOL})"
            )


class Step(NamedTuple):
    """One decode_step of a hidden case: its branch, its number on that branch, its index, each
    row's position and whether the row took a token ([B] each), and the tokens it reads (a key
    of `x` in `_play`: the branch's, or the ones it took when it released a row)."""

    branch: str
    number: int
    index: int
    positions: torch.Tensor
    active: torch.Tensor
    tokens: str


def _check_events(
    candidate: Candidate, seed: int, what: str, events: list, long: bool = False
) -> None:
    """Play `events` (forks, steps, releases); Fail unless every branch's outputs equal a full
    forward over its own sequences and its lengths are its own at the end. When `long`, the
    original first takes a prefix of LONG_POSITIONS positions by appends of up to LONG_CHUNK:
    the keys (rotated at their positions) and values of its first tokens, as decode_step would
    have cached them."""
    g = cases.generator(seed)
    prefix = cases.chunks(g, cases.randint(g, *LONG_POSITIONS), LONG_CHUNK) if long else []
    case = hidden_cases.name(
        seed, what.replace("a long prefix", f"a {sum(prefix)}-position prefix")
    )
    weights = cases.layer_weights(g, HIDDEN_D_MODEL, HEADS, HEADS, HIDDEN_HEAD_DIM)
    T = HIDDEN_T + sum(prefix)
    x = {"original": cases.randn(g, B, T, HIDDEN_D_MODEL)}  # each branch's tokens
    plan = Plan()
    base = LONG_BASE if long else BASE
    plan.layer("L", weights, HEADS, HEADS, HIDDEN_HEAD_DIM, base)
    plan.new("original")
    if prefix:
        cached = reference.attention_layer(
            x["original"][:, : sum(prefix)], weights, HEADS, HEADS, base
        )  # k, v [B, H, sum(prefix), D], float64
        start = 0
        for t in prefix:
            plan.append(
                "original",
                cached["k"][:, :, start : start + t].float(),
                cached["v"][:, :, start : start + t].float(),
            )
            start += t
    steps, lengths = _play(plan, g, events, x, sum(prefix))
    states = {branch: plan.state(branch) for branch in lengths}
    results = hidden_cases.run(candidate, plan, case)

    full = {
        tokens: reference.attention_layer(seq, weights, HEADS, HEADS, base)["out"]
        for tokens, seq in x.items()
    }
    rows = torch.arange(B)
    for branch, number, index, positions, active, tokens in steps:
        where = f"{case}: the {branch}'s decode step {number}"
        got = tensor(results[index]["output"], f"{where}, output")
        require_shape(got, (B, 1, HIDDEN_D_MODEL), f"{where}, output")
        mask = active.bool()[:, None, None]
        want = full[tokens][rows, positions][:, None]
        divergence = first_divergence(
            [got.double().where(mask, 0.0)[:, None]], [want.where(mask, 0.0)[:, None]], TOL
        )
        if divergence:
            raise Fail(
                f"{where}: the output at row {divergence.row} differs from a full forward "
                f"over the {branch}'s own sequence ({divergence.error(TOL)}): "
                + (
                    UNWRITTEN_SLOTS
                    if divergence.nonfinite
                    else "each cache continues its "
                    "rows at their own lengths, which only its own appends and releases "
                    "change, in storage no other cache writes"
                )
            )
    for branch, state in states.items():
        got = tensor(results[state]["lengths"], f"{case}: the {branch}'s cache.lengths").tolist()
        if got != lengths[branch].tolist():
            raise Fail(
                f"{case}: at the end, the {branch}'s cache.lengths are not its own: a fork "
                "copies the lengths, then each cache counts its own appends and releases"
            )


def _play(
    plan: Plan, g: torch.Generator, events: list, x: dict[str, torch.Tensor], prefix: int = 0
) -> tuple[list[Step], dict[str, torch.Tensor]]:
    """The events into `plan`, on an original that holds `prefix` positions in every row. A fork
    shares each row's prefix, then takes tokens of its own; a released row starts a new sequence
    of its own at position 0. Each branch's tokens are in `x` ([B, T, d_model], named by the
    branch; after a release, by the branch and the event). Returns the steps and each branch's
    lengths."""
    lengths = {"original": torch.full((B,), prefix, dtype=torch.int64)}
    T = x["original"].shape[1]
    tokens = {"original": "original"}  # the key of each branch's tokens in x
    rows, steps = torch.arange(B), []
    for event, (kind, branch, arg) in enumerate(events):
        if kind == "fork":
            plan.fork(branch, arg)
            lengths[arg], tokens[arg] = lengths[branch].clone(), arg
            x[arg] = x[tokens[branch]].clone()
            for b in range(B):
                n = int(lengths[arg][b])
                x[arg][b, n:] = cases.randn(g, T - n, HIDDEN_D_MODEL)
        elif kind == "release":
            plan.release(branch, arg)
            lengths[branch] = lengths[branch].clone()
            lengths[branch][arg] = 0
            released = f"{branch} after event {event}"  # each release, tokens of its own
            x[released] = x[tokens[branch]].clone()
            x[released][arg] = cases.randn(g, T, HIDDEN_D_MODEL)
            tokens[branch] = released
        else:
            counts = torch.tensor(arg)
            index = plan.decode_step(
                "L",
                branch,
                x[tokens[branch]][rows, lengths[branch]][:, None],
                None if all(arg) else counts,
            )
            number = sum(s.branch == branch for s in steps)
            steps.append(Step(branch, number, index, lengths[branch], counts, tokens[branch]))
            lengths[branch] = lengths[branch] + counts
    return steps, lengths
