"""The batching track's workloads: seeded plain data, the oracle included (contract section 6).

A workload is what graders.worker.batching.drive takes: a pool and budgets ("config"), requests
with their arrival step, and each request's "oracle", its greedy decoding alone on the kata's
model (graders.batching.model), which is what any correct schedule reproduces. Prompts are drawn
from a seed; a request whose decoding meets a top-2 logit margin under MIN_MARGIN is drawn again
(so float order never decides a token). An `eos` is a token the request's own decoding produces
at a chosen step, so that it ends there.

KINDS, each a function of a generator and its sizes (`public()` fixes the sizes and seeds;
`hidden(seed)` draws them from the run's seed):
    staggered      arrivals spread over the first steps, mixed prompt and output lengths, EOS
    mixed          everything at once, outputs from 2 to a few hundred: continuous batching
                   against static batching (iteration-level's 0.7x)
    preemption     a pool too small for every sequence's growth: running sequences are preempted
                   and recompute; a head of the queue too big for the blocks left
    long-prompt    a prompt several times max_batched_tokens arrives among running decodes
    shared-prefix  prefix_caching: a system prompt of several blocks shared by staggered
                   requests, a sharer arriving after every earlier holder finished, and blocks
                   whose tokens equal another request's blocks after a different prefix
"""

from __future__ import annotations

import functools

import torch

from graders.batching.model import VOCAB, Decoder, decode_together
from graders.shared import cases

MIN_MARGIN = 1e-6
PUBLIC_SEED = 3400


def public() -> list[tuple[str, dict]]:
    """(kind, workload) of the fixed public set, built once a process."""
    return list(_public())


@functools.cache
def _public() -> tuple[tuple[str, dict], ...]:
    model = Decoder()
    return tuple(
        (kind, make(model, cases.generator(PUBLIC_SEED + n), **sizes))
        for n, (kind, make, sizes) in enumerate(_PUBLIC)
    )


@functools.lru_cache(maxsize=4)
def hidden(seed: int) -> tuple[tuple[str, int, dict], ...]:
    """(kind, its seed, workload) of one workload of each kind, the n-th kind's sizes and
    tokens drawn from seed + n; the last few draws are kept (a grade's items share one)."""
    model = Decoder()
    drawn = []
    for n, (kind, make, draw) in enumerate(_HIDDEN):
        g = cases.generator(seed + n)
        drawn.append((kind, seed + n, make(model, g, **draw(g))))
    return tuple(drawn)


def max_steps(workload: dict) -> int:
    """A bound no correct scheduler reaches: twice every position computed, once per step, after
    the last arrival (a preempted sequence recomputes at most what it had)."""
    total = sum(len(r["prompt"]) + len(workload["oracle"][r["id"]]) for r in workload["requests"])
    return 2 * total + max(r["arrival"] for r in workload["requests"]) + 16


