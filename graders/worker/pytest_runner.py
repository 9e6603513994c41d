"""Run a candidate's own test file against one implementation, inside a forked worker child.

The implementation is installed as module `kv_cache` before pytest starts, so the candidate's
`from kv_cache import ...` gets it whatever else lies beside the test file. The implementation is
source text and the file name it is compiled as (``{"source": ..., "file": ...}``: the
reference, a disguise of it, or a disguised bundled mistake), so the worker needs no file of the
kata's solutions. Nothing of the request says which implementation it is, and its source leaves
the request once compiled: the tests see the module, not the text the judge sent.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
from pathlib import Path

import pytest

FIRST_FAILURE_CHARS = 800


class _Outcomes:
    """A pytest plugin that counts what happened, so nothing is read from printed output."""

    def __init__(self):
        self.passed = self.failed = self.errors = 0
        self.first_failure: str | None = None

    def pytest_collectreport(self, report):
        if report.failed:
            self.errors += 1
            self._remember(report)

    def pytest_runtest_logreport(self, report):
        if report.when == "call" and report.passed:
            self.passed += 1
        elif report.failed:
            if report.when == "call":
                self.failed += 1
            else:
                self.errors += 1
            self._remember(report)

    def _remember(self, report):
        if self.first_failure is None:
            text = report.longreprtext or ""
            self.first_failure = f"{report.nodeid}: {text[-FIRST_FAILURE_CHARS:]}"


def run(test_path: str, implementation: dict, exitfirst: bool = False) -> dict:
    """Run the tests at `test_path` with `implementation` as `kv_cache`; counts of what happened,
    and the digest of the test file's bytes as read just before pytest (`tests_sha256`).

    `exitfirst` stops at the first failure: enough when all we ask is whether the tests catch it.
    """
    tests_sha256 = hashlib.sha256(Path(test_path).read_bytes()).hexdigest()
    sys.dont_write_bytecode = True
    # Scanning every installed package for pytest plugins costs more than the tests themselves;
    # a candidate's tests get plain pytest (hypothesis still works as a library).
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    _install(implementation)
    sys.path.insert(0, str(Path(test_path).resolve().parent))  # helpers beside the tests
    outcomes = _Outcomes()
    folder = str(Path(test_path).resolve().parent)
    # No ini file and no conftest.py from the folders above: the tests run as the candidate
    # wrote them, whatever project they happen to lie in.
    exit_code = pytest.main(
        [
            test_path,
            "-q",
            "-p",
            "no:cacheprovider",
            "-c",
            os.devnull,
            "--confcutdir",
            folder,
            "--no-header",
            "--rootdir",
            folder,
            *(["-x"] if exitfirst else []),
        ],
        plugins=[outcomes],
    )
    return {
        "exit_code": int(exit_code),
        "passed": outcomes.passed,
        "failed": outcomes.failed,
        "errors": outcomes.errors,
        "first_failure": outcomes.first_failure,
        "tests_sha256": tests_sha256,
    }


def _install(implementation: dict) -> None:
    """Make `implementation` module `kv_cache`, and take its source out of the request (which
    the frames below the candidate's tests still hold)."""
    spec = importlib.util.spec_from_loader("kv_cache", loader=None)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = implementation["file"]
    sys.modules["kv_cache"] = module
    exec(compile(implementation.pop("source"), module.__file__, "exec"), module.__dict__)
