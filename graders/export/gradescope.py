"""`kata export gradescope OUT.zip`: the kata as a Gradescope autograder bundle.

The zip holds, at its root (Gradescope unpacks it into /autograder/source):

    setup.sh          run once when Gradescope builds the assignment's image: Python >= 3.11,
                      bubblewrap and the CPU build of torch where missing, then the kata from the
                      wheel below into a virtual environment ($KVKATA_VENV, default /opt/kvkata)
    run_autograder    run for every submission: graders.export.autograder
    kvkata-*.whl      the kata that exported the bundle
    assignment.json   the assignment's settings (SETTINGS): track, hidden, seed, torch's version
    graders/          the interviewer's private graders (--graders), when given

No step of setup.sh fetches anything but packages by name (apt-get, pip).
"""

from __future__ import annotations

import json
import stat
import tempfile
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from graders.export.wheel import build_wheel, checkout

SETTINGS = "assignment.json"
PRIVATE_GRADERS = "graders"  # the folder of the bundle holding --graders' files
DEFAULT_VENV = "/opt/kvkata"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"


@dataclass(frozen=True)
class Assignment:
    """What every submission of the assignment is graded with. `seed` is the hidden cases' seed
    (hidden bundles; None: a fresh seed each submission), `torch` the torch version setup.sh
    installs (the exporting kata's, without its local build tag)."""

    track: str
    hidden: bool
    seed: int | None
    torch: str
    private_graders: bool

    @classmethod
    def read(cls, path: Path) -> "Assignment":
        return cls(**json.loads(path.read_text()))


SETUP_SH = r"""#!/usr/bin/env bash
# kvkata's Gradescope setup: run once, as root, when Gradescope builds the assignment's image.
# Each system step is skipped when what it installs is already there.
#   KVKATA_VENV         the kata's virtual environment [@VENV@]
#   KVKATA_TORCH_INDEX  the package index of torch's CPU build [@INDEX@];
#                       set it empty to use pip's own configuration
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
venv="${KVKATA_VENV:-@VENV@}"
torch_index="${KVKATA_TORCH_INDEX-@INDEX@}"

usable() {  # a Python >= 3.11 that can make a virtual environment
    command -v "$1" >/dev/null 2>&1 &&
        "$1" -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null
}
python_found() {
    for candidate in python3 python3.13 python3.12 python3.11; do
        if usable "$candidate"; then echo "$candidate"; return 0; fi
    done
    return 1
}
apt_install() {
    echo "setup.sh: apt-get install $*"
    if [ -z "${apt_updated:-}" ]; then apt-get update -q; apt_updated=1; fi
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@"
}

python="$(python_found)" || {
    apt_install python3 python3-venv
    python="$(python_found)" || { apt_install python3.11 python3.11-venv; python=python3.11; }
}
if command -v bwrap >/dev/null 2>&1; then
    echo "setup.sh: bubblewrap is there"
else
    apt_install bubblewrap
fi
echo "setup.sh: $("$python" --version) makes $venv"
"$python" -m venv "$venv"
if [ -n "$torch_index" ]; then
    "$venv/bin/python" -m pip install -q "torch==@TORCH@" --index-url "$torch_index"
else
    "$venv/bin/python" -m pip install -q "torch==@TORCH@"
fi
"$venv/bin/python" -m pip install -q "$here"/@WHEEL@
"$venv/bin/kata" rubric >/dev/null
echo "setup.sh: kvkata is installed in $venv"
"""

RUN_AUTOGRADER = r"""#!/usr/bin/env bash
# kvkata's Gradescope run: for every submission, grade /autograder/submission and write
# /autograder/results/results.json (graders.export.autograder says how).
#   KVKATA_VENV   the kata's virtual environment, as setup.sh made it [@VENV@]
# -I: isolated, so that no folder of the bundle or the submission shadows the kata's modules.
exec "${KVKATA_VENV:-@VENV@}/bin/python" -I -m graders.export.autograder /autograder
"""


class ExportError(Exception):
    """The bundle cannot be made as asked; the message says why in one line."""


def torch_version() -> str:
    """The running torch's version without its local build tag ('2.13.0+cpu' -> '2.13.0')."""
    from importlib.metadata import version

    return version("torch").split("+")[0]


def export(
    out: Path, assignment: Assignment, private_graders: Path | None, wheel: Path | None = None
) -> None:
    """Write the bundle for `assignment` to `out` (a .zip). `private_graders`: a folder of the
    interviewer's graders (hidden bundles); `wheel`: the kata's wheel, else built from the
    checkout the running kata comes from (ExportError where there is none)."""
    with tempfile.TemporaryDirectory(prefix="kvkata-export-") as scratch:
        if wheel is None:
            root = checkout()
            if root is None:
                raise ExportError(
                    "this kata is installed from a wheel: give the wheel to bundle "
                    "with --wheel FILE (or export from a checkout)"
                )
            wheel = build_wheel(root, Path(scratch))
        files = {
            "setup.sh": _filled(SETUP_SH, assignment, wheel.name),
            "run_autograder": _filled(RUN_AUTOGRADER, assignment, wheel.name),
            SETTINGS: json.dumps(asdict(assignment), indent=2) + "\n",
        }
        with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as bundle:
            for name, text in files.items():
                _add(bundle, name, text.encode(), executable=name != SETTINGS)
            _add(bundle, wheel.name, wheel.read_bytes(), executable=False)
            if private_graders is not None:
                for path in sorted(private_graders.rglob("*")):
                    if path.is_file() and "__pycache__" not in path.parts:
                        name = f"{PRIVATE_GRADERS}/{path.relative_to(private_graders).as_posix()}"
                        _add(bundle, name, path.read_bytes(), executable=False)


def _filled(template: str, assignment: Assignment, wheel: str) -> str:
    return (
        template.replace("@VENV@", DEFAULT_VENV)
        .replace("@INDEX@", TORCH_CPU_INDEX)
        .replace("@TORCH@", assignment.torch)
        .replace("@WHEEL@", wheel)
    )


def _add(bundle: zipfile.ZipFile, name: str, data: bytes, executable: bool) -> None:
    """Add `name` with Unix mode 755 (scripts) or 644, as Gradescope unpacks it."""
    info = zipfile.ZipInfo(name, date_time=(2026, 1, 1, 0, 0, 0))
    info.external_attr = (stat.S_IFREG | (0o755 if executable else 0o644)) << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    bundle.writestr(info, data)
