"""The hidden graders (graders/hidden/): correct code passes them, and each catches a mistake its
item's public grader lets through.

Every hidden file has at least one `Mutant` of the reference here: a realistic mistake that the
public grader of that item passes and the hidden one does not. Since grade.py runs an item's
public graders before its hidden ones and prefixes a hidden grader's message with "hidden case: ",
a non-pass whose message starts with that prefix says both: the public grader passed, the hidden
one did not. Each mutant is graded once, with --hidden, on its items only; all grades run up
front, a few at a time.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from graders.grade import HIDDEN, PUBLIC, GradeResult, grade, load_graders
from graders.mutation import REFERENCE, Mutant

PARALLEL = 3

_WRITES = '''    cache.k_storage[rows, :, dst] = new_key[rows, :, src]  # [N, Hkv, D]
    cache.v_storage[rows, :, dst] = new_value[rows, :, src]
'''
_FLAT_WRITES = '''    # Every (row, head, position) written is one row of the storage seen as [B*Hkv*capacity, D].
    b, h, i = torch.arange(batch)[:, None, None], torch.arange(kv_heads)[:, None], torch.arange(t)
    slots = ((b * kv_heads + h) * cache.capacity + lengths[:, None, None] + i).reshape(-1)
    keep = (i < counts[:, None, None]).expand(batch, kv_heads, t).reshape(-1)
    cache.k_storage.view(-1, head_dim).index_copy_(0, slots[keep], new_key.view(-1, head_dim)[keep])
    cache.v_storage.view(-1, head_dim).index_copy_(0, slots[keep], new_value.view(-1, head_dim)[keep])
'''
_PAST_END = ("    past_end = torch.arange(keys.shape[2], device=keys.device) >= cache.lengths[:, None]"
             "  # [B, T]\n")
_MASK = '    scores = scores.masked_fill(past_end[:, None, None, :], float("-inf"))\n'
_SOFTMAX = "    weights = torch.softmax(scores, dim=-1)  # max-subtracted inside: stable for large logits\n"
_GROWTH = "        capacity = _next_power_of_two(needed)\n"
_ROPE = ("    q = apply_rope(q, positions, layer.rope_base)\n"
         "    k = apply_rope(k, positions, layer.rope_base)\n")
_ROPE_TABLE = '''
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
_EXPANDING_REORDER = '''
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

# (mutant, the items whose hidden grader must catch it)
MUTANTS = [
    (Mutant("doubles-once", "storage starts at 16 slots and doubles once when an append does not "
            "fit: an append larger than what the cache holds overflows it (IndexError)",
            replace=((_GROWTH, "        capacity = (2 * cache.capacity if cache.k_storage is not None"
                               " else max(16, _next_power_of_two(needed)))\n"),)),
     {"append-time-dim", "prefix-equivalence"}),
    (Mutant("flat-scatter-views-input", "append scatters the new rows into the storage seen as "
            "[B*Hkv*capacity, D], taking them with new_key.view(-1, D): a transposed input raises",
            replace=((_WRITES, _FLAT_WRITES),
                     ("    batch, _, t, _ = new_key.shape\n", "    batch, kv_heads, t, head_dim = new_key.shape\n"))),
     {"append-time-dim", "prefix-equivalence"}),
    (Mutant("mask-buffer-of-512", "attend masks with positions from a buffer built once for 512 "
            "positions (nanoGPT's block_size): past 512 the mask no longer fits the scores",
            replace=((_PAST_END, "    past_end = POSITIONS[: keys.shape[2]] >= cache.lengths[:, None]\n"),
                     ("def _next_power_of_two", "POSITIONS = torch.arange(512)  # block_size\n\n\n"
                                                "def _next_power_of_two"))),
     {"attend-shape", "prefix-equivalence"}),
    (Mutant("counts-shape-by-numel", "append checks that counts has B elements, not that it is [B]",
            replace=(("    if counts.shape != (batch,):\n", "    if counts.numel() != batch:\n"),)),
     {"validate-shapes"}),
    (Mutant("heads-check-reversed", "attend checks kv_heads % query_heads instead of query_heads % "
            "kv_heads",
            replace=(("    if q_heads % kv_heads:\n", "    if kv_heads % q_heads:\n"),)),
     {"validate-shapes"}),
    (Mutant("value-device-unchecked", "append compares the key's device with the cache's, and the "
            "value's dtype with the key's, but never the value's device",
            replace=(("    if new_key.dtype != new_value.dtype or new_key.device != new_value.device:\n",
                      "    if new_key.dtype != new_value.dtype:\n"),)),
     {"validate-dtype-device"}),
    (Mutant("clamps-logits", "attend clamps the logits to +-1e4 as an overflow guard (on top of a "
            "stable softmax), which flattens larger logits",
            replace=((_SOFTMAX, "    weights = torch.softmax(scores.clamp(-1e4, 1e4), dim=-1)\n"),)),
     {"stable-softmax"}),
    (Mutant("reset-wipes-storage", "reset zeroes the stored keys and values before dropping them, "
            "which fails on a cache that has none",
            functions={"reset": '''
def reset(cache: KVCache) -> None:
    """Forget everything; wipe the data first so no stale keys or values survive."""
    cache.k_storage.zero_()
    cache.v_storage.zero_()
    cache.k_storage = cache.v_storage = cache.lengths = None
'''}),
     {"reset"}),
    (Mutant("additive-mask", "attend adds -1e4 to the scores of positions past a row's length "
            "instead of excluding them: huge stale keys of a released sequence still win",
            replace=((_MASK, "    scores = scores + past_end[:, None, None, :] * -1e4\n"),)),
     {"release"}),
    (Mutant("time-high-water-mark", "keys and values are cut at the longest the rows have been, "
            "a mark appends raise and nothing lowers",
            replace=(("        self.lengths: Tensor | None = None  # int64 [B]\n",
                      "        self.lengths: Tensor | None = None  # int64 [B]\n        self.time = 0\n"),
                     ("self.k_storage[:, :, : int(self.lengths.max())]", "self.k_storage[:, :, : self.time]"),
                     ("self.v_storage[:, :, : int(self.lengths.max())]", "self.v_storage[:, :, : self.time]"),
                     ("    cache.lengths = new_lengths\n",
                      "    cache.lengths = new_lengths\n    cache.time = max(cache.time, int(new_lengths.max()))\n"),
                     ("    cache.k_storage = cache.v_storage = cache.lengths = None\n",
                      "    cache.k_storage = cache.v_storage = cache.lengths = None\n    cache.time = 0\n"))),
     {"length-vs-capacity"}),
    (Mutant("masks-zero-keys", "attend also excludes positions whose key is all zeros, taking "
            "them for slots never written",
            replace=((_MASK, _MASK + "    scores = scores.masked_fill((keys == 0).all(dim=-1)[:, :, None, :], "
                                     "float(\"-inf\"))\n"),)),
     {"ragged-batch"}),
    (Mutant("zeroes-padding-in-place", "append zeroes the padding positions (past counts[b]) of the "
            "caller's new_key and new_value before writing",
            replace=((_WRITES, "    new_key.masked_fill_(~real[:, None, :, None], 0.0)\n"
                               "    new_value.masked_fill_(~real[:, None, :, None], 0.0)\n" + _WRITES),)),
     {"ragged-batch"}),
    (Mutant("keeps-newest-query", "decode_step keeps the newest query on the cache object",
            replace=(("    out = attend(cache, q)  # [B, Hq, 1, D]\n    return layer.wo(",
                      "    cache.last_query = q\n    out = attend(cache, q)  # [B, Hq, 1, D]\n"
                      "    return layer.wo("),)),
     {"kv-only"}),
    (Mutant("mqa-squeeze", "attend's MQA path drops the single KV head with .squeeze(), which "
            "also drops a batch of one",
            replace=(("    keys, values = cache.keys, cache.values  # [B, Hkv, T, D], T = max(lengths)\n",
                      "    keys, values = cache.keys, cache.values  # [B, Hkv, T, D], T = max(lengths)\n"
                      "    if kv_heads == 1:  # MQA: one KV head, broadcast over the query heads\n"
                      "        keys, values = keys.squeeze()[:, None], values.squeeze()[:, None]\n"),)),
     {"gqa"}),
    (Mutant("rope-table-of-256", "decode_step reads RoPE's cos and sin from a table built for 256 "
            "positions (a max_position_embeddings)",
            replace=((_ROPE, _ROPE.replace("apply_rope(", "_rope_from_table(")),
                     ("def _next_power_of_two", "MAX_POSITIONS = 256\n\n\ndef _next_power_of_two")),
            functions={"_rope_from_table": _ROPE_TABLE}),
     {"rope-absolute"}),
    (Mutant("fork-of-empty-is-itself", "fork of a cache that holds nothing returns the cache itself",
            functions={"fork": '''
def fork(cache: KVCache) -> KVCache:
    """An independent copy; an empty cache has nothing to copy and is returned as it is."""
    if cache.k_storage is None:
        return cache
    copy = KVCache(cache.requested_capacity)
    copy.k_storage, copy.v_storage = cache.k_storage.clone(), cache.v_storage.clone()
    copy.lengths = cache.lengths.clone()
    return copy
'''}),
     {"rope-fork-offset"}),
    (Mutant("expands-one-row-as-view", "reorder gives one row to every beam as an expanded view "
            "(no copy): the next in-place write into the shared memory raises",
            functions={"reorder": _EXPANDING_REORDER}),
     {"beam-reorder"}),
    (Mutant("storage-from-slots-written", "append sizes the storage from the largest slot it "
            "writes: with every row at counts 0 there is none (max of an empty tensor)",
            replace=(("    _reserve(cache, int(new_lengths.max()), new_key)\n", ""),
                     ("    dst = (lengths[:, None] + offsets)[real]  # [N]: time index in storage\n",
                      "    dst = (lengths[:, None] + offsets)[real]  # [N]: time index in storage\n"
                      "    _reserve(cache, int(dst.max()) + 1, new_key)\n"))),
     {"finished-beams"}),
    (Mutant("prescales-query-in-its-dtype", "attend scales the query by 1/sqrt(D) in the query's "
            "own dtype, then computes float32 scores: inexact for bf16/fp16 unless D is a power of 4",
            replace=(("    q = query.reshape(batch, kv_heads, groups, head_dim)  # [B, Hkv, G, D]\n",
                      "    q = (query * head_dim ** -0.5).reshape(batch, kv_heads, groups, head_dim)\n"),
                     ("    scores = (q.float() @ keys.float().transpose(-1, -2)) / math.sqrt(head_dim)",
                      "    scores = q.float() @ keys.float().transpose(-1, -2)"))),
     {"low-precision"}),
    (Mutant("exact-fit-for-chunks", "a multi-position append grows the storage to exactly what it "
            "needs (the prefill path); only single tokens double it",
            replace=((_GROWTH, "        capacity = needed if like.shape[2] > 1 else _next_power_of_two(needed)\n"),)),
     {"prealloc"}),
    (Mutant("grows-by-64-slots", "storage grows to the next multiple of 64 slots",
            replace=((_GROWTH, "        capacity = 64 * -(-needed // 64)\n"),)),
     {"prealloc"}),
]

HIDDEN_ITEMS = {g.item for g in load_graders(HIDDEN, hidden=True)}
PUBLIC_ITEMS = {g.item for g in load_graders(PUBLIC, hidden=False)}
TENSOR_PRINTOUT = re.compile(r"tensor\(|\[\s*-?\d+\.\d{3,}")  # a repr, or a list of floats


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> dict[str, GradeResult]:
    folder = tmp_path_factory.mktemp("hidden")

    def run(job: tuple[str, Path, set[str]]) -> tuple[str, GradeResult]:
        name, path, items = job
        return name, grade(path, hidden=True, only=items)

    jobs = [("reference", REFERENCE, HIDDEN_ITEMS)]
    for mutant, items in MUTANTS:
        (folder / mutant.name).mkdir()
        path = folder / mutant.name / "kv_cache.py"
        path.write_text(mutant.source())
        jobs.append((mutant.name, path, items))
    with ThreadPoolExecutor(PARALLEL) as pool:
        return dict(pool.map(run, jobs))


def test_one_hidden_grader_per_public_item():
    assert HIDDEN_ITEMS == PUBLIC_ITEMS - {"own-tests"}


def test_every_hidden_grader_has_a_mutant_it_catches():
    assert HIDDEN_ITEMS <= set().union(*(items for _, items in MUTANTS))


def test_the_reference_passes_every_hidden_case(graded):
    result = graded["reference"]
    assert not result.grader_broke
    failed = [f"{i.id}: {i.status}: {i.message}" for i in result.items if i.status != "pass"]
    assert not failed, "\n".join(failed)
    assert all("hidden case: " in i.message for i in result.items)


@pytest.mark.parametrize("mutant, items", MUTANTS, ids=[m.name for m, _ in MUTANTS])
def test_public_passes_and_hidden_catches(mutant, items, graded):
    result = graded[mutant.name]
    assert not result.grader_broke, "\n".join(i.message for i in result.items)
    for item in result.items:
        assert item.status != "pass", f"{item.id}: the hidden grader passed {mutant.name}"
        assert item.message.startswith("hidden case: "), (
            f"{item.id}: the public grader already fails {mutant.name}: {item.message}")
        assert re.search(r"seed \d+ \(", item.message), f"{item.id}: no seed named: {item.message}"
        assert not TENSOR_PRINTOUT.search(item.message), f"{item.id}: prints a tensor: {item.message}"
