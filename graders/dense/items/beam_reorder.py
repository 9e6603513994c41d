"""beam-reorder: cached beam search equals uncached beam search, every layer reordered.

Public: two parts, both against the judge's float64 answers over whole sequences:

- Fixed beam indices, chosen here, on two caches (one per layer, append and attend with inputs
  of their own), so neither search ties nor RoPE can blur the verdict. Rows of different lengths
  (counts 0/1) are reordered with duplicates ([2, 0, 0]), twice in a row (composed), expanded
  from one row to three and shrunk to two. After every step each active row's output must equal
  full attention over that row's own history, and at the end `lengths` must be the reordered
  ones. This catches a reorder of keys only, or of keys and values but not lengths (rows of
  equal length hide that), a scatter (old row j to row beam_idx[j]) where a gather is meant, a
  copy in place that overwrites a row still to be read, and one that assumes B' == B.
- Long caches: 1,100 positions in three rows grown by chunks of hundreds and by single tokens,
  then reordered by a permutation and by duplicates; 1,050 positions in two rows, expanded to
  three rows and shrunk to two (B' != B); a step after each reorder. (No reorder here gives one
  row to every beam: that is the hidden cases' question below.) A
  cache that keeps its old positions apart from the newest (fixed segments, a quantized prefix
  and a residual, as transformers' QuantizedCache) must reorder all of them: one that reorders
  only its newest part passes every short schedule, since no short cache has an old part.
- A beam search (3 beams, 6 steps) through a 2-layer decoder, run in the worker by trusted code
  (graders/worker/beam_search.py) with the candidate's decode_step and reorder on every layer. The
  judge follows the search's choices with its own uncached forwards (graders/dense/decoder.py): at
  each step every chosen continuation's score must match, and the chosen ones must be a top 3
  of the judge's scores up to the tolerance (a near-tie may break either way in float32;
  elsewhere the tokens must be the same). The first choice expands 1 row to 3 with duplicate
  indices; later ones reorder the beams.

Hidden: longer random schedules, with a row expanded to every beam while the storage has room
to spare. The public schedules expand one row to three right when the next append must grow the
storage anyway, and so does the beam search (a 4-token prompt fills 4 slots); so a reorder that
expands a single row as a view (`expand`, no copy: every beam the same memory) passes them: the
growth copies the rows apart before anything is written. Each seeded schedule, checked as the
public ones are:
- three steps first (a doubling cache then has a free slot), then one row expanded to 3 or 4
  beams and a step that writes into every beam in place;
- then a dozen random events: steps with random counts 0/1 (never all 0) and reorders with
  random indices, duplicates and B' from 1 to 4 (one schedule reorders twice in a row, the other
  collapses to a single beam and expands it again);
- a long schedule: 1,000 to 1,300 positions from B=1 or 2, grown by chunks of up to 300
  positions and single-token steps, then a permutation of the rows and random reorders with
  B' from 1 to 4 and steps, as above.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from graders.shared import cases, hidden_cases, reference

from graders.dense import decoder
from graders.judge.candidate import Candidate
from graders.shared.compare import TOLERANCE, close, require_close, require_shape
from graders.shared.plans import Fail, Plan, tensor

ITEM = "beam-reorder"

VOCAB, D_MODEL, HEADS, HEAD_DIM, LAYERS, D_FF, BASE = 20, 32, 2, 16, 2, 64, 10000.0
BEAMS, STEPS, SEARCH_SEED = 3, 6, 10
TOL = TOLERANCE[torch.float32]


class Schedule(NamedTuple):
    """Steps and reorders on two caches, from `batch` rows: events ("step", counts) (one token,
    counts 0/1 per row), ("chunk", t) (t positions in every row) or ("reorder", beam_idx); every
    step's inputs drawn from `seed`."""

    seed: int
    name: str
    batch: int
    events: list


