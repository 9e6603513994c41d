"""Where the kata's own files are: the starter, the solutions and the rubric.

The one module that knows. In a repository checkout (and an editable install) they are the
folders beside graders/: starter/, solutions/, rubric/. An installed wheel carries them inside
the graders package, as graders/_data/starter, graders/_data/solutions and graders/_data/rubric
(pyproject.toml maps the folders there). Every other module takes its paths from here.
"""

from __future__ import annotations

from pathlib import Path

PACKAGES = Path(__file__).resolve().parents[2]  # holds the packages graders and benchmarks
_WHEEL_DATA = PACKAGES / "graders" / "_data"
DATA = _WHEEL_DATA if _WHEEL_DATA.is_dir() else PACKAGES  # holds starter/, solutions/, rubric/

STARTER = DATA / "starter"
SOLUTIONS = DATA / "solutions"
SOLUTIONS_README = SOLUTIONS / "README.md"  # the steps' story: `kata solution --readme`
RUBRIC = DATA / "rubric" / "rubric.toml"
TILED_ATTENTION = PACKAGES / "benchmarks" / "tiled_attention.py"
FUSED_ATTENTION = PACKAGES / "benchmarks" / "fused_attention.py"
TILED_PAGED_ATTENTION = PACKAGES / "benchmarks" / "tiled_paged_attention.py"
FUSED_PAGED_ATTENTION = PACKAGES / "benchmarks" / "fused_paged_attention.py"


class KataFileMissing(Exception):
    """One of the kata's own files is not where this installation should have it."""


def required_files() -> list[Path]:
    """Every file of the kata's own that some command reads."""
    return [
        *(
            STARTER / name
            for name in ("kv_cache.py", "test_kv_cache.py", "paged_kv_cache.py", "scheduler.py")
        ),
        *(
            SOLUTIONS / name
            for name in (
                "kv_cache.py",
                "kv_cache_l6.py",
                "concat_kv_cache.py",
                "paged_kv_cache.py",
                "test_kv_cache.py",
                "scheduler.py",
            )
        ),
        SOLUTIONS_README,
        RUBRIC,
        TILED_ATTENTION,
        FUSED_ATTENTION,
        TILED_PAGED_ATTENTION,
        FUSED_PAGED_ATTENTION,
    ]


def check() -> None:
    """Raise KataFileMissing, with a one-line message, naming the first required file missing."""
    for path in required_files():
        if not path.is_file():
            raise KataFileMissing(
                f"the kata's file {path} is missing from this installation (reinstall kvkata)"
            )
