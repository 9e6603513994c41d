"""beam-reorder: cached beam search equals uncached beam search, every layer reordered.

Two parts, both against the judge's float64 answers over whole sequences:

- Fixed beam indices, chosen here, on two caches (one per layer, append and attend with inputs
  of their own), so neither search ties nor RoPE can blur the verdict. Rows of different lengths
  (counts 0/1) are reordered with duplicates ([2, 0, 0]), twice in a row (composed), expanded
  from one row to three and shrunk to two. After every step each active row's output must equal
  full attention over that row's own history, and at the end `lengths` must be the reordered
  ones. This catches a reorder of keys only, or of keys and values but not lengths (rows of
  equal length hide that), a scatter (old row j to row beam_idx[j]) where a gather is meant, a
  copy in place that overwrites a row still to be read, and one that assumes B' == B.
- A beam search (3 beams, 6 steps) through a 2-layer decoder, run in the worker by trusted code
  (graders/worker/beam_search.py) with the candidate's decode_step and reorder on every layer. The
  judge follows the search's choices with its own uncached forwards (graders/decoder.py): at
  each step every chosen continuation's score must match, and the chosen ones must be a top 3
  of the judge's scores up to the tolerance (a near-tie may break either way in float32;
  elsewhere the tokens must be the same). The first choice expands 1 row to 3 with duplicate
  indices; later ones reorder the beams.
"""

from __future__ import annotations

import torch

from graders import cases, decoder, reference
from graders.candidate import Candidate, Fail, Plan, tensor
from graders.compare import TOLERANCE, close, require_close, require_shape

ITEM = "beam-reorder"

VOCAB, D_MODEL, HEADS, HEAD_DIM, LAYERS, D_FF, BASE = 20, 32, 2, 16, 2, 64, 10000.0
BEAMS, STEPS, SEARCH_SEED = 3, 6, 10
TOL = TOLERANCE[torch.float32]

SCHEDULES = [  # name, starting batch, events: ("step", counts) or ("reorder", beam_idx)
    ("ragged rows reordered with duplicates, then two reorders in a row", 3, [
        ("step", (1, 1, 1)), ("step", (1, 0, 1)), ("step", (1, 1, 0)), ("reorder", [2, 0, 0]),
        ("step", (1, 1, 1)), ("reorder", [1, 2, 0]), ("reorder", [2, 2, 1]), ("step", (1, 1, 1)),
        ("step", (0, 1, 1))]),
    ("one row expanded to three (B' != B), then shrunk to two", 1, [
        ("step", (1,)), ("step", (1,)), ("reorder", [0, 0, 0]), ("step", (1, 0, 1)),
        ("reorder", [2, 1]), ("step", (1, 1)), ("reorder", [1, 1, 0]), ("step", (1, 1, 1))]),
]


def grade(candidate: Candidate) -> str:
    steps = sum(decode_fixed_indices(candidate, seed, *schedule) for seed, schedule in
                enumerate(SCHEDULES, start=110))
    _beam_search(candidate)
    return (f"fixed beam indices: {steps} steps on {LAYERS} caches equal full attention; "
            f"beam search ({BEAMS} beams, {STEPS} steps, {LAYERS} layers) made the uncached "
            f"search's choices, scores within {TOL}")


