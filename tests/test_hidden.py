"""The hidden graders (each item's `grade_hidden`, in its track's items package): correct code
passes them, and each catches a mistake its item's public grader lets through.

Every item's hidden cases have at least one `Mutant` of the reference here: a realistic mistake
that the public grader of that item passes and the hidden one does not. grade.py runs an item's
public grader before its hidden one and puts "hidden case: " in front of a hidden grader's
message, so a non-pass whose message starts with it says both: the public grader passed, the
hidden one did not. Each mutant is graded once, with --hidden, on its items only; all grades run
up front, a few at a time.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from graders.judge.grade import kata_graders
from graders.judge.result import GradeResult
from tests.grading import grade
from graders.shared.mutation import PAGED_REFERENCE, REFERENCE, Mutant
from graders.shared.rubric import load
from graders.shared.tracks import BATCHING, DENSE, MODEL_ITEM, SERVING
from tests.seeds import SEEDS
from tests.wrong.shipped_bugs import SEGMENTED_FORK_SHARES_OLD

pytestmark = pytest.mark.slow  # whole grades: `pytest -m "not slow"` is the quick loop

PARALLEL = 3
HIDDEN_ITEMS = {g.item for g in kata_graders(hidden=True)}
PUBLIC_ITEMS = {g.item for g in kata_graders(hidden=False)}
TENSOR_PRINTOUT = re.compile(r"tensor\(|\[\s*-?\d+\.\d{3,}")  # a repr, or a list of floats


@dataclass(frozen=True)
class HiddenOnly:
    """A mutant that the public graders of `items` pass and their hidden graders do not."""

    mutant: Mutant
    items: frozenset[str]


def hidden_only(mutant: Mutant, *items: str) -> HiddenOnly:
    return HiddenOnly(mutant, frozenset(items))


# Lines of the reference (solutions/kv_cache.py) that the mutants change.
GROWTH = "        capacity = _next_power_of_two(needed)\n"
SHAPE = "    batch, _, t, _ = new_key.shape\n"
WRITES = (
    "    cache.k_storage[rows, :, dst] = new_key[rows, :, src]\n"
    "    cache.v_storage[rows, :, dst] = new_value[rows, :, src]\n"
)
RESERVE = "    _reserve(cache, int(new_lengths.max()), new_key)\n"
DST = "    dst = (lengths[:, None] + offsets)[real]\n"
PAIR = "    if new_key.dtype != new_value.dtype or new_key.device != new_value.device:\n"
PAST_END = (
    "    past_end = torch.arange(keys.shape[2], device=keys.device) >= cache.lengths[:, None]\n"
)
MASK = '    scores = scores.masked_fill(past_end[:, None, None, :], float("-inf"))\n'
SOFTMAX = "    weights = torch.softmax(scores, dim=-1)"
KEYS = "    keys, values = cache.keys, cache.values\n"
GROUPED_Q = "    q = query.reshape(batch, kv_heads, groups, head_dim)\n"
SCORES = "    scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)"
ATTEND_IN_DECODE = "    out = attend(cache, q)\n"
ROPE = (
    "    q = apply_rope(q, positions, layer.rope_base)\n"
    "    k = apply_rope(k, positions, layer.rope_base)\n"
)
FIRST_DEF = "def _next_power_of_two"
LENGTHS_ATTR = "        self.lengths: Tensor | None = None\n"
NEW_LENGTHS = "    cache.lengths = new_lengths\n"
RESET = "    cache.k_storage = cache.v_storage = cache.lengths = None\n"

FLAT_WRITES = """\
    # Each (row, head, position) written is one row of the storage seen as [B*Hkv*capacity, D].
    b, h, i = torch.arange(batch)[:, None, None], torch.arange(kv_heads)[:, None], torch.arange(t)
    slots = ((b * kv_heads + h) * cache.capacity + lengths[:, None, None] + i).reshape(-1)
    keep = (i < counts[:, None, None]).expand(batch, kv_heads, t).reshape(-1)
    for stored, new in ((cache.k_storage, new_key), (cache.v_storage, new_value)):
        stored.view(-1, head_dim).index_copy_(0, slots[keep], new.view(-1, head_dim)[keep])
