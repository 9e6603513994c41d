"""Wrong implementations rewritten from bugs that public KV caches shipped (issue 30).

Each is a mistake a real cache made, rewritten into the contract, with the items it must fail
publicly. Two are mutants of a correct design of fixed 256-position segments
(tests/implementations/segmented.py): its reorder moving only the newest segment (transformers'
QuantizedCache never reordered its quantized part), which passed every item until the beam items
reordered caches of more than 1,000 positions; and its fork sharing the full segments, which only
hidden rope-fork-offset catches (SEGMENTED_FORK_SHARES_OLD, graded in tests/test_hidden.py).
The others are mutants of the reference solutions:
- growth that triggers only when a row is exactly full: an append that crosses the capacity
  part-way overflows (public length-vs-capacity appends such chunks);
- a fixed 2048 slots (Meta's Llama reference: max_seq_len), never grown;
- a release that clears head `index` of every row: with an index below kv_heads no IndexError
  gives it away, only the other rows' data;
- SDPA called with is_causal=True: one query sees key 0 alone (PyTorch #103082).
Two paged ones only the hidden int8 cases catch, so they are in tests/test_hidden.py: an int8
copy-on-write that forgets the scales, and a free that hands out blocks a fork still holds.
"""

from __future__ import annotations

from pathlib import Path

from graders.shared.mutation import Mutant
from tests.wrong import wrong

ROOT = Path(__file__).resolve().parent.parent
SDPA = ROOT / "implementations" / "sdpa.py"
SEGMENTED = ROOT / "implementations" / "segmented.py"

_RESERVED = "    if cache.k_storage is not None and needed <= cache.capacity:\n"
_GROWTH = "        capacity = _next_power_of_two(needed)\n"
_RELEASED = "    cache.lengths[index] = 0\n"

SEGMENTED_FORK_SHARES_OLD = Mutant(
    "segmented-fork-shares-old",
    "fixed 256-position segments; fork copies only the newest "
    "segment and shares the full ones (they are full: why copy them?)",
    replace=(
        (
            "    copy.k_segments = [s.clone() for s in cache.k_segments]\n"
            "    copy.v_segments = [s.clone() for s in cache.v_segments]\n",
            "    copy.k_segments = [*cache.k_segments[:-1], cache.k_segments[-1].clone()]\n"
            "    copy.v_segments = [*cache.v_segments[:-1], cache.v_segments[-1].clone()]\n",
        ),
    ),
    base=SEGMENTED,
)

WRONG = [
    wrong(
        Mutant(
            "segmented-reorders-newest",
            "fixed 256-position segments; reorder index-selects only "
            "the newest segment (the residual) and the lengths, and checks shapes against it",
            replace=(
                (
                    "        stored = cache.k_segments[0]\n",
                    "        stored = cache.k_segments[-1]\n",
                ),
                (
                    "    stored = cache.k_segments[0]\n    kv_heads",
                    "    stored = cache.k_segments[-1]\n    kv_heads",
                ),
                (
                    "    cache.k_segments = [s.index_select(0, beam_idx) for s in cache.k_segments]\n"
                    "    cache.v_segments = [s.index_select(0, beam_idx) for s in cache.v_segments]\n",
                    "    cache.k_segments[-1] = cache.k_segments[-1].index_select(0, beam_idx)\n"
                    "    cache.v_segments[-1] = cache.v_segments[-1].index_select(0, beam_idx)\n",
                ),
            ),
            base=SEGMENTED,
        ),
        fails={"beam-reorder"},
    ),
    wrong(
        Mutant(
            "grows-only-when-full",
            "storage grows only when the longest row is exactly at the "
            "capacity: an append that crosses it part-way writes past the storage",
            replace=(
                (
                    _RESERVED,
                    "    if cache.k_storage is not None and "
                    "int(cache.lengths.max()) < cache.capacity:\n",
                ),
            ),
        ),
        fails={"length-vs-capacity", "beam-reorder"},
    ),
    wrong(
        Mutant(
            "fixed-2048-slots",
            "storage of max_seq_len = 2048 slots (or the capacity asked for), "
            "allocated at the first append and never grown (Meta's Llama reference)",
            replace=(
                (_RESERVED, "    if cache.k_storage is not None:\n"),
                (_GROWTH, "        capacity = 2048\n"),
            ),
        ),
        fails={"length-vs-capacity", "prealloc"},
    ),
    wrong(
        Mutant(
            "release-clears-a-head",
            "release zeroes storage[:, index] (head `index` of every row) "
            "where it means row `index`",
            replace=(
                (
                    _RELEASED,
                    _RELEASED + "    cache.k_storage[:, index] = 0\n"
                    "    cache.v_storage[:, index] = 0\n",
                ),
            ),
        ),
        fails={"release"},
    ),
    wrong(
        Mutant(
            "sdpa-is-causal",
            "attend calls scaled_dot_product_attention with is_causal=True instead "
            "of the lengths mask: its mask is aligned top-left, so the one query sees key 0 alone",
            replace=(("attn_mask=mask,", "is_causal=True,"),),
            base=SDPA,
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
]
