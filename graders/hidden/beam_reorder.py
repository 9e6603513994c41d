"""Hidden beam-reorder: longer random reorder schedules, with a row expanded to every beam while
the storage has room to spare.

The public item expands one row to three (beam_idx [0, 0, 0]) right when the next append must
grow the storage anyway, and its beam search does the same (a 4-token prompt fills 4 slots). So
a reorder that expands a single row as a view (`expand`, no copy: every beam the same memory)
passes it: the growth copies the rows apart before anything is written. Here, seeded and checked
as the public item checks its fixed schedules (two caches, every active row's output against
full attention over that row's own history after every step, lengths at the end):
- three steps first (a doubling cache then has a free slot), then one row expanded to 3 or 4
  beams and a step that writes into every beam in place;
- then a dozen random events: steps with random counts 0/1 (never all 0) and reorders with
  random indices, duplicates and B' from 1 to 4 (one schedule reorders twice in a row, the other
  collapses to a single beam and expands it again).
"""

from __future__ import annotations

import torch

from graders import cases
from graders.candidate import Candidate
from graders.hidden import _cases
from graders.items.beam_reorder import decode_fixed_indices

ITEM = "beam-reorder"

SEEDS = [_cases.BASE_SEED + 1400 + i for i in range(2)]


def grade(candidate: Candidate) -> str:
    steps = 0
    for seed in SEEDS:
        batch, events = _schedule(cases.generator(seed))
        name = _cases.name(seed, f"{len(events)} events from B={batch}: one row expanded to every "
                                 "beam, then random steps and reorders")
        with _cases.labelled(name):
            steps += decode_fixed_indices(candidate, seed, name, batch, events)
    return (f"{len(SEEDS)} seeded schedules, {steps} steps: after expansions of one row, "
            "collapses and random reorders, every row equals attention over its own history")


def _schedule(g: torch.Generator) -> tuple[int, list]:
    """A starting batch and events, ("step", counts) or ("reorder", beam_idx), as the public
    item's."""
    batch = _cases.randint(g, 1, 2)
    events = [("step", (1,) * batch)] * 3
    beams = _cases.randint(g, 3, 4)
    events += [("reorder", [_cases.randint(g, 0, batch - 1)] * beams), ("step", (1,) * beams)]
    rows = beams
    for _ in range(12):
        if _cases.randint(g, 0, 2):
            counts = [_cases.randint(g, 0, 1) for _ in range(rows)]
            counts[_cases.randint(g, 0, rows - 1)] = 1
            events.append(("step", tuple(counts)))
        else:
            new_rows = _cases.randint(g, 1, 4)
            events.append(("reorder", [_cases.randint(g, 0, rows - 1) for _ in range(new_rows)]))
            rows = new_rows
    events.append(("step", (1,) * rows))
    return batch, events
