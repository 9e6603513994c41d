"""The facts about the machine that a benchmark's figures depend on, and `Unavailable`: a subject
this machine cannot run."""

from __future__ import annotations

import os
import platform
from importlib import metadata
from pathlib import Path

import torch


class Unavailable(Exception):
    """This subject cannot run on this machine (a missing optional package, no compiler)."""


CPU_CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def facts() -> dict:
    """CPU model, logical CPUs, torch's threads, library versions, and the CPU's caches where the
    system says (Linux): {"L1d": "48K", "L2": "1024K", "L3": "32768K"}, sizes as the kernel writes them."""
    return {
        "cpu": _cpu_model(),
        "logical_cpus": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "caches": _caches(),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _caches() -> dict:
    caches = {}
    for index in sorted(CPU_CACHES.glob("index*")):
        try:
            level, kind, size = (
                (index / name).read_text().strip() for name in ("level", "type", "size")
            )
        except OSError:
            continue
        suffix = {"Data": "d", "Instruction": "i"}.get(kind, "")
        caches[f"L{level}{suffix}"] = size
    return caches


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None