SCHEDULES = [
    Schedule(
        110,
        "ragged rows reordered with duplicates, then two reorders in a row",
        3,
        [
            ("step", (1, 1, 1)),
            ("step", (1, 0, 1)),
            ("step", (1, 1, 0)),
            ("reorder", [2, 0, 0]),
            ("step", (1, 1, 1)),
            ("reorder", [1, 2, 0]),
            ("reorder", [2, 2, 1]),
            ("step", (1, 1, 1)),
            ("step", (0, 1, 1)),
        ],
    ),
    Schedule(
        111,
        "one row expanded to three (B' != B), then shrunk to two",
        1,
        [
            ("step", (1,)),
            ("step", (1,)),
            ("reorder", [0, 0, 0]),
            ("step", (1, 0, 1)),
            ("reorder", [2, 1]),
            ("step", (1, 1)),
            ("reorder", [1, 1, 0]),
            ("step", (1, 1, 1)),
        ],
    ),
    Schedule(
        112,
        "a 1,100-position cache grown by chunks and single tokens, then reordered",
        3,
        [
            ("chunk", 300),
            ("step", (1, 1, 1)),
            ("step", (1, 1, 1)),
            ("chunk", 500),
            ("step", (1, 0, 1)),
            ("chunk", 297),
            ("step", (1, 1, 1)),
            ("reorder", [2, 0, 1]),
            ("step", (1, 1, 1)),
            ("reorder", [1, 1, 0]),
            ("step", (1, 1, 1)),
        ],
    ),
    Schedule(
        113,
        "a 1,050-position cache grown by chunks and single tokens, expanded to three "
        "rows (B' != B), then shrunk to two",
        2,
        [
            ("chunk", 600),
            ("step", (1, 1)),
            ("chunk", 448),
            ("step", (1, 0)),
            ("reorder", [0, 1, 0]),
            ("step", (1, 0, 1)),
            ("reorder", [2, 0]),
            ("step", (1, 1)),
        ],
    ),
]
HIDDEN_SEEDS = [1400 + i for i in range(2)]
LONG_SEED = 1420


def grade(candidate: Candidate) -> str:
    steps = sum(_decode_schedule(candidate, schedule) for schedule in SCHEDULES)
    _beam_search(candidate)
    return (
        f"fixed beam indices: {steps} steps on {LAYERS} caches equal full attention; "
        f"beam search ({BEAMS} beams, {STEPS} steps, {LAYERS} layers) made the uncached "
        f"search's choices, scores within {TOL}"
    )


def grade_hidden(candidate: Candidate) -> str:
    steps = 0
    schedules = [_hidden_schedule(seed) for seed in hidden_cases.seeds(HIDDEN_SEEDS)]
    for schedule in [*schedules, _long_schedule(hidden_cases.seed(LONG_SEED))]:
        with hidden_cases.labelled(schedule.name):
            steps += _decode_schedule(candidate, schedule)
    return (
        f"{len(HIDDEN_SEEDS) + 1} seeded schedules, {steps} steps, one of them over more "
        "than 1,000 positions: after expansions of one row, collapses and random reorders, "
        "every row equals attention over its own history"
    )


def _hidden_schedule(seed: int) -> Schedule:
    """Three steps, one row expanded to 3 or 4 beams and a step, then 12 random steps and
    reorders, then a step of every row."""
    g = cases.generator(seed)
    batch = cases.randint(g, 1, 2)
    events = [("step", (1,) * batch)] * 3
    beams = cases.randint(g, 3, 4)
    events += [("reorder", [cases.randint(g, 0, batch - 1)] * beams), ("step", (1,) * beams)]
    rows = beams
    for _ in range(12):
        if cases.randint(g, 0, 2):
            counts = [cases.randint(g, 0, 1) for _ in range(rows)]
            counts[cases.randint(g, 0, rows - 1)] = 1
            events.append(("step", tuple(counts)))
        else:
            new_rows = cases.randint(g, 1, 4)
            events.append(("reorder", [cases.randint(g, 0, rows - 1) for _ in range(new_rows)]))
            rows = new_rows
    events.append(("step", (1,) * rows))
    name = hidden_cases.name(
        seed,
        f"{len(events)} events from B={batch}: one row expanded to "
        "every beam, then random steps and reorders",
    )
    return Schedule(seed, name, batch, events)


