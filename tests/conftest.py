"""Suite-wide fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

from graders.judge.workers import warm_workers
from graders.shared.mutation import REFERENCE
from tests.seeds import SUITE_SEED

HOSTILE = Path(__file__).parent / "hostile"
# A hostile file builds on the reference as `kv_cache_base`; the base travels inside the file,
# because a sandboxed worker is shown the candidate's one file and nothing beside it.
BOOTSTRAP = """import sys as _sys, types as _types
_sys.modules["kv_cache_base"] = _base_module = _types.ModuleType("kv_cache_base")
exec(compile({source!r}, "kv_cache_base.py", "exec"), _base_module.__dict__)
"""


@pytest.fixture(scope="session", autouse=True)
def _one_seed_for_the_suite():
    """A hidden run that does not choose its seed draws SUITE_SEED (tests/seeds.py)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("graders.judge.grade.draw_seed", lambda: SUITE_SEED)
        patch.setattr("graders.workflows.batch.draw_seed", lambda: SUITE_SEED)
        yield


@pytest.fixture(scope="session", autouse=True)
def _answers_kept_apart(tmp_path_factory):
    """The real-model item's kept answers (graders.shared.model_answers) in a folder of the
    suite's own: it computes them once, and never reads or writes the user's."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KVKATA_CACHE", str(tmp_path_factory.mktemp("kept-answers")))
        yield


@pytest.fixture(scope="session", autouse=True)
def _warm_workers():
    """Every grade in the suite forks its workers from one process that imported torch once."""
    with warm_workers():
        yield


@pytest.fixture
def hostile_file(tmp_path):
    """write(name, filename="kv_cache.py", **fill): tests/hostile/NAME.py as one candidate file
    in tmp_path, its @KEY@ placeholders filled in; returns its path."""

    def write(name: str, filename: str = "kv_cache.py", **fill) -> Path:
        source = (HOSTILE / f"{name}.py").read_text()
        for key, value in fill.items():
            source = source.replace(f"@{key}@", str(value))
        if "kv_cache_base" in source:
            source = BOOTSTRAP.format(source=REFERENCE.read_text()) + source
        path = tmp_path / filename
        path.write_text(source)
        return path

    return write
