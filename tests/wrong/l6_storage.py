"""Wrong implementations of how the cache stores and reads: heads, dtypes, growth, finished rows.

Each is the reference solution with one mistake candidates make, judged by the L6 items gqa,
low-precision, prealloc and finished-beams; `fails` lists every item (L4-L6) it fails. The GQA,
dtype and growth mistakes show in their own item only (every other item uses MHA, float32 or
float64, and judges outputs, not allocation). The two count-0 mistakes break ragged rows in
general, so every item that decodes rows skipping steps fails them too.
"""

from __future__ import annotations

from graders.shared.mutation import Mutant
from tests.wrong import wrong

_GROUPS = "q = query.reshape(batch, kv_heads, groups, head_dim)"
_RETURN = "return out.reshape(batch, q_heads, 1, head_dim).to(query.dtype)"
_SCORES = "scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)"
_GROWTH = "capacity = _next_power_of_two(needed)"
_VALIDATE = "counts = _validate_append(cache, new_key, new_value, counts)"
_DECODE_ATTENTION = """\
    keys = cache.keys.repeat(1, heads // kv_heads, 1, 1)  # [B, Hq, T, D]
    values = cache.values.repeat(1, heads // kv_heads, 1, 1)
    scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)  # [B, Hq, 1, T]
    past_end = torch.arange(keys.shape[2]) >= cache.lengths[:, None]  # [B, T]
    weights = torch.softmax(scores.masked_fill(past_end[:, None, None, :], float("-inf")), dim=-1)
    out = (weights @ values.float()).to(q.dtype)  # [B, Hq, 1, D]
"""
_OFFSETS = "    offsets = torch.arange(t, device=new_key.device)\n"
_STORE = "    cache.k_storage, cache.v_storage = k, v\n"
_PAST_END = (
    "    past_end = torch.arange(keys.shape[2], device=keys.device) >= cache.lengths[:, None]\n"
)
_FORK_LENGTHS = "        copy.lengths = cache.lengths.clone()\n"

