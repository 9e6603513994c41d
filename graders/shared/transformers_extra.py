"""Whether the real-model item can run here: transformers installed, in the tested range.

Read from the installed package's metadata, without importing it (the judge never imports
transformers: the real-model item's two workers do, graders.worker.real_model). The range is
the `real-model` extra's in pyproject.toml (tests/test_real_model.py holds the two equal): the
Cache API changed between 4.x and 5.x (`cache=` for `past_key_values=`, `crop(-n)` for
`crop(length)`), and the adapter follows 5.x.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util

EXTRA = "real-model"
LOWEST, BELOW = (5, 0), (6, 0)  # transformers >=5.0,<6
REQUIREMENT = "transformers>=5.0,<6"
INSTALL = f"pip install 'kvkata[{EXTRA}]' (or pip install '{REQUIREMENT}')"


def problem() -> str | None:
    """Why the real-model item cannot run here (what to install), or None when it can."""
    if importlib.util.find_spec("transformers") is None:
        return f"transformers is not installed: {INSTALL}"
    try:
        version = importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return f"transformers has no package metadata: {INSTALL}"
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if not LOWEST <= numbers < BELOW:
        return f"transformers {version} is outside the tested range {REQUIREMENT}: {INSTALL}"
    return None