def decode_fixed_indices(candidate: Candidate, seed: int, name: str, batch: int, events: list) -> int:
    g = cases.generator(seed)
    history = [[torch.zeros(2, HEADS, 0, HEAD_DIM) for _ in range(batch)] for _ in range(LAYERS)]
    plan, checks, last_reorder = Plan(), [], "before any reorder"
    for n in range(LAYERS):
        plan.new(f"c{n}")
    for kind, arg in events:
        if kind == "reorder":
            last_reorder = f"after reorder(cache, {arg})"
            for n in range(LAYERS):
                plan.reorder(f"c{n}", torch.tensor(arg))
                history[n] = [history[n][i] for i in arg]
            continue
        active = torch.tensor(arg, dtype=torch.bool)
        for n in range(LAYERS):
            new = cases.sequence(g, len(arg), HEADS, HEADS, 1, HEAD_DIM)
            plan.append(f"c{n}", new["k"], new["v"], cases.counts(*arg))
            index = plan.attend(f"c{n}", new["q"])
            kv = torch.stack((new["k"], new["v"]), dim=1)  # [B, 2, H, 1, D]
            history[n] = [torch.cat((h, kv[b]), dim=2) if arg[b] else h
                          for b, h in enumerate(history[n])]
            want = torch.cat([_newest(new["q"][b : b + 1], h) for b, h in enumerate(history[n])])
            checks.append((index, n, len(checks) // LAYERS, last_reorder, active, want))
    states = [plan.state(f"c{n}") for n in range(LAYERS)]
    results = candidate.run(plan)

    for n, state in enumerate(states):
        want = [h.shape[2] for h in history[n]]
        got = tensor(results[state]["lengths"], f"cache.lengths of cache {n}").tolist()
        if got != want:
            raise Fail(f"{name}: at the end, cache {n}'s lengths are {got}, expected {want}: "
                       "reorder must move lengths with their rows (row j = old row beam_idx[j])")
    for index, n, step, after, active, want in checks:
        got = tensor(results[index], f"attend's output at step {step}")
        require_shape(got, tuple(want.shape), f"attend's output at step {step}")
        mask = active[:, None, None, None]
        require_close([got.double().where(mask, 0.0)], [want.where(mask, 0.0)], TOL,
                      case=f"{name}: cache {n}, {after}, against attention over each row's own "
                      "history (new row j must continue old row beam_idx[j] in keys, values and "
                      "lengths alike)", first_step=step)
    return len(checks) // LAYERS


def _newest(q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
    """Full attention of one query [1, H, 1, D] over one row's history kv [2, H, T, D]."""
    k, v = kv[0:1], kv[1:2]
    padded = torch.zeros_like(k).double()
    padded[:, :, -1:] = q
    return reference.causal_attention(padded, k, v)[:, :, -1:]


def _beam_search(candidate: Candidate) -> None:
    g = cases.generator(SEARCH_SEED)
    weights = decoder.weights(g, VOCAB, D_MODEL, HEADS, HEADS, HEAD_DIM, LAYERS, D_FF)
    prompt = torch.randint(VOCAB, (4,), generator=g)
    plan = Plan()
    index = plan.beam_search(weights, prompt, BEAMS, STEPS, HEADS, HEADS, HEAD_DIM, BASE)
    found = candidate.run(plan)[index]
    found = {k: tensor(found[k], f"the beam search's {k}") for k in ("tokens", "beam_idx", "scores")}
    for k, value in found.items():
        require_shape(value, (STEPS, BEAMS), f"the beam search's {k}")
    sequences, scores = prompt[None], torch.zeros(1, dtype=torch.float64)
    for step in range(STEPS):
        when = ("the first choice, before any reorder" if step == 0 else
                f"after reorder(cache, {found['beam_idx'][step - 1].tolist()}) on every layer")
        log_probs = decoder.log_probs(weights, sequences, HEADS, HEADS, BASE)  # [beams, vocab]
        table = (scores[:, None] + log_probs).flatten()
        beam_idx, tokens = found["beam_idx"][step].long(), found["tokens"][step].long()
        picked = beam_idx * VOCAB + tokens
        in_range = (0 <= tokens) & (tokens < VOCAB) & (0 <= beam_idx) & (beam_idx < len(sequences))
        if not in_range.all() or picked.unique().numel() < BEAMS:
            raise Fail(f"beam search, step {step}: beams {beam_idx.tolist()} with tokens "
                       f"{tokens.tolist()} are not {BEAMS} distinct continuations")
        want, got = table[picked], found["scores"][step].double()
        wrong = (~close(got, want, TOL)).nonzero()
        if len(wrong):
            j = int(wrong[0])
            hint = ("decode_step is wrong before any reorder (see rope-absolute)" if step == 0 else
                    "is every layer's cache reordered, keys, values and lengths?")
            raise Fail(f"beam search, step {step} ({when}): new beam {j} (old beam "
                       f"{int(beam_idx[j])} + token {int(tokens[j])}) scores {float(got[j]):.5f}, "
                       f"the uncached decoder {float(want[j]):.5f}: {hint}")
        kth = table.topk(BEAMS).values[-1]
        if want.min() < kth - (TOL.atol + TOL.rtol * kth.abs()):
            raise Fail(f"beam search, step {step} ({when}): chose a continuation scoring "
                       f"{float(want.min()):.5f} in the uncached decoder, below its top {BEAMS} "
                       f"(the {BEAMS}th scores {float(kth):.5f})")
        sequences = torch.cat((sequences[beam_idx], tokens[:, None]), dim=1)
        scores = want
