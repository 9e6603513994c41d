"""Wrong implementations of positions at L6: RoPE in decode_step, fork, and beam reorder.

Each is the reference solution with one mistake candidates make, and lists every item (L4-L6)
it fails. Several pass every output check on uniform batches and fail only where the graders
look harder: a position shifted by the same offset for q and k (only the cached keys show it),
one position for the whole batch (only ragged rows show it), lengths left unreordered (only rows
of different lengths show it). A RoPE mistake also fails rope-fork-offset (its rows are ragged
before the fork and its keys are checked), and beam-reorder when it shows on uniform rows (the
beam search decodes through decode_step); beam-reorder's fixed-index part uses append and attend
only, so reorder mistakes fail nothing else.
"""

from __future__ import annotations

from graders.shared.mutation import Mutant
from tests.wrong import wrong

POSITIONS = "    positions = lengths.to(x.device)[:, None]\n"
ROTATE_Q = "    q = apply_rope(q, positions, layer.rope_base)\n"
ROTATE_K = "    k = apply_rope(k, positions, layer.rope_base)\n"
REORDER_K = "    cache.k_storage = cache.k_storage.index_select(0, beam_idx)\n"
REORDER_V = "    cache.v_storage = cache.v_storage.index_select(0, beam_idx)\n"
REORDER_LENGTHS = "    cache.lengths = cache.lengths.index_select(0, beam_idx)\n"

ROPE_PAIRS = '''
def rope_pairs(x: Tensor, positions: Tensor, base: float) -> Tensor:
    """RoPE as in the paper: rotate each pair (x[2i], x[2i+1]) by position * base^(-2i/D)."""
    head_dim = x.shape[-1]
    inv_freq = base ** (-torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)  # [D/2]
    angles = (positions.float()[..., None] * inv_freq)[:, None]  # [B, 1, T, D/2]
    even, odd = x.float()[..., 0::2], x.float()[..., 1::2]
    rotated = torch.stack((even * angles.cos() - odd * angles.sin(),
                           odd * angles.cos() + even * angles.sin()), dim=-1)
    return rotated.flatten(-2).to(x.dtype)
'''

ROTATE_AT_ATTEND = (
    ROTATE_Q + ROTATE_K + "\n    append(cache, k, v, counts)\n    out = attend(cache, q)\n",
    "    append(cache, k, v, counts)  # keys cached as projected; RoPE is applied when reading\n"
    "    T = cache.keys.shape[2]\n"
    "    q = apply_rope(q, torch.full((batch, 1), T - 1), layer.rope_base)\n"
    "    rotated = KVCache()\n"
    "    rotated.k_storage = apply_rope(cache.keys, torch.arange(T).expand(batch, T), layer.rope_base)\n"
    "    rotated.v_storage, rotated.lengths = cache.values, cache.lengths\n"
    "    out = attend(rotated, q)  # [B, Hq, 1, D]\n",
)

FORK_SHALLOW = '''
def fork(cache: KVCache) -> KVCache:
    """A copy of the cache object with storage of its own."""
    twin = copy.copy(cache)  # every attribute shared, lengths included
    if cache.k_storage is not None:
        twin.k_storage, twin.v_storage = cache.k_storage.clone(), cache.v_storage.clone()
    return twin
'''

REORDER_SCATTER = '''
def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    """Beam reordering: old row j moves to row beam_idx[j]."""
    for name in ("k_storage", "v_storage", "lengths"):
        old = getattr(cache, name)
        new = old.clone()
        new[beam_idx] = old
        setattr(cache, name, new)
'''

REORDER_ROW_LOOP = '''
def reorder(cache: KVCache, beam_idx: Tensor) -> None:
    """Beam reordering in place, row by row: new row j is old row beam_idx[j]."""
    for j, i in enumerate(beam_idx.tolist()):
        cache.k_storage[j] = cache.k_storage[i]
        cache.v_storage[j] = cache.v_storage[i]
    cache.lengths = cache.lengths[beam_idx]
'''

