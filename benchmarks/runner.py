"""The bench process: the only place `kata bench` runs the code it measures.

    python -m benchmarks.runner     (started by benchmarks.bench, never by hand)

It reads one `graders.wire` frame, the plan (cells, subjects, warm-up, repetitions), on the
stdin it was started with, and answers with event frames on its stdout; both are moved to
private file descriptors at start-up, so what the measured code prints lands in stderr. Events:

    {"event": "machine", "facts": {...}}
    {"event": "loading", "subject": id}                      before importing a subject's file
    {"event": "subject", "subject": id, "status": "ok" | "failed" | "unavailable", "message": ...}
    {"event": "call", "cell": i, "subject": id}             before each call into a subject
    {"event": "result", "cell": i, "subject": id, "seconds": [...], "held_bytes": n}
    {"event": "result", "cell": i, "subject": id, "error": "..."}
    {"event": "done"}

A subject that raises, or whose first output is not the attention it should be, gets an error
for that cell and the others go on. A call that never returns or kills the process is the
parent's to notice: the last "call" event names the culprit.
"""

from __future__ import annotations

import gc
import os
import re
import traceback

from graders.worker import frames, limits, wire


def main() -> None:
    proto_in, proto_out = os.dup(0), os.dup(1)
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    os.dup2(2, 1)
    plan = wire.decode(frames.read_frame(proto_in))
    limits.apply(limits.Limits(**plan["limits"]))

    def send(body: dict) -> None:
        wire.write_frame(proto_out, body)

    import torch

    from benchmarks import machine

    # The sandbox sets OMP_NUM_THREADS=1 (a grade's worker needs no more); the bench measures
    # what the machine does, with every CPU this process may run on.
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    send({"event": "machine", "facts": machine.facts()})
    builders = _load_subjects(plan["subjects"], send)
    with torch.inference_mode():
        for index in range(plan["first_cell"], len(plan["cells"])):
            _run_cell(index, plan, builders, send)
            gc.collect()
    send({"event": "done"})


def _load_subjects(specs: list[dict], send) -> dict:
    from benchmarks.machine import Unavailable

    builders = {}
    for spec in specs:
        send({"event": "loading", "subject": spec["id"]})
        try:
            builders[spec["id"]] = _builder(spec)
        except Unavailable as exc:
            send(
                {
                    "event": "subject",
                    "subject": spec["id"],
                    "status": "unavailable",
                    "message": str(exc),
                }
            )
        except BaseException as exc:  # noqa: BLE001 - SyntaxError, SystemExit, anything
            send(
                {
                    "event": "subject",
                    "subject": spec["id"],
                    "status": "failed",
                    "message": f"does not load: {_describe(exc)}",
                }
            )
        else:
            send({"event": "subject", "subject": spec["id"], "status": "ok"})
    return builders


def _builder(spec: dict):
    from benchmarks import subjects
    from graders.worker.serve import import_file

    kind = spec["builder"]
    if kind == "bare":
        return subjects.bare
    if kind == "read":
        return subjects.read_bound
    if kind == "bare-window":
        return subjects.bare_window
    if kind in ("hf-dynamic", "hf-static"):
        return subjects.hugging_face(kind.removeprefix("hf-"))
    module = import_file(spec["path"], "kata_bench_" + re.sub(r"\W", "_", spec["id"]))
    if kind in ("tiled", "fused", "windowed"):
        return getattr(subjects, kind)(module)
    if kind in ("tiled-paged", "fused-paged"):
        return getattr(subjects, kind.replace("-", "_"))(module, spec.get("quantize"))
    return subjects.contract_cache(module, spec.get("quantize"))


def _run_cell(index: int, plan: dict, builders: dict, send) -> None:
    from benchmarks import subjects, timing

    cell = plan["cells"][index]
    shape, dtype = subjects.SHAPES[cell["shape"]], wire.DTYPES[cell["dtype"]]
    steps = plan["warmup"] + plan["reps"]
    history = subjects.History.random(
        shape, dtype, cell["length"], subjects.capacity_for(cell["length"], steps), plan["window"]
    )
    expected = {}  # (appended tokens, windowed) -> float64 output: 1 token after a cache's first
    # step, 0 for the floors
    steppers, errors = {}, {}
    for name, build in builders.items():
        send({"event": "call", "cell": index, "subject": name})
        try:
            stepper = build(history)
            wanted = (int(stepper.appends), stepper.windowed)
            if wanted not in expected:
                expected[wanted] = history.expected(*wanted)
            problem = _check(stepper.step(), expected[wanted], history, stepper)
            for _ in range(plan["warmup"] - 1):
                stepper.step()
        except BaseException as exc:  # noqa: BLE001
            problem = _describe(exc)
        if problem:
            errors[name] = problem
        else:
            steppers[name] = stepper

    def guarded(name):
        step = steppers[name].step

        def call():
            if name not in errors:
                try:
                    step()
                except BaseException as exc:  # noqa: BLE001
                    errors[name] = _describe(exc)

        return call

    seconds = timing.interleaved(
        {name: guarded(name) for name in steppers},
        plan["reps"],
        before=lambda name: send({"event": "call", "cell": index, "subject": name}),
    )
    for name in builders:
        if name in errors:
            send({"event": "result", "cell": index, "subject": name, "error": errors[name]})
        else:
            send(
                {
                    "event": "result",
                    "cell": index,
                    "subject": name,
                    "seconds": seconds[name],
                    "held_bytes": steppers[name].held_bytes(),
                }
            )


def _check(out, expected, history, stepper) -> str | None:
    """Why the first step's output is not `expected` (float64, [B, Hq, 1, D]), or None."""
    import torch

    from graders.shared.compare import TOLERANCE, close

    if not stepper.appends and out is None:
        return None  # the read bound computes no attention
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(expected.shape):
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        return f"the step returned {got}, not the attention output {tuple(expected.shape)}"
    error = (out.double() - expected).abs()
    if stepper.quantized:  # int8: error within 2% of the values' scale (the quantized-kv bound)
        ok = bool(error.max() <= 2e-2 * history.values.double().abs().max())
    else:
        ok = bool(close(out, expected, TOLERANCE[history.keys.dtype]).all())
    if ok:
        return None
    return (
        f"wrong output: max abs error {error.max().item():.2e} against float64 attention "
        f"({history.keys.dtype}); not timed"
    )


def _describe(exc: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(exc), exc)).strip()
    return text.splitlines()[-1] if text else type(exc).__name__


if __name__ == "__main__":
    main()