"""
WIPING_RESET = '''
def reset(cache: KVCache) -> None:
    """Forget everything; wipe the data first so no stale keys or values survive."""
    cache.k_storage.zero_()
    cache.v_storage.zero_()
    cache.k_storage = cache.v_storage = cache.lengths = None
'''
ROPE_FROM_TABLE = '''
def _rope_from_table(x, positions, base):
    """apply_rope, reading cos and sin from a table of MAX_POSITIONS rows (HF Llama's cache)."""
    half = x.shape[-1] // 2
    inv_freq = base ** (-torch.arange(0, x.shape[-1], 2, dtype=torch.float32) / x.shape[-1])
    angles = torch.arange(MAX_POSITIONS, dtype=torch.float32)[:, None] * inv_freq  # [P, D/2]
    emb = torch.cat((angles, angles), dim=-1)
    cos, sin = emb.cos()[positions][:, None], emb.sin()[positions][:, None]  # [B, 1, T, D]
    xf = x.float()
    return (xf * cos + torch.cat((-xf[..., half:], xf[..., :half]), dim=-1) * sin).to(x.dtype)
'''
FORK_RETURNING_EMPTY = '''
def fork(cache: KVCache) -> KVCache:
    """An independent copy; an empty cache has nothing to copy and is returned as it is."""
    if cache.k_storage is None:
        return cache
    copy = KVCache(cache.requested_capacity)
    copy.k_storage, copy.v_storage = cache.k_storage.clone(), cache.v_storage.clone()
    copy.lengths = cache.lengths.clone()
    return copy
'''
EXPANDING_REORDER = '''
def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    """New row j is old row beam_idx[j]; one row given to every beam is shared, not copied."""
    if cache.k_storage is None:
        raise ValueError("reorder on an empty cache")
    if beam_idx.dtype != torch.int64 or beam_idx.dim() != 1:
        raise ValueError("beam_idx must be a 1-d int64 tensor")
    if bool((beam_idx == beam_idx[0]).all()):  # beam expansion: a view of the one row, no copy
        n = len(beam_idx)
        cache.k_storage = cache.k_storage[beam_idx[:1]].expand(n, -1, -1, -1)
        cache.v_storage = cache.v_storage[beam_idx[:1]].expand(n, -1, -1, -1)
    else:
        cache.k_storage = cache.k_storage.index_select(0, beam_idx)
        cache.v_storage = cache.v_storage.index_select(0, beam_idx)
    cache.lengths = cache.lengths.index_select(0, beam_idx)
'''
# Two bugs of public caches that only the hidden cases of long caches and int8 pools catch
# (tests/wrong/shipped_bugs.py has the ones the public cases catch).
COW_COPY = "            for pool in (self.k_pool, self.v_pool, self.k_scale, self.v_scale):\n"
FREED = "            if self._refs[block] == 0:\n                self._free.append(block)\n"
FREE_COUNT = "        return len(self._free)\n"

MUTANTS = [
    hidden_only(
        Mutant(
            "doubles-once",
            "storage starts at 16 slots and doubles once when an append does not "
            "fit: an append larger than what the cache holds overflows it (IndexError)",
            replace=(
                (
                    GROWTH,
                    "        capacity = (2 * cache.capacity if cache.k_storage is not None\n"
                    "                    else max(16, _next_power_of_two(needed)))\n",
                ),
            ),
        ),
        "append-time-dim",
        "prefix-equivalence",
    ),
    hidden_only(
        Mutant(
            "flat-scatter-views-input",
            "append scatters the new rows into the storage seen as "
            "[B*Hkv*capacity, D], taking them with new_key.view(-1, D): a transposed input raises",
            replace=(
                (WRITES, FLAT_WRITES),
                (SHAPE, "    batch, kv_heads, t, head_dim = new_key.shape\n"),
            ),
        ),
        "append-time-dim",
        "prefix-equivalence",
    ),
    hidden_only(
        Mutant(
            "mask-buffer-of-512",
            "attend masks with positions from a buffer built once for 512 "
            "positions (nanoGPT's block_size): past 512 the mask no longer fits the scores",
            replace=(
                (
                    PAST_END,
                    PAST_END.replace(
                        "torch.arange(keys.shape[2], device=keys.device)",
                        "POSITIONS[: keys.shape[2]]",
                    ),
                ),
                (FIRST_DEF, "POSITIONS = torch.arange(512)  # block_size\n\n\n" + FIRST_DEF),
            ),
        ),
        "attend-shape",
        "prefix-equivalence",
    ),
    hidden_only(
        Mutant(
            "counts-shape-by-numel",
            "append checks that counts has B elements, not that it is [B]",
            replace=(("    if counts.shape != (batch,):\n", "    if counts.numel() != batch:\n"),),
        ),
        "validate-shapes",
    ),
    hidden_only(
        Mutant(
            "heads-check-reversed",
            "attend checks kv_heads % query_heads, not query_heads % kv_heads",
            replace=(("    if q_heads % kv_heads:\n", "    if kv_heads % q_heads:\n"),),
        ),
        "validate-shapes",
    ),
    hidden_only(
        Mutant(
            "value-device-unchecked",
            "append compares the key's device with the cache's and the "
            "value's dtype with the key's, but never the value's device",
            replace=((PAIR, "    if new_key.dtype != new_value.dtype:\n"),),
        ),
        "validate-dtype-device",
    ),
    hidden_only(
        Mutant(
            "clamps-logits",
            "attend clamps the logits to +-1e4 as an overflow guard (on top of a "
            "stable softmax), which flattens larger logits",
            replace=((SOFTMAX, "    weights = torch.softmax(scores.clamp(-1e4, 1e4), dim=-1)"),),
        ),
        "stable-softmax",
    ),
    hidden_only(
        Mutant(
            "masks-with-minus-1e4",
            "attend masks the slots past each row's length with -1e4 (older "
            "fp16 code's mask) instead of -inf: a row whose logits lie below it attends to them",
            replace=((MASK, MASK.replace('float("-inf")', "-1e4")),),
        ),
        "stable-softmax",
    ),
    hidden_only(
        Mutant(
            "reset-wipes-storage",
            "reset zeroes the stored keys and values before dropping them, "
            "which fails on a cache that has none",
            functions={"reset": WIPING_RESET},
        ),
        "reset",
    ),
    hidden_only(
        Mutant(
            "additive-mask",
            "attend adds -1e4 to the scores past a row's length instead of "
            "excluding them: a released sequence's huge stale keys still win",
            replace=((MASK, "    scores = scores + past_end[:, None, None, :] * -1e4\n"),),
        ),
        "release",
    ),
    hidden_only(
        Mutant(
            "time-high-water-mark",
            "keys and values are cut at the longest the rows have been, a "
            "mark appends raise and nothing lowers",
            replace=(
                (LENGTHS_ATTR, LENGTHS_ATTR + "        self.time = 0\n"),
                (
                    "self.k_storage[:, :, : int(self.lengths.max())]",
                    "self.k_storage[:, :, : self.time]",
                ),
                (
                    "self.v_storage[:, :, : int(self.lengths.max())]",
                    "self.v_storage[:, :, : self.time]",
                ),
                (
                    NEW_LENGTHS,
                    NEW_LENGTHS + "    cache.time = max(cache.time, int(new_lengths.max()))\n",
                ),
                (RESET, RESET + "    cache.time = 0\n"),
            ),
        ),
        "length-vs-capacity",
    ),
    hidden_only(
        Mutant(
            "zeroes-padding-in-place",
            "append zeroes the padding (positions past counts[b]) of the "
            "caller's new_key and new_value before writing",
            replace=(
                (
                    WRITES,
                    "    new_key.masked_fill_(~real[:, None, :, None], 0.0)\n"
                    "    new_value.masked_fill_(~real[:, None, :, None], 0.0)\n" + WRITES,
                ),
            ),
        ),
        "ragged-batch",
    ),
    hidden_only(
        Mutant(
            "keeps-newest-query",
            "decode_step keeps the newest query on the cache object",
            replace=((ATTEND_IN_DECODE, "    cache.last_query = q\n" + ATTEND_IN_DECODE),),
        ),
        "kv-only",
    ),
    hidden_only(
        Mutant(
            "mqa-squeeze",
            "attend's MQA path drops the single KV head with .squeeze(), which also "
            "drops a batch of one",
            replace=(
                (
                    KEYS,
                    KEYS + "    if kv_heads == 1:  # MQA: one KV head for every query head\n"
                    "        keys = keys.squeeze()[:, None]\n"
                    "        values = values.squeeze()[:, None]\n",
                ),
            ),
        ),
        "gqa",
    ),
    hidden_only(
        Mutant(
            "rope-table-of-256",
            "decode_step reads RoPE's cos and sin from a table built for 256 "
            "positions (a max_position_embeddings)",
            replace=(
                (ROPE, ROPE.replace("apply_rope(", "_rope_from_table(")),
                (FIRST_DEF, "MAX_POSITIONS = 256\n\n\n" + FIRST_DEF),
            ),
            functions={"_rope_from_table": ROPE_FROM_TABLE},
        ),
        "rope-absolute",
    ),
    hidden_only(
        Mutant(
            "fork-of-empty-is-itself",
            "fork of a cache that holds nothing returns that same cache",
            functions={"fork": FORK_RETURNING_EMPTY},
        ),
        "rope-fork-offset",
    ),
    hidden_only(
        Mutant(
            "fork-shares-lengths",
            "fork copies the storage but hands the fork the original's lengths "
            "tensor, and release zeroes a row of it in place: a release on either shows in both",
            replace=(
                (
                    "        copy.lengths = cache.lengths.clone()\n",
                    "        copy.lengths = cache.lengths\n",
                ),
                ("    cache.lengths = cache.lengths.clone()\n", ""),
            ),
        ),
        "rope-fork-offset",
    ),
    hidden_only(
        Mutant(
            "expands-one-row-as-view",
            "reorder gives one row to every beam as an expanded view (no "
            "copy): the next in-place write into the shared memory raises",
            functions={"reorder": EXPANDING_REORDER},
        ),
        "beam-reorder",
    ),
    hidden_only(
        Mutant(
            "storage-from-slots-written",
            "append sizes the storage from the largest slot it writes: "
            "with every row at counts 0 there is none (max of an empty tensor)",
            replace=(
                (RESERVE, ""),
                (DST, DST + "    _reserve(cache, int(dst.max()) + 1, new_key)\n"),
            ),
        ),
        "finished-beams",
    ),
    hidden_only(
        Mutant(
            "prescales-query-in-its-dtype",
            "attend scales the query by 1/sqrt(D) in the query's own "
            "dtype, then computes float32 scores: inexact in bf16/fp16 unless D is a power of 4",
            replace=(
                (
                    GROUPED_Q,
                    "    q = (query * head_dim ** -0.5).reshape(batch, kv_heads, groups, "
                    "head_dim)\n",
                ),
                (SCORES, "    scores = q.float() @ keys.float().transpose(-1, -2)"),
            ),
        ),
        "low-precision",
    ),
    hidden_only(
        Mutant(
            "regrows-by-requested-capacity",
            "once a requested capacity is full, storage grows by "
            "that capacity again: a constant step, where only KVCache(capacity=N) goes",
            replace=(
                (
                    GROWTH,
                    "        capacity = (max(needed, cache.capacity + cache.requested_capacity)"
                    " if cache.requested_capacity else _next_power_of_two(needed))\n",
                ),
            ),
        ),
        "prealloc",
    ),
    # The serving track (solutions/paged_kv_cache.py).
    hidden_only(
        Mutant(
            "paged-power-of-two-block-math",
            "positions split into block and slot with shifts and "
            "masks, right only when block_size is a power of two",
            replace=(
                (
                    "        blocks = torch.tensor(table, device=self.device)[pos // bs]\n"
                    "        slots = pos % bs\n",
                    "        blocks = torch.tensor(table, device=self.device)[pos >> (bs.bit_length() - 1)]\n"
                    "        slots = pos & (bs - 1)\n",
                ),
            ),
            base=PAGED_REFERENCE,
        ),
        "paged-equivalence",
        "paged-block-table",
        "quantized-kv",
    ),
    hidden_only(
        Mutant(
            "paged-masks-with-minus-1e4",
            "attend masks the slots past each sequence's length with "
            "-1e4 (older fp16 code's mask) instead of -inf: logits below it lose to them",
            replace=(
                (
                    'scores.masked_fill(past_end[:, None, None, :], float("-inf"))',
                    "scores.masked_fill(past_end[:, None, None, :], -1e4)",
                ),
            ),
            base=PAGED_REFERENCE,
        ),
        "paged-equivalence",
    ),
    hidden_only(
        Mutant(
            "paged-block-index-of-32",
            "attend gathers at most 32 blocks a sequence (a fixed-width "
            "block index, like a kernel's)",
            replace=(
                (
                    "        padded = [t + [0] * (width - len(t)) for t in tables]\n",
                    "        width = min(width, 32)\n"
                    "        padded = [t[:width] + [0] * (width - len(t[:width])) for t in tables]\n",
                ),
            ),
            base=PAGED_REFERENCE,
        ),
        "paged-equivalence",
        "quantized-kv",
    ),
    hidden_only(
        Mutant(
            "cow-only-when-it-fits",
            "copy-on-write only when the append stays inside the shared "
            "partial block; one that fills it and spills into new blocks writes into it in place",
            replace=(
                (
                    "cow = length % bs != 0 and self._refs[table[-1]] > 1",
                    "cow = length % bs != 0 and self._refs[table[-1]] > 1 and new_blocks == 0",
                ),
            ),
            base=PAGED_REFERENCE,
        ),
        "paged-cow",
    ),
    hidden_only(
        Mutant(
            "copy-before-growth-check",
            "the copy-on-write copy is made first, then the room for new "
            "blocks is checked: a CacheFull there leaves the copy taken",
            replace=(
                (
                    "        needed = new_blocks + int(cow)\n",
                    "        needed = new_blocks\n"
                    "        if cow:  # the copy first: it is needed whatever the growth\n"
                    "            if self._reserved.get(seq_id, 0) + self._unreserved() < 1:\n"
                    "                raise CacheFull(f'no free block to copy for {seq_id!r}')\n"
                    "            shared, table[-1] = table[-1], self._take()\n"
                    "            self._refs[shared] -= 1\n"
                    "            for pool in (self.k_pool, self.v_pool, self.k_scale, self.v_scale):\n"
                    "                if pool is not None:\n"
                    "                    pool[table[-1]] = pool[shared]\n"
                    "            cow = False\n",
                ),
            ),
            base=PAGED_REFERENCE,
        ),
        "paged-free",
    ),
    hidden_only(
        Mutant(
            "reservation-shrinks-by-tokens",
            "an admitted sequence's reservation shrinks by the tokens "
            "it appends, not the blocks it takes",
            replace=(
                (
                    "self._reserved[seq_id] = own - min(own, needed)",
                    "self._reserved[seq_id] = max(0, own - t)",
                ),
            ),
            base=PAGED_REFERENCE,
        ),
        "admission",
    ),
    hidden_only(
        Mutant(
            "evict-most-recently-used",
            "evict takes the most recently used sequence: an append moves "
            "a sequence to the end of the order, as an LRU list would",
            replace=(
                (
                    "        self._lengths[seq_id] = length + t\n",
                    "        self._lengths[seq_id] = length + t\n"
                    "        self._tables[seq_id] = self._tables.pop(seq_id)  # recently used: to the end\n",
                ),
            ),
            base=PAGED_REFERENCE,
        ),
        "eviction",
    ),
    hidden_only(SEGMENTED_FORK_SHARES_OLD, "rope-fork-offset"),
    # L6+ (contract section 8)
    hidden_only(
        Mutant(
            "chunk-mqa-squeeze",
            "attend_chunk's MQA path drops the single KV head with .squeeze(), "
            "which also drops a batch of one (real-model: assisted decoding's one row in the "
            "hidden MQA Llama; the public Llama is GQA 4/2)",
            replace=(
                (
                    "    k, v = cache.keys, cache.values\n",
                    "    k, v = cache.keys, cache.values\n"
                    "    if kv_heads == 1:  # MQA: one KV head for every query head\n"
                    "        k, v = k.squeeze()[:, None], v.squeeze()[:, None]\n",
                ),
            ),
        ),
        "chunk-causal-mask",
        MODEL_ITEM,
    ),
    hidden_only(
        Mutant(
            "truncate-type-unchecked",
            "truncate checks each length's range but not that lengths is "
            "an int64 [B] tensor: float lengths become the cache's, one row too many raises "
            "RuntimeError",
            replace=(
                (
                    "    if not isinstance(lengths, Tensor) or lengths.dtype != torch.int64 or "
                    "lengths.shape != (batch,):\n"
                    '        raise ValueError(f"lengths must be an int64 tensor [{batch}]")\n',
                    "",
                ),
            ),
        ),
        "speculative-rollback",
    ),
    hidden_only(
        Mutant(
            "window-skipped-rows-shrink",
            "a windowed append gives every row min(held + c, W + c - 1), "
            "the rows that took nothing (c = 0) too: they drop their oldest position",
            replace=(
                (
                    "    cache.lengths = torch.where(counts > 0, grown, held)\n",
                    "    cache.lengths = grown\n",
                ),
            ),
        ),
        "sliding-window",
    ),
    hidden_only(
        Mutant(
            "int8-cow-forgets-scales",
            "copy-on-write copies a shared block's int8 keys and values but not their scales",
            replace=((COW_COPY, "            for pool in (self.k_pool, self.v_pool):\n"),),
            base=PAGED_REFERENCE,
        ),
        "paged-cow",
    ),
    hidden_only(
        Mutant(
            "free-returns-shared-blocks",
            "free returns every block of the sequence, held by a fork "
            "or not; num_free_blocks counts the blocks no table holds, so it stays right",
            replace=(
                (FREED, "            self._free.append(block)\n"),
                (
                    FREE_COUNT,
                    "        held = {b for t in self._tables.values() for b in t}\n"
                    "        return len(self._refs) - len(held)\n",
                ),
            ),
            base=PAGED_REFERENCE,
        ),
        "paged-free",
    ),
]


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[tuple[str, int], GradeResult]:
    """(name, seed) -> the grade of the references and of each mutant, at every seed of SEEDS."""
    folder = tmp_path_factory.mktemp("hidden")
    jobs = [
        ("reference", REFERENCE, HIDDEN_ITEMS),
        ("paged reference", PAGED_REFERENCE, HIDDEN_ITEMS),
    ]
    for case in MUTANTS:
        path = folder / case.mutant.name / case.mutant.base.name
        path.parent.mkdir()
        path.write_text(case.mutant.source())
        jobs.append((case.mutant.name, path, case.items))

    def run(job: tuple[str, Path, set[str], int]) -> tuple[tuple[str, int], GradeResult]:
        name, path, items, seed = job
        track = SERVING if path.name == SERVING.implementation else DENSE
        return (name, seed), grade(path, track=track.id, hidden=True, only=set(items), seed=seed)

    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(pool.map(run, [(*job, seed) for job in jobs for seed in SEEDS]))


def test_one_hidden_grader_per_public_item():
    assert HIDDEN_ITEMS == PUBLIC_ITEMS - {"own-tests"}


def test_every_hidden_grader_catches_a_mutant():
    """The batching track's hidden graders are held by tests/test_batching_items.py, on the
    wrong schedulers of tests/wrong/batching.py."""
    batching = {i.id for i in load().items if BATCHING.owns(i.level)}
    assert HIDDEN_ITEMS - batching <= set().union(*(case.items for case in MUTANTS))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("reference", ["reference", "paged reference"])
def test_the_reference_passes_every_hidden_case(graded, reference, seed):
    result = graded[reference, seed]
    assert result.seed == seed
    assert not result.grader_broke
    failed = [f"{i.id}: {i.status}: {i.message}" for i in result.items if i.status != "pass"]
    assert not failed, "\n".join(failed)
    assert all("hidden case: " in i.message for i in result.items)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("case", MUTANTS, ids=[case.mutant.name for case in MUTANTS])
def test_public_passes_and_hidden_catches(case, graded, seed):
    result = graded[case.mutant.name, seed]
    assert not result.grader_broke, "\n".join(i.message for i in result.items)
    for item in result.items:
        name = case.mutant.name
        assert item.status != "pass", f"{item.id}: the hidden grader passed {name}"
        assert item.message.startswith("hidden case: "), (
            f"{item.id}: the public grader already fails {name}: {item.message}"
        )
        assert re.search(r"seed \d+ \(", item.message), f"{item.id}: no seed named: {item.message}"
        assert not TENSOR_PRINTOUT.search(item.message), (
            f"{item.id}: prints a tensor: {item.message}"
        )