WRONG = [
    # RoPE positions in decode_step
    wrong(
        Mutant(
            "rope-position-zero",
            "positions of the new token within x (always 0), as in a prefill",
            replace=(
                (
                    POSITIONS,
                    "    positions = torch.arange(x.shape[1]).expand(batch, -1)  # [B, 1]\n",
                ),
            ),
        ),
        fails={"rope-absolute", "rope-fork-offset", "beam-reorder"},
    ),
    wrong(
        Mutant(
            "rope-longest-row",
            "one position for the batch: the time dimension of cache.keys",
            replace=(
                (
                    POSITIONS,
                    "    start = 0 if cache.keys is None else cache.keys.shape[2]\n"
                    "    positions = torch.full((batch, 1), start)  # [B, 1]\n",
                ),
            ),
        ),
        fails={"rope-absolute", "rope-fork-offset"},
    ),
    wrong(
        Mutant(
            "rope-query-unrotated",
            "RoPE applied to the key before caching, never to the query",
            replace=((ROTATE_Q, ""),),
        ),
        fails={"rope-absolute", "rope-fork-offset", "beam-reorder"},
    ),
    wrong(
        Mutant(
            "rope-key-unrotated",
            "RoPE applied to the query only; keys cached as projected",
            replace=((ROTATE_K, ""),),
        ),
        fails={"rope-absolute", "rope-fork-offset", "beam-reorder"},
    ),
    wrong(
        Mutant(
            "rope-interleaved",
            "decode_step rotates with its own RoPE, pairs (2i, 2i+1)",
            replace=(
                ("apply_rope(q, positions", "rope_pairs(q, positions"),
                ("apply_rope(k, positions", "rope_pairs(k, positions"),
            ),
            functions={"rope_pairs": ROPE_PAIRS},
        ),
        fails={"rope-absolute", "rope-fork-offset", "beam-reorder"},
    ),
    wrong(
        Mutant(
            "rope-one-position-late",
            "positions are the lengths after appending (1-based)",
            replace=(
                (POSITIONS, "    positions = (lengths + 1).to(x.device)[:, None]  # [B, 1]\n"),
            ),
        ),
        fails={"rope-absolute", "rope-fork-offset"},
    ),
    wrong(
        Mutant(
            "rope-at-attend-time",
            "keys cached before RoPE, rotated when read; the query at the "
            "longest row's last position",
            replace=(ROTATE_AT_ATTEND,),
        ),
        fails={"rope-absolute", "rope-fork-offset"},
    ),
    # fork
    wrong(
        Mutant(
            "fork-shares-storage",
            "fork copies the references to storage, not the tensors",
            replace=(
                ("copy.k_storage = cache.k_storage.clone()", "copy.k_storage = cache.k_storage"),
                ("copy.v_storage = cache.v_storage.clone()", "copy.v_storage = cache.v_storage"),
            ),
        ),
        fails={"rope-fork-offset"},
    ),
    wrong(
        Mutant(
            "fork-forgets-lengths",
            "fork copies keys and values but not lengths",
            replace=(("        copy.lengths = cache.lengths.clone()\n", ""),),
        ),
        fails={"rope-fork-offset"},
    ),
    wrong(
        Mutant(
            "fork-shares-lengths",
            "fork is a shallow copy with cloned storage, and append "
            "grows lengths in place, so both branches grow one lengths tensor",
            replace=(
                ("import math\n", "import copy\nimport math\n"),
                (
                    "    cache.lengths = new_lengths\n",
                    "    if cache.lengths is None:\n        cache.lengths = new_lengths\n"
                    "    else:\n        cache.lengths += counts  # in place\n",
                ),
            ),
            functions={"fork": FORK_SHALLOW},
        ),
        fails={"rope-fork-offset"},
    ),
    wrong(
        Mutant(
            "fork-returns-itself",
            "fork returns the cache it was given",
            functions={"fork": "def fork(cache: KVCache) -> KVCache:\n    return cache\n"},
        ),
        fails={"rope-fork-offset"},
    ),
    # reorder
    wrong(
        Mutant(
            "reorder-keys-only",
            "reorder moves keys but not values or lengths",
            replace=((REORDER_V, ""), (REORDER_LENGTHS, "")),
        ),
        fails={"beam-reorder"},
    ),
    wrong(
        Mutant(
            "reorder-not-lengths",
            "reorder moves keys and values but not lengths",
            replace=((REORDER_LENGTHS, ""),),
        ),
        fails={"beam-reorder"},
    ),
    wrong(
        Mutant(
            "reorder-in-place",
            "reorder copies the gathered rows into the old storage: B' must be B",
            replace=(
                (REORDER_K, "    cache.k_storage.copy_(cache.k_storage[beam_idx])\n"),
                (REORDER_V, "    cache.v_storage.copy_(cache.v_storage[beam_idx])\n"),
            ),
        ),
        fails={"beam-reorder"},
    ),
    wrong(
        Mutant(
            "reorder-scatter",
            "reorder scatters old row j to row beam_idx[j] instead of gathering",
            functions={"reorder": REORDER_SCATTER},
        ),
        fails={"beam-reorder"},
    ),
    wrong(
        Mutant(
            "reorder-row-loop",
            "reorder copies rows in place one by one, overwriting rows still to be read",
            functions={"reorder": REORDER_ROW_LOOP},
        ),
        fails={"beam-reorder"},
    ),
]
