"""real-model: the candidate's cache inside a real model equals transformers' own DynamicCache.

A tiny LlamaForCausalLM (2 layers, hidden 64, 4 heads over 2 KV heads, vocabulary 128), its
weights drawn here from a seed (nothing is downloaded), generates through the kata's adapter
(graders/worker/real_model.py: a transformers Cache whose layers call the candidate's append,
reorder and truncate) in the worker that holds the candidate's file beside transformers, and
through transformers' DynamicCache in a worker that holds no candidate code. Every run must
give the same tokens and, at every step, logits within LOGITS of DynamicCache's.

Each decoding mode runs with both attentions, since each hides bugs the other shows (contract
section 8): the model's own (sdpa over the candidate's `keys`/`values`: shows what the cache
stores, reorders and truncates) and the candidate's `attend`/`attend_chunk` (registered with
AttentionInterface: shows its scale, mask and softmax). The candidate's attention runs only
where the batch has no padding; a left-padded ragged batch runs the model's.

Public: greedy (2 rows, 20 tokens), a ragged greedy batch (3 left-padded rows), beam search
(3 beams over 2 rows, 12 tokens: `reorder` every step) and assisted decoding (a second seeded
Llama drafts, the model verifies a chunk and `crop`s the rejected drafts: `attend_chunk` and
`truncate` every round). Hidden: the same modes, with the models' seeds, the prompts, their
lengths, the batch and the number of beams drawn from the run's seed; the models' head layout
too (the first set MQA, the second MHA or another GQA: the public model's GQA 4/2 hides code
that special-cases one KV head or one group); and a long prompt (520 to 900 tokens, as a real
model's prompt is): past the 512 positions of a fixed buffer (nanoGPT's `block_size`), which no
public run, at 27 positions at most, comes near.

DynamicCache's answers to the public runs depend on nothing but them and the torch and
transformers versions: they are kept on disk (graders.shared.model_answers), so a public grade
after the first starts no reference worker; what is read passes the reference worker's reply
schema, or is computed again. Hidden runs always go to the reference worker.

transformers (the `real-model` extra) not installed, or outside the tested range: the item is
not_attempted, saying what to install. A file without section 8's names: not_attempted too.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from collections.abc import Iterator
from typing import Literal

import torch

from graders.judge import replies
from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases, model_answers, transformers_extra
from graders.shared.compare import Tolerance, close
from graders.shared.plans import CandidateError, CandidateTimeout, Fail, NotAttempted, Plan

ITEM = "real-model"

VOCAB, HIDDEN, HEADS, KV_HEADS, LAYERS, FFN = 128, 64, 4, 2, 2, 128
CONFIG = {
    "vocab_size": VOCAB,
    "hidden_size": HIDDEN,
    "intermediate_size": FFN,
    "num_hidden_layers": LAYERS,
    "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS,
    "max_position_embeddings": 1024,  # past LONG_PROMPT; the default RoPE never reads it
    "bos_token_id": None,
    "eos_token_id": None,
    "pad_token_id": 0,
    "tie_word_embeddings": False,
}
# Weights ~ N(0, WEIGHT_SCALE^2), norms 1 + N(0, 0.1^2): logits of size ~3 whose top two stand
# ~1e-3 apart at the closest (measured over the public runs), a thousand times what the
# candidate's float32 attention moves them. transformers' own init (std 0.02) gives logits
# near 0.1, all within a few 1e-4 of each other: every token a near tie.
WEIGHT_SCALE, NORM_SCALE = 0.1, 0.1
# Logits against DynamicCache's, an element passing within atol + rtol*|expected|. Measured
# (torch 2.13, transformers 5.25, CPU; tests/test_real_model.py measures it again): the model's
# own attention over a correct cache's keys is exact (0.0: the same bits reach the same sdpa);
# the candidate's float32 attend/attend_chunk (two styles: concat storage, a list of chunks
# with grouped queries) moves logits of size ~3 by at most 2.4e-6 over the public runs and 10
# seeds of hidden ones (77 generations): 0.021 of this bound at the worst element (48x; at
# 2e-5 + 2e-5 the worst took 0.105, too thin a margin). The hidden MQA, MHA and GQA 8/x
# models and the long prompts (520 to 900 positions), over 8 seeds: 0.026 at the worst (38x).
# A missing 1/sqrt(D) scale moves them by 1e-1 to 1.5: thousands of times past it.
LOGITS = Tolerance(atol=1e-4, rtol=1e-4)

Mode = Literal["greedy", "beam", "assisted"]
Attention = Literal["model", "candidate"]
MODES = {"greedy": "greedy search", "beam": "beam search", "assisted": "assisted decoding"}
ATTENTIONS = {
    "model": "the model's own attention over cache.keys/values",
    "candidate": "your attend/attend_chunk as the attention",
}


@dataclass(frozen=True)
class Run:
    """One generate: `lengths` the prompt length of each row (shorter rows left-padded to the
    longest), `seed` the prompts' and the models' (`model_seed`, the assistant at +1)."""

    name: str
    mode: Mode
    attention: Attention
    lengths: tuple[int, ...]
    new_tokens: int
    seed: int
    model_seed: int
    beams: int = 1
    heads: tuple[int, int] = (HEADS, KV_HEADS)  # the models' (Hq, Hkv); head_dim HIDDEN // Hq

    @property
    def label(self) -> str:
        beams = f" ({self.beams} beams)" if self.mode == "beam" else ""
        layout = "" if self.heads == (HEADS, KV_HEADS) else f", {hidden_cases.layout(*self.heads)}"
        return f"{self.name}: {MODES[self.mode]}{beams}{layout}, {ATTENTIONS[self.attention]}"


MODEL_SEED = 4300
PUBLIC = [
    Run("2 rows of 7 tokens, 20 new", "greedy", "model", (7, 7), 20, 4310, MODEL_SEED),
    Run(
        "3 rows of 7, 4 and 6 tokens, left-padded, 16 new",
        "greedy",
        "model",
        (7, 4, 6),
        16,
        4311,
        MODEL_SEED,
    ),
    Run("2 rows of 6 tokens, 12 new", "beam", "model", (6, 6), 12, 4312, MODEL_SEED, beams=3),
    Run(
        "1 row of 7 tokens, 20 new, a second seeded Llama drafting",
        "assisted",
        "model",
        (7,),
        20,
        4313,
        MODEL_SEED,
    ),
]
PUBLIC += [replace(r, attention="candidate") for r in PUBLIC if len(set(r.lengths)) == 1]
# Each hidden set's seed offset and the (Hq, Hkv) its models draw from: every run has an MQA
# set (head_dim 32 to 8) and one of MHA or GQA other than the public 4/2.
HIDDEN_SETS = [(4320, ((2, 1), (4, 1), (8, 1))), (4321, ((4, 4), (2, 2), (8, 2), (8, 4)))]
# A long prompt's tokens, drawn: past 512 (a `block_size` buffer's end) at every seed, within
# max_position_embeddings; its few new tokens each attend over all of it.
LONG_PROMPT, LONG_NEW = (520, 900), (3, 6)


def grade(candidate: Candidate) -> str:
    return _grade_runs(candidate, PUBLIC, keep=True)


def grade_hidden(candidate: Candidate) -> str:
    runs = [
        run
        for offset, layouts in HIDDEN_SETS
        for run in _hidden_runs(hidden_cases.seed(offset), layouts)
    ]
    return _grade_runs(candidate, runs, keep=False)


def _hidden_runs(seed: int, layouts: tuple[tuple[int, int], ...]) -> list[Run]:
    """Each mode once, with both attentions where the batch has no padding: seeded models of
    a layout drawn from `layouts`, prompts of 3 to 12 tokens, 10 to 24 new tokens, 1 to 3 rows
    (ragged in one greedy run), 2 to 4 beams; and one greedy run of 1 or 2 rows over a
    LONG_PROMPT."""
    g = cases.generator(seed)
    model_seed = 10 * seed
    batch = cases.randint(g, 2, 3)
    ragged = tuple(cases.randint(g, 3, 12) for _ in range(batch))
    even = (cases.randint(g, 3, 12),) * cases.randint(g, 1, 3)
    beams = cases.randint(g, 2, 4)
    runs = [
        Run("ragged", "greedy", "model", ragged, cases.randint(g, 10, 24), seed + 1, model_seed),
        Run("greedy", "greedy", "model", even, cases.randint(g, 10, 24), seed + 2, model_seed),
        Run(
            "beams", "beam", "model", even[:2], cases.randint(g, 6, 12), seed + 3, model_seed, beams
        ),
        Run(
            "assisted",
            "assisted",
            "model",
            even[:1],
            cases.randint(g, 10, 24),
            seed + 4,
            model_seed,
        ),
        Run(
            "long prompt",
            "greedy",
            "model",
            (cases.randint(g, *LONG_PROMPT),) * cases.randint(g, 1, 2),
            cases.randint(g, *LONG_NEW),
            seed + 5,
            model_seed,
        ),
    ]
    heads = cases.choice(g, layouts)
    runs += [replace(r, attention="candidate") for r in runs if len(set(r.lengths)) == 1]
    return [
        replace(
            r,
            name=hidden_cases.name(
                seed, f"{r.name}, prompts of {list(r.lengths)} tokens, {r.new_tokens} new"
            ),
            heads=heads,
        )
        for r in runs
    ]


def _grade_runs(candidate: Candidate, runs: list[Run], keep: bool) -> str:
    """`runs` through the candidate's cache against DynamicCache's answers; `keep`: those
    answers read from, or written to, graders.shared.model_answers (the public runs)."""
    problem = transformers_extra.problem()
    if problem:
        raise NotAttempted(problem)
    wanted = {}
    plan = Plan()
    for run in runs:  # DynamicCache's answer depends on neither attention: one per generate
        key = replace(run, name="", attention="model")
        if key not in wanted:
            wanted[key] = plan.real_model_reference(_operation(run))
    reference = _answers(candidate, plan, keep)
    calls = {}
    notes = []
    for run, got in zip(runs, _generations(candidate, runs, together=keep)):
        want = reference[wanted[replace(run, name="", attention="model")]]
        note = _compare(run, got, want)
        if note:
            notes.append(note)
        for name, n in got["calls"].items():
            calls[name] = calls.get(name, 0) + n
    made = ", ".join(f"{name} {n}" for name, n in calls.items())
    return (
        f"{len(runs)} generate runs (greedy, ragged, beam search, assisted decoding; the "
        "model's attention and yours) equal DynamicCache token for token, logits within "
        f"{LOGITS} (calls: {made})" + "".join(f"; {note}" for note in notes)
    )


def _generations(candidate: Candidate, runs: list[Run], together: bool) -> Iterator[dict]:
    """Each run's generation through the candidate's cache, in order. `together` (the public
    runs, 0.4 s for a correct cache against the 10 s of a request): all in one request to the
    model's worker, one fork instead of seven; where the candidate's code raised, crashed or
    hung there, each run again in a request of its own, as the hidden runs always are, so that
    the failure names its run (a hidden one its seed), a slow run has a request's time, and a
    run that fails its comparison is reported before a later run is made."""
    if together:
        plan = Plan()
        indices = [plan.real_model(_operation(run)) for run in runs]
        try:
            results = candidate.run(plan, beside_model=True)
        except (CandidateError, CandidateTimeout):
            results = None  # found again below, run by run
        if results is not None:
            yield from (results[index] for index in indices)
            return
    for run in runs:
        plan = Plan()
        index = plan.real_model(_operation(run))
        with hidden_cases.labelled(run.label):  # a raise names the run, and a hidden one its seed
            got = candidate.run(plan, beside_model=True)[index]
        yield got


def _answers(candidate: Candidate, plan: Plan, keep: bool) -> list:
    """DynamicCache's generations for `plan`: kept ones when `keep` and they pass the reference
    worker's reply schema for these operations, else the reference worker's (then kept)."""
    if keep:
        kept = model_answers.read()
        if isinstance(kept, list) and len(kept) == len(plan.ops):
            try:
                checked = replies.plan_reply({"results": [{"ok": a} for a in kept]}, plan.ops)
                return [result["ok"] for result in checked["results"]]
            except replies.MalformedReply:
                pass  # computed again below, and the file rewritten
    answers = candidate.reference(plan)
    if keep:
        model_answers.write(answers)
    return answers


def _operation(run: Run) -> dict:
    """The plan operation's fields for `run` (graders.worker.real_model)."""
    g = cases.generator(run.seed)
    width = max(run.lengths)
    ids = torch.zeros(len(run.lengths), width, dtype=torch.int64)
    mask = torch.zeros(len(run.lengths), width, dtype=torch.int64)
    for row, length in enumerate(run.lengths):  # left padding: the newest token is last
        ids[row, width - length :] = torch.randint(1, VOCAB, (length,), generator=g)
        mask[row, width - length :] = 1
    return {
        "model": model(run.model_seed, run.heads),
        "assistant": model(run.model_seed + 1, run.heads) if run.mode == "assisted" else None,
        "input_ids": ids,
        "attention_mask": mask,
        "mode": run.mode,
        "attention": run.attention,
        "new_tokens": run.new_tokens,
        "beams": run.beams,
    }


