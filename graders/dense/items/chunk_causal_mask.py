"""chunk-causal-mask: attend_chunk equals full causal attention for every query of a chunk.

Verifying t draft tokens in one call: all t keys are in the cache when the chunk's queries
attend, so query i must not see the positions after its own, the mask that one newest query
never needed (the seed's "no future mask" question, turned around). Query i of row b sits at
positions[b] - t + i: rows of different lengths put the mask at different offsets.

Public: three rows of prompts 5, 2 and 7 positions (one ragged append through counts), then
chunks of 3, 1 and 7, each verified with attend_chunk and compared query by query with a
float64 full causal forward, in MHA and in GQA 4/2; the chunk of 1 also against the candidate's
own attend (the contract: t == 1 is attend); a chunk of 3 on a cache whose rows hold 2
positions raises ValueError. A failure names the mistake its output matches: a chunk that sees
its own future, a mask aligned top-left.

Hidden, seeded: shapes (B 1-4, MHA, GQA or MQA, head_dim 8 or 16), prompts of 0-12 positions
through counts, chunks of 1-8, and after a release: the released row holds only the next chunk;
the first case is always one row of MQA (a squeeze of the one KV head drops the batch too).
"""

from __future__ import annotations

import torch

from graders.dense.chunks import TOL, Run, require_checks
from graders.judge.candidate import Candidate
from graders.shared import cases, hidden_cases
from graders.shared.compare import first_divergence
from graders.shared.plans import Fail, Plan, Raised, tensor

ITEM = "chunk-causal-mask"

PROMPTS = [5, 2, 7]  # row lengths before the chunks: ragged, through counts
CHUNKS = [3, 1, 7]
LAYOUTS = [(2, 2), (4, 2)]  # (Hq, Hkv): MHA, GQA
HEAD_DIM = 8
HIDDEN_SEEDS = (4200, 4210, 4220)


def grade(candidate: Candidate) -> str:
    for hq, hkv in LAYOUTS:
        _check_run(
            candidate,
            cases.generator(420 + hq),
            f"{hq}/{hkv} heads",
            len(PROMPTS),
            hq,
            hkv,
            HEAD_DIM,
            PROMPTS,
            CHUNKS,
        )
    _check_short_rows(candidate)
    return (
        f"chunks of {', '.join(map(str, CHUNKS))} over rows of {PROMPTS} positions, MHA and "
        "GQA: every query equals full causal attention (t == 1 equals attend); a chunk past "
        "what a row holds raises ValueError"
    )


def grade_hidden(candidate: Candidate) -> str:
    for n, seed in enumerate(hidden_cases.seeds(HIDDEN_SEEDS)):
        g = cases.generator(seed)
        batch = 1 if n == 0 else cases.randint(g, 1, 4)
        hkv = 1 if n == 0 else cases.choice(g, (1, 2))
        hq = hkv * cases.choice(g, (2, 4) if n == 0 else (1, 2, 4))
        d = cases.choice(g, (8, 16))
        prompts = [cases.randint(g, 0, 12) for _ in range(batch)]
        chunks = [cases.randint(g, 1, 8) for _ in range(3)]
        what = (
            f"{hidden_cases.shape(batch, hkv, d, 'kv head')}, {hidden_cases.layout(hq, hkv)}, "
            f"prompts {prompts}, chunks {chunks}, a release"
        )
        _check_run(
            candidate,
            g,
            hidden_cases.name(seed, what),
            batch,
            hq,
            hkv,
            d,
            prompts,
            chunks,
            release=True,
        )
    return "seeded shapes, ragged prompts and chunks, after a release: every query equals full causal attention"


def _check_run(
    candidate: Candidate,
    g: torch.Generator,
    case: str,
    batch: int,
    hq: int,
    hkv: int,
    d: int,
    prompts: list[int],
    chunks: list[int],
    release: bool = False,
) -> None:
    plan = Plan()
    run = Run(plan, g, batch, hq, hkv, d)
    if max(prompts) > 0:
        run.append(prompts)
    t1 = []
    for i, t in enumerate(chunks):
        if release and i == len(chunks) - 1:
            run.release(0)  # row 0 starts again: it holds only this chunk
        check = run.chunk(
            t,
            f"attend_chunk of the chunk {i} ({t} queries, at positions "
            f"{[p - t for p in run.positions]} + 0..{t - 1})",
        )
        if t == 1:
            t1.append((check, plan.attend("c", _same_query(plan, check))))
    results = hidden_cases.run(candidate, plan, case)
    require_checks(results, run.checks, case)
    for check, index in t1:
        chunk = tensor(results[check.index], f"{case}: attend_chunk")
        single = tensor(results[index], f"{case}: attend")
        if first_divergence([chunk.double()], [single.double()], TOL) is not None:
            raise Fail(
                f"{case}: attend_chunk of one query differs from attend with the same query "
                "(the contract: with t == 1 it equals attend)"
            )


def _same_query(plan: Plan, check) -> torch.Tensor:
    """The query the attend_chunk of `check` was given."""
    return plan.ops[check.index]["query"]


def _check_short_rows(candidate: Candidate) -> None:
    """A chunk of 3 on rows that hold 2 positions each: ValueError."""
    g = cases.generator(429)
    plan = Plan()
    run = Run(plan, g, 2, 2, 2, HEAD_DIM)
    run.append([2, 2])
    index = plan.attend_chunk("c", cases.randn(g, 2, 2, 3, HEAD_DIM), may_raise=True)
    got = candidate.run(plan)[index]
    if not (isinstance(got, Raised) and got.is_a("ValueError")):
        raise Fail(
            "attend_chunk of 3 queries on rows that hold 2 positions each "
            + (f"raised {got.type}" if isinstance(got, Raised) else "returned")
            + ", expected ValueError (the contract: a chunk needs its t positions cached)"
        )