def _long_schedule(seed: int) -> Schedule:
    """1,000 to 1,300 positions from B=1 or 2 by chunks of up to 300 and single-token steps,
    then a permutation (B=2) or an expansion (B=1), and 8 random steps and reorders."""
    g = cases.generator(seed)
    batch, target = cases.randint(g, 1, 2), cases.randint(g, 1000, 1300)
    events, total = [], 0
    while total < target:
        t = cases.randint(g, 1, 300) if cases.randint(g, 0, 1) else 1
        events.append(("chunk", t) if t > 1 else ("step", (1,) * batch))
        total += t
    first = [1, 0] if batch == 2 else [0] * cases.randint(g, 2, 4)
    events += [("reorder", first), ("step", (1,) * len(first))]
    rows = len(first)
    for _ in range(8):
        if cases.randint(g, 0, 1):
            events.append(("step", (1,) * rows))
        else:
            new_rows = cases.randint(g, 1, 4)
            events.append(("reorder", [cases.randint(g, 0, rows - 1) for _ in range(new_rows)]))
            rows = new_rows
    events.append(("step", (1,) * rows))
    name = hidden_cases.name(
        seed,
        f"a long cache, {total} positions from B={batch} by chunks and "
        "single tokens, then reordered (B' != B)",
    )
    return Schedule(seed, name, batch, events)


def _decode_schedule(candidate: Candidate, schedule: Schedule) -> int:
    """Run `schedule` on LAYERS caches; Fail unless the final lengths are the reordered ones and
    every active row's output equals attention over its own history after every step. Returns
    the number of steps."""
    plan, history, reads = _plan(schedule)
    states = [plan.state(f"c{n}") for n in range(LAYERS)]
    results = candidate.run(plan)

    for n, state in enumerate(states):
        want = [h.shape[2] for h in history[n]]
        got = tensor(results[state]["lengths"], f"cache.lengths of cache {n}").tolist()
        if got != want:
            raise Fail(
                f"{schedule.name}: at the end, cache {n}'s lengths are {got}, expected "
                f"{want}: reorder must move lengths with their rows (row j = old row "
                "beam_idx[j])"
            )
    for read in reads:
        got = tensor(results[read.index], f"attend's output at step {read.step}")
        require_shape(got, tuple(read.expected.shape), f"attend's output at step {read.step}")
        mask = read.active[:, None, None, None]
        require_close(
            [got.double().where(mask, 0.0)],
            [read.expected.where(mask, 0.0)],
            TOL,
            case=f"{schedule.name}: cache {read.cache}, {read.after}, against attention "
            "over each row's own history (new row j must continue old row beam_idx[j] "
            "in keys, values and lengths alike)",
            first_step=read.step,
        )
    return len(reads) // LAYERS


class Read(NamedTuple):
    """One attend of a schedule: its index, cache, step, the last reorder before it, the rows
    that took a token ([B] bool) and the judge's answer [B, H, 1, D]."""

    index: int
    cache: int
    step: int
    after: str
    active: torch.Tensor
    expected: torch.Tensor


