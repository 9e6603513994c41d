"""Timing many subjects fairly on a noisy machine: interleaved repetitions, medians and spread.

Run one subject's repetitions, then the next one's, and whatever drifts during the run (another
process on the machine, clock speed, the page cache) lands on one subject more than on another.
Interleaving makes repetition r call every subject once, so drift hits all alike; each repetition
starts one subject further along, so each subject is first (right after the previous repetition's
last, with caches as that one left them) as often as any other. The median ignores the odd
repetition a neighbour's burst spoiled; the quartiles say how much the repetitions scattered.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass(frozen=True)
class Summary:
    """Seconds per call: the median and the quartiles of the repetitions."""

    median: float
    q1: float
    q3: float
    min: float

    @classmethod
    def of(cls, seconds: list[float]) -> "Summary":
        q1, _, q3 = statistics.quantiles(seconds, n=4) if len(seconds) > 1 else seconds * 3
        return cls(statistics.median(seconds), q1, q3, min(seconds))

    @property
    def spread(self) -> float:
        """Half the interquartile range, relative to the median: 0.03 reads "±3%"."""
        return (self.q3 - self.q1) / (2 * self.median)


def interleaved(
    calls: dict[str, Callable[[], object]],
    reps: int,
    before: Callable[[str], None] = lambda name: None,
) -> dict[str, list[float]]:
    """Seconds each call took, `reps` times each, interleaved and rotated; `before(name)` runs
    ahead of each call, outside the timed span."""
    names = list(calls)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        shift = rep % len(names)
        for name in names[shift:] + names[:shift]:
            before(name)
            start = time.perf_counter()
            calls[name]()
            seconds[name].append(time.perf_counter() - start)
    return seconds
