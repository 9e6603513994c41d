"""Wrong implementations of validation: what append and attend accept, and when they check it.

Each fails `validate-shapes` and/or `validate-dtype-device` and nothing else: the outputs on
compatible inputs are right, so only the graders that send incompatible ones can tell.
"""

from graders.shared.mutation import Mutant
from tests.wrong import wrong

_VALIDATE = "counts = _validate_append(cache, new_key, new_value, counts)"
_STORED_DTYPE = '            ("dtype", new_key.dtype, stored.dtype),\n'
_STORED_DEVICE = '            ("device", new_key.device, stored.device),\n'
_PAIR = "if new_key.dtype != new_value.dtype or new_key.device != new_value.device:"
_COUNTS_CHECKS = """    if not isinstance(counts, Tensor) or counts.dtype != torch.int64:
        got = counts.dtype if isinstance(counts, Tensor) else type(counts).__name__
        raise ValueError(f"counts dtype: expected an int64 tensor, got {got}")
    if counts.shape != (batch,):
        raise ValueError(f"counts shape: expected [{batch}], got {list(counts.shape)}")
    if counts.min() < 0 or counts.max() > t:
        raise ValueError(f"counts range: each must be in 0..{t}, got {counts.tolist()}")
"""
_QUERY_CHECKS = """    for name, got, want in (
        ("batch", batch, stored.shape[0]),
        ("head_dim", head_dim, stored.shape[3]),
        ("dtype", query.dtype, stored.dtype),
        ("device", query.device, stored.device),
    ):
        if got != want:
            raise ValueError(f"{name}: query has {got}, cache has {want}")
    if q_heads % kv_heads:
        raise ValueError(f"heads: query heads {q_heads} are not a multiple of kv_heads {kv_heads}")
"""

_GROW_FIRST = '''
def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None):
    """Append along time; makes room first, then checks the inputs (the mistake: too late)."""
    batch, _, t, _ = new_key.shape
    lengths = cache.lengths if cache.lengths is not None else torch.zeros(batch, dtype=torch.int64)
    _reserve(cache, int(lengths.max()) + t, new_key)  # grows (or allocates) before any check
    counts = _validate_append(cache, new_key, new_value, counts)  # [B]
    new_lengths = lengths + counts  # [B]
    offsets = torch.arange(t, device=new_key.device)  # [t]
    real = offsets < counts[:, None]  # [B, t]
    rows = torch.arange(batch, device=new_key.device)[:, None].expand(batch, t)[real]  # [N]
    src = offsets.expand(batch, t)[real]  # [N]
    dst = (lengths[:, None] + offsets)[real]  # [N]
    cache.k_storage[rows, :, dst] = new_key[rows, :, src]
    cache.v_storage[rows, :, dst] = new_value[rows, :, src]
    cache.lengths = new_lengths
'''

WRONG = [
    wrong(
        Mutant(
            "no-append-validation",
            "append checks nothing: trusts every shape, dtype and count",
            replace=(
                (
                    _VALIDATE,
                    "counts = counts if counts is not None else torch.full("
                    "(new_key.shape[0],), new_key.shape[2], dtype=torch.int64)",
                ),
            ),
        ),
        fails={"validate-shapes", "validate-dtype-device"},
    ),
    wrong(
        Mutant(
            "validates-after-growing",
            "append grows the storage first and validates after, so a "
            "rejected append has already reallocated (or, for a new dtype, converted) the cache",
            functions={"append": _GROW_FIRST},
        ),
        fails={"validate-shapes", "validate-dtype-device"},
    ),
    wrong(
        Mutant(
            "batch-not-checked",
            "append does not compare the batch size with the cache's",
            replace=(
                (
                    '            ("batch", batch, stored.shape[0]),\n            ("kv_heads"',
                    '            ("kv_heads"',
                ),
            ),
        ),
        fails={"validate-shapes"},
    ),
    wrong(
        Mutant(
            "head-dim-not-checked",
            "append does not compare head_dim with the cache's",
            replace=(
                (
                    '            ("head_dim", head_dim, stored.shape[3]),\n' + _STORED_DTYPE,
                    _STORED_DTYPE,
                ),
            ),
        ),
        fails={"validate-shapes"},
    ),
    wrong(
        Mutant(
            "counts-not-validated",
            "append uses counts as given: any dtype, shape or range",
            replace=((_COUNTS_CHECKS, ""),),
        ),
        fails={"validate-shapes"},
    ),
    wrong(
        Mutant(
            "dtype-not-checked",
            "append never compares dtypes: a float64 append regrows or writes "
            "into the float32 cache silently",
            replace=((_STORED_DTYPE, ""), (_PAIR, "if new_key.device != new_value.device:")),
        ),
        fails={"validate-dtype-device"},
    ),
    wrong(
        Mutant(
            "device-not-checked",
            "append never compares devices",
            replace=((_STORED_DEVICE, ""), (_PAIR, "if new_key.dtype != new_value.dtype:")),
        ),
        fails={"validate-dtype-device"},
    ),
    wrong(
        Mutant(
            "attend-returns-float32",
            "attend returns the float32 product of the float32 softmax, whatever the query's dtype",
            replace=(
                ("out = weights.to(values.dtype) @ values", "out = weights @ values.float()"),
                (
                    "return out.reshape(batch, q_heads, 1, head_dim).to(query.dtype)",
                    "return out.reshape(batch, q_heads, 1, head_dim)",
                ),
            ),
        ),
        fails={"validate-dtype-device", "low-precision"},
    ),
    wrong(
        Mutant(
            "attend-no-query-validation",
            "attend checks only that the cache is not empty, nothing "
            "about the query's batch, heads, head_dim, dtype or device",
            replace=((_QUERY_CHECKS, ""),),
        ),
        fails={"validate-shapes", "validate-dtype-device"},
    ),
    wrong(
        Mutant(
            "attend-scales-query-in-place",
            "attend scales the query in place, writing into the "
            "caller's tensor (outputs are right)",
            replace=(
                (
                    "    scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)",
                    "    q.mul_(1 / math.sqrt(head_dim))\n"
                    "    scores = q.float() @ keys.float().transpose(-1, -2)",
                ),
            ),
        ),
        fails={"validate-dtype-device"},
    ),
]
