"""The kata's wheel, built from the sources of a checkout (an autograder bundle carries it).

The build reads a copy of the sources in a temporary folder, so the checkout stays clean, and
uses the running environment's setuptools with no build isolation: nothing is downloaded.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from graders.shared import bundled

# What the build reads (pyproject.toml's packages and data folders).
SOURCES = (
    "pyproject.toml",
    "README.md",
    "cli.py",
    "graders",
    "benchmarks",
    "kvkata",
    "starter",
    "solutions",
    "rubric",
)


class WheelError(Exception):
    """The wheel could not be built; the message says why in one line."""


def checkout() -> Path | None:
    """The checkout the running kata comes from, or None for an installed wheel (whose sources
    hold no pyproject.toml to build from)."""
    root = bundled.PACKAGES
    return root if (root / "pyproject.toml").is_file() and (root / "starter").is_dir() else None


def build_wheel(root: Path, out: Path) -> Path:
    """Build the kata's wheel from the checkout `root` into the folder `out`; its path."""
    with tempfile.TemporaryDirectory(prefix="kvkata-wheel-") as scratch:
        source = Path(scratch) / "src"
        for name in SOURCES:
            if (root / name).is_dir():
                shutil.copytree(
                    root / name,
                    source / name,
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                )
            else:
                source.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(root / name, source / name)
        built = Path(scratch) / "dist"
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "wheel",
                str(source),
                "--no-deps",
                "--no-build-isolation",
                "-q",
                "-w",
                str(built),
            ],
            capture_output=True,
            text=True,
        )
        wheels = sorted(built.glob("kvkata-*.whl"))
        if done.returncode != 0 or len(wheels) != 1:
            last = (done.stderr.strip().splitlines() or ["no wheel made"])[-1]
            raise WheelError(f"pip wheel failed: {last}")
        out.mkdir(parents=True, exist_ok=True)
        return Path(shutil.copy2(wheels[0], out / wheels[0].name))
