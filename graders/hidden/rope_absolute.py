"""Hidden rope-absolute: RoPE positions in the hundreds, and longer random ragged schedules.

The public item's positions stay below 10. Here, on the public item's layer geometry and with
its checks (every decode_step output against a full float64 RoPE forward, cached keys against k
rotated at their absolute positions, known mistakes named), seeded:
- prompts of 260 to 400 tokens per row, prefilled with `append` (keys rotated by the judge),
  then decode steps with random counts 0/1: every row's positions are past 256, where a cos/sin
  table sized for some maximum position (a `max_position_embeddings`) ends, and where positions
  held in bfloat16 stop being exact integers;
- 24 decode steps from an empty cache, each row taking a token with probability 0.7, so rows
  join late, skip runs of steps and end far apart: every row's position must be its own
  cache.lengths[b] at every step.
float32 RoPE at position 400 is within ~2e-6 of float64 (head_dim 16): measured, the correct
implementations' outputs stay within 1/19 of the tolerance.
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate
from graders.hidden import _cases
from graders.items.rope_absolute import B, check_decoding

ITEM = "rope-absolute"

LONG_SEED = _cases.BASE_SEED + 1200
RAGGED_SEED = _cases.BASE_SEED + 1210


def grade(candidate: Candidate) -> str:
    g = cases.generator(LONG_SEED)
    prompts = tuple(_cases.randint(g, 260, 400) for _ in range(B))
    steps = _steps(g, 6, 0.5)
    name = _cases.name(LONG_SEED, f"prompts of {min(prompts)} to {max(prompts)} tokens, then "
                                  "ragged decode steps")
    with _cases.labelled(name):
        check_decoding(candidate, LONG_SEED, name, prompts, steps)
    g = cases.generator(RAGGED_SEED)
    name = _cases.name(RAGGED_SEED, "24 decode steps from an empty cache, rows taking tokens "
                                    "at random")
    with _cases.labelled(name):
        check_decoding(candidate, RAGGED_SEED, name, (0,) * B, _steps(g, 24, 0.7))
    return (f"positions up to {max(prompts) + 6} after long prefilled prompts, and 24 random "
            "ragged steps: outputs and cached keys at every row's own absolute position")


def _steps(g: torch.Generator, n: int, p: float) -> list[tuple[int, ...]]:
    """n steps of counts 0/1, each 1 with probability p, and never all 0."""
    steps = []
    while len(steps) < n:
        counts = tuple(int(u < p) for u in torch.rand(B, generator=g))
        if any(counts):
            steps.append(counts)
    return steps
