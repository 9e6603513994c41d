"""kvkata from Python: grade a file as `kata grade` does, and read the report in a notebook.

    from kvkata import grade
    result = grade("kv_cache.py")   # tests: test_kv_cache.py beside it, as `kata grade` finds them
    result                          # in Jupyter, the report `kata grade` prints

`grade` takes the options of `kata grade` as keyword arguments and grades the same way: the
candidate's code runs in the same sandboxed workers, never in this process. Its result has the
grade's `level`, `score` and `items` (and every other field of graders.judge.result.GradeResult), and
shows itself as the terminal's report: in Jupyter (`_repr_mimebundle_`: HTML, and the text for
frontends without HTML), in rich (`rich.print(result)`, `__rich_console__`) and as `str()`.

Importing this module is light; `grade` imports the graders (and torch) on its first call.
"""

from __future__ import annotations

import io
import os
from dataclasses import replace
from pathlib import Path

from graders.judge.request import DEFAULT_IMPORT_TIMEOUT, DEFAULT_TIMEOUT

__all__ = ["Grade", "grade"]

DETAILS = ("quiet", "brief", "default", "verbose")  # as graders.formats.report.render takes them
NOTEBOOK_WIDTH = 100  # columns of the report in a notebook (rich's Jupyter default is 115)
_HTML = (
    '<pre style="white-space:pre;overflow-x:auto;line-height:normal;'
    "font-family:Menlo,'DejaVu Sans Mono',consolas,'Courier New',monospace\">{code}</pre>\n"
)


class Grade:
    """One grade: `kata grade`'s result (`.result`, a graders.judge.result.GradeResult) and its report.

    `.level` (None for a partial run), `.score`, `.max_score`, `.items` (each with `id`,
    `level`, `status`, `points`, `message`) and `.tells` are the grade's; so is every other
    attribute of the GradeResult (`.passed`, `.seed`, `.exit_code()` ...). The report is
    `kata grade`'s at `detail` ("quiet", "brief", "default" or "verbose"), its last line
    naming `command`, how to grade the file again in a terminal.
    """

    def __init__(self, result, command: str = "kata grade", detail: str = "default"):
        self.result, self.command, self.detail = result, command, detail

    @property
    def level(self) -> str | None:
        return self.result.level

    @property
    def score(self) -> float:
        return self.result.score

    @property
    def max_score(self) -> float:
        return self.result.max_score

    @property
    def items(self) -> list:
        return self.result.items

    @property
    def tells(self) -> list:
        return self.result.tells

    def __getattr__(self, name: str):
        if name == "result":  # not set yet (copy, pickle): no recursion
            raise AttributeError(name)
        return getattr(self.result, name)

    def _rendered(self, width: int):
        """A recording console, `width` columns wide, that the report was printed to."""
        from rich.console import Console

        from graders.formats import report

        console = Console(
            file=io.StringIO(),
            record=True,
            width=width,
            force_terminal=True,
            force_jupyter=False,
            color_system="truecolor",
            highlight=False,
        )
        report.render(self.result, console, self.detail, self.command)
        return console

    def __rich_console__(self, console, options):
        """The report, as `kata grade` prints it, at the width rich gives it."""
        from rich.text import Text

        printed = self._rendered(options.max_width).file.getvalue()
        yield Text.from_ansi(printed.rstrip("\n"), no_wrap=True)

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        """What Jupyter shows: the report in HTML with the terminal's colours, and as text."""
        console = self._rendered(NOTEBOOK_WIDTH)
        text = console.export_text(clear=False)
        return {
            "text/plain": text,
            "text/html": console.export_html(inline_styles=True, code_format=_HTML),
        }

    def __str__(self) -> str:
        return self._rendered(NOTEBOOK_WIDTH).export_text()

    def __repr__(self) -> str:
        level = "partial" if self.level is None else self.level
        return (
            f"<kvkata.Grade {self.result.implementation}: {level}, "
            f"{self.score:g}/{self.max_score:g} points>"
        )


def grade(
    path: str | os.PathLike | None = None,
    *,
    tests: str | os.PathLike | None = None,
    track: str = "dense",
    hidden: bool = False,
    seed: int | None = None,
    graders: str | os.PathLike | None = None,
    items: list[str] | None = None,
    level: str | None = None,
    exitfirst: bool = False,
    timeout: float = DEFAULT_TIMEOUT,
    import_timeout: float = DEFAULT_IMPORT_TIMEOUT,
    sandbox: str = "auto",
    memory: float = 4.0,
    detail: str = "default",
) -> Grade:
    """Grade `path` as `kata grade PATH` does, and return the Grade (which shows the report).

    Paths are relative to the current folder. `path` None grades what `kata grade` grades
    there (a workspace's kv_cache.py, paged_kv_cache.py for track "serving", scheduler.py for
    "batching"). `tests` defaults to test_<name>.py beside the file, when it exists. The other
    arguments are the options of `kata grade`: `track` ("dense", "serving" or "batching"),
    `hidden` and its `seed` and `graders` (a folder of private graders), `items` (--item ids)
    and `level` (--level),
    `exitfirst` (-x), `timeout`, `import_timeout`, `sandbox` ("auto", "require", "process"),
    `memory` (GiB a process), and `detail`, the report's ("quiet", "brief", "default",
    "verbose"). Like `kata grade`, it records the items that did not pass, for `--lf`.

    What `kata grade` refuses with exit code 2 raises here: FileNotFoundError for a file that is
    not there, ValueError for a wrong option; graders.judge.isolation.SandboxUnavailable when
    `sandbox="require"` cannot be had. This process's torch thread count is left as it was.
    """
    import torch

    from graders.judge.grade import grade as judge
    from graders.judge.isolation import GIB, Sandbox
    from graders.judge.request import GradeRequest
    from graders.judge.workers import GradeWorkers
    from graders.shared import tracks
    from graders.workflows import last_failed, target

    try:
        chosen = tracks.get(track)
    except KeyError as exc:
        raise ValueError(f"track: {exc.args[0]}") from None
    cwd = Path.cwd()
    implementation, tests_path = target.grade_target(
        cwd, None if path is None else Path(path), None if tests is None else Path(tests), chosen
    )
    items = [items] if isinstance(items, str) else items
    target.check_selection(chosen, items or [], level)
    if (seed is not None or graders is not None) and not hidden:
        raise ValueError("seed and graders choose hidden cases: use them with hidden=True")
    if sandbox not in ("auto", "require", "process"):
        raise ValueError(f"sandbox {sandbox!r}: 'auto', 'require' or 'process'")
    if detail not in DETAILS:
        raise ValueError(f"detail {detail!r}: one of {', '.join(DETAILS)}")
    extra = None
    if graders is not None:
        extra = cwd / graders
        if not extra.is_dir():
            raise FileNotFoundError(f"graders: {extra} is not a folder")

    request = GradeRequest(
        implementation,
        tests_path,
        track=chosen,
        hidden=hidden,
        extra_graders=extra,
        seed=seed,
        only=frozenset(items) if items else None,
        up_to=level,
        exitfirst=exitfirst,
        timeout=timeout,
        import_timeout=import_timeout,
        sandbox=Sandbox(mode=sandbox, memory=int(memory * GIB)),
    )
    threads = torch.get_num_threads()
    try:
        result = judge(request, GradeWorkers.start(request))
    finally:
        torch.set_num_threads(threads)  # the judge sets one thread: a notebook keeps its own
    result = replace(result, implementation=str(path) if path is not None else str(implementation))
    last_failed.record(implementation, result)
    return Grade(result, target.regrade_command(path, tests, chosen), detail)
