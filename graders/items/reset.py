"""reset: reset forgets the old batch entirely; a batch of another shape and dtype then works.

A cache is decoded for a few steps (B=2, H=2, D=8, float32), reset, and must then look exactly
like a new one: keys, values and lengths None, capacity 0. Then a batch of every other shape and
dtype (B=3, H=4, D=16, float64) is decoded through the same cache and compared with full causal
attention at every prefix. The usual mistakes: rewinding lengths but keeping the storage (whose
shape and dtype then reject the new batch, or whose capacity lingers), clearing the storage but
not a separately kept capacity or dtype, or clearing lengths only.

Tolerance: compare.TOLERANCE[float64], which is float32's: the contract's softmax runs in float32
even for a float64 cache.
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, Raised, tensor
from graders.compare import TOLERANCE, require_close, require_shape
from graders.worker.ops import Missing

ITEM = "reset"

OLD = dict(B=2, H=2, D=8, steps=3, dtype=torch.float32)
NEW = dict(B=3, H=4, D=16, steps=5, dtype=torch.float64)


def grade(candidate: Candidate) -> str:
    g = cases.generator(70)
    old = cases.sequence(g, OLD["B"], OLD["H"], OLD["H"], OLD["steps"], OLD["D"], OLD["dtype"])
    new = cases.sequence(g, NEW["B"], NEW["H"], NEW["H"], NEW["steps"], NEW["D"], NEW["dtype"])
    plan = Plan()
    plan.new("c")
    for t in range(OLD["steps"]):
        plan.append("c", old["k"][:, :, t : t + 1], old["v"][:, :, t : t + 1])
    plan.reset("c")
    after_reset = plan.state("c")
    steps = []  # (append, attend) per step; both may raise if reset kept the old batch's shape
    for t in range(NEW["steps"]):
        steps.append((plan.append("c", new["k"][:, :, t : t + 1], new["v"][:, :, t : t + 1],
                                  may_raise=True),
                      plan.attend("c", new["q"][:, :, t : t + 1], may_raise=True)))
    results = candidate.run(plan)

    state = results[after_reset]
    for name in ("keys", "values", "lengths", "capacity"):
        value = state[name]
        empty = _is_zero(value) if name == "capacity" else value is None
        if not empty:
            if isinstance(value, torch.Tensor) and value.dim():
                value = f"a tensor of shape {list(value.shape)}"
            elif value == repr(Missing):
                value = "unreadable (reading it raised AttributeError)"
            raise Fail(f"after reset, cache.{name} is {value}, expected "
                       f"{0 if name == 'capacity' else None}: reset must forget everything, as if "
                       "the cache were new")
    shape = [NEW["B"], NEW["H"], 1, NEW["D"]]
    got = []
    for t, (append, attend) in enumerate(steps):
        for op, index in (("append", append), ("attend", attend)):
            if isinstance(results[index], Raised):
                raised = results[index]
                raise Fail(f"after reset, {op} at step {t} of a new batch {shape} float64 raised "
                           f"{raised.type}: {raised.message[:200]}; the first append after reset "
                           "fixes batch, heads, head_dim and dtype anew")
        out = tensor(results[attend], f"attend's output at step {t} after reset")
        require_shape(out, tuple(shape), f"attend's output at step {t} after reset")
        got.append(out)
    full = reference.causal_attention(new["q"], new["k"], new["v"])
    require_close(got, [full[:, :, t : t + 1] for t in range(NEW["steps"])],
                  TOLERANCE[torch.float64], case=f"a new batch {shape} float64 after reset",
                  step_name="prefix length")
    return (f"after reset the cache is empty; a new batch {shape} float64 decodes within "
            f"{TOLERANCE[torch.float64]} of full causal attention at every prefix")


def _is_zero(value) -> bool:
    """Whether `value` is the number 0 (an int, or a one-element tensor)."""
    return (isinstance(value, (int, torch.Tensor)) and torch.as_tensor(value).numel() == 1
            and int(value) == 0)
