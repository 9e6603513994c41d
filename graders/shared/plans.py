"""What a grader says to the candidate's code and hears back: plans, results, verdicts.

A grader is a plain function ``grade(candidate) -> str``. It builds a `Plan`, runs it with
`candidate.run(plan)` (graders.judge.candidate), compares the `Results` with its own reference, and
either returns a one-line pass message or raises `Fail` with the reason. What the candidate's
code did wrong on its own (raised, hung, crashed, is still a stub) comes out of `run` as
`CandidateError`, `CandidateTimeout` or `NotAttempted`, so graders only deal with outputs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

import torch

from graders.worker import wire


class Fail(Exception):
    """The item fails; the message says why, in terms a candidate can act on."""


class NotAttempted(Exception):
    """The code the item needs still raises NotImplementedError."""


class CandidateError(Exception):
    """The candidate's code raised, crashed or exited where it should have answered, or its
    worker's reply was malformed (`graders.judge.replies`: every reply is checked there, before it
    reaches `Candidate.run`, and its texts clipped).

    `signature`: for an exception the candidate's code raised, its type, message and place in
    the candidate's file, so that a grade names the same error once (graders.judge.grade)."""

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
STATE_8 = (*STATE, "positions")  # and section 8's (L6+)
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

    def new(self, cache: str = "c", capacity: int | None = None, window: int | None = None) -> int:
        return self._add("new", cache=cache, capacity=capacity, window=window)

    def append(
        self, cache, key, value, counts=None, *, may_raise=None, return_inputs=None, measure=None
    ) -> int:
        return self._add(
            "append",
            cache=cache,
            key=key,
            value=value,
            counts=counts,
            may_raise=may_raise,
            return_inputs=return_inputs,
            measure=measure,
        )

    def attend(self, cache, query, *, may_raise=None, return_inputs=None) -> int:
        return self._add(
            "attend", cache=cache, query=query, may_raise=may_raise, return_inputs=return_inputs
        )

    def state(self, cache: str = "c", names: tuple[str, ...] = STATE) -> int:
        """A snapshot of the cache's attributes `names`, copied when the op runs (a later op may
        write into a view); an attribute the cache lacks comes back as Missing."""
        return self._add("state", cache=cache, names=list(names))

    def reset(self, cache: str = "c") -> int:
        return self._add("reset", cache=cache)

    def release(self, cache: str, index: int) -> int:
        return self._add("release", cache=cache, index=index)

    def layer(
        self,
        name: str,
        weights: dict,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        rope_base: float,
    ) -> int:
        return self._add(
            "layer",
            layer=name,
            weights=weights,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            rope_base=rope_base,
        )

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

    def attend_chunk(self, cache: str, query, *, may_raise=None, return_inputs=None) -> int:
        """attend_chunk(cache, query) of contract section 8: query [B, Hq, t, D]."""
        return self._add(
            "attend_chunk",
            cache=cache,
            query=query,
            may_raise=may_raise,
            return_inputs=return_inputs,
        )

    def truncate(self, cache: str, lengths, *, may_raise=None) -> int:
        """truncate(cache, lengths) of contract section 8: lengths int64 [B]."""
        return self._add("truncate", cache=cache, lengths=lengths, may_raise=may_raise)

    def beam_search(
        self,
        weights: dict,
        prompt,
        beams: int,
        steps: int,
        n_heads: int,
        n_kv_heads: int,
        head_dim: int,
        rope_base: float,
    ) -> int:
        return self._add(
            "beam_search",
            weights=weights,
            prompt=prompt,
            beams=beams,
            steps=steps,
            n_heads=n_heads,
            n_kv_heads=n_kv_heads,
            head_dim=head_dim,
            rope_base=rope_base,
        )

    def real_model(self, run: dict) -> int:
        """generate of a tiny transformers Llama through the candidate's cache: `run` holds
        the operation's fields (graders.worker.real_model); its result is the sequences, the
        logits and the count of each contract call, or the names the file lacks, or how the
        cache stopped holding what the model wrote."""
        return self._add("real_model", **run)

    def real_model_reference(self, run: dict) -> int:
        """The same generation with transformers' DynamicCache, for the reference worker."""
        return self._add("real_model_reference", **run)

    def drive_scheduler(self, workload: dict, max_steps: int) -> int:
        """The batching track: the candidate's Scheduler driven on `workload` (plain data, the
        oracle included) for at most `max_steps` steps; its result is the trace
        (graders.worker.batching)."""
        return self._add("drive_scheduler", workload=workload, max_steps=max_steps)


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


class PlanRunner(Protocol):
    """What the shared library needs of a candidate: a way to run a plan. The judge's
    `graders.judge.candidate.Candidate` is one; the shared room names only this."""

    def run(self, plan: Plan) -> Results: ...
