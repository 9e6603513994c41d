"""One PagedKVCache in a plan, with the judge's own copy of every sequence's keys and values.

`Pool` sends adds, appends and frees to the candidate's cache and keeps what each sequence was
given; each `attend` records the float64 answer (graders.shared.reference) over every row's own keys
and values, and `check` compares the candidate's outputs with them after the run. What a Pool
judges is the data attention reads and how it computes; which blocks hold it is the bookkeeping
of graders.serving.model and graders.serving.session.
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

from graders.shared import cases, reference
from graders.shared.compare import (
    SDPA_IS_CAUSAL,
    UNWRITTEN_SLOTS,
    Tolerance,
    close,
    first_divergence,
    require_shape,
)
from graders.shared.plans import Fail, Plan, tensor


class Read(NamedTuple):
    """One attend: its operation, rows, float64 answer [rows, Hq, 1, D], when it was made, its
    query, and each row's keys and values as they were then ([Hkv, L, D] each)."""

    index: int
    seq_ids: list
    lengths: list[int]
    expected: torch.Tensor
    after: str
    query: torch.Tensor
    kv: list[tuple[torch.Tensor, torch.Tensor]]


class Pool:
    """One PagedKVCache named `obj` in `plan`, and the judge's own copy of every sequence in it:
    `attend` records float64 attention over each row's own keys and values; `check` compares."""

    def __init__(
        self,
        plan: Plan,
        g: torch.Generator,
        num_blocks: int,
        block_size: int,
        Hq: int,
        Hkv: int,
        head_dim: int,
        dtype=torch.float32,
        obj: str = "p",
        **kwargs,
    ):
        self.plan, self.g, self.obj, self.bs, self.dtype = plan, g, obj, block_size, dtype
        self.Hq, self.Hkv, self.D = Hq, Hkv, head_dim
        plan.paged_new(
            obj,
            num_blocks,
            block_size,
            Hkv,
            head_dim,
            dtype=str(dtype).removeprefix("torch."),
            **kwargs,
        )
        self.seqs: dict[int, list[torch.Tensor]] = {}  # id -> [keys, values], each [Hkv, L, D]
        self.reads: list[Read] = []

    def kv(self, t: int, scale=1.0) -> torch.Tensor:
        """Seeded keys or values for t positions, [Hkv, t, D]; `scale`: [t] magnitudes, or 1."""
        x = cases.randn(self.g, self.Hkv, t, self.D).double()
        return (x * torch.as_tensor(scale, dtype=torch.float64)[..., None]).to(self.dtype)

    def add(self, seq) -> None:
        self.plan.call(self.obj, "add", seq)
        self.seqs[seq] = [self.kv(0)] * 2

    def free(self, seq) -> None:
        self.plan.call(self.obj, "free", seq)
        del self.seqs[seq]

    def append(self, seq, key=None, value=None, t: int = 1, noncontiguous: bool = False) -> None:
        """Append `key` and `value` ([Hkv, t, D]; seeded ones of t positions when not given),
        sent as non-contiguous tensors when asked."""
        key = self.kv(t) if key is None else key
        value = self.kv(key.shape[1]) if value is None else value
        wrap = (lambda x: {"noncontiguous": x}) if noncontiguous else (lambda x: x)
        self.plan.call(self.obj, "append", seq, wrap(key), wrap(value))
        old = self.seqs[seq]
        self.seqs[seq] = [torch.cat((old[0], key), 1), torch.cat((old[1], value), 1)]

    def attend(
        self, seq_ids: list, after: str, q_scale: float = 1.0, query: torch.Tensor | None = None
    ) -> None:
        """One attend over `seq_ids` (repeats and empty sequences allowed) with `query` ([rows,
        Hq, 1, D]; a seeded one times `q_scale` when not given), its answer recorded; `after`
        says when, in messages."""
        if query is None:
            query = (cases.randn(self.g, len(seq_ids), self.Hq, 1, self.D) * q_scale).to(self.dtype)
        kv = [tuple(self.seqs[s]) for s in seq_ids]  # this step's keys and values of each row
        rows = [
            torch.zeros(1, self.Hq, 1, self.D, dtype=torch.float64)
            if not k.shape[1]
            else reference.causal_attention(query[i : i + 1], k[None], v[None])
            for i, (k, v) in enumerate(kv)
        ]
        index = self.plan.call(self.obj, "attend", list(seq_ids), query)
        self.reads.append(
            Read(
                index, list(seq_ids), [k.shape[1] for k, _ in kv], torch.cat(rows), after, query, kv
            )
        )

    def check(
        self,
        results,
        tol: Tolerance,
        case: str,
        likely: Callable[["Pool", list, int, Tolerance], str] | None = None,
    ) -> None:
        """Fail at the first read whose output is not within `tol` of the judge's, naming the
        likely mistake `likely` (default: `likely_mistake`) finds, if any."""
        got = [
            tensor(results[r.index], f"{case}: attend's output after {r.after}") for r in self.reads
        ]
        for out, read in zip(got, self.reads):
            require_shape(out, tuple(read.expected.shape), f"{case}: attend's output")
            if out.dtype != read.query.dtype:
                raise Fail(
                    f"{case}: attend returned {out.dtype} for a {read.query.dtype} query: "
                    "the output keeps the query's dtype"
                )
        wrong = first_divergence(got, [r.expected for r in self.reads], tol)
        if wrong is None:
            return
        read, row = self.reads[wrong.step], wrong.row
        if wrong.nonfinite and read.lengths[row]:  # ordinary inputs: a slot it should not read
            error = f"{wrong.error()}: {UNWRITTEN_SLOTS}"
        else:
            label = (likely or likely_mistake)(self, got, wrong.step, tol)
            error = f"max abs error {wrong.max_abs:.2e} (tolerance {tol})" + (
                f". Likely mistake: {label}" if label else ""
            )
        raise Fail(
            f"{case}, after {read.after}: row {row} (sequence {read.seq_ids[row]}, length "
            f"{read.lengths[row]}), head {wrong.head} is not attention over that "
            f"sequence's own positions: {error}"
        )


