"""The tree's style, held: `ruff format --check` and `ruff check` with pyproject.toml's settings
(line length 100, the small rule set, the candidate-like files left as written)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RUFF = shutil.which("ruff")

pytestmark = pytest.mark.skipif(RUFF is None, reason="ruff is not installed (the dev extra has it)")


@pytest.mark.parametrize("command", [["format", "--check"], ["check"]], ids=["format", "lint"])
def test_the_tree_is_as_ruff_leaves_it(command):
    done = subprocess.run([RUFF, *command, "."], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
