"""finished-beams: rows appended with counts 0 stop growing and keep their outputs.

In a batch of beams or requests, a row that has finished (EOS) still sits in every later append,
with counts[b] == 0 and some padding in its slot of new_key. It must neither grow nor change:
its length stays, and attention with the same query gives the same answer as when it stopped.
Public: B=3, MHA; a 3-position prompt, then single-token steps in which row 1 stops after step 0 and
row 0 after step 2 while row 2 goes on. The padding of count-0 rows is NaN, so a row that stores
or reads it shows NaN. At every step cache.lengths is compared exactly, and every row's output
(each row's query is its newest real token's; a finished row keeps asking its last one) with the
float64 reference over that row's own positions. This catches counts 0 taken as 1 (the row grows
by the padding) and a write for the finished row that lands inside its valid prefix while its
length stays (say at lengths + counts - 1, its last real position).
The same through decode_step with counts 0/1 (finite padding tokens for finished rows): lengths
stay, a finished row's cached keys stay exactly as they were when it stopped, and every row's
cached values are those of its own tokens (values carry no RoPE, so positions are not judged here).

Hidden, seeded (the public cases finish two of three rows, one token per step, and always have a
row going on):
- 4 to 6 rows after a prompt; each row finishes at a random step; every step appends t = 1 to 4
  positions, all of them real for the rows still going, NaN padding for the finished ones;
- then a last append in which every row has counts 0 (a batch loop that runs one step after its
  last sequence ended): nothing may grow, and a cache that sizes its storage from the slots it is
  about to write, or takes the largest of them, has none to look at;
- the same through decode_step (finite padding tokens), rows finishing at random, ending with a
  step of counts all 0;
- a long cache: 1,000 to 1,200 positions in 3 or 4 rows by chunks of up to 300, then single
  tokens while two rows or more finish at random; then the finished rows are dropped by a
  reorder that also duplicates the first row still going (B' != B, as a beam search refills its
  beams), and every row takes three more tokens. A cache that keeps old positions apart
  (segments, a quantized prefix) must reorder all of them.
After every append lengths must be exact and every row's output, for its newest real token's
query, equal to the float64 reference over its own positions; after every decode_step lengths
must be exact and a finished row's cached keys exactly what they were when it stopped.
"""

from __future__ import annotations

import torch

from graders.shared import cases, hidden_cases, reference

from graders.dense import decode_loop
from graders.judge.candidate import Candidate
from graders.shared.compare import TOLERANCE, UNWRITTEN_SLOTS, first_divergence, require_shape
from graders.shared.plans import Fail, Plan, tensor

ITEM = "finished-beams"

B, H, D, PROMPT = 3, 2, 8, 3
STEPS = [(1, 1, 1), (1, 0, 1), (1, 0, 1), (0, 0, 1), (0, 0, 1), (0, 0, 1)]  # counts per step
DECODE_STEPS = [(1, 1, 1), (1, 1, 1), (1, 0, 1), (0, 0, 1), (0, 0, 1)]
D_MODEL, BASE = 16, 10000.0
TOL = TOLERANCE[torch.float32]

APPEND_SEED = 1500
DECODE_SEED = 1510
LONG_SEED = 1520
LONG_POSITIONS, LONG_CHUNK, LONG_STEPS = (1000, 1200), 300, 6
HIDDEN_STEPS = 8  # appends after the prompt, before the one in which every row has finished


def grade(candidate: Candidate) -> str:
    _check_append(candidate)
    _check_decode(candidate)
    return (
        f"rows with counts 0 kept their lengths and, with the same query, their outputs "
        f"(within {TOL} of the reference) over {len(STEPS)} steps while others went on; "
        "through decode_step too, with their cached keys unchanged"
    )


def grade_hidden(candidate: Candidate) -> str:
    _check_hidden_append(candidate)
    _check_hidden_decode(candidate)
    _check_hidden_long(candidate)
    return (
        f"rows finishing at random over {HIDDEN_STEPS} multi-position appends, then all of "
        f"them: lengths kept and outputs unchanged (within {TOL}); through decode_step too; "
        f"in a cache of over {LONG_POSITIONS[0]} positions, finished rows dropped by a "
        "reorder"
    )


