"""What a grader holds of the candidate: `Candidate.run(plan)`, reached only through its worker.

`run` sends a plan (graders.shared.plans) to the implementation's worker and turns the reply into
`Results`, or into the exception that says what the candidate's code did on its own (raised
where it should have answered, hung, crashed, is still a stub), naming the call that raised and
the candidate's own line.
"""

from __future__ import annotations

from pathlib import Path

import torch

from graders.judge.isolation import limit_reached
from graders.judge.workers import GradeWorkers, Worker
from graders.shared.plans import (
    MEASURED_TIME,
    CandidateError,
    CandidateTimeout,
    NotAttempted,
    Plan,
    Raised,
    Results,
    Tell,
)
from graders.shared.untrusted import clip
from graders.worker.limits import Limits


class Candidate:
    """One implementation under grading, reached only through its worker process.

    `tests` is the candidate's own test file (or None) and `test_worker` the worker that runs it.
    `model_worker` runs the implementation beside transformers, `reference_worker` transformers
    alone (the real-model item's two workers; None where a caller gave none).
    """

    def __init__(
        self,
        worker: Worker,
        timeout: float,
        tests: Path | None = None,
        test_worker: Worker | None = None,
        model_worker: Worker | None = None,
        reference_worker: Worker | None = None,
    ):
        self.worker = worker
        self.timeout = timeout
        self.tests = tests
        self.test_worker = test_worker
        self.model_worker = model_worker
        self.reference_worker = reference_worker
        self.tells: list[Tell] = []

    def run(self, plan: Plan, *, beside_model: bool = False) -> Results:
        """The plan's results from the implementation's worker, or with `beside_model` from the
        worker that runs it beside transformers (the real-model item's)."""
        worker = self._model_workers()[0] if beside_model else self.worker
        timeout = self.timeout * (MEASURED_TIME if plan.measured else 1)
        reply = worker.run([{"plan": {"ops": plan.ops}}], timeout)[0]
        if reply.status == "timeout":
            raise CandidateTimeout(f"the implementation {reply.detail}")
        if reply.malformed:
            raise CandidateError(reply.detail)
        if reply.status == "crashed":
            raise CandidateError(
                self._limit_first(f"the process running the implementation {reply.detail}")
            )
        if "error" in reply.body:
            raise CandidateError(
                self._limit_first(
                    f"the implementation returned something that cannot be sent back: "
                    f"{reply.body['error'].strip()}"
                )
            )
        results = Results()
        for op, result in zip(plan.ops, reply.body["results"]):
            if "raised" in result:
                results.values.append(self._raised(op, result["raised"], self.worker.limits))
            else:
                results.values.append(result["ok"])
            results.inputs.append(result.get("inputs_after"))
        if len(results.values) < len(plan.ops):
            raise CandidateError("the plan stopped early")  # only after an exception, raised above
        return results

    def reference(self, plan: Plan) -> list:
        """The values of a plan run where no candidate code is (the reference worker): what goes
        wrong there is the kata's fault, never the candidate's (RuntimeError)."""
        reply = self._model_workers()[1].run([{"plan": {"ops": plan.ops}}], self.timeout)[0]
        if reply.status != "done" or "error" in reply.body:
            raise RuntimeError(
                f"the reference worker failed: {reply.status} {reply.detail}"
                f"{reply.body.get('error', '') if reply.body else ''}"
            )
        values = []
        for result in reply.body["results"]:
            if "raised" in result:
                raise RuntimeError(
                    f"the reference worker raised {result['raised']['type']}: "
                    f"{result['raised']['message']}"
                )
            values.append(result["ok"])
        return values

    def _model_workers(self):
        """The real-model item's two workers; made like the implementation's worker where the
        caller gave none (a Candidate built by hand), and ended with it."""
        if self.model_worker is None or self.reference_worker is None:
            base = self.worker
            self.model_worker, self.reference_worker = GradeWorkers.model_workers(
                Path(base.path),
                base.module,
                base.isolation,
                _Sandboxed(base.limits),
                base.import_timeout,
            )
            base.companions += [self.model_worker, self.reference_worker]
        return self.model_worker, self.reference_worker

    def abandon_model(self) -> None:
        """The real-model item's answers are not wanted after all (it ran beside the other
        items, and is not graded): its two workers end now, from another thread than its own."""
        for worker in (self.model_worker, self.reference_worker):
            if worker is not None:
                worker.interrupt()

    def tell(self, tell_id: str, detected: bool, message: str) -> None:
        self.tells.append(Tell(tell_id, detected, message))

    def _limit_first(self, message: str) -> str:
        """`message`, led by the name of the resource limit it shows was reached, if any."""
        limit = limit_reached(message, self.worker.limits)
        return f"{limit}: {message}" if limit else message

    @staticmethod
    def _raised(op: dict, raised: dict, limits: Limits) -> Raised:
        name = op.get("method", op["op"])
        if raised["type"] == "NotImplementedError":
            raise NotAttempted(f"`{name}` still raises NotImplementedError")
        if raised["type"] == "NotWritten":  # a name of section 8 (L6+) the file lacks
            raise NotAttempted(raised["message"])
        if raised["type"] == "MissingName":
            raise CandidateError(raised["message"])
        limit = limit_reached(f"{raised['type']}: {raised['message']}", limits)
        if limit:  # not the candidate's answer to a bad call: the sandbox stopped it
            raise CandidateError(f"{limit}: `{name}` raised {raised['type']}: {raised['message']}")
        if not op.get("may_raise"):
            where = last_candidate_line(raised["traceback"])
            call, grow = _call_words(op, raised.get("cache"))
            raise CandidateError(
                f"{call} raised {raised['type']}: {raised['message']}{where}{grow}",
                signature=(str(raised["type"]), str(raised["message"]), where),
            )
        return Raised(raised["type"], raised["message"], tuple(raised["lineage"]))


