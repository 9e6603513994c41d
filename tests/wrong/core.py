"""Wrong implementations of the L4/L5 core: append, attend, lengths and capacity.

Each is the reference solution with one mistake candidates make, and lists every item it fails:
a broken attend breaks everything built on it (decode_step, GQA, beams), as it would in a
candidate's file. lengths-python-int leaves validate-shapes out on purpose: its validation is
right, only the type of `lengths` is wrong, which append-time-dim judges. empty_unwritten_slots
is a design of its own (tests/implementations/wrong/), torch.empty storage whose shorter rows
read slots never written: the worker fills new memory with NaN, so it fails the same items every
run. `fails` is what the public cases fail; drops-writes-past-capacity also fails the hidden
prefix-equivalence (chunks that cross a requested capacity).
"""

from __future__ import annotations

from pathlib import Path

from graders.shared.mutation import Mutant
from tests.wrong import wrong

FILES = Path(__file__).resolve().parent.parent / "implementations" / "wrong"

SCORES = "scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)"
SOFTMAX = "weights = torch.softmax(scores, dim=-1)"
ROW_MASK = (
    "    past_end = torch.arange(keys.shape[2], device=keys.device) >= cache.lengths[:, None]\n"
    '    scores = scores.masked_fill(past_end[:, None, None, :], float("-inf"))\n'
)

APPEND_ON_HEADS = '''
def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None):
    """Append new_key, new_value ([B, Hkv, t, D]) to the cache."""
    counts = _validate_append(cache, new_key, new_value, counts)  # [B]
    if cache.k_storage is None:
        cache.k_storage, cache.v_storage = new_key.clone(), new_value.clone()
        cache.lengths = counts.clone()
        return
    cache.k_storage = torch.cat((cache.k_storage, new_key), dim=1)
    cache.v_storage = torch.cat((cache.v_storage, new_value), dim=1)
    cache.lengths = cache.lengths + counts
'''

APPEND_ONE_LENGTH = '''
def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None):
    """Append new_key, new_value ([B, Hkv, t, D]) along time."""
    _validate_append(cache, new_key, new_value, counts)
    t = new_key.shape[2]
    length = cache.lengths or 0  # every row has the same length
    _reserve(cache, length + t, new_key)
    cache.k_storage[:, :, length : length + t] = new_key
    cache.v_storage[:, :, length : length + t] = new_value
    cache.lengths = length + t
'''

FIXED_SIZE_RESERVE = '''
def _reserve(cache: KVCache, needed: int, like: Tensor) -> None:
    """Allocate once, like a static cache: KVCache(capacity=N) holds N slots (4096 by default)."""
    if cache.k_storage is not None:
        return
    capacity = max(cache.requested_capacity or 4096, needed)
    batch, kv_heads, _, head_dim = like.shape
    cache.k_storage = like.new_zeros(batch, kv_heads, capacity, head_dim)
    cache.v_storage = like.new_zeros(batch, kv_heads, capacity, head_dim)
'''

