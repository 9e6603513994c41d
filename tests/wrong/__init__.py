"""The library of wrong implementations the graders are tested against.

Each module here holds `WRONG`, a list of `Wrong`: a realistic candidate file with one mistake (a
`Mutant` of the reference, or a file of its own under tests/implementations/) and exactly the
rubric items it must fail and the tells it must show. tests/test_wrong_implementations.py grades
every one and checks both sets, so a grader that cannot fail, or fails too much, shows up.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from pathlib import Path

from graders.shared.mutation import Mutant
from graders.shared.tracks import DENSE, SERVING, Track


@dataclass(frozen=True)
class Wrong:
    """`fails`: exactly the items that must not pass. `tells`: exactly the tells detected."""

    implementation: Mutant | Path
    fails: frozenset[str]
    tells: frozenset[str] = field(default_factory=frozenset)
    track: Track = DENSE

    @property
    def name(self) -> str:
        impl = self.implementation
        return impl.name if isinstance(impl, Mutant) else impl.stem

    def write(self, folder: Path) -> Path:
        """The candidate file in `folder`, named as its track's contract says."""
        impl = self.implementation
        source = impl.source() if isinstance(impl, Mutant) else impl.read_text()
        path = folder / self.track.implementation
        path.write_text(source)
        return path


def wrong(implementation: Mutant | Path, fails: set[str], tells: set[str] = frozenset()) -> Wrong:
    return Wrong(implementation, frozenset(fails), frozenset(tells))


def wrong_serving(implementation: Mutant | Path, fails: set[str]) -> Wrong:
    """A wrong paged cache (the serving track, which has no tells)."""
    return Wrong(implementation, frozenset(fails), track=SERVING)


def everything() -> list[Wrong]:
    """Every WRONG list of every module in this package."""
    found = []
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        found.extend(importlib.import_module(f"{__name__}.{info.name}").WRONG)
    return found