def _plan(schedule: Schedule) -> tuple[Plan, list, list[Read]]:
    """The schedule as a plan on caches c0, c1, ...; each cache's rows' histories at the end
    ([2, H, T, D] per row: keys and values) and every attend to check."""
    g, batch = cases.generator(schedule.seed), schedule.batch
    history = [[torch.zeros(2, HEADS, 0, HEAD_DIM) for _ in range(batch)] for _ in range(LAYERS)]
    plan, reads, last_reorder = Plan(), [], "before any reorder"
    for n in range(LAYERS):
        plan.new(f"c{n}")
    for kind, arg in schedule.events:
        if kind == "reorder":
            last_reorder = f"after reorder(cache, {arg})"
            for n in range(LAYERS):
                plan.reorder(f"c{n}", torch.tensor(arg))
                history[n] = [history[n][i] for i in arg]
            continue
        t, counts = (arg, None) if kind == "chunk" else (1, cases.counts(*arg))
        arg = (1,) * len(history[0]) if kind == "chunk" else arg
        active = torch.tensor(arg, dtype=torch.bool)
        for n in range(LAYERS):
            new = cases.sequence(g, len(arg), HEADS, HEADS, t, HEAD_DIM)
            plan.append(f"c{n}", new["k"], new["v"], counts)
            q = new["q"][:, :, -1:]  # [B, H, 1, D]: the newest position's query
            index = plan.attend(f"c{n}", q)
            kv = torch.stack((new["k"], new["v"]), dim=1)  # [B, 2, H, t, D]
            history[n] = [
                torch.cat((h, kv[b]), dim=2) if arg[b] else h for b, h in enumerate(history[n])
            ]
            want = torch.cat([_newest(q[b : b + 1], h) for b, h in enumerate(history[n])])
            reads.append(Read(index, n, len(reads) // LAYERS, last_reorder, active, want))
    return plan, history, reads


def _newest(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """Full attention of one query [1, H, 1, D] over one row's history kv [2, H, T, D]: the
    newest row of a causal forward, which sees every position."""
    return reference.causal_attention(q, kv[0:1], kv[1:2])


def _beam_search(candidate: Candidate) -> None:
    g = cases.generator(SEARCH_SEED)
    weights = decoder.weights(g, VOCAB, D_MODEL, HEADS, HEADS, HEAD_DIM, LAYERS, D_FF)
    prompt = torch.randint(VOCAB, (4,), generator=g)
    plan = Plan()
    index = plan.beam_search(weights, prompt, BEAMS, STEPS, HEADS, HEADS, HEAD_DIM, BASE)
    found = candidate.run(plan)[index]
    found = {
        k: tensor(found[k], f"the beam search's {k}") for k in ("tokens", "beam_idx", "scores")
    }
    for k, value in found.items():
        require_shape(value, (STEPS, BEAMS), f"the beam search's {k}")
    sequences, scores = prompt[None], torch.zeros(1, dtype=torch.float64)
    for step in range(STEPS):
        when = (
            "the first choice, before any reorder"
            if step == 0
            else f"after reorder(cache, {found['beam_idx'][step - 1].tolist()}) on every layer"
        )
        log_probs = decoder.log_probs(weights, sequences, HEADS, HEADS, BASE)  # [beams, vocab]
        table = (scores[:, None] + log_probs).flatten()
        beam_idx, tokens = found["beam_idx"][step].long(), found["tokens"][step].long()
        picked = beam_idx * VOCAB + tokens
        in_range = (0 <= tokens) & (tokens < VOCAB) & (0 <= beam_idx) & (beam_idx < len(sequences))
        if not in_range.all() or picked.unique().numel() < BEAMS:
            raise Fail(
                f"beam search, step {step}: beams {beam_idx.tolist()} with tokens "
                f"{tokens.tolist()} are not {BEAMS} distinct continuations"
            )
        want, got = table[picked], found["scores"][step].double()
        wrong = (~close(got, want, TOL)).nonzero()
        if len(wrong):
            j = int(wrong[0])
            hint = (
                "decode_step is wrong before any reorder (see rope-absolute)"
                if step == 0
                else "is every layer's cache reordered, keys, values and lengths?"
            )
            raise Fail(
                f"beam search, step {step} ({when}): new beam {j} (old beam "
                f"{int(beam_idx[j])} + token {int(tokens[j])}) scores {float(got[j]):.5f}, "
                f"the uncached decoder {float(want[j]):.5f}: {hint}"
            )
        kth = table.topk(BEAMS).values[-1]
        if want.min() < kth - (TOL.atol + TOL.rtol * kth.abs()):
            raise Fail(
                f"beam search, step {step} ({when}): chose a continuation scoring "
                f"{float(want.min()):.5f} in the uncached decoder, below its top {BEAMS} "
                f"(the {BEAMS}th scores {float(kth):.5f})"
            )
        sequences = torch.cat((sequences[beam_idx], tokens[:, None]), dim=1)
        scores = want
