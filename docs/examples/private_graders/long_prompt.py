"""A private hidden case for prefix-equivalence: a 1500-token prompt, then 8 decode steps.

An interviewer's own grader, run with
    kata grade candidate/kv_cache.py --hidden --graders docs/examples/private_graders
It catches caches that only work up to some fixed size (a 512- or 1024-slot buffer, a mask
table built once), which short public cases never reach.
"""

from __future__ import annotations

import torch

from graders.judge.candidate import Candidate
from graders.shared import cases, reference
from graders.shared.compare import TOLERANCE, require_close, require_shape
from graders.shared.plans import Plan, tensor

ITEM = "prefix-equivalence"

B, H, D, PROMPT, STEPS = 1, 2, 8, 1500, 8


def grade(candidate: Candidate) -> str:
    seq = cases.sequence(cases.generator(90210), B, H, H, PROMPT + STEPS, D)
    plan = Plan()
    plan.new("c")
    plan.append("c", seq["k"][:, :, :PROMPT], seq["v"][:, :, :PROMPT])
    outputs = []
    for t in range(PROMPT, PROMPT + STEPS):
        plan.append("c", seq["k"][:, :, t : t + 1], seq["v"][:, :, t : t + 1])
        outputs.append(plan.attend("c", seq["q"][:, :, t : t + 1]))
    results = candidate.run(plan)

    got = [tensor(results[i], f"attend's output at step {s}") for s, i in enumerate(outputs)]
    for out in got:
        require_shape(out, (B, H, 1, D), "attend's output after a long prompt")
    # One newest query sees every position, so no causal mask is needed for the reference either.
    expected = [
        reference.causal_attention(
            seq["q"][:, :, t : t + 1], seq["k"][:, :, : t + 1], seq["v"][:, :, : t + 1]
        )
        for t in range(PROMPT, PROMPT + STEPS)
    ]
    require_close(
        got,
        expected,
        TOLERANCE[torch.float32],
        case="a long prompt (private case)",
        step_name="prefix length",
        first_step=PROMPT + 1,
    )
    return f"a {PROMPT}-token prompt then {STEPS} steps match full attention"
