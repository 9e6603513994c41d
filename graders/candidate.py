"""What a grader sees of the candidate: plans to run, results to check, verdict exceptions.

A grader is a plain function ``grade(candidate) -> str``. It builds a `Plan`, runs it with
`candidate.run(plan)`, compares the results with its own reference, and either returns a one-line
pass message or raises `Fail` with the reason. What the candidate's code did wrong on its own
(raised, hung, crashed, is still a stub) comes out of `run` as the matching exception, so graders
only deal with outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from graders.worker import wire
from graders.isolation import limit_reached
from graders.untrusted import clip
from graders.worker.limits import Limits
from graders.workers import Worker


class Fail(Exception):
    """The item fails; the message says why, in terms a candidate can act on."""


class NotAttempted(Exception):
    """The code the item needs still raises NotImplementedError."""


class CandidateError(Exception):
    """The candidate's code raised, crashed or exited where it should have answered, or its
    worker's reply was malformed (`graders.replies`: every reply is checked there, before it
    reaches `Candidate.run`, and its texts clipped).

    `signature`: for an exception the candidate's code raised, its type, message and place in
    the candidate's file, so that a grade names the same error once (graders.grade)."""

    def __init__(self, message: str, signature: tuple[str, str, str] | None = None):
        super().__init__(message)
        self.signature = signature


class CandidateTimeout(Exception):
    """The candidate's code did not answer in time."""


@dataclass(frozen=True)
class Raised:
    """An exception the candidate raised on an operation marked `may_raise`.

    `lineage` names the exception's classes, its own first, so a subclass of ValueError counts
    as a ValueError.
    """

    type: str
    message: str
    lineage: tuple[str, ...] = ()

    def is_a(self, name: str) -> bool:
        return name in self.lineage


STATE = ("keys", "values", "lengths", "capacity")  # the cache attributes a state op copies
# A plan with measured appends (prealloc) may use this many times --timeout: the allocation probe
# runs Python code at every torch operation of an append, about 20 us each, 10x what a small
# operation costs: an append that loops over positions in Python (correct, if slow) took 6-10 s
# measured for prealloc's 32768 positions, which it appends in 0.9 s unmeasured, and 13 s for
# the hidden run.
MEASURED_TIME = 3


class Plan:
    """Operations for the worker to run in order (run by `graders.worker.ops`); each method returns the
    index of its operation, to look its result up in the `Results`."""

    def __init__(self):
        self.ops: list[dict] = []

    @property
    def measured(self) -> bool:
        """Does an operation run under the allocation probe (`append(measure=True)`)?"""
        return any(op.get("measure") for op in self.ops)

    def _add(self, op: str, **fields) -> int:
        self.ops.append({"op": op, **{k: v for k, v in fields.items() if v is not None}})
        return len(self.ops) - 1

    def new(self, cache: str = "c", capacity: int | None = None) -> int:
        return self._add("new", cache=cache, capacity=capacity)

    def append(self, cache, key, value, counts=None, *, may_raise=None, return_inputs=None,
               measure=None) -> int:
        return self._add("append", cache=cache, key=key, value=value, counts=counts,
                         may_raise=may_raise, return_inputs=return_inputs, measure=measure)

    def attend(self, cache, query, *, may_raise=None, return_inputs=None) -> int:
        return self._add("attend", cache=cache, query=query, may_raise=may_raise,
                         return_inputs=return_inputs)

    def state(self, cache: str = "c", names: tuple[str, ...] = STATE) -> int:
        """A snapshot of the cache's attributes `names`, copied when the op runs (a later op may
        write into a view); an attribute the cache lacks comes back as Missing."""
        return self._add("state", cache=cache, names=list(names))

    def reset(self, cache: str = "c") -> int:
        return self._add("reset", cache=cache)

    def release(self, cache: str, index: int) -> int:
        return self._add("release", cache=cache, index=index)

    def layer(self, name: str, weights: dict, n_heads: int, n_kv_heads: int, head_dim: int,
              rope_base: float) -> int:
        return self._add("layer", layer=name, weights=weights, n_heads=n_heads,
                         n_kv_heads=n_kv_heads, head_dim=head_dim, rope_base=rope_base)

    def decode_step(self, layer: str, cache: str, x, counts=None) -> int:
        return self._add("decode_step", layer=layer, cache=cache, x=x, counts=counts)

    def inventory(self, cache: str, probes: dict) -> int:
        return self._add("inventory", cache=cache, probes=probes)

    def paged_new(self, obj: str, *args, dtype: str | None = None, **kwargs) -> int:
        """PagedKVCache(*args, **kwargs) named `obj`; `dtype` by name ("bfloat16")."""
        if dtype is not None:
            kwargs["dtype"] = dtype
        return self._add("paged_new", obj=obj, args=list(args), kwargs=kwargs)

    def call(self, obj: str, method: str, *args, may_raise=None) -> int:
        """obj.method(*args), for the PagedKVCache contract's methods."""
        return self._add("call", obj=obj, method=method, args=list(args), may_raise=may_raise)

    def get(self, obj: str, attr: str) -> int:
        """obj.attr: num_free_blocks or pool_bytes."""
        return self._add("get", obj=obj, attr=attr)

    def reorder(self, cache: str, beam_idx) -> int:
        return self._add("reorder", cache=cache, beam_idx=beam_idx)

    def fork(self, cache: str, into: str) -> int:
        return self._add("fork", cache=cache, into=into)

    def beam_search(self, weights: dict, prompt, beams: int, steps: int, n_heads: int,
                    n_kv_heads: int, head_dim: int, rope_base: float) -> int:
        return self._add("beam_search", weights=weights, prompt=prompt, beams=beams, steps=steps,
                         n_heads=n_heads, n_kv_heads=n_kv_heads, head_dim=head_dim,
                         rope_base=rope_base)