WRONG = [
    wrong(
        Mutant(
            "append-on-heads",
            "append concatenates along dim 1 (kv_heads), not time, so it cannot check kv_heads",
            replace=(('            ("kv_heads", kv_heads, stored.shape[1]),\n', ""),),
            functions={"append": APPEND_ON_HEADS},
        ),
        fails={
            "append-time-dim",
            "attend-shape",
            "prefix-equivalence",
            "validate-shapes",
            "stable-softmax",
            "reset",
            "release",
            "length-vs-capacity",
            "ragged-batch",
            "kv-only",
            "gqa",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
            "finished-beams",
            "low-precision",
            "prealloc",
        },
        tells={"concat-every-step"},
    ),
    wrong(
        Mutant(
            "attend-whole-capacity",
            "attend reads every allocated slot, with no length mask",
            replace=(
                (
                    "keys, values = cache.keys, cache.values",
                    "keys, values = cache.k_storage, cache.v_storage",
                ),
                (ROW_MASK, ""),
            ),
        ),
        fails={
            "prefix-equivalence",
            "stable-softmax",
            "reset",
            "release",
            "length-vs-capacity",
            "ragged-batch",
            "gqa",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
            "finished-beams",
            "low-precision",
        },
    ),
    wrong(
        Mutant(
            "attend-no-row-mask",
            "attend over max(lengths) positions without a per-row mask",
            replace=((ROW_MASK, ""),),
        ),
        fails={
            "release",
            "ragged-batch",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
            "finished-beams",
        },
    ),
    wrong(
        Mutant(
            "valid-from-data",
            "attend takes a slot whose keys are all zero for an empty "
            "one (storage starts zeroed, release zeroes the row) instead of masking by "
            "lengths: a real all-zero key is left out",
            replace=(
                (
                    "past_end = torch.arange(keys.shape[2], device=keys.device) >= "
                    "cache.lengths[:, None]",
                    "past_end = (keys == 0).all(dim=-1).all(dim=1)",
                ),
                (
                    "weights = weights.masked_fill((cache.lengths == 0)[:, None, None, None], 0.0)",
                    "weights = weights.nan_to_num(0.0)",
                ),
                (
                    "    cache.lengths[index] = 0\n",
                    "    cache.lengths[index] = 0\n"
                    "    cache.k_storage[index] = 0\n"
                    "    cache.v_storage[index] = 0\n",
                ),
            ),
        ),
        fails={"ragged-batch"},
    ),
    wrong(
        Mutant(
            "masks-zero-keys",
            "attend also excludes positions whose key is all zeros, "
            "taking them for slots never written",
            replace=(
                (
                    ROW_MASK,
                    ROW_MASK + "    empty = (keys == 0).all(dim=-1)  # [B, Hkv, T]\n"
                    "    scores = scores.masked_fill(empty[:, :, None, :], "
                    'float("-inf"))\n',
                ),
            ),
        ),
        fails={"ragged-batch"},
    ),
    wrong(
        FILES / "empty_unwritten_slots.py",
        fails={
            "release",
            "ragged-batch",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
            "finished-beams",
        },
    ),
    wrong(
        Mutant(
            "no-scale",
            "scores are not scaled by 1/sqrt(head_dim)",
            replace=((SCORES, SCORES.replace(" / math.sqrt(head_dim)", "")),),
        ),
        fails={
            "prefix-equivalence",
            "stable-softmax",
            "reset",
            "release",
            "length-vs-capacity",
            "ragged-batch",
            "gqa",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
            "finished-beams",
            "low-precision",
        },
    ),
    wrong(
        Mutant(
            "scale-one-over-d",
            "scores are scaled by 1/head_dim",
            replace=((SCORES, SCORES.replace("math.sqrt(head_dim)", "head_dim")),),
        ),
        fails={
            "prefix-equivalence",
            "stable-softmax",
            "reset",
            "release",
            "length-vs-capacity",
            "ragged-batch",
            "gqa",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
            "finished-beams",
            "low-precision",
        },
    ),
    wrong(
        Mutant(
            "softmax-wrong-axis",
            "softmax over dim -2 (the one query position), not the cached positions",
            replace=((SOFTMAX, "weights = torch.softmax(scores, dim=-2)"),),
        ),
        fails={
            "prefix-equivalence",
            "stable-softmax",
            "reset",
            "release",
            "length-vs-capacity",
            "ragged-batch",
            "gqa",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
            "finished-beams",
            "low-precision",
        },
    ),
    wrong(
        Mutant(
            "softmax-no-max",
            "softmax as exp(s) / sum(exp(s)), no maximum subtracted",
            replace=(
                (SOFTMAX, "exp = scores.exp()\n    weights = exp / exp.sum(dim=-1, keepdim=True)"),
            ),
        ),
        fails={"stable-softmax", "low-precision"},
    ),
    wrong(
        Mutant(
            "softmax-batch-max",
            "softmax subtracts one maximum for the whole batch",
            replace=(
                (
                    SOFTMAX,
                    "exp = (scores - scores.max()).exp()\n"
                    "    weights = exp / exp.sum(dim=-1, keepdim=True)",
                ),
            ),
        ),
        fails={"stable-softmax"},
    ),
    wrong(
        Mutant(
            "counts-ignored",
            "append checks counts, then writes all t positions to every row",
            replace=(
                (
                    "counts = _validate_append(cache, new_key, new_value, counts)\n"
                    "    batch, _, t, _ = new_key.shape\n",
                    "_validate_append(cache, new_key, new_value, counts)\n"
                    "    batch, _, t, _ = new_key.shape\n"
                    "    counts = torch.full((batch,), t, dtype=torch.int64, device=new_key.device)\n",
                ),
            ),
        ),
        fails={
            "release",
            "length-vs-capacity",
            "ragged-batch",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
            "finished-beams",
        },
    ),
    wrong(
        Mutant(
            "writes-padding",
            "append writes all t positions of every row; lengths grow by counts",
            replace=(
                (
                    "real = offsets < counts[:, None]",
                    "real = torch.ones(batch, t, dtype=torch.bool, device=new_key.device)",
                ),
                (
                    "_reserve(cache, int(new_lengths.max()), new_key)",
                    "_reserve(cache, int(lengths.max()) + t, new_key)",
                ),
            ),
        ),
        fails={"ragged-batch", "finished-beams"},
    ),
    wrong(
        Mutant(
            "shared-write-offset",
            "every row's new positions written at max(lengths), not its own length",
            replace=(
                (
                    "dst = (lengths[:, None] + offsets)[real]",
                    "dst = (lengths.max() + offsets).expand(batch, t)[real]",
                ),
                (
                    "_reserve(cache, int(new_lengths.max()), new_key)",
                    "_reserve(cache, int(lengths.max()) + t, new_key)",
                ),
            ),
        ),
        fails={"release", "ragged-batch", "rope-absolute", "rope-fork-offset", "beam-reorder"},
    ),
    wrong(
        Mutant(
            "lengths-python-int",
            "lengths is one Python int for the whole batch, so counts go unused",
            replace=(
                (
                    "self.k_storage[:, :, : int(self.lengths.max())]",
                    "self.k_storage[:, :, : self.lengths]",
                ),
                (
                    "self.v_storage[:, :, : int(self.lengths.max())]",
                    "self.v_storage[:, :, : self.lengths]",
                ),
                (ROW_MASK, ""),
                (
                    "    weights = weights.masked_fill((cache.lengths == 0)[:, None, None, None], 0.0)\n",
                    "",
                ),
                (
                    "if cache.lengths is not None and cache.lengths.shape[0] != batch:\n"
                    '        raise ValueError(f"batch: x has {batch}, cache has {cache.lengths.shape[0]}")',
                    "if cache.k_storage is not None and cache.k_storage.shape[0] != batch:\n"
                    '        raise ValueError(f"batch: x has {batch}, cache has {cache.k_storage.shape[0]}")',
                ),
                (
                    "lengths = cache.lengths if cache.lengths is not None else torch.zeros(batch, dtype=torch.int64)",
                    "lengths = torch.full((batch,), cache.lengths or 0)",
                ),
            ),
            functions={"append": APPEND_ONE_LENGTH},
        ),
        fails={
            "append-time-dim",
            "release",
            "length-vs-capacity",
            "ragged-batch",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
            "finished-beams",
        },
    ),
    wrong(
        Mutant(
            "capacity-is-max-length",
            "capacity reports max(lengths), not the allocated slots",
            replace=(
                (
                    "return 0 if self.k_storage is None else self.k_storage.shape[2]",
                    "return 0 if self.k_storage is None else int(self.lengths.max())",
                ),
                ("needed <= cache.capacity:", "needed <= cache.k_storage.shape[2]:"),
                (
                    "k[:, :, : cache.capacity] = cache.k_storage",
                    "k[:, :, : cache.k_storage.shape[2]] = cache.k_storage",
                ),
                (
                    "v[:, :, : cache.capacity] = cache.v_storage",
                    "v[:, :, : cache.v_storage.shape[2]] = cache.v_storage",
                ),
            ),
        ),
        fails={"length-vs-capacity"},
    ),
    wrong(
        Mutant(
            "drops-writes-past-capacity",
            "a fixed-size cache (KVCache(capacity=N), 4096 "
            "slots by default) never grows: positions appended past its last slot are "
            "dropped, while lengths still count them",
            functions={"_reserve": FIXED_SIZE_RESERVE},
            replace=(
                (
                    "real = offsets < counts[:, None]",
                    "real = (offsets < counts[:, None]) & (lengths[:, None] + offsets < "
                    "cache.capacity)",
                ),
            ),
        ),
        fails={"length-vs-capacity"},
    ),
    wrong(
        Mutant(
            "capacity-request-ignored",
            "KVCache(capacity=N) allocates only what the first append needs",
            replace=(("self.requested_capacity = capacity or 0", "self.requested_capacity = 0"),),
        ),
        fails={"length-vs-capacity"},
    ),
    wrong(
        Mutant(
            "keys-whole-storage",
            "keys and values return the whole storage (time = capacity)",
            replace=(
                ("self.k_storage[:, :, : int(self.lengths.max())]", "self.k_storage"),
                ("self.v_storage[:, :, : int(self.lengths.max())]", "self.v_storage"),
            ),
        ),
        fails={"append-time-dim", "length-vs-capacity", "kv-only"},
    ),
    wrong(
        Mutant(
            "attend-drops-query-axis",
            "attend returns [B, Hq, D]: the query's time axis is squeezed away",
            replace=(
                (
                    "return out.reshape(batch, q_heads, 1, head_dim).to(query.dtype)",
                    "return out.reshape(batch, q_heads, head_dim).to(query.dtype)",
                ),
            ),
        ),
        fails={
            "attend-shape",
            "prefix-equivalence",
            "validate-dtype-device",
            "stable-softmax",
            "reset",
            "release",
            "length-vs-capacity",
            "ragged-batch",
            "gqa",
            "rope-absolute",
            "rope-fork-offset",
            "beam-reorder",
            "finished-beams",
            "low-precision",
        },
    ),
]