def unshared_prompt_tokens(workload: dict) -> int:
    """Prompt tokens of the workload not in a full block whose tokens, and every token before
    it, begin an earlier-arrived request's prompt: what a prefix cache cannot save (the last
    token of a prompt is always computed)."""
    seen: set[tuple[int, ...]] = set()
    bs = workload["config"]["block_size"]
    unshared = 0
    for request in sorted(workload["requests"], key=lambda r: r["arrival"]):
        prompt = tuple(request["prompt"])
        full = (len(prompt) - 1) // bs
        hits = 0
        while hits < full and prompt[: (hits + 1) * bs] in seen:
            hits += 1
        unshared += len(prompt) - hits * bs
        seen.update(prompt[: (i + 1) * bs] for i in range(len(prompt) // bs))
    return unshared


def _build(model: Decoder, g: torch.Generator, config: dict, specs: list[dict]) -> dict:
    """A workload from request specs {id, prompt (a length or tokens), max_new_tokens, arrival,
    eos_at (None, or the output index whose token becomes the request's eos)}."""
    prompts = [_tokens(g, spec["prompt"]) for spec in specs]
    while True:
        decoded = decode_together(
            model, [(p, s["max_new_tokens"], None) for p, s in zip(prompts, specs)]
        )
        low = [i for i, (_, margin) in enumerate(decoded) if margin < MIN_MARGIN]
        if not low:
            break
        for i in low:  # a near tie: draw that prompt again
            prompts[i] = _tokens(g, len(prompts[i]))
    requests, oracle = [], {}
    for spec, prompt, (tokens, _) in zip(specs, prompts, decoded):
        eos = None
        if spec.get("eos_at") is not None:
            eos = tokens[min(spec["eos_at"], len(tokens) - 1)]
            tokens = tokens[: tokens.index(eos) + 1]
        requests.append(
            {
                "id": spec["id"],
                "prompt": prompt,
                "max_new_tokens": spec["max_new_tokens"],
                "eos": eos,
                "arrival": spec["arrival"],
            }
        )
        oracle[spec["id"]] = tokens
    return {"config": {"prefix_caching": False, **config}, "requests": requests, "oracle": oracle}


def _tokens(g: torch.Generator, prompt) -> list[int]:
    if isinstance(prompt, int):
        return torch.randint(0, VOCAB, (prompt,), generator=g).tolist()
    return list(prompt)


def staggered(
    model: Decoder,
    g: torch.Generator,
    *,
    count: int,
    longest_prompt: int,
    longest_output: int,
    spread: int,
) -> dict:
    """`count` requests arriving over `spread` steps; every third ends at an eos."""
    specs = [
        {
            "id": f"s{i}",
            "prompt": cases.randint(g, 1, longest_prompt),
            "max_new_tokens": cases.randint(g, 1, longest_output),
            "arrival": 0 if i == 0 else cases.randint(g, 0, spread),
            "eos_at": cases.randint(g, 0, 6) if i % 3 == 1 else None,
        }
        for i in range(count)
    ]
    return _build(
        model,
        g,
        {"num_blocks": 64, "block_size": 4, "max_num_seqs": 4, "max_batched_tokens": 32},
        specs,
    )


def mixed(
    model: Decoder, g: torch.Generator, *, count: int, long_output: int, short_output: int
) -> dict:
    """`count` requests at step 0, max_num_seqs of them at a time: in each wave of max_num_seqs
    one long output, the others short, so static batching waits for the long one."""
    seqs = 4
    specs = [
        {
            "id": f"m{i}",
            "prompt": cases.randint(g, 2, 24),
            "max_new_tokens": long_output if i % seqs == 0 else cases.randint(g, 2, short_output),
            "arrival": 0,
        }
        for i in range(count)
    ]
    return _build(
        model,
        g,
        {"num_blocks": 128, "block_size": 8, "max_num_seqs": seqs, "max_batched_tokens": 64},
        specs,
    )


def preemption(
    model: Decoder, g: torch.Generator, *, count: int, num_blocks: int, output: int
) -> dict:
    """`count` requests whose prompts fit the pool together but whose outputs do not; then, as
    the pool fills, a prompt of several blocks and a one-block prompt behind it (the head of the
    queue that does not fit keeps the small one out)."""
    specs = [
        {
            "id": f"p{i}",
            "prompt": cases.randint(g, 4, 9),
            "max_new_tokens": cases.randint(g, output // 2, output),
            "arrival": min(i, 2),
        }
        for i in range(count)
    ]
    specs += [
        {"id": "big", "prompt": cases.randint(g, 9, 17), "max_new_tokens": 4, "arrival": 3},
        {"id": "small", "prompt": 2, "max_new_tokens": 4, "arrival": 3},
    ]
    return _build(
        model,
        g,
        {
            "num_blocks": num_blocks,
            "block_size": 4,
            "max_num_seqs": count + 2,
            "max_batched_tokens": 32,
        },
        specs,
    )


def long_prompt(
    model: Decoder, g: torch.Generator, *, prompt: int, budget: int, output: int
) -> dict:
    """Three short requests decoding when a prompt of `prompt` tokens (several budgets) and a
    short one behind it arrive."""
    specs = [
        {"id": f"d{i}", "prompt": cases.randint(g, 2, 6), "max_new_tokens": output, "arrival": 0}
        for i in range(3)
    ]
    specs += [
        {"id": "long", "prompt": prompt, "max_new_tokens": 4, "arrival": 2},
        {"id": "after", "prompt": 3, "max_new_tokens": 3, "arrival": 3},
    ]
    return _build(
        model,
        g,
        {"num_blocks": 96, "block_size": 8, "max_num_seqs": 4, "max_batched_tokens": budget},
        specs,
    )


def shared_prefix(
    model: Decoder, g: torch.Generator, *, system_blocks: int, sharers: int, output: int
) -> dict:
    """prefix_caching: `sharers` requests of one system prompt of `system_blocks` blocks plus
    their own question, staggered; one more arriving long after every earlier one finished;
    and two requests whose blocks equal others' blocks after different prefixes (`other0`
    begins with a block that is the second block of `other1`... as a block of its own prompt,
    `other2` has `other1`'s second block at the same place after a different first block)."""
    bs = 8
    system = _tokens(g, system_blocks * bs)
    specs = [
        {
            "id": f"q{i}",
            "prompt": system + _tokens(g, cases.randint(g, 1, 2 * bs)),
            "max_new_tokens": cases.randint(g, 2, output),
            "arrival": 2 * i,
        }
        for i in range(sharers)
    ]
    first, second, third = _tokens(g, bs), _tokens(g, bs), _tokens(g, bs)
    specs += [
        {
            "id": "other1",
            "prompt": first + second + _tokens(g, 3),
            "max_new_tokens": output,
            "arrival": 1,
        },
        {
            "id": "other0",
            "prompt": second + _tokens(g, 5),
            "max_new_tokens": 3,
            "arrival": 2 * sharers + 2,
        },
        {
            "id": "other2",
            "prompt": third + second + _tokens(g, 2),
            "max_new_tokens": 3,
            "arrival": 2 * sharers + 3,
        },
        {
            "id": "late",
            "prompt": system + _tokens(g, 5),
            "max_new_tokens": 3,
            "arrival": 4 * output + 20 * sharers + 100,
        },
    ]
    return _build(
        model,
        g,
        {
            "num_blocks": 8 * (system_blocks + 4),
            "block_size": bs,
            "max_num_seqs": 4,
            "max_batched_tokens": 48,
            "prefix_caching": True,
        },
        specs,
    )


_PUBLIC = [
    (
        "staggered",
        staggered,
        {"count": 8, "longest_prompt": 30, "longest_output": 40, "spread": 20},
    ),
    ("mixed", mixed, {"count": 8, "long_output": 80, "short_output": 20}),
    ("preemption", preemption, {"count": 5, "num_blocks": 14, "output": 20}),
    ("long-prompt", long_prompt, {"prompt": 200, "budget": 48, "output": 16}),
    ("shared-prefix", shared_prefix, {"system_blocks": 3, "sharers": 4, "output": 12}),
]

_HIDDEN = [
    (
        "staggered",
        staggered,
        lambda g: {
            "count": cases.randint(g, 6, 10),
            "longest_prompt": cases.randint(g, 10, 60),
            "longest_output": cases.randint(g, 10, 60),
            "spread": cases.randint(g, 5, 40),
        },
    ),
    (
        "mixed",
        mixed,
        lambda g: {
            "count": 8,
            "long_output": cases.randint(g, 80, 150),
            "short_output": cases.randint(g, 5, 25),
        },
    ),
    (
        "preemption",
        preemption,
        lambda g: {
            "count": cases.randint(g, 4, 6),
            "num_blocks": cases.randint(g, 14, 18),
            "output": cases.randint(g, 16, 28),
        },
    ),
    (
        "long-prompt",
        long_prompt,
        lambda g: {
            "prompt": cases.randint(g, 150, 300),
            "budget": cases.randint(g, 24, 64),
            "output": cases.randint(g, 10, 24),
        },
    ),
    (
        "shared-prefix",
        shared_prefix,
        lambda g: {
            "system_blocks": cases.randint(g, 2, 5),
            "sharers": cases.randint(g, 3, 5),
            "output": cases.randint(g, 6, 16),
        },
    ),
]