def _check_append(candidate: Candidate) -> None:
    seq = cases.sequence(cases.generator(720), B, H, H, PROMPT + len(STEPS), D)
    full = reference.causal_attention(seq["q"], seq["k"], seq["v"])  # [B, H, T, D]
    rows, lengths = torch.arange(B), torch.full((B,), PROMPT)
    plan = Plan()
    plan.new("c")
    plan.append("c", seq["k"][:, :, :PROMPT], seq["v"][:, :, :PROMPT])
    steps = [(None, lengths, None, plan.attend("c", seq["q"][:, :, PROMPT - 1 : PROMPT]))]
    for counts in STEPS:
        lengths = lengths + torch.tensor(counts)
        # Row b's newest real position: its query's, and its key's if it grew. [B, H, 1, D] each:
        q, k, v = (seq[name][rows, :, lengths - 1][:, :, None] for name in "qkv")
        plan.append("c", cases.padded(k, counts), cases.padded(v, counts), cases.counts(*counts))
        steps.append((counts, lengths, plan.state("c"), plan.attend("c", q)))
    results = candidate.run(plan)

    for step, (counts, lengths, state, attended) in enumerate(steps):
        where = f"after step {step - 1} (counts {list(counts)})" if counts else "after the prompt"
        if state is not None:
            _require_lengths(results[state], lengths, counts, where)
        out = tensor(results[attended], f"attend's output {where}")
        require_shape(out, (B, H, 1, D), f"attend's output {where}")
        expected = full[rows, :, lengths - 1][:, :, None]
        divergence = first_divergence([out], [expected], TOL)
        if divergence is None:
            continue
        row = divergence.row
        error = divergence.error(TOL)
        if counts is None or counts[row]:
            raise Fail(
                f"attend {where}: row {row}, which took a token, differs from the reference "
                f"at head {divergence.head} ({error})"
                + (f": {UNWRITTEN_SLOTS}" if divergence.nonfinite else "")
            )
        why = (
            f"{UNWRITTEN_SLOTS}; here the NaN past the row's length is the padding given for "
            "its count-0 position, stored, or memory never written (torch.empty)."
            if divergence.nonfinite
            else "did a count-0 append write into its valid positions, "
            "or does attend read past the row's own length?"
        )
        raise Fail(
            f"attend {where}: row {row} has counts 0 (finished), yet its output for the "
            f"same query changed ({error}): {why} A row with counts 0 writes nothing and "
            "attends over its own lengths[b] positions"
        )


def _check_decode(candidate: Candidate) -> None:
    g = cases.generator(721)
    weights = cases.layer_weights(g, D_MODEL, H, H, D)
    x = cases.randn(g, B, len(DECODE_STEPS), D_MODEL)  # step t's token of each row, or its padding
    plan = Plan()
    plan.layer("L", weights, H, H, D, BASE)
    plan.new("c")
    states, lengths, tokens = [], torch.zeros(B, dtype=torch.int64), [[] for _ in range(B)]
    for t, counts in enumerate(DECODE_STEPS):
        plan.decode_step("L", "c", x[:, t : t + 1], cases.counts(*counts))
        lengths = lengths + torch.tensor(counts)
        for b in range(B):
            if counts[b]:
                tokens[b].append(x[b, t])
        states.append((counts, lengths, plan.state("c")))
    results = candidate.run(plan)

    previous = None  # cache.keys after the step before
    for t, (counts, lengths, state) in enumerate(states):
        where = f"after decode_step {t} (counts {list(counts)})"
        _require_lengths(results[state], lengths, counts, where)
        keys = _holding(results[state]["keys"], lengths, f"cache.keys {where}")
        for b in range(B):
            n = int(lengths[b])
            if not counts[b] and not torch.equal(keys[b, :, :n], previous[b, :, :n]):
                raise Fail(
                    f"{where}: row {b} has counts 0 (finished), yet its cached keys "
                    "changed: a row with counts 0 must write nothing"
                )
        previous = keys
    values = _holding(
        results[states[-1][2]]["values"], lengths, "cache.values after the last decode_step"
    )
    for b in range(B):
        own = torch.stack(tokens[b])[None].double()  # [1, n, d_model]: the tokens row b took
        v = reference.split_heads(own @ weights["wv"].double().T, H)  # [1, H, n, D]
        if first_divergence([values[b : b + 1, :, : len(tokens[b])]], [v], TOL):
            raise Fail(
                f"after the last decode_step, row {b}'s cached values are not those of its "
                f"own {len(tokens[b])} tokens in order (v = wv(x) of the steps it took)"
            )


def _holding(value, lengths: torch.Tensor, what: str) -> torch.Tensor:
    """`value` as a [B, H, >= max(lengths), D] tensor (its time size is length-vs-capacity's)."""
    stored, T = tensor(value, what), int(lengths.max())
    shape = tuple(stored.shape)
    if len(shape) != 4 or shape[2] < T or (*shape[:2], shape[3]) != (B, H, D):
        raise Fail(f"{what} has shape {list(shape)}, expected [{B}, {H}, {T}, {D}]")
    return stored