def model(seed: int, layout: tuple[int, int] = (HEADS, KV_HEADS)) -> dict:
    """The Llama's config with `layout`'s (Hq, Hkv) and its weights drawn from `seed`, named as
    transformers names the parameters of LlamaForCausalLM (its load_state_dict in the worker
    checks every name)."""
    g = cases.generator(seed)
    heads, kv_heads = layout
    head_dim = HIDDEN // heads
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN)}
    for n in range(LAYERS):
        layer = f"model.layers.{n}"
        shapes |= {
            f"{layer}.self_attn.q_proj.weight": (heads * head_dim, HIDDEN),
            f"{layer}.self_attn.k_proj.weight": (kv_heads * head_dim, HIDDEN),
            f"{layer}.self_attn.v_proj.weight": (kv_heads * head_dim, HIDDEN),
            f"{layer}.self_attn.o_proj.weight": (HIDDEN, heads * head_dim),
            f"{layer}.mlp.gate_proj.weight": (FFN, HIDDEN),
            f"{layer}.mlp.up_proj.weight": (FFN, HIDDEN),
            f"{layer}.mlp.down_proj.weight": (HIDDEN, FFN),
            f"{layer}.input_layernorm.weight": (HIDDEN,),
            f"{layer}.post_attention_layernorm.weight": (HIDDEN,),
        }
    shapes |= {"model.norm.weight": (HIDDEN,), "lm_head.weight": (VOCAB, HIDDEN)}
    weights = {
        name: (
            torch.randn(shape, generator=g) * WEIGHT_SCALE
            if len(shape) == 2
            else 1 + torch.randn(shape, generator=g) * NORM_SCALE
        )
        for name, shape in shapes.items()
    }
    config = CONFIG | {"num_attention_heads": heads, "num_key_value_heads": kv_heads}
    return {"config": config, "weights": weights}


