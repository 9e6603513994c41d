"""paged-equivalence: paged attention equals dense attention, in a fragmented pool.

Six sequences share one pool of 4-position blocks; appends of 1 to 9 positions (most crossing a
block boundary) are interleaved with frees, so freed blocks are reused by other sequences and
tables end up out of order and far apart. After every append and free, one attend over every
live sequence, an id repeated, and a sequence that never got a position (zeros expected), each
row compared with float64 attention over that sequence's own keys and values
(graders.reference), for MHA 4/4, GQA 8/2 and MQA 4/1. A bfloat16 pool must answer in bfloat16.
What this catches: blocks read in an order other than the table, slots past a sequence's length
in its last block (stale data of a freed sequence), NaN for an empty sequence, a GQA head
mapping other than h // (Hq // Hkv), a missing 1/sqrt(D).
Last, the dense contract's validation, kept light: append with wrong kv_heads, head_dim, rank,
dtype or device, and attend with a bad query raise ValueError and change nothing.
`Pool` (the judge's side of a PagedKVCache) is shared with the other serving items.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from graders import cases, reference
from graders.candidate import Candidate, Fail, Plan, Raised, tensor
from graders.compare import TOLERANCE, close, first_divergence, require_shape

ITEM = "paged-equivalence"

NUM_BLOCKS, BLOCK_SIZE, D = 24, 4, 16
LAYOUTS = ((4, 4), (8, 2), (4, 1))  # (Hq, Hkv): MHA, GQA, MQA
EMPTY = 3  # added, never written
SCRIPT = (("add", 0), ("add", 1), ("add", 2), ("add", EMPTY), ("append", 0, 3), ("append", 1, 6),
          ("append", 2, 2), ("add", 4), ("append", 4, 5), ("append", 0, 4), ("append", 2, 7),
          ("free", 1), ("append", 4, 6), ("append", 0, 9), ("add", 5), ("append", 5, 5),
          ("free", 4), ("append", 2, 1), ("append", 5, 8), ("append", 0, 2), ("append", 5, 3))


class Read(NamedTuple):  # one attend: its op, rows, float64 answer, and each row's [Hkv, L, D] K, V
    index: int
    seq_ids: list
    lengths: list[int]
    expected: torch.Tensor
    after: str
    query: torch.Tensor
    kv: list[tuple[torch.Tensor, torch.Tensor]]


class Pool:
    """One PagedKVCache in a plan, and the judge's own copy of every sequence in it: `attend`
    records float64 attention over each row's own keys and values; `check` compares."""

    def __init__(self, plan: Plan, g, num_blocks: int, block_size: int, Hq: int, Hkv: int,
                 head_dim: int, dtype=torch.float32, obj: str = "p", **kwargs):
        self.plan, self.g, self.obj, self.bs, self.dtype = plan, g, obj, block_size, dtype
        self.Hq, self.Hkv, self.D = Hq, Hkv, head_dim
        plan.paged_new(obj, num_blocks, block_size, Hkv, head_dim,
                       dtype=str(dtype).removeprefix("torch."), **kwargs)
        self.seqs: dict[int, list[torch.Tensor]] = {}  # id -> [keys, values], each [Hkv, L, D]
        self.reads: list[Read] = []

    def kv(self, t: int, scale=1.0) -> torch.Tensor:  # [Hkv, t, D]; scale: [t] magnitudes, or 1
        x = cases.randn(self.g, self.Hkv, t, self.D).double()
        return (x * torch.as_tensor(scale, dtype=torch.float64)[..., None]).to(self.dtype)

    def add(self, seq) -> None:
        self.plan.call(self.obj, "add", seq)
        self.seqs[seq] = [self.kv(0)] * 2

    def free(self, seq) -> None:
        self.plan.call(self.obj, "free", seq)
        del self.seqs[seq]

    def append(self, seq, key=None, value=None, t: int = 1, noncontiguous: bool = False) -> None:
        key = self.kv(t) if key is None else key
        value = self.kv(key.shape[1]) if value is None else value
        wrap = (lambda x: {"noncontiguous": x}) if noncontiguous else (lambda x: x)
        self.plan.call(self.obj, "append", seq, wrap(key), wrap(value))
        old = self.seqs[seq]
        self.seqs[seq] = [torch.cat((old[0], key), 1), torch.cat((old[1], value), 1)]

    def attend(self, seq_ids: list, after: str, q_scale: float = 1.0) -> None:
        query = (cases.randn(self.g, len(seq_ids), self.Hq, 1, self.D) * q_scale).to(self.dtype)
        kv = [tuple(self.seqs[s]) for s in seq_ids]  # this step's keys and values of each row
        rows = [torch.zeros(1, self.Hq, 1, self.D, dtype=torch.float64) if not k.shape[1]
                else reference.causal_attention(query[i : i + 1], k[None], v[None])
                for i, (k, v) in enumerate(kv)]
        index = self.plan.call(self.obj, "attend", list(seq_ids), query)
        self.reads.append(Read(index, list(seq_ids), [k.shape[1] for k, _ in kv], torch.cat(rows),
                               after, query, kv))

    def check(self, results, tol, case: str, likely=None) -> None:
        got = [tensor(results[r.index], f"{case}: attend's output after {r.after}")
               for r in self.reads]
        for out, read in zip(got, self.reads):
            require_shape(out, tuple(read.expected.shape), f"{case}: attend's output")
            if out.dtype != read.query.dtype:
                raise Fail(f"{case}: attend returned {out.dtype} for a {read.query.dtype} query: "
                           "the output keeps the query's dtype")
        wrong = first_divergence(got, [r.expected for r in self.reads], tol)
        if wrong is None:
            return
        read, row = self.reads[wrong.step], wrong.row
        label = (likely or _likely)(self, got, wrong.step, tol)
        raise Fail(f"{case}, after {read.after}: row {row} (sequence {read.seq_ids[row]}, length "
                   f"{read.lengths[row]}), head {wrong.head} is not attention over that "
                   f"sequence's own positions: max abs error {wrong.max_abs:.2e} (tolerance "
                   f"{tol})" + (f". Likely mistake: {label}" if label else ""))


