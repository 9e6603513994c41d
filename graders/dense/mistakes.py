"""The bundled mistakes that `own-tests` runs the candidate's tests against.

Each is the reference with one mistake that any equivalence test at every prefix catches on
ordinary random inputs (batch of a few rows, equal lengths, MHA, one token at a time): the
candidate's tests should fail on every one. Mistakes that need special inputs to show (ragged
rows, GQA, huge logits) are not here; they are the graders' job, not a fair test of tests.

Each edit is of statements matched on the syntax tree (`Mutant.statements`) or a whole function,
so a mistake applies to the reference however it is formatted. Every one is needed: for each,
a test file that catches all the others passes `own-tests` without it
(tests/test_bundled_mistakes.py).
"""

from __future__ import annotations

from graders.shared.mutation import Mutant

_SCORES = "scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)"
_MASK = 'scores = scores.masked_fill(past_end[:, None, None, :], float("-inf"))'
_PAST_END = "past_end = torch.arange(keys.shape[2], device=keys.device) >= cache.lengths[:, None]"

MISTAKES = (
    Mutant(
        "no-scale",
        "scores are not scaled by 1/sqrt(head_dim)",
        statements=((_SCORES, "scores = q.float() @ keys.float().transpose(-1, -2)"),),
    ),
    Mutant(
        "scale-by-head-dim",
        "scores are scaled by 1/head_dim",
        statements=((_SCORES, "scores = (q.float() @ keys.float().transpose(-1, -2)) / head_dim"),),
    ),
    Mutant(
        "softmax-wrong-axis",
        "softmax over the query-group axis instead of the cached positions",
        statements=(
            ("weights = torch.softmax(scores, dim=-1)", "weights = torch.softmax(scores, dim=-2)"),
        ),
    ),
    Mutant(
        "values-are-keys",
        "attention weights multiply the keys instead of the values",
        statements=(
            ("out = weights.to(values.dtype) @ values", "out = weights.to(keys.dtype) @ keys"),
        ),
    ),
    Mutant(
        "attends-over-capacity",
        "attention runs over every allocated slot, not the valid prefix",
        statements=(
            (
                "keys, values = cache.keys, cache.values",
                "keys, values = cache.k_storage, cache.v_storage",
            ),
            (_MASK, ""),
        ),
    ),
    Mutant(
        "drops-newest",
        "the newest position is left out of attention",
        statements=((_PAST_END, _PAST_END + " - 1"),),
    ),
    Mutant(
        "causal-mask-on-newest",
        "a causal mask built for a 1-row query hides all but position 0",
        statements=((_MASK, _MASK + '\nscores[..., 1:] = float("-inf")'),),
    ),
    Mutant(
        "overwrites-first-slot",
        "every append writes at position 0, so the prefix is lost",
        statements=(
            ("dst = (lengths[:, None] + offsets)[real]", "dst = offsets.expand(batch, t)[real]"),
        ),
    ),
    Mutant(
        "appends-on-heads",
        "append concatenates along the head dimension instead of time",
        functions={
            "append": '''
def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None):
    """Append along dim 1 (the mistake: that is kv_heads, not time)."""
    batch, _, t, _ = new_key.shape
    if cache.k_storage is None:
        cache.k_storage, cache.v_storage = new_key, new_value
        cache.lengths = torch.full((batch,), t, dtype=torch.int64)
    else:
        cache.k_storage = torch.cat((cache.k_storage, new_key), dim=1)
        cache.v_storage = torch.cat((cache.v_storage, new_value), dim=1)
'''
        },
    ),
)

# Mistakes a test that checks only shapes catches too: they change the output's shape. Catching
# only these does not clear the `shape-only-tests` tell.
SHAPE_MISTAKES = frozenset({"appends-on-heads"})