@dataclass
class Results:
    """The results of a plan, by operation index: the value returned, or `Raised`."""

    values: list = field(default_factory=list)
    inputs: list = field(default_factory=list)

    def __getitem__(self, index: int):
        return self.values[index]

    def inputs_after(self, index: int) -> dict:
        """The tensor inputs of an operation run with `return_inputs`, as they were after it."""
        return self.inputs[index]


@dataclass
class Tell:
    id: str
    detected: bool
    message: str


class Candidate:
    """One implementation under grading, reached only through its worker process.

    `tests` is the candidate's own test file (or None) and `test_worker` the worker that runs it.
    """

    def __init__(self, worker: Worker, timeout: float, tests: Path | None = None,
                 test_worker: Worker | None = None):
        self.worker = worker
        self.timeout = timeout
        self.tests = tests
        self.test_worker = test_worker
        self.tells: list[Tell] = []

    def run(self, plan: Plan) -> Results:
        timeout = self.timeout * (MEASURED_TIME if plan.measured else 1)
        reply = self.worker.run([{"plan": {"ops": plan.ops}}], timeout)[0]
        if reply.status == "timeout":
            raise CandidateTimeout(f"the implementation {reply.detail}")
        if reply.malformed:
            raise CandidateError(reply.detail)
        if reply.status == "crashed":
            raise CandidateError(self._limit_first(
                f"the process running the implementation {reply.detail}"))
        if "error" in reply.body:
            raise CandidateError(self._limit_first(
                f"the implementation returned something that cannot be sent back: "
                f"{reply.body['error'].strip()}"))
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
        if raised["type"] == "MissingName":
            raise CandidateError(raised["message"])
        limit = limit_reached(f"{raised['type']}: {raised['message']}", limits)
        if limit:  # not the candidate's answer to a bad call: the sandbox stopped it
            raise CandidateError(f"{limit}: `{name}` raised {raised['type']}: {raised['message']}")
        if not op.get("may_raise"):
            where = _last_candidate_line(raised["traceback"])
            call, grow = _call_words(op, raised.get("cache"))
            raise CandidateError(
                f"{call} raised {raised['type']}: {raised['message']}{where}{grow}",
                signature=(str(raised["type"]), str(raised["message"]), where))
        return Raised(raised["type"], raised["message"], tuple(raised["lineage"]))


def tensor(value, what: str) -> torch.Tensor:
    """`value` if it is a plain tensor with data; else Fail saying what `what` returned instead."""
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, wire.Opaque):
        raise Fail(f"{what} is {_without_data(value)}, expected a plain torch.Tensor on the CPU")
    raise Fail(f"{what} is {value!r}, expected a torch.Tensor")


def _without_data(value: wire.Opaque) -> str:
    """A tensor that arrived without data, its type named once: "a float32 tensor [2, 3] of type
    m.Sub (a torch.Tensor subclass)", "a float32 tensor [2, 3] on meta"."""
    text = f"a {value.dtype} tensor {list(value.shape)}"
    if value.type_name != "torch.Tensor":
        text += f" of type {value.type_name} (a torch.Tensor subclass)"
    return text + (f" on {value.device}" if value.device != "cpu" else "")


def _last_candidate_line(traceback_text: str) -> str:
    """The last frame of the traceback in the candidate's own code: neither the kata's frames
    nor torch's or Python's (an IndexError raised in torch/_ops.py is the candidate's write)."""
    lines = [line.strip() for line in traceback_text.splitlines() if line.strip().startswith("File ")]
    lines = [line for line in lines if not any(part in line for part in LIBRARY_FRAMES)]
    return f" ({clip(lines[-1])})" if lines else ""


LIBRARY_FRAMES = ("/graders/", "/site-packages/", "/dist-packages/", "/lib/python3")


def _call_words(op: dict, cache) -> tuple[str, str]:
    """The call that raised, with the state of its cache when the worker sent it ("`append` of
    4 positions at lengths [2047], capacity 2048"); and, when that append took a row past the
    capacity, what the contract asks of it ("" otherwise)."""
    key = op.get("key")
    key = key.get("noncontiguous") if isinstance(key, dict) else key
    size = 1 if op["op"] == "decode_step" else (
        key.shape[2] if isinstance(key, torch.Tensor) and key.dim() == 4 else None)
    words = f"`{op.get('method', op['op'])}`" + (
        f" of {size} position{'s' if size != 1 else ''}" if size else "")
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
    return words, (f". An append past capacity {capacity} raised: the contract requires append "
                   "to grow the storage when a row would outgrow it (doubling, say), whatever "
                   "capacity the cache started with")
