"""Wrong implementations of the cache's lifecycle: reset between requests, release of one row.

Each fails `reset` or `release` and nothing else: decoding one batch from a new cache is right.
"""

from graders.shared.mutation import Mutant
from tests.wrong import wrong

_CAPACITY_ATTRIBUTE = '''
class KVCache:
    """One layer's cache; capacity is a plain attribute, set whenever storage is allocated."""

    def __init__(self, capacity: int | None = None, window: int | None = None):
        self.requested_capacity = capacity or 0
        self.window = window
        self.capacity = 0  # time slots allocated
        self.k_storage: Tensor | None = None  # [B, Hkv, capacity, D]
        self.v_storage: Tensor | None = None
        self.lengths: Tensor | None = None  # int64 [B]
        self.seen: Tensor | None = None  # int64 [B], with a window

    @property
    def positions(self) -> Tensor | None:
        return self.lengths if self.lengths is None or self.window is None else self.seen

    @property
    def keys(self) -> Tensor | None:
        if self.window is not None and self.k_storage is not None:
            return _in_time_order(self, self.k_storage)
        return None if self.k_storage is None else self.k_storage[:, :, : int(self.lengths.max())]

    @property
    def values(self) -> Tensor | None:
        if self.window is not None and self.v_storage is not None:
            return _in_time_order(self, self.v_storage)
        return None if self.v_storage is None else self.v_storage[:, :, : int(self.lengths.max())]
'''

_WRITE_OFFSETS = '''
def append(cache: KVCache, new_key: Tensor, new_value: Tensor, counts: Tensor | None = None):
    """Append along time. Each row writes at its own offset `ends[b]`, kept beside `lengths`."""
    counts = _validate_append(cache, new_key, new_value, counts)  # [B]
    batch, _, t, _ = new_key.shape
    lengths = cache.lengths if cache.lengths is not None else counts.new_zeros(batch)  # [B]
    ends = cache.ends if cache.ends is not None else counts.new_zeros(batch)  # [B]
    _reserve(cache, int((ends + counts).max()), new_key)
    offsets = torch.arange(t, device=new_key.device)  # [t]
    real = offsets < counts[:, None]  # [B, t]
    rows = torch.arange(batch, device=new_key.device)[:, None].expand(batch, t)[real]  # [N]
    src = offsets.expand(batch, t)[real]  # [N]
    dst = (ends[:, None] + offsets)[real]  # [N]: the mistake shows after release, see there
    cache.k_storage[rows, :, dst] = new_key[rows, :, src]
    cache.v_storage[rows, :, dst] = new_value[rows, :, src]
    cache.lengths, cache.ends = lengths + counts, ends + counts
'''

WRONG = [
    wrong(
        Mutant(
            "reset-rewinds-lengths",
            "reset sets every length to 0 and keeps the storage for reuse: "
            "keys are not None, capacity stays, and the old shape rejects a new batch",
            functions={
                "reset": '''
def reset(cache: KVCache) -> None:
    """Rewind every row to length 0, keeping the buffers for the next request."""
    cache.lengths = torch.zeros_like(cache.lengths)
'''
            },
        ),
        fails={"reset"},
    ),
    wrong(
        Mutant(
            "reset-only-lengths",
            "reset clears lengths only; the storage, its shape and dtype stay",
            functions={
                "reset": '''
def reset(cache: KVCache) -> None:
    """Forget the sequences."""
    cache.lengths = None
'''
            },
        ),
        fails={"reset"},
    ),
    wrong(
        Mutant(
            "reset-keeps-capacity",
            "capacity is an attribute of its own, and reset forgets storage and lengths but not it",
            functions={"KVCache": _CAPACITY_ATTRIBUTE},
            replace=(
                (
                    "cache.k_storage, cache.v_storage = k, v",
                    "cache.k_storage, cache.v_storage, cache.capacity = k, v, capacity",
                ),
                (
                    "copy.lengths = cache.lengths.clone()",
                    "copy.lengths, copy.capacity = cache.lengths.clone(), cache.capacity",
                ),
            ),
        ),
        fails={"reset"},
    ),
    wrong(
        Mutant(
            "release-does-nothing",
            "release leaves the row as it is",
            functions={
                "release": '''
def release(cache: KVCache, index: int) -> None:
    """Nothing to free: the slot is reused by whatever the scheduler appends next."""
'''
            },
        ),
        fails={"release"},
    ),
    wrong(
        Mutant(
            "release-zeros-storage",
            "release zeroes the row's keys and values but keeps its length",
            functions={
                "release": '''
def release(cache: KVCache, index: int) -> None:
    """Wipe the ended sequence's keys and values."""
    cache.k_storage[index] = 0
    cache.v_storage[index] = 0
'''
            },
        ),
        fails={"release"},
    ),
    wrong(
        Mutant(
            "release-clears-all-rows",
            "release sets every row's length to 0, not only `index`'s",
            functions={
                "release": '''
def release(cache: KVCache, index: int) -> None:
    """Sequence `index` ended."""
    cache.lengths = torch.zeros_like(cache.lengths)
'''
            },
        ),
        fails={"release"},
    ),
    wrong(
        Mutant(
            "release-removes-row",
            "release drops the row from the batch, so the batch shrinks",
            functions={
                "release": '''
def release(cache: KVCache, index: int) -> None:
    """Sequence `index` ended: take it out of the batch."""
    keep = [b for b in range(cache.lengths.shape[0]) if b != index]
    cache.k_storage, cache.v_storage = cache.k_storage[keep], cache.v_storage[keep]
    cache.lengths = cache.lengths[keep]
'''
            },
        ),
        fails={"release"},
    ),
    wrong(
        Mutant(
            "release-keeps-write-offset",
            "each row writes at a write offset kept beside lengths; "
            "release zeroes the length but not the offset, so the next sequence in that slot is "
            "written after the old one's keys while attention reads the old ones",
            functions={
                "append": _WRITE_OFFSETS,
                "reset": '''
def reset(cache: KVCache) -> None:
    """Forget everything; the next append may start a batch of any shape, dtype or device."""
    cache.k_storage = cache.v_storage = cache.lengths = cache.ends = None
''',
            },
            replace=(
                (
                    "self.lengths: Tensor | None = None",
                    "self.lengths: Tensor | None = None\n"
                    "        self.ends: Tensor | None = None  # int64 [B]: where row b writes next",
                ),
                (
                    "cache.lengths = cache.lengths.index_select(0, beam_idx)",
                    "cache.lengths = cache.lengths.index_select(0, beam_idx)\n"
                    "    cache.ends = cache.ends.index_select(0, beam_idx)",
                ),
                (
                    "copy.lengths = cache.lengths.clone()",
                    "copy.lengths, copy.ends = cache.lengths.clone(), cache.ends.clone()",
                ),
            ),
        ),
        fails={"release"},
    ),
]
