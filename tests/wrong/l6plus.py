"""Wrong implementations of contract section 8 (L6+): rollbacks, chunks and windows (issue 42).

Mutants of the reference solution, each a bug that public caches shipped in speculative
decoding or sliding windows, rewritten into the contract. Each passes L4 to L6 (it changes only
section 8's code), so its L6+ items run, and lists every item it fails:
- rollback that keeps everything on crop(0) (a length of 0 read as "no limit");
- truncate to the current length emptying the row (`keys[:, :, :-0]` is empty);
- a rollback longer than a row wrapping around as a negative slice does, instead of raising;
- a trim that moves the offset (positions) but keeps the held count, so the slots before the
  window's oldest position (the dropped drafts') come back into a later chunk's view;
- one acceptance count applied to every row (row 0's number of rejected drafts);
- a ring buffer that gives its slots back in storage order (right until it wraps);
- a window one position too wide, one too narrow;
- a chunk without the causal mask: it fails every L6+ item, since the rollback's verification
  and the window's chunks are chunks too.
"""

from __future__ import annotations

from graders.shared.mutation import Mutant
from tests.wrong import wrong

_KEEP_ALL = "        cache.lengths = keep.clone()\n"
_RANGE = "    if (keep < 0).any() or (keep > seen).any():\n"
_WINDOW_KEEP = "    cache.lengths, cache.seen = (keep - oldest).clamp_min(0), keep.clone()\n"
_CAUSAL = (
    "    visible = (slot < held[:, None])[:, None, :] & (at[:, None, :] <= asks[:, :, None])\n"
)
_WINDOW_CHUNK = "        visible &= at[:, None, :] > asks[:, :, None] - cache.window\n"
_WINDOW_NEWEST = "    seen_from = cache.seen[:, None] - cache.window\n"
_TIME_ORDER = "    return storage.gather(2, index)\n"

WRONG = [
    wrong(
        Mutant(
            "truncate-zero-keeps-all",
            "truncate reads a length of 0 as no limit (a falsy "
            "max_length), so a row rolled back to 0 keeps everything",
            replace=((_KEEP_ALL, "        cache.lengths = torch.where(keep == 0, seen, keep)\n"),),
        ),
        fails={"speculative-rollback"},
    ),
    wrong(
        Mutant(
            "truncate-current-empties",
            "truncate slices off the rejected count from the end, "
            "keys[:, :, :-dropped]: with nothing dropped, [:-0] keeps nothing",
            replace=((_KEEP_ALL, "        cache.lengths = torch.where(keep == seen, 0, keep)\n"),),
        ),
        fails={"speculative-rollback"},
    ),
    wrong(
        Mutant(
            "truncate-negative-wraps",
            "truncate takes a negative length as a negative slice does "
            "(that many from the end) instead of raising: a rollback longer than a row wraps around",
            replace=(
                (
                    _RANGE,
                    "    keep = torch.where(keep < 0, seen + keep, keep)\n"
                    "    if (keep < 0).any() or (keep > seen).any():\n",
                ),
            ),
        ),
        fails={"speculative-rollback"},
    ),
    wrong(
        Mutant(
            "trim-moves-offset-only",
            "truncate on a windowed cache moves the positions back but "
            "keeps the count of held positions, so the view starts before the oldest one held, at "
            "slots the dropped drafts wrote",
            replace=((_WINDOW_KEEP, "    cache.seen = keep.clone()\n"),),
        ),
        fails={"speculative-rollback"},
    ),
    wrong(
        Mutant(
            "one-acceptance-count",
            "truncate rolls every row back by row 0's number of rejected "
            "drafts (one count for the batch)",
            replace=(
                (_KEEP_ALL, "        cache.lengths = (seen - (seen[0] - keep[0])).clamp_min(0)\n"),
            ),
        ),
        fails={"speculative-rollback"},
    ),
    wrong(
        Mutant(
            "ring-in-storage-order",
            "a windowed cache's keys and values are its ring's slots in "
            "storage order: right until the ring wraps, then the oldest position is not first",
            replace=((_TIME_ORDER, "    return storage[:, :, :span]\n"),),
        ),
        fails={"sliding-window"},
    ),
    wrong(
        Mutant(
            "window-one-too-wide",
            "the window's mask lets the query at p see p - W as well",
            replace=(
                (_WINDOW_CHUNK, _WINDOW_CHUNK.replace("- cache.window", "- cache.window - 1")),
                (_WINDOW_NEWEST, _WINDOW_NEWEST.replace("- cache.window", "- cache.window - 1")),
            ),
        ),
        fails={"sliding-window"},
    ),
    wrong(
        Mutant(
            "window-one-too-narrow",
            "the window's mask hides p - W + 1 from the query at p",
            replace=(
                (_WINDOW_CHUNK, _WINDOW_CHUNK.replace("- cache.window", "- cache.window + 1")),
                (_WINDOW_NEWEST, _WINDOW_NEWEST.replace("- cache.window", "- cache.window + 1")),
            ),
        ),
        fails={"sliding-window"},
    ),
    wrong(
        Mutant(
            "chunk-without-causal-mask",
            "attend_chunk masks by lengths alone: every query of the "
            "chunk sees the whole chunk, the positions after its own included",
            replace=(
                (
                    _CAUSAL,
                    "    visible = (slot < held[:, None])[:, None, :].expand(-1, t, -1).clone()\n",
                ),
            ),
        ),
        fails={"chunk-causal-mask", "speculative-rollback", "sliding-window", "real-model"},
    ),
]
