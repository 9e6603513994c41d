"""Wrong schedulers for the batching track (contract section 6), each one named mistake.

Each is a mutant of the learner's solution (solutions/scheduler.py): the diff is the bug. `fails`
is the set of the contract's batching rubric ids the scheduler must not pass once the track's
items grade it (phase 2 of issue 34: the judge's replay names each concern): the item the
mistake is about, and what it drags with it on the track's public workloads: a stall leaves
outputs incomplete (batch-equivalence), is a stall (preemption) and never finishes
(iteration-level); decodes held back behind a 200-token prompt take 19 steps where the
reference takes 16 (iteration-level's 1.1x). Each set was checked against the judge's
replay (graders.batching.replay) on the public workloads while it was being written: every rule
it found is in the set, iteration-level's figures from its step counts.
tests/test_batching_solutions.py checks today, with the track's driver and a ledger of its own,
that each one breaks the rule it is named for.

tests/test_batching_items.py grades all nine through the worker's operations and the judge's
reply check, in-process; WRONG, the list tests/test_wrong_implementations.py grades as a
candidate's file through a real worker, holds two of them (one rule of the trace, one figure):
the nine grade alike either way, and nine whole grades more would cost the suite ~45 s.
"""

from __future__ import annotations

from dataclasses import dataclass

from graders.shared.bundled import SOLUTIONS
from graders.shared.mutation import Mutant
from graders.shared.tracks import BATCHING
from tests.wrong import Wrong

SOLUTION = SOLUTIONS / "scheduler.py"

_ADMIT = (
    "        while not preempted and self.waiting and len(self.running) < "
    "self.max_num_seqs \\\n"
    "                and tokens_left > 0:\n"
    "            seq = self.waiting[0]\n"
)
_FITS = "            if self._blocks(start + n) - len(cached) + to_hold > self.pool.num_free():\n"
_POP_HEAD = "            self.waiting.popleft()\n"
_BUDGET_LEFT = "        tokens_left = self.max_batched_tokens - sum(n for _, n in plan)\n"
_RELEASE = (
    "                self.running.remove(seq)\n                self.pool.release(seq.block_table)\n"
)


@dataclass(frozen=True)
class WrongScheduler:
    """A wrong scheduler and exactly the batching items it must fail."""

    mutant: Mutant
    fails: frozenset[str]

    @property
    def name(self) -> str:
        return self.mutant.name


def _wrong(name: str, description: str, replace: tuple, fails: set[str]) -> WrongScheduler:
    return WrongScheduler(
        Mutant(name, description, replace=replace, base=SOLUTION), frozenset(fails)
    )


SCHEDULERS = [
    _wrong(
        "static-batching",
        "starts new requests only when nothing is running: every batch "
        "waits for its longest sequence to finish",
        (
            (_BUDGET_LEFT, _BUDGET_LEFT + "        idle = not self.running\n"),
            (
                "while not preempted and self.waiting",
                "while not preempted and idle and self.waiting",
            ),
        ),
        {"iteration-level", "fcfs"},
    ),
    _wrong(
        "preempts-oldest",
        "preempts the oldest running sequence, the one with the most "
        "work done, instead of the most recently arrived",
        (("self._preempt(self.running.pop())", "self._preempt(self.running.pop(0))"),),
        {"preemption"},
    ),
    _wrong(
        "never-preempts",
        "when the running sequences need more blocks than are free, the "
        "ones that cannot grow are left out of the step but keep their blocks (no "
        "preemption): the others run on until none can grow, then the engine stalls",
        (
            (
                "            self._preempt(self.running.pop())\n"
                "            preempted = True\n"
                "            plan = self._fill(self.running)\n",
                "            plan = [(seq, n) for seq, n in plan if self._new_blocks(seq, n) == 0]\n"
                "            preempted = True\n",
            ),
        ),
        {"preemption", "batch-equivalence", "iteration-level", "chunked-prefill"},
    ),
    _wrong(
        "never-frees-finished",
        "a finished sequence leaves the running list but keeps its "
        "blocks: the pool leaks until nothing fits",
        ((_RELEASE, "                self.running.remove(seq)\n"),),
        {"block-accounting", "batch-equivalence", "preemption", "iteration-level"},
    ),
    _wrong(
        "prefix-hash-own-tokens",
        "a block's prefix-cache hash is of its own tokens only: "
        "the same tokens after a different prefix share K/V computed in another context",
        (("parent = seq.block_hashes[i - 1] if i else None", "parent = None"),),
        {"prefix-caching", "batch-equivalence"},
    ),
    _wrong(
        "prefill-starves-decodes",
        "running prefills are planned before decodes: a long "
        "prompt takes the whole token budget and everyone else's decodes wait",
        (("for seq in decodes + prefills:", "for seq in prefills + decodes:"),),
        {"chunked-prefill", "iteration-level"},
    ),
    _wrong(
        "seats-off-by-one",
        "admits while len(running) <= max_num_seqs: one sequence more than the budget runs",
        (("len(self.running) < self.max_num_seqs", "len(self.running) <= self.max_num_seqs"),),
        {"budgets"},
    ),
    _wrong(
        "skips-the-head",
        "a waiting request that does not fit is skipped and a later one "
        "that fits starts first (no head-of-line rule)",
        (
            (
                _ADMIT,
                "        for seq in list(self.waiting):\n"
                "            if preempted or len(self.running) >= self.max_num_seqs \\\n"
                "                    or tokens_left <= 0:\n"
                "                break\n",
            ),
            (
                _FITS + "                break\n" + _POP_HEAD,
                _FITS + "                continue\n" + "            self.waiting.remove(seq)\n",
            ),
        ),
        {"fcfs"},
    ),
    _wrong(
        "free-count-off-by-one",
        "num_free_blocks reports one block fewer than are free",
        (("        return self.pool.num_free()\n", "        return self.pool.num_free() - 1\n"),),
        {"block-accounting"},
    ),
    _wrong(
        "no-chunking",
        "a waiting prompt starts only when all of it fits in the tokens left: "
        "one longer than max_batched_tokens never starts",
        (
            (
                "            n = min(seq.num_left - start, tokens_left)\n",
                "            n = seq.num_left - start\n"
                "            if n > tokens_left:\n"
                "                break\n",
            ),
        ),
        {"chunked-prefill", "batch-equivalence", "preemption", "fcfs", "iteration-level"},
    ),
]

WRONG = [
    Wrong(w.mutant, w.fails, track=BATCHING)
    for w in SCHEDULERS
    if w.name in ("static-batching", "free-count-off-by-one")
]