def _require_lengths(state: dict, want: torch.Tensor, counts, where: str) -> None:
    got = state["lengths"]  # its type is append-time-dim's business: an int stands for every row
    if isinstance(got, (torch.Tensor, int)):
        got = got.tolist() if isinstance(got, torch.Tensor) else [got] * B
    if got == want.tolist():
        return
    grew = (
        counts is not None
        and isinstance(got, list)
        and len(got) == B
        and all(g > w for g, w, c in zip(got, want.tolist(), counts) if not c)
    )
    raise Fail(
        f"{where}: cache.lengths is {got!r}, expected {want.tolist()}"
        + (
            ": rows with counts 0 grew; counts[b] == 0 means row b takes no position"
            if grew and 0 in counts
            else ""
        )
    )


def _finishing(g: torch.Generator, B: int, steps: int) -> list[list[int]]:
    """Per step, 1 for the rows still going, 0 for the finished: each row finishes at a random
    step, the last step has every row finished."""
    ends = [cases.randint(g, 1, steps - 1) for _ in range(B)]
    return [[int(s < end) for end in ends] for s in range(steps)] + [[0] * B]


def _check_hidden_append(candidate: Candidate) -> None:
    """4 to 6 rows finishing at random in appends of 1 to 4 positions (NaN padding), then a step
    with every row finished: lengths and every row's output after each append."""
    seed = hidden_cases.seed(APPEND_SEED)
    g = cases.generator(seed)
    B, H, D = cases.randint(g, 4, 6), cases.randint(g, 1, 3), cases.choice(g, (4, 8))
    prompt = cases.randint(g, 2, 5)
    going = _finishing(g, B, HIDDEN_STEPS)
    sizes = [cases.randint(g, 1, 4) for _ in going]
    case = hidden_cases.name(
        seed,
        f"{hidden_cases.shape(B, H)}, rows finishing at random "
        "in appends of 1 to 4 positions, then a step with every "
        "row finished",
    )
    seq = cases.sequence(g, B, H, H, prompt + sum(sizes), D)
    plan = Plan()
    plan.new("c")
    plan.append("c", seq["k"][:, :, :prompt], seq["v"][:, :, :prompt])
    lengths, ops = [prompt] * B, []
    for active, t in zip(going, sizes):
        counts = [t * a for a in active]
        new = {
            p: cases.padded(
                torch.stack([seq[p][b, :, n : n + t] for b, n in enumerate(lengths)]), counts
            )
            for p in "kv"
        }
        plan.append("c", new["k"], new["v"], cases.counts(*counts))
        lengths = [n + c for n, c in zip(lengths, counts)]
        query = torch.stack([seq["q"][b, :, n - 1 : n] for b, n in enumerate(lengths)])
        ops.append((counts, lengths, plan.state("c"), plan.attend("c", query)))
    results = hidden_cases.run(candidate, plan, case)

    for step, (counts, lengths, state, attended) in enumerate(ops, start=1):
        where = f"{case}: append {step}" + (" (every row finished)" if not any(counts) else "")
        if tensor(results[state]["lengths"], f"{where}, cache.lengths").tolist() != lengths:
            raise Fail(
                f"{where}: cache.lengths is not what it should be: a row with counts 0 "
                "takes no position, the others take their counts"
            )
        out = tensor(results[attended], f"{where}, attend's output")
        require_shape(out, (B, H, 1, D), f"{where}, attend's output")
        expected = torch.cat(
            [
                decode_loop.newest({p: x[b : b + 1] for p, x in seq.items()}, n)
                for b, n in enumerate(lengths)
            ]
        )
        divergence = first_divergence([out], [expected], TOL)
        if divergence is not None:
            row = divergence.row
            doing = "has finished" if not counts[row] else "takes positions"
            raise Fail(
                f"{where}: row {row}, which {doing}, is not attention over its own "
                f"positions ({divergence.error(TOL)}): "
                + (
                    UNWRITTEN_SLOTS
                    if divergence.nonfinite
                    else "a row with counts 0 must write nothing and keep its output"
                )
            )