def _likely(pool: Pool, got: list, step: int, tol) -> str:
    """A label for the known mistake whose signature the outputs show, or ""."""
    wrong = [(r, i) for r, out in zip(pool.reads, got) for i in range(len(r.lengths))
             if not close(out[i], r.expected[i], tol).all()]
    read = pool.reads[step]
    bad = [i for r, i in wrong if r is read]
    if any(read.lengths[i] == 0 for i in bad):
        return "a sequence of length 0 gives zeros (a softmax over no positions is NaN)"
    for label, heads, scaled in VARIANTS:
        if all(close(got[step][i], _variant(read.query[i], *read.kv[i], heads, scaled), tol).all()
               for i in bad):
            return label
    if any(n and n % pool.bs == 0 for r in pool.reads for n in r.lengths) and all(
            r.lengths[i] % pool.bs for r, i in wrong):
        return ("only sequences whose last block is partly filled are wrong: does attend read "
                "slots past a sequence's length, or blocks in an order other than the table's?")
    return ""


VARIANTS = (("query head h reads KV head h % Hkv, not h // (Hq // Hkv)", "modulo", True),
            ("scores not scaled by 1/sqrt(head_dim)", "grouped", False))


def _variant(q, k, v, heads: str, scaled: bool) -> torch.Tensor:
    """A known mistake's attention for one row: q [Hq, 1, D], k and v [Hkv, L, D]."""
    if k.shape[1] == 0:
        return torch.zeros(q.shape, dtype=torch.float64)
    Hq, Hkv = q.shape[0], k.shape[0]
    kv = torch.arange(Hq) // (Hq // Hkv) if heads == "grouped" else torch.arange(Hq) % Hkv
    scores = q.double() @ k.double()[kv].transpose(-1, -2)
    return (scores / (math.sqrt(q.shape[-1]) if scaled else 1)).softmax(-1) @ v.double()[kv]