class _Sandboxed:
    """What GradeWorkers.model_workers reads of a sandbox: the limits a worker already has."""

    def __init__(self, limits: Limits):
        self._limits = limits

    def limits(self) -> Limits:
        return self._limits


def last_candidate_line(traceback_text: str) -> str:
    """The last frame of the traceback in the candidate's own code: neither the kata's frames
    nor torch's or Python's (an IndexError raised in torch/_ops.py is the candidate's write)."""
    lines = [
        line.strip() for line in traceback_text.splitlines() if line.strip().startswith("File ")
    ]
    lines = [line for line in lines if not any(part in line for part in LIBRARY_FRAMES)]
    return f" ({clip(lines[-1])})" if lines else ""


LIBRARY_FRAMES = ("/graders/", "/site-packages/", "/dist-packages/", "/lib/python3")


def _call_words(op: dict, cache) -> tuple[str, str]:
    """The call that raised, with the state of its cache when the worker sent it ("`append` of
    4 positions at lengths [2047], capacity 2048"); and, when that append took a row past the
    capacity, what the contract asks of it ("" otherwise)."""
    key = op.get("key")
    key = key.get("noncontiguous") if isinstance(key, dict) else key
    size = (
        1
        if op["op"] == "decode_step"
        else (key.shape[2] if isinstance(key, torch.Tensor) and key.dim() == 4 else None)
    )
    words = f"`{op.get('method', op['op'])}`" + (
        f" of {size} position{'s' if size != 1 else ''}" if size else ""
    )
    lengths = cache.get("lengths") if isinstance(cache, dict) else None
    capacity = cache.get("capacity") if isinstance(cache, dict) else None
    if not (isinstance(lengths, list) and lengths and all(type(n) is int for n in lengths)):
        lengths = None
    capacity = capacity if type(capacity) is int else None
    if lengths is not None:
        words += f" at lengths {lengths[:8]}"[:-1] + (", ...]" if len(lengths) > 8 else "]")
    if capacity is not None:
        words += f", capacity {capacity}"
    counts = op.get("counts")
    grows = int(counts.max()) if isinstance(counts, torch.Tensor) and counts.numel() else size
    if None in (lengths, capacity, grows) or max(lengths) + grows <= capacity:
        return words, ""
    return words, (
        f". Likely mistake: what append does when a row outgrows capacity {capacity} "
        "(this append took a row past it, and raised)"
    )