def _check_hidden_decode(candidate: Candidate) -> None:
    """decode_step with rows finishing at random, then a step with every row finished: lengths,
    and a finished row's cached keys unchanged."""
    seed = hidden_cases.seed(DECODE_SEED)
    g = cases.generator(seed)
    B, H, D, d_model = 4, 2, 8, 16
    going = _finishing(g, B, 6)
    case = hidden_cases.name(
        seed, f"decode_step, B={B}, rows finishing at random, then a step with every row finished"
    )
    weights = cases.layer_weights(g, d_model, H, H, D)
    x = cases.randn(g, B, len(going), d_model)
    plan = Plan()
    plan.layer("L", weights, H, H, D, 10000.0)
    plan.new("c")
    states, lengths = [], [0] * B
    for t, counts in enumerate(going):
        plan.decode_step("L", "c", x[:, t : t + 1], cases.counts(*counts))
        lengths = [n + c for n, c in zip(lengths, counts)]
        states.append((counts, lengths, plan.state("c")))
    results = hidden_cases.run(candidate, plan, case)

    previous = None
    for t, (counts, lengths, state) in enumerate(states):
        where = f"{case}: after decode_step {t}"
        if tensor(results[state]["lengths"], f"{where}, cache.lengths").tolist() != lengths:
            raise Fail(
                f"{where}: cache.lengths is not what it should be: a row with counts 0 "
                "takes no position"
            )
        keys = tensor(results[state]["keys"], f"{where}, cache.keys")
        require_shape(keys, (B, H, max(lengths), D), f"{where}, cache.keys")
        for b, n in enumerate(lengths):
            if not counts[b] and not torch.equal(keys[b, :, :n], previous[b, :, :n]):
                raise Fail(
                    f"{where}: row {b} has finished (counts 0), yet its cached keys "
                    "changed: a row with counts 0 must write nothing"
                )
        previous = keys


def _check_hidden_long(candidate: Candidate) -> None:
    """A long prefix by chunks, single tokens while rows finish (NaN padding), the finished rows
    dropped by a reorder that duplicates a row going on, three more tokens: lengths and every
    row's output, for its newest real token's query, after every append."""
    seed = hidden_cases.seed(LONG_SEED)
    g = cases.generator(seed)
    B, H, D = cases.randint(g, 3, 4), 2, 8
    chunks = cases.chunks(g, cases.randint(g, *LONG_POSITIONS), LONG_CHUNK)
    finished = torch.randperm(B, generator=g)[: cases.randint(g, 2, B - 1)].tolist()
    ends = {b: cases.randint(g, 1, LONG_STEPS - 1) for b in finished}  # the step a row stops at
    going = [[int(b not in ends or s < ends[b]) for b in range(B)] for s in range(LONG_STEPS)]
    kept = [b for b in range(B) if b not in ends]
    beam_idx = [*kept, kept[0]]
    case = hidden_cases.name(
        seed,
        f"B={B}, a {sum(chunks)}-position prefix by chunks, rows "
        f"finishing at random, then reorder(cache, {beam_idx})",
    )
    seq = cases.sequence(g, B, H, H, sum(chunks) + LONG_STEPS + 3, D)
    plan = Plan()
    plan.new("c")
    rows, lengths, ops = list(range(B)), [0] * B, []  # rows: the row of `seq` each one continues
    events = (
        [("append", [t] * B) for t in chunks]
        + [("append", c) for c in going]
        + [("reorder", beam_idx)]
        + [("append", [1] * len(beam_idx))] * 3
    )
    for kind, arg in events:
        if kind == "reorder":
            plan.reorder("c", torch.tensor(arg))
            rows, lengths = [rows[i] for i in arg], [lengths[i] for i in arg]
            continue
        t = max(arg)
        new = {
            p: cases.padded(
                torch.stack([seq[p][r, :, n : n + t] for r, n in zip(rows, lengths)]), arg
            )
            for p in "kv"
        }  # [B', H, t, D], NaN past each row's count
        plan.append("c", new["k"], new["v"], cases.counts(*arg))
        lengths = [n + c for n, c in zip(lengths, arg)]
        query = torch.stack([seq["q"][r, :, n - 1 : n] for r, n in zip(rows, lengths)])
        ops.append(
            (arg, list(rows), lengths, plan.state("c", ("lengths",)), plan.attend("c", query))
        )
    results = hidden_cases.run(candidate, plan, case)

    for step, (counts, rows, lengths, state, attended) in enumerate(ops, start=1):
        where = f"{case}: append {step}" + (" (after the reorder)" if len(rows) != B else "")
        if tensor(results[state]["lengths"], f"{where}, cache.lengths").tolist() != lengths:
            raise Fail(
                f"{where}: cache.lengths is not what it should be: a row with counts 0 "
                "takes no position, and a reorder moves each row's length with it"
            )
        out = tensor(results[attended], f"{where}, attend's output")
        require_shape(out, (len(rows), H, 1, D), f"{where}, attend's output")
        expected = torch.cat(
            [
                decode_loop.newest({p: x[r : r + 1] for p, x in seq.items()}, n)
                for r, n in zip(rows, lengths)
            ]
        )
        divergence = first_divergence([out], [expected], TOL)
        if divergence is not None:
            raise Fail(
                f"{where}: row {divergence.row} is not attention over its own "
                f"{lengths[divergence.row]} positions ({divergence.error(TOL)}): "
                + (
                    UNWRITTEN_SLOTS
                    if divergence.nonfinite
                    else "a row with counts 0 writes nothing, and reorder moves every "
                    "position of a row, the oldest as much as the newest"
                )
            )
