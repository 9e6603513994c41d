"""`kata bench`: what runs, in what order, and what comes back.

A run is a list of cells (shape x dtype x cache length) and a list of subjects (the bundled
solutions, the candidate files given, the floors and the Hugging Face peers). All of it runs in
one bench process (`benchmarks.runner`), so every subject of a cell is timed in the same process,
interleaved. This process only reads its events, with a deadline on each: a subject that hangs
or kills the bench process is marked failed with what happened, the cells already measured are
kept, and a fresh bench process goes on from the cell it broke in, without that subject.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from benchmarks.timing import Summary
from graders.judge import isolation
from graders.judge.isolation import GIB, Sandbox
from graders.judge.workers import OutputTail
from graders.shared import bundled
from graders.worker import frames, wire

SOLUTIONS = bundled.SOLUTIONS
START_SECONDS = 60.0  # the bench process imports torch (and transformers) before its first event
# The bench process checks first outputs with the judge's tolerances: it sees the graders whole
# (read-only). It measures, it does not grade: nothing it computes reaches a verdict.
BENCH_CODE = ("graders", "benchmarks")
BENCH_CPU_SECONDS = 3600  # one bench process measures every cell: far more than a grade's call
BENCH_TMP_BYTES = 1 << 30  # torch.compile writes a precompiled header of over 64 MiB to /tmp


@dataclass(frozen=True)
class SubjectSpec:
    id: str
    kind: str  # "solution", "candidate", "floor" or "peer"
    label: str
    builder: (
        str  # how the runner builds it: "contract", "tiled", "fused", "tiled-paged", "bare", ...
    )
    path: str | None = None
    quantize: str | None = None


BUNDLED = [
    SubjectSpec(
        "concat",
        "solution",
        "concat (solutions/concat_kv_cache.py)",
        "contract",
        str(SOLUTIONS / "concat_kv_cache.py"),
    ),
    SubjectSpec(
        "preallocated",
        "solution",
        "preallocated (solutions/kv_cache.py)",
        "contract",
        str(SOLUTIONS / "kv_cache.py"),
    ),
    SubjectSpec(
        "tiled",
        "solution",
        "preallocated + tiled attention",
        "tiled",
        str(SOLUTIONS / "kv_cache.py"),
    ),
    SubjectSpec(
        "fused",
        "solution",
        "preallocated + fused attention (torch.compile)",
        "fused",
        str(SOLUTIONS / "kv_cache.py"),
    ),
    SubjectSpec(
        "paged",
        "solution",
        "paged (solutions/paged_kv_cache.py)",
        "contract",
        str(SOLUTIONS / "paged_kv_cache.py"),
    ),
    SubjectSpec(
        "paged-int8",
        "solution",
        "paged, int8 storage",
        "contract",
        str(SOLUTIONS / "paged_kv_cache.py"),
        quantize="int8",
    ),
    SubjectSpec(
        "tiled-paged",
        "solution",
        "paged + tiled paged attention",
        "tiled-paged",
        str(SOLUTIONS / "paged_kv_cache.py"),
    ),
    SubjectSpec(
        "tiled-paged-int8",
        "solution",
        "paged, int8, tiled paged attention",
        "tiled-paged",
        str(SOLUTIONS / "paged_kv_cache.py"),
        quantize="int8",
    ),
    SubjectSpec(
        "fused-paged",
        "solution",
        "paged + fused paged attention (torch.compile)",
        "fused-paged",
        str(SOLUTIONS / "paged_kv_cache.py"),
    ),
    SubjectSpec(
        "fused-paged-int8",
        "solution",
        "paged, int8, fused paged attention",
        "fused-paged",
        str(SOLUTIONS / "paged_kv_cache.py"),
        quantize="int8",
    ),
    SubjectSpec("bare", "floor", "bare attention (contiguous K, V; no cache)", "bare"),
    SubjectSpec("read", "floor", "pure read of K and V", "read"),
    SubjectSpec(
        "window",
        "solution",
        "preallocated, KVCache(window=W) (solutions/kv_cache.py)",
        "windowed",
        str(SOLUTIONS / "kv_cache.py"),
    ),
    SubjectSpec("bare-window", "floor", "bare attention over the last W positions", "bare-window"),
    SubjectSpec("hf-dynamic", "peer", "HF transformers DynamicCache + SDPA", "hf-dynamic"),
    SubjectSpec("hf-static", "peer", "HF transformers StaticCache + SDPA", "hf-static"),
]
BUNDLED_IDS = [spec.id for spec in BUNDLED]
WINDOWED = ("window", "bare-window")  # their own table: they attend the last W positions only


@dataclass(frozen=True)
class Cell:
    shape: str  # a key of benchmarks.subjects.SHAPES
    dtype: str  # a key of graders.wire.DTYPES
    length: int  # positions cached before the measured steps

    def __str__(self) -> str:
        return f"{self.shape} {self.dtype} T={self.length}"


@dataclass
class Settings:
    lengths: list[int]
    dtypes: list[str]
    shapes: list[str]
    subjects: list[SubjectSpec]
    warmup: int = 3
    reps: int = 15
    window: int = 1024  # W of the windowed subjects (Mistral 7B's was 4096)
    timeout: float = 120.0  # seconds one call into a subject may take
    # How candidate files are walled off, and the bench process's memory limit: it holds every
    # subject's cache of a cell at once (about 3 GiB at T=16384 with the bundled subjects).
    sandbox: Sandbox = Sandbox(memory=8 * GIB)

    @property
    def cells(self) -> list[Cell]:
        return [
            Cell(shape, dtype, length)
            for shape in self.shapes
            for dtype in self.dtypes
            for length in self.lengths
        ]


@dataclass
class Measurement:
    seconds: list[float] | None = None  # one per repetition
    held_bytes: int | None = None
    error: str | None = None

    @property
    def summary(self) -> Summary | None:
        return Summary.of(self.seconds) if self.seconds else None


@dataclass
class SubjectStatus:
    spec: SubjectSpec
    status: str = "ok"  # "ok", "failed" (does not load, hung, crashed) or "unavailable"
    message: str | None = None


@dataclass
class BenchResult:
    settings: Settings
    machine: dict = field(default_factory=dict)
    subjects: dict[str, SubjectStatus] = field(default_factory=dict)
    measurements: dict[tuple[int, str], Measurement] = field(default_factory=dict)

    def at(self, cell_index: int, subject: str) -> Summary | None:
        found = self.measurements.get((cell_index, subject))
        return found.summary if found else None

    def failed_candidates(self) -> list[str]:
        """Candidate files that did not load, hung or crashed, or raised or answered wrong."""
        erred = {subject for (_, subject), found in self.measurements.items() if found.error}
        return [
            s.spec.id
            for s in self.subjects.values()
            if s.spec.kind == "candidate" and (s.status != "ok" or s.spec.id in erred)
        ]


def candidate_specs(paths: list[Path]) -> list[SubjectSpec]:
    """One subject per candidate file, named by its file name (made unique)."""
    taken, specs = set(BUNDLED_IDS), []
    for path in paths:
        name, n = path.stem, 2
        while name in taken:
            name, n = f"{path.stem}-{n}", n + 1
        taken.add(name)
        specs.append(SubjectSpec(name, "candidate", str(path), "contract", str(path.resolve())))
    return specs


def run(settings: Settings, on_event: Callable[[dict], None] = lambda event: None) -> BenchResult:
    """Measure every subject in every cell; `on_event` sees each event as it arrives."""
    result = BenchResult(settings, subjects={s.id: SubjectStatus(s) for s in settings.subjects})
    first_cell = 0
    while True:
        active = [s for s in settings.subjects if result.subjects[s.id].status == "ok"]
        process = _BenchProcess(settings, active, first_cell)
        try:
            broke_at = process.follow(result, on_event)
        finally:
            process.kill()
        if broke_at is None:
            return result
        first_cell = broke_at


class _BenchProcess:
    def __init__(self, settings: Settings, subjects: list[SubjectSpec], first_cell: int):
        self.timeout, self.first_cell = settings.timeout, first_cell
        self.stderr = OutputTail()
        stdin_r, self.to_runner = os.pipe()
        self.from_runner, stdout_w = os.pipe()
        stderr_r, stderr_w = os.pipe()
        sandbox = settings.sandbox
        self.launch = isolation.launch(
            sandbox.resolve(),
            "benchmarks.runner",
            code=BENCH_CODE,
            tmp_bytes=BENCH_TMP_BYTES,
            files=sorted({Path(spec.path) for spec in subjects if spec.path}),
        )
        self.process = isolation.start(
            self.launch.argv,
            stdin=stdin_r,
            stdout=stdout_w,
            stderr=stderr_w,
            env=self.launch.env,
            cwd=self.launch.cwd,
            pass_fds=self.launch.pass_fds,
            start_new_session=True,
        )
        self.launch.close_fds()
        os.close(stderr_w)
        self.stderr.drain(stderr_r)
        os.close(stdin_r)
        os.close(stdout_w)
        wire.write_frame(
            self.to_runner,
            {
                "cells": [vars(cell) for cell in settings.cells],
                "first_cell": first_cell,
                "subjects": [vars(spec) for spec in subjects],
                "warmup": settings.warmup,
                "reps": settings.reps,
                "window": settings.window,
                "limits": settings.sandbox.limits(
                    cpu_seconds=BENCH_CPU_SECONDS, file_size=BENCH_TMP_BYTES
                ).to_dict(),
            },
        )

    def follow(self, result: BenchResult, on_event) -> int | None:
        """Record events until "done" (None), or until the process hangs or dies: then mark the
        subject it was in failed and return the cell to go on from."""
        where: tuple[int | None, str] | None = None  # (cell or None while loading, subject)
        deadline = time.monotonic() + START_SECONDS
        while True:
            try:
                event = wire.decode(frames.read_frame(self.from_runner, deadline))
            except (TimeoutError, frames.WireError, OSError) as exc:
                return self._broken(result, where, hung=isinstance(exc, TimeoutError))
            deadline = time.monotonic() + self.timeout
            kind = event["event"]
            if kind == "machine":
                result.machine = event["facts"]
            elif kind == "loading":
                where = (None, event["subject"])
            elif kind == "subject":
                status = result.subjects[event["subject"]]
                status.status, status.message = event["status"], event.get("message")
            elif kind == "call":
                where = (event["cell"], event["subject"])
            elif kind == "result":
                result.measurements[(event["cell"], event["subject"])] = Measurement(
                    event.get("seconds"), event.get("held_bytes"), event.get("error")
                )
            on_event(event)
            if kind == "done":
                return None

    def _broken(self, result: BenchResult, where, hung: bool) -> int:
        if where is None:
            raise RuntimeError(
                f"the bench process failed before measuring anything{self._stderr_tail()}"
            )
        cell, subject = where
        if hung:
            what = f"no answer within {self.timeout:g} s"
        else:
            self.process.wait()
            code = self.process.returncode
            if code > 128 and self.launch.argv[0] == "bwrap":  # bwrap exits 128 + the signal
                code = 128 - code
            what = (
                f"killed the bench process ({signal.Signals(-code).name})"
                if code < 0
                else f"ended the bench process (exit code {code})"
            )
        when = "while loading" if cell is None else f"at {result.settings.cells[cell]}"
        status = result.subjects[subject]
        status.status, status.message = "failed", f"{what} {when}{self._stderr_tail()}"
        return self.first_cell if cell is None else cell

    def _stderr_tail(self) -> str:
        lines = [line for line in self.stderr.text().splitlines() if line.strip()]
        return (": " + " | ".join(lines[-2:])[-300:]) if lines else ""

    def kill(self) -> None:
        """Kill the bench process and everything its subjects started."""
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        isolation.forget(self.process.pid)
        isolation.reap_strays()
        self.launch.cleanup()
        for fd in (self.to_runner, self.from_runner):
            os.close(fd)
