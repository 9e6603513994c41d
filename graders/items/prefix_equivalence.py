"""prefix-equivalence: the newest-token output equals full causal attention at every prefix.

The question's core invariant. Each case decodes a whole sequence through the cache and compares
every step, not only the last: a mistake in how the prefix is kept shows at some prefix even when
the final step happens to agree.
"""

from __future__ import annotations

import math

import torch

from graders import cases, reference
from graders.candidate import Candidate, Plan, tensor
from graders.compare import TOLERANCE, require_close, require_shape

ITEM = "prefix-equivalence"

CASES = [
    # name, capacity, prompt length, total length
    ("one token at a time from an empty cache", None, 1, 12),
    ("a 5-token prompt, then one token at a time", None, 5, 12),
    ("preallocated KVCache(capacity=32), one token at a time", 32, 1, 9),
]


def grade(candidate: Candidate) -> str:
    B, H, D = 2, 4, 16
    for seed, (name, capacity, prompt, total) in enumerate(CASES):
        seq = cases.sequence(cases.generator(seed), B, H, H, total, D)
        plan = Plan()
        plan.new("c", capacity=capacity)
        outputs = []
        start = 0
        for end in range(prompt, total + 1):
            plan.append("c", seq["k"][:, :, start:end], seq["v"][:, :, start:end])
            outputs.append(plan.attend("c", seq["q"][:, :, end - 1 : end]))
            start = end
        results = candidate.run(plan)
        got = [tensor(results[i], f"attend's output at step {s}") for s, i in enumerate(outputs)]
        for step, out in enumerate(got):
            require_shape(out, (B, H, 1, D), f"attend's output at step {step}")
        full = reference.causal_attention(seq["q"], seq["k"], seq["v"])  # [B, H, T, D]
        newest = [full[:, :, t : t + 1] for t in range(prompt - 1, total)]
        require_close(got, newest, TOLERANCE[torch.float32], case=name, step_name="prefix length",
                      first_step=prompt, likely=_likely_mistakes(seq, prompt, total))
    return f"{len(CASES)} cases, every prefix within {TOLERANCE[torch.float32]} of full causal attention"


def _likely_mistakes(seq: dict, prompt: int, total: int) -> dict[str, list[torch.Tensor]]:
    """What known mistakes would output at each step, to name the one the candidate made."""
    q, k, v = seq["q"], seq["k"], seq["v"]
    D = q.shape[-1]
    steps = range(prompt - 1, total)

    def newest(full: torch.Tensor) -> list[torch.Tensor]:
        return [full[:, :, t : t + 1] for t in steps]

    v64 = v.double()
    return {
        "scores are not scaled by 1/sqrt(head_dim)": newest(
            reference.causal_attention(q.double() * math.sqrt(D), k, v)),
        "scores are scaled by 1/head_dim, not 1/sqrt(head_dim)": newest(
            reference.causal_attention(q.double() / math.sqrt(D), k, v)),
        "only the newest position is attended (the prefix is lost)": [
            v64[:, :, t : t + 1] for t in steps],
        "softmax over an axis other than the cached positions": [
            v64[:, :, : t + 1].sum(dim=2, keepdim=True) for t in steps],
    }
