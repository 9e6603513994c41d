"""Suite-wide fixtures."""

from __future__ import annotations

import pytest

from graders.workers import warm_workers


@pytest.fixture(scope="session", autouse=True)
def _warm_workers():
    """Every grade in the suite forks its workers from one process that imported torch once."""
    with warm_workers():
        yield