def _compare(run: Run, got: dict, want: dict) -> str | None:
    """Fail at the first step where `got` parts from DynamicCache's `want`: its logits beyond
    LOGITS, or its tokens. Tokens that part where every logit so far is within LOGITS part at a
    near tie (both are right): the run passes, compared up to there, and the note says so."""
    if "missing" in got:
        raise NotAttempted(
            f"the file defines no {', '.join(got['missing'])}: real-model drives "
            "the cache through contract section 8 (attend_chunk verifies a "
            "prompt or drafts, truncate drops rejected drafts)"
        )
    if "mismatch" in got:
        raise Fail(f"{run.label}: {got['mismatch']}. {_hint(run)}")
    if not got["calls"]["append"]:  # a generate that never reached the cache proves nothing
        raise Fail(f"{run.label}: the model's generate never called your append")
    prompt = max(run.lengths)
    tokens, expected = got["sequences"][:, prompt:], want["sequences"][:, prompt:]
    parted = (tokens != expected).any(dim=0).nonzero()  # [k, 1]: steps where a row parts
    token_step = int(parted[0]) if len(parted) else run.new_tokens
    ok = close(got["logits"], want["logits"], LOGITS)  # [N, rows, V]
    bad = (~ok.flatten(1).all(dim=1)).nonzero()
    logit_step = int(bad[0]) if len(bad) else run.new_tokens
    if logit_step < run.new_tokens and logit_step <= token_step:
        row = int((~ok[logit_step]).any(dim=1).nonzero()[0])
        error = float(
            (got["logits"][logit_step, row].double() - want["logits"][logit_step, row].double())
            .abs()
            .nan_to_num(torch.inf)
            .max()
        )
        raise Fail(
            f"{run.label}: the logits of new token {logit_step + 1} of {run.new_tokens} "
            f"part from DynamicCache's (row {row}: off by up to {error:.2e}, tolerance "
            f"{LOGITS})"
            f"{_tokens_so_far(token_step, logit_step)}. {_hint(run)}"
        )
    if token_step < run.new_tokens:
        return (
            f"{run.label}: new token {token_step + 1} parts at a near tie (every logit "
            f"within {LOGITS}), compared up to there"
        )
    return None


def _tokens_so_far(token_step: int, logit_step: int) -> str:
    if token_step == logit_step:
        return ", and so do the tokens"
    return f"; the tokens still agree there{' and after' if token_step > logit_step + 1 else ''}"


def _hint(run: Run) -> str:
    """Where to look, by what the run exercised; the item that explains such a bug."""
    if run.attention == "candidate":
        return (
            "The model's own attention over your keys and values is compared separately: "
            "if it passed, look at attend and attend_chunk (their 1/sqrt(D) scale, the "
            "chunk's causal mask, the float32 softmax; prefix-equivalence and "
            "chunk-causal-mask check them directly)"
        )
    if run.mode == "beam":
        return (
            "Beam search calls reorder on every layer after each step: new row j must "
            "continue old row beam_idx[j] in keys, values and lengths alike (beam-reorder)"
        )
    if run.mode == "assisted":
        return (
            "Assisted decoding appends the drafts as one chunk and truncates the rejected "
            "ones every round: nothing dropped may be attended again, and the next append "
            "writes where truncate left each row (speculative-rollback)"
        )
    return (
        "The model reads cache.keys and cache.values after each append: they must hold "
        "every appended position in order, [B, Hkv, T, D] (append-time-dim, ragged-batch)"
    )
