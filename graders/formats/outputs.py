"""The files `kata grade` writes beside its report (--json, --format gradescope, --markdown,
--junit, --html), each written whatever happens to the others.

A file that cannot be written, or a format that breaks, costs that file alone: the others are
still written, and the failure is returned to be shown in one line. A file the system refuses
(OSError: a full disk, a folder removed since it was checked; OutputError: a path that became a
folder) is the environment's problem, exit code 2 like the check before the grade; any other
exception is the kata's own bug, exit code 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from graders.judge.result import GradeResult
from graders.shared.output_files import OutputError
from graders.shared.untrusted import quote

USAGE_ERROR, BROKEN = 2, 4  # exit codes of the contract, section 3


@dataclass(frozen=True)
class OutputFailure:
    """An output that was not written: its option, its path, why (one line) and the exit code
    that failure calls for (USAGE_ERROR or BROKEN)."""

    option: str
    path: Path
    reason: str
    exit_code: int

    def __str__(self) -> str:
        return f"{self.option} {self.path}: not written: {self.reason}"


def write_outputs(
    result: GradeResult,
    *,
    json_path: Path | None,
    output_format: str,
    markdown: Path | None,
    junit: Path | None,
    html: Path | None = None,
) -> list[OutputFailure]:
    """Write every output asked for (None: not asked), each apart from the others; return the
    ones that failed, in the order above."""
    from graders.formats.grade_page import write_html
    from graders.formats.gradescope import write_gradescope
    from graders.formats.junit import write_junit
    from graders.formats.report import write_json
    from graders.formats.scorecard import write_markdown

    json_option = "--format gradescope" if output_format == "gradescope" else "--json"
    writers = [
        (json_option, json_path, write_gradescope if output_format == "gradescope" else write_json),
        ("--markdown", markdown, write_markdown),
        ("--junit", junit, write_junit),
        ("--html", html, write_html),
    ]
    failures = []
    for option, path, write in writers:
        if path is None:
            continue
        try:
            write(result, path)
        except (OSError, OutputError) as exc:
            reason = getattr(exc, "strerror", None) or str(exc)
            failures.append(OutputFailure(option, path, quote(reason), USAGE_ERROR))
        except Exception as exc:  # noqa: BLE001 - the kata's bug: the other files still written
            reason = f"the kata's own error, please report it: {type(exc).__name__}: {exc}"
            failures.append(OutputFailure(option, path, quote(reason), BROKEN))
    return failures