def grade(candidate: Candidate) -> str:
    for seed, (Hq, Hkv) in enumerate(LAYOUTS, start=600):
        case = f"{'MHA' if Hq == Hkv else 'MQA' if Hkv == 1 else 'GQA'} {Hq}/{Hkv}"
        plan = Plan()
        run_script(Pool(plan, cases.generator(seed), NUM_BLOCKS, BLOCK_SIZE, Hq, Hkv, D), SCRIPT,
                   candidate, TOLERANCE[torch.float32], case)
    plan = Plan()
    run_script(Pool(plan, cases.generator(610), NUM_BLOCKS, BLOCK_SIZE, 4, 2, D, torch.bfloat16),
               SCRIPT[:12], candidate, TOLERANCE[torch.bfloat16], "a bfloat16 pool (GQA 4/2)")
    _validation(candidate)
    return (f"{len(LAYOUTS)} head layouts on a fragmented pool ({len(SCRIPT)} steps of appends "
            f"and frees) within {TOLERANCE[torch.float32]} of float64 attention, bfloat16 in "
            "bfloat16, empty sequences give zeros; bad appends and queries raise ValueError")


def run_script(pool: Pool, script, candidate: Candidate, tol, case: str) -> None:
    """After every append and free: attend over the live sequences, the first again, the empty."""
    for op, seq, *t in script:
        getattr(pool, op)(seq, **({"t": t[0]} if t else {}))
        if op != "add":
            live = [s for s in pool.seqs if s != EMPTY]
            after = f"{op} {seq}" + (f" ({t[0]} positions)" if t else "")
            pool.attend(live + live[:1] + [EMPTY], after)
    pool.check(candidate.run(pool.plan), tol, case)


def _validation(candidate: Candidate) -> None:
    g, plan = cases.generator(620), Plan()
    pool = Pool(plan, g, 8, BLOCK_SIZE, 2, 2, 8)
    pool.add(0)
    pool.append(0, t=5)
    x = cases.randn(g, 2, 1, 8)
    bad = [("append with 3 kv heads on a 2-head pool", "append", cases.randn(g, 3, 1, 8)),
           ("append with head_dim 6 on a head_dim 8 pool", "append", cases.randn(g, 2, 1, 6)),
           ("append with a 4-d key and value", "append", x[None]),
           ("a float64 append to a float32 pool", "append", x.double()),
           ("an append on the meta device", "append", {"meta": x}),
           ("attend with a head_dim 6 query", "attend", cases.randn(g, 1, 2, 1, 6)),
           ("attend with 3 query heads on 2 kv heads", "attend", cases.randn(g, 1, 3, 1, 8)),
           ("attend with 2 query rows for 1 sequence id", "attend", cases.randn(g, 2, 2, 1, 8)),
           ("attend with a float64 query", "attend", cases.randn(g, 1, 2, 1, 8).double())]
    ops = [(what, plan.call("p", op, *((0, arg, arg) if op == "append" else ([0], arg)),
                            may_raise=True)) for what, op, arg in bad]
    pool.attend([0], "the rejected calls")  # they changed nothing: still the 5 positions
    results = candidate.run(plan)
    for what, index in ops:
        raised = results[index]
        if not (isinstance(raised, Raised) and raised.is_a("ValueError")):
            did = (f"raised {raised.type}: {raised.message}" if isinstance(raised, Raised)
                   else "was accepted")
            raise Fail(f"{what} {did}; expected ValueError (append and attend validate like the "
                       "dense cache's)")
    pool.check(results, TOLERANCE[torch.float32], "after rejected appends and queries")