VARIANTS = (
    ("which KV head each query head reads (the outputs match h % Hkv)", "modulo", True),
    ("the scores' scale (the outputs match larger scores)", "grouped", False),
)


def likely_mistake(pool: Pool, got: list, step: int, tol: Tolerance) -> str:
    """A label for the known mistake whose signature the outputs show, or "": an empty sequence
    not giving zeros, a head mapping or scale of `VARIANTS`, SDPA's is_causal=True with one
    query (the first key's value alone), or only sequences with a partly filled last block
    wrong."""
    wrong = [
        (r, i)
        for r, out in zip(pool.reads, got)
        for i in range(len(r.lengths))
        if not close(out[i], r.expected[i], tol).all()
    ]
    read = pool.reads[step]
    bad = [i for r, i in wrong if r is read]
    if any(read.lengths[i] == 0 for i in bad):
        return "what a sequence of length 0 attends to (its output is not zeros)"
    for label, heads, scaled in VARIANTS:
        if all(
            close(got[step][i], _variant(read.query[i], *read.kv[i], heads, scaled), tol).all()
            for i in bad
        ):
            return label
    if bad and all(
        close(got[step][i], _first_key_only(read.query[i], read.kv[i][1]), tol).all() for i in bad
    ):
        return SDPA_IS_CAUSAL
    if any(n and n % pool.bs == 0 for r in pool.reads for n in r.lengths) and all(
        r.lengths[i] % pool.bs for r, i in wrong
    ):
        return (
            "which slots and blocks attend reads (only sequences whose last block is partly "
            "filled are wrong)"
        )
    return ""


def _first_key_only(q, v) -> torch.Tensor:
    """What a query q [Hq, 1, D] gets from attention over the first key alone: its KV head's
    first value, v [Hkv, L, D] -> [Hq, 1, D] (query head h reads KV head h // (Hq // Hkv))."""
    Hq, Hkv = q.shape[0], v.shape[0]
    return v.double()[torch.arange(Hq) // (Hq // Hkv), :1]


def _variant(q, k, v, heads: str, scaled: bool) -> torch.Tensor:
    """A known mistake's attention for one row: q [Hq, 1, D], k and v [Hkv, L, D]."""
    if k.shape[1] == 0:
        return torch.zeros(q.shape, dtype=torch.float64)
    Hq, Hkv = q.shape[0], k.shape[0]
    kv = torch.arange(Hq) // (Hq // Hkv) if heads == "grouped" else torch.arange(Hq) % Hkv
    scores = q.double() @ k.double()[kv].transpose(-1, -2)
    return (scores / (math.sqrt(q.shape[-1]) if scaled else 1)).softmax(-1) @ v.double()[kv]
