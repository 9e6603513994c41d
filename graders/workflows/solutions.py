"""`kata solution` past its parsing: the reference solutions, the steps a learner reads them in,
each shown whole, the change from one step to another, and the steps' story (--readme).

In a terminal each is highlighted (the README rendered); otherwise it is the file's exact source,
the plain unified diff, or the README's Markdown, so that `kata solution concat > f.py` makes a
file to grade. cli.py checks the names against SOLUTIONS, and asks the interview session (a
strict one refuses), before it calls a function here.
"""

from __future__ import annotations

import difflib
import sys
from typing import Callable

from rich.console import Console

from graders.shared import bundled

SOLUTIONS = {  # in the order a learner reads them
    "concat": bundled.SOLUTIONS / "concat_kv_cache.py",
    "preallocated": bundled.SOLUTIONS / "kv_cache_l6.py",  # kv_cache.py before section 8
    "paged": bundled.SOLUTIONS / "paged_kv_cache.py",
    "tiled": bundled.TILED_ATTENTION,
    "fused": bundled.FUSED_ATTENTION,
    "tiled-paged": bundled.TILED_PAGED_ATTENTION,
    "fused-paged": bundled.FUSED_PAGED_ATTENTION,
    "speculative": bundled.SOLUTIONS / "kv_cache.py",  # preallocated with section 8 (L6+)
    "scheduler": bundled.SOLUTIONS / "scheduler.py",
    "tests": bundled.SOLUTIONS / "test_kv_cache.py",
}


def show(make_console: Callable[[], Console], name: str) -> None:
    """The step `name` (one of SOLUTIONS): its exact bytes to a pipe; in a terminal, highlighted
    on `make_console()`'s console."""
    from rich.syntax import Syntax

    path = SOLUTIONS[name]
    if not sys.stdout.isatty():
        sys.stdout.flush()
        sys.stdout.buffer.write(path.read_bytes())
        sys.stdout.flush()
        return
    make_console().print(Syntax(path.read_text(), "python", line_numbers=True, word_wrap=True))


def show_diff(make_console: Callable[[], Console], text: str) -> None:
    """A diff `step_diff` made: as it is to a pipe; in a terminal, highlighted on
    `make_console()`'s console (nothing when the steps are the same)."""
    from rich.syntax import Syntax

    if not sys.stdout.isatty():
        sys.stdout.write(text)
    elif text:
        make_console().print(Syntax(text, "diff", word_wrap=True))


def show_readme(make_console: Callable[[], Console]) -> None:
    """solutions/README.md (bundled.SOLUTIONS_README): rendered in a terminal, on
    `make_console()`'s console, else as it is."""
    from rich.markdown import Markdown

    text = bundled.SOLUTIONS_README.read_text()
    if not sys.stdout.isatty():
        sys.stdout.write(text)
        return
    make_console().print(Markdown(text))


def step_diff(old: str, new: str) -> str:
    """The unified diff from step `old` to step `new` (names of SOLUTIONS), "" when they are the
    same. Each step is its whole file as `step_source` gives it."""
    (old_label, old_text), (new_label, new_text) = step_source(old), step_source(new)
    return "".join(
        difflib.unified_diff(
            old_text.splitlines(keepends=True),
            new_text.splitlines(keepends=True),
            fromfile=f"{old} ({old_label})",
            tofile=f"{new} ({new_label})",
        )
    )


def step_source(name: str) -> tuple[str, str]:
    """(what the step is, its whole file). Every step is its file, except the attention steps
    (benchmarks/attention_steps.py), each a function, not a cache: its step is the solution it
    starts from with attend's math replaced by a call to that function."""
    from benchmarks import attention_steps

    step = attention_steps.STEPS.get(name)
    if step is None:
        return SOLUTIONS[name].name, SOLUTIONS[name].read_text()
    start = SOLUTIONS[step.start]
    return (
        f"{start.name}, attend's math in {step.file.name}",
        attention_steps.step_file(name, start.read_text()),
    )
