"""What `kata grade` grades, and how to ask for it again: shared by the CLI and `kvkata.grade`.

Each check raises with one line that names the problem: FileNotFoundError for a file that is not
there, ValueError for anything else. The CLI prints that line and exits 2; `kvkata.grade` lets it
propagate. Nothing here imports torch.
"""

from __future__ import annotations

import os
import shlex
import stat
from pathlib import Path

from graders.shared.rubric import load, selected
from graders.shared.tracks import DENSE, Track
from graders.shared.untrusted import printable
from graders.workflows.workspace import default_target


def python_file(path: Path, what: str) -> Path:
    """`path` when it is an existing .py file. A symbolic link is graded as its target, and only
    when that target is a regular .py file too: a link named kv_cache.py to a key or a password
    file is refused before anything reads it."""
    if not path.exists():
        raise FileNotFoundError(f"{what} {path} does not exist")
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory, not a Python file")
    if path.suffix != ".py":
        raise ValueError(f"{what} {path} is not a Python file (.py)")
    if path.is_symlink() and Path(os.path.realpath(path)).suffix != ".py":
        raise ValueError(f"{what} {path} is a link to a file that is not a Python file (.py)")
    if not stat.S_ISREG(path.stat().st_mode):
        raise ValueError(f"{what} {path} is not a regular file")
    return path


def grade_target(
    cwd: Path, path: Path | None, tests: Path | None, track: Track
) -> tuple[Path, Path | None]:
    """(implementation, tests) that `kata grade [PATH] [--tests TESTS]` grades from `cwd`, paths
    relative to it: PATH, or the workspace's file (workspace.default_target); TESTS, or
    test_<name>.py beside the implementation when it exists; no tests for a track without
    own-tests."""
    if path is None:
        found = default_target(cwd, track)
        if found is None:
            raise FileNotFoundError(
                f"no {track.implementation} here ({cwd}): make a workspace with `kata init DIR` "
                "and grade inside it, or name the file: `kata grade PATH`"
            )
        path, default_tests = found
        tests = tests or default_tests
    implementation = python_file(cwd / path, "implementation")
    if tests:
        tests = python_file(cwd / tests, "test file")
    elif track.tests:
        tests = _beside(implementation)
    return implementation, tests if track.tests else None


def check_selection(track: Track, items: list[str], level: str | None) -> None:
    """Item ids of the track's rubric, a level the rubric has, and at least one item that both
    choose (`--level L5 --item gqa` chooses none: gqa is L6)."""
    rubric = load()
    unknown = sorted(set(items) - {item.id for item in rubric.track(track)})
    if unknown:
        raise ValueError(
            f"no rubric item {unknown[0]!r} in the {track.id} track (kata rubric lists them)"
        )
    if level is not None and level not in rubric.levels:
        raise ValueError(f"no level {level!r}: choose one of {', '.join(rubric.levels)}")
    if not selected(track, set(items) or None, level):
        named = ", ".join(items)
        raise ValueError(
            f"--level {level} and --item {named} choose no item: "
            f"{'it is' if len(items) == 1 else 'they are'} above {level}"
        )


def regrade_command(path: Path | str | None, tests: Path | str | None, track: Track) -> str:
    """How a report tells the user to grade the same file again: `kata grade` with the PATH,
    --tests and --track they gave, quoted for a POSIX shell. A path holding a character that a
    terminal would act on (an escape, a bidi control, a byte that is not UTF-8: a candidate may
    name a folder so) is written in bash's $'...' quoting, printable and still runnable."""
    words = [
        "kata",
        "grade",
        *([str(path)] if path else []),
        *(["--tests", str(tests)] if tests else []),
        *(["--track", track.id] if track != DENSE else []),
    ]
    return " ".join(_shell_word(word) for word in words)


def _shell_word(word: str) -> str:
    if printable(word) == word:
        return shlex.quote(word)
    return "$'" + "".join(_ansi_c(char) for char in word) + "'"


def _ansi_c(char: str) -> str:
    """`char` inside bash's $'...': quotes and backslashes escaped, and what `printable` would
    escape as \\xNN (a control, or a byte that was not UTF-8) or \\uNNNN."""
    code = ord(char)
    if char in "\\'":
        return "\\" + char
    if 0xDC80 <= code <= 0xDCFF:  # a byte that was not UTF-8, kept by surrogateescape
        return f"\\x{code - 0xDC00:02x}"
    if code < 0x80 and printable(char) != char:
        return f"\\x{code:02x}"
    if printable(char) != char:
        return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"
    return char


def _beside(implementation: Path) -> Path | None:
    """The candidate's tests by the contract's naming: test_<name>.py beside the file (a link
    there is checked as `python_file` checks one)."""
    tests = implementation.with_name(f"test_{implementation.name}")
    return python_file(tests, "test file") if tests.is_file() else None