WRONG = [
    wrong(
        Mutant(
            "gqa-head-mapping-modulo",
            "query heads grouped as [B, G, Hkv, D]: head h reads KV head "
            "h % Hkv (what `repeat` gives) instead of h // G",
            replace=(
                (_GROUPS, "q = query.reshape(batch, groups, kv_heads, head_dim).transpose(1, 2)"),
                (
                    _RETURN,
                    "return out.transpose(1, 2).reshape(batch, q_heads, 1, head_dim)"
                    ".to(query.dtype)",
                ),
            ),
        ),
        fails={"gqa"},
    ),
    wrong(
        Mutant(
            "gqa-kv-repeated-in-cache",
            "decode_step repeats k and v for the query heads before "
            "appending: right outputs from a cache n_heads / n_kv_heads times too big",
            replace=(
                (
                    "    append(cache, k, v, counts)\n",
                    "    k = k.repeat_interleave(heads // kv_heads, dim=1)  # [B, Hq, 1, D]\n"
                    "    v = v.repeat_interleave(heads // kv_heads, dim=1)\n"
                    "    append(cache, k, v, counts)\n",
                ),
            ),
        ),
        fails={"gqa"},
    ),
    wrong(
        Mutant(
            "gqa-decode-own-attention-modulo",
            "decode_step attends by itself instead of calling "
            "attend, expanding the cached heads with `repeat`: query head h reads KV head h % Hkv",
            replace=(("    out = attend(cache, q)\n", _DECODE_ATTENTION),),
        ),
        fails={"gqa"},
    ),
    wrong(
        Mutant(
            "gqa-unsupported",
            "attend handles only as many query heads as KV heads and raises otherwise",
            replace=(
                (
                    "    if q_heads % kv_heads:\n",
                    "    if q_heads != kv_heads:\n"
                    '        raise ValueError("heads: GQA is not supported")\n'
                    "    if q_heads % kv_heads:\n",
                ),
            ),
        ),
        fails={"gqa"},
    ),
    wrong(
        Mutant(
            "softmax-in-cache-dtype",
            "scores and softmax in the cache's dtype: fp16 scores overflow, "
            "bf16 scores are rounded to steps of 128 near 20000",
            replace=((_SCORES, "scores = (q @ keys.transpose(-1, -2)) / math.sqrt(head_dim)"),),
        ),
        fails={"low-precision"},
    ),
    wrong(
        Mutant(
            "low-precision-stored-as-float32",
            "bf16/fp16 keys and values are upcast to float32 in "
            "storage, the cache remembering the caller's dtype to validate and answer in",
            replace=(
                ('("dtype", new_key.dtype, stored.dtype)', '("dtype", new_key.dtype, cache.dtype)'),
                ('("dtype", query.dtype, stored.dtype)', '("dtype", query.dtype, cache.dtype)'),
                (
                    "    k = like.new_zeros(batch, kv_heads, capacity, head_dim)\n"
                    "    v = like.new_zeros(batch, kv_heads, capacity, head_dim)\n",
                    "    cache.dtype = like.dtype\n"
                    "    low = like.dtype in (torch.bfloat16, torch.float16)\n"
                    "    dtype = torch.float32 if low else like.dtype\n"
                    "    k = like.new_zeros(batch, kv_heads, capacity, head_dim, dtype=dtype)\n"
                    "    v = like.new_zeros(batch, kv_heads, capacity, head_dim, dtype=dtype)\n",
                ),
                (
                    "cache.k_storage[rows, :, dst] = new_key[rows, :, src]",
                    "cache.k_storage[rows, :, dst] = new_key[rows, :, src].to(cache.k_storage.dtype)",
                ),
                (
                    "cache.v_storage[rows, :, dst] = new_value[rows, :, src]",
                    "cache.v_storage[rows, :, dst] = new_value[rows, :, src].to(cache.v_storage.dtype)",
                ),
                (
                    "        copy.lengths = cache.lengths.clone()\n",
                    "        copy.lengths = cache.lengths.clone()\n        copy.dtype = cache.dtype\n",
                ),
            ),
        ),
        fails={"low-precision"},
    ),
    wrong(
        Mutant(
            "float32-output-for-low-precision",
            "attend computes in at least float32 (float64 stays "
            "float64) and returns that, so a bf16 or fp16 query gets a float32 answer",
            replace=(
                (
                    "out = weights.to(values.dtype) @ values",
                    "out = weights.to(torch.promote_types(values.dtype, torch.float32)) @ values.to("
                    "torch.promote_types(values.dtype, torch.float32))",
                ),
                (_RETURN, "return out.reshape(batch, q_heads, 1, head_dim)"),
            ),
        ),
        fails={"low-precision"},
    ),
    wrong(
        Mutant(
            "grows-to-fit",
            "storage grows to exactly the slots needed, a new buffer and a full copy "
            "at every single-token append (the concat strategy, without torch.cat)",
            replace=((_GROWTH, "capacity = needed"),),
        ),
        fails={"prealloc"},
        tells={"concat-every-step"},
    ),
    wrong(
        Mutant(
            "grows-by-8-slots",
            "storage grows by a constant 8 slots when full: n/8 reallocations "
            "and O(n^2) bytes copied",
            replace=((_GROWTH, "capacity = max(needed, cache.capacity + 8)"),),
        ),
        fails={"prealloc"},
    ),
    wrong(
        Mutant(
            "grows-by-1024-slots",
            "storage grows to the next multiple of 1024 slots past what it "
            "needs: no growth in a few hundred positions, then a reallocation every 2048 and O(n^2) "
            "bytes copied over a long run",
            replace=((_GROWTH, "capacity = 1024 * -(-(needed + 1024) // 1024)"),),
        ),
        fails={"prealloc"},
    ),
    wrong(
        Mutant(
            "exact-fit-for-chunks",
            "a multi-position append grows the storage to exactly what it "
            "needs (a prefill path); only single tokens double it",
            replace=(
                (_GROWTH, "capacity = needed if like.shape[2] > 1 else _next_power_of_two(needed)"),
            ),
        ),
        fails={"prealloc"},
    ),
    wrong(
        Mutant(
            "grows-by-64-slots",
            "storage grows to the next multiple of 64 slots",
            replace=((_GROWTH, "capacity = 64 * -(-needed // 64)"),),
        ),
        fails={"prealloc"},
    ),
    wrong(
        Mutant(
            "rebuilds-causal-mask",
            "each growth also builds a [capacity, capacity] boolean causal "
            "mask, which attend reads one row of: O(capacity^2) bytes held and allocated",
            replace=(
                (
                    _STORE,
                    _STORE + "    cache.causal = torch.ones(capacity, capacity, "
                    "dtype=torch.bool, device=like.device).tril()\n",
                ),
                (
                    _PAST_END,
                    "    causal = cache.causal[cache.lengths.clamp_min(1) - 1, "
                    ": keys.shape[2]]  # [B, T]\n"
                    "    past_end = (torch.arange(keys.shape[2], device=keys.device) "
                    ">= cache.lengths[:, None]) | ~causal\n",
                ),
                (_FORK_LENGTHS, _FORK_LENGTHS + "        copy.causal = cache.causal\n"),
            ),
        ),
        fails={"prealloc"},
    ),
    wrong(
        Mutant(
            "count-zero-grows",
            "a single-token append (decoding) adds one position to every row, "
            "ignoring counts: finished rows grow by their padding",
            replace=(
                (
                    _VALIDATE,
                    _VALIDATE + "\n    if new_key.shape[2] == 1:  # decoding: every row "
                    "takes its token\n        counts = torch.ones_like(counts)",
                ),
            ),
        ),
        fails={
            "finished-beams",
            "ragged-batch",
            "release",
            "length-vs-capacity",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
        },
    ),
    wrong(
        Mutant(
            "count-zero-overwrites-last",
            "a single-token append writes each row's key at "
            "lengths + counts - 1: a row with counts 0 overwrites its last real position",
            replace=(
                (
                    _OFFSETS,
                    "    if t == 1:  # decoding: each row's new key goes to its last position\n"
                    "        last = new_lengths - 1  # [B]\n"
                    "        cache.k_storage[torch.arange(batch), :, last] = new_key[:, :, 0]\n"
                    "        cache.v_storage[torch.arange(batch), :, last] = new_value[:, :, 0]\n"
                    "        cache.lengths = new_lengths\n"
                    "        return\n" + _OFFSETS,
                ),
            ),
        ),
        fails={
            "finished-beams",
            "ragged-batch",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
        },
    ),
]
