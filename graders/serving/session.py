"""A script played on the candidate's PagedKVCache and on the judge's model of it, compared.

`Session` sends each step to the candidate's cache (through a plan) and to a
`graders.serving.model.Book`, and records what to compare once the plan has run: the call's
outcome and the readings after it, each as a small check that knows its own problem. The
serving graders of paged-cow, paged-free, admission and eviction, public and hidden, are
scripts over a Session (the hidden ones drawn by graders.serving.scripts.play).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from graders.serving.model import Book, Full
from graders.shared import cases, reference
from graders.shared.compare import TOLERANCE, UNWRITTEN_SLOTS, close, first_divergence
from graders.shared.plans import Fail, Plan, Raised, Results

TOL = TOLERANCE[torch.float32]
# How far an int8 pool's attention may be from float64 attention over the values written, as a
# share of the largest of them: quantized-kv's bound, measured in graders/serving/items/quantized_kv.py.
INT8_BOUND = 2e-2


class Session:
    """A plan on one PagedKVCache whose every step is also done to a `Book`.

    `watch` names what is read after each step: "tables" (every block table, judged by its
    sharing), "length" (of every sequence), "attend" (every non-empty sequence against float64
    attention over what was written to it), "num_free_blocks"; and around a step: "unchanged"
    (attention before and after a call that must raise CacheFull, equal) and "freed"
    (num_free_blocks around an evict whose victim never shared a block). The keys written are
    zero, so attention is the mean of exactly the values a sequence holds, whatever the scores:
    these items judge which data a sequence reads; how attention computes (scale, softmax,
    heads, empty sequences) is paged-equivalence's question. `hidden` labels a step by its kind
    only, so that a message never shows a hidden case's script. `quantize="int8"` makes the
    pool an int8 one, whose attention is then held to INT8_BOUND of each sequence's largest
    value rather than to float32's tolerance.
    """

    def __init__(
        self,
        case: str,
        num_blocks: int,
        block_size: int,
        *,
        seed: int,
        watch=("tables", "length", "attend", "num_free_blocks"),
        heads: int = 2,
        head_dim: int = 8,
        hidden: bool = False,
        quantize: str | None = None,
    ):
        self.case, self.watch, self.hidden, self.quantize = case, set(watch), hidden, quantize
        self.book = Book(num_blocks, block_size)
        self.g, self.heads, self.head_dim = cases.generator(seed), heads, head_dim
        self.plan = Plan()
        self.plan.paged_new(
            "p",
            num_blocks,
            block_size,
            heads,
            head_dim,
            **({"quantize": quantize} if quantize else {}),
        )
        self.kv: dict = {}  # seq -> (keys, values) [heads, n, head_dim]: what was written to it
        self.checks: list[Check] = []
        self.steps, self.forked = 0, False

    def add(self, seq):
        return self.step("add", seq)

    def admit(self, seq, max_tokens):
        return self.step("admit", seq, max_tokens)

    def can_admit(self, tokens):
        return self.step("can_admit", tokens)

    def append(self, seq, t):
        return self.step("append", seq, t)

    def fork(self, src, dst):
        return self.step("fork", src, dst)

    def free(self, seq):
        return self.step("free", seq)

    def evict(self):
        return self.step("evict")

    def step(self, method: str, *args) -> tuple:
        """One call, to the book and into the plan: what the book returned or raised is expected
        (and returned: ("returns", value) or ("raises", exception name))."""
        self.steps += 1
        label = f"step {self.steps} ({method if self.hidden else _call(method, args)})"
        sent = self._arguments(method, args)
        room = f"free blocks before it: {self.book.num_free}, unreserved: {self.book.unreserved()}"
        freed = self._blocks_an_evict_frees()
        filled = self._filled()
        outcome = self._book_outcome(method, args)
        counted = method == "evict" and freed is not None and "freed" in self.watch
        unchanged = outcome == ("raises", "CacheFull") and "unchanged" in self.watch and filled
        free_before = self.plan.get("p", "num_free_blocks") if counted else None
        reads_before = self._read_attention(filled) if unchanged else None
        call = self.plan.call("p", method, *sent, may_raise=True)
        self.checks.append(Outcome(label, method, call, outcome, room))
        if counted:
            self.checks.append(
                Freed(label, free_before, self.plan.get("p", "num_free_blocks"), freed)
            )
        if unchanged:
            query, before = reads_before
            after = self.plan.call("p", "attend", filled, query, may_raise=True)
            self.checks.append(Unchanged(label, filled, before, after, tuple(query.shape)))
        if outcome[0] == "returns":
            self._remember(method, args, sent, outcome[1])
        if method != "can_admit":
            self._observe(label)
        return outcome

    def check(self, results: Results, hints: dict[str, str]) -> None:
        """Fail at the first outcome or reading that is not the book's, with its step's label
        and the item's hint for it (`hints`, keyed by the check's `hint_keys`, finest first)."""
        for check in self.checks:
            problem = check.problem(results)
            if problem:
                hint = next((hints[key] for key in check.hint_keys if key in hints), "")
                raise Fail(f"{self.case}, {check.label}: {problem}" + (f". {hint}" if hint else ""))

    def _arguments(self, method: str, args: tuple) -> tuple:
        """The call's arguments as sent: an append of t positions sends zero keys and seeded
        values ([heads, t, head_dim])."""
        if method != "append":
            return args
        values = cases.randn(self.g, self.heads, args[1], self.head_dim)
        return args[0], torch.zeros_like(values), values

    def _blocks_an_evict_frees(self) -> int | None:
        """How many blocks an evict would give back now: the newest sequence's, when none of them
        was ever shared (else None: what a shared block does is another item's question)."""
        victim = next(reversed(self.book.tables), None)
        if victim is None or self.book.ever_shared.intersection(self.book.tables[victim]):
            return None
        return len(self.book.tables[victim])

    def _filled(self) -> list:
        return [s for s in self.book.tables if self.book.lengths[s]]

    def _book_outcome(self, method: str, args: tuple) -> tuple:
        try:
            return "returns", getattr(self.book, method)(*args)
        except (KeyError, ValueError, Full) as exc:
            return "raises", "CacheFull" if isinstance(exc, Full) else type(exc).__name__

    def _read_attention(self, seqs: list) -> tuple[torch.Tensor, int]:
        """An attend over `seqs` with a seeded query [len(seqs), heads, 1, head_dim]: the query
        and the attend's index."""
        query = cases.randn(self.g, len(seqs), self.heads, 1, self.head_dim)
        return query, self.plan.call("p", "attend", seqs, query, may_raise=True)

    def _remember(self, method: str, args: tuple, sent: tuple, value) -> None:
        """What each sequence holds, after a call that succeeded."""
        if method == "append":
            self.kv[args[0]] = tuple(
                torch.cat(pair, dim=1) for pair in zip(self.kv[args[0]], sent[1:])
            )
        elif method == "fork":
            self.kv[args[1]], self.forked = self.kv[args[0]], True
        elif method in ("free", "evict"):
            del self.kv[args[0] if method == "free" else value]
        elif method == "add" or method == "admit" and value:
            self.kv[args[0]] = (torch.zeros(self.heads, 0, self.head_dim),) * 2

    def _observe(self, label: str) -> None:
        """Readings after a step, the most telling first."""
        seqs, plan, book = list(self.book.tables), self.plan, self.book
        if "tables" in self.watch and seqs:
            got = [plan.call("p", "block_table", seq, may_raise=True) for seq in seqs]
            self.checks.append(Tables(label, got, {s: list(book.tables[s]) for s in seqs}))
        for seq in seqs if "length" in self.watch else ():
            self.checks.append(
                Length(label, seq, plan.call("p", "length", seq, may_raise=True), book.lengths[seq])
            )
        filled = self._filled()
        if "attend" in self.watch and filled:
            query, index = self._read_attention(filled)
            want = [
                reference.causal_attention(query[i : i + 1], k[None], v[None])  # float64
                for i, (k, v) in enumerate(self.kv[s] for s in filled)
            ]
            largest = (
                torch.tensor([float(self.kv[s][1].abs().max()) for s in filled])
                if self.quantize
                else None
            )  # [rows]: each sequence's largest value
            self.checks.append(
                Attention(label, filled, index, torch.cat(want), self.forked, largest)
            )
        if "num_free_blocks" in self.watch:
            self.checks.append(FreeCount(label, plan.get("p", "num_free_blocks"), book.num_free))


# The checks a Session records. Each knows the operations it reads, what the book expects, and
# says what is wrong (`problem`, None when nothing is); `hint_keys` name the item's hints for it.


@dataclass(frozen=True)
class Outcome:
    """A call's return value or exception, against the book's ("returns", value) or ("raises",
    name). `room` (the free and unreserved blocks before the call) explains an append's."""

    label: str
    method: str
    index: int
    expected: tuple
    room: str

    @property
    def hint_keys(self) -> tuple[str, ...]:
        if self.method in ("append", "free"):  # finer hints by outcome: "append:CacheFull"
            return f"{self.method}:{self.expected[1]}", self.method
        return (self.method,)

    def problem(self, results: Results) -> str | None:
        got, (kind, want) = results[self.index], self.expected
        if isinstance(got, Raised):
            if kind == "raises" and got.is_a(want):
                return None
            room = f" ({self.room})" if self.method == "append" else ""
            return (
                f"it raised {got.type} ({got.message[:120]}), expected "
                f"{want if kind == 'raises' else 'no exception'}{room}"
            )
        if kind == "raises":
            return f"expected {want}, but it returned {_shown(got)}"
        if want is not None and not (type(got) is type(want) and got == want):
            return f"it returned {_shown(got)}, expected {want!r}"
        return None


@dataclass(frozen=True)
class Length:
    """length(seq) after a step."""

    label: str
    seq: object
    index: int
    expected: int
    hint_keys = ("length",)

    def problem(self, results: Results) -> str | None:
        got = results[self.index]
        if isinstance(got, Raised):
            return f"length({self.seq!r}) raised {got.type} ({got.message[:120]})"
        if _int(got) == self.expected:
            return None
        return f"length({self.seq!r}) is {_shown(got)}, expected {self.expected}"


@dataclass(frozen=True)
class FreeCount:
    """num_free_blocks after a step."""

    label: str
    index: int
    expected: int
    hint_keys = ("num_free_blocks",)

    def problem(self, results: Results) -> str | None:
        got = results[self.index]
        if _int(got) == self.expected:
            return None
        return f"num_free_blocks is {_shown(got)}, expected {self.expected}"


@dataclass(frozen=True)
class Freed:
    """num_free_blocks before and after an evict: up by the victim's blocks."""

    label: str
    before: int
    after: int
    expected: int
    hint_keys = ("freed",)

    def problem(self, results: Results) -> str | None:
        before, after = results[self.before], results[self.after]
        if None in (_int(before), _int(after)) or _int(after) - _int(before) != self.expected:
            return (
                f"num_free_blocks went from {before!r} to {after!r}, expected {self.expected} more"
            )
        return None


@dataclass(frozen=True)
class Tables:
    """Every block table after a step, judged by its sharing: the candidate's tables must share
    blocks exactly where the book's do (any ids will do)."""

    label: str
    indices: list[int]
    expected: dict  # seq -> the book's block names
    hint_keys = ("tables",)

    def problem(self, results: Results) -> str | None:
        return _sharing([results[i] for i in self.indices], self.expected)


@dataclass(frozen=True)
class Attention:
    """attend over every non-empty sequence after a step, against float64 attention over what
    was written to each ([rows, heads, 1, head_dim]). `forked`: a fork happened before.
    `largest` ([rows]): in an int8 pool, each sequence's largest value, INT8_BOUND of which its
    error may be."""

    label: str
    seqs: list
    index: int
    expected: torch.Tensor
    forked: bool
    largest: torch.Tensor | None = None

    @property
    def hint_keys(self) -> tuple[str, ...]:
        if self.largest is not None:
            return f"attend:int8:{self.forked}", f"attend:{self.forked}", "attend"
        return f"attend:{self.forked}", "attend"

    def problem(self, results: Results) -> str | None:
        got = results[self.index]
        problem = _output_problem(got, tuple(self.expected.shape))
        if problem:
            return problem
        if self.largest is not None:
            return self._int8_problem(got)
        d = first_divergence([got], [self.expected], TOL)
        if d is None:
            return None
        error = (
            f"{d.error()}: {UNWRITTEN_SLOTS}"
            if d.nonfinite  # no row is empty here
            else f"max abs error {d.max_abs:.2e} (tolerance {TOL})"
        )
        return (
            f"attend row {d.row} (sequence {self.seqs[d.row]!r}), head {d.head} is not "
            f"attention over that sequence's own positions: {error}"
        )

    def _int8_problem(self, got: torch.Tensor) -> str | None:
        """The first row whose error passes INT8_BOUND of its largest value, or None."""
        error = (got.double() - self.expected).abs().nan_to_num(float("inf")).amax(
            dim=(1, 2, 3)
        ) / self.largest  # [rows]: share of the largest value
        over = (error > INT8_BOUND).nonzero()
        if not len(over):
            return None
        row = int(over[0])
        shown = (
            f"non-finite output: {UNWRITTEN_SLOTS}"
            if not torch.isfinite(got[row]).all()
            else f"error {float(error[row]):.2e} of its largest value, past the int8 bound "
            f"{INT8_BOUND:.0e}"
        )
        return (
            f"attend row {row} (sequence {self.seqs[row]!r}) of the int8 pool is not "
            f"attention over that sequence's own positions: {shown}"
        )


@dataclass(frozen=True)
class Unchanged:
    """attend over every non-empty sequence just before and just after a call that must raise
    CacheFull: the same."""

    label: str
    seqs: list
    before: int
    after: int
    shape: tuple[int, ...]
    hint_keys = ("unchanged",)

    def problem(self, results: Results) -> str | None:
        before, after = results[self.before], results[self.after]
        problem = _output_problem(before, self.shape) or _output_problem(after, self.shape)
        if problem:
            return problem
        broken = (~torch.isfinite(before)).nonzero()  # ordinary inputs: a slot it should not read
        if len(broken):
            return (
                f"the attention of sequence {self.seqs[int(broken[0, 0])]!r} is not finite "
                "even before the append that raised CacheFull, so whether that append changed "
                f"it cannot be told: {UNWRITTEN_SLOTS}"
            )
        wrong = (~close(after, before, TOL)).nonzero()
        return (
            None
            if not len(wrong)
            else (
                f"the attention of sequence {self.seqs[int(wrong[0, 0])]!r} is not what it was before "
                "the append that raised CacheFull"
            )
        )


Check = Outcome | Length | FreeCount | Freed | Tables | Attention | Unchanged


def _output_problem(out, shape: tuple[int, ...]) -> str | None:
    """What is wrong with attend's answer as a value (raised, not a tensor of `shape`), or None."""
    if isinstance(out, Raised):
        return f"attend raised {out.type} ({out.message[:120]})"
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
        return f"attend returned {_shown(out)}, expected a tensor of shape {list(shape)}"
    return None


def _sharing(got: list, want: dict) -> str | None:
    """The candidate's tables must share blocks exactly where the book's do."""
    where: dict = {}  # ("id", candidate id) or ("name", judge block) -> (seq, entry, the other)
    for (seq, names), table in zip(want.items(), got):
        if isinstance(table, Raised):
            return f"block_table({seq!r}) raised {table.type} ({table.message[:120]})"
        ids = table.tolist() if isinstance(table, torch.Tensor) else table
        if not isinstance(ids, list) or None in map(_int, ids):
            return f"block_table({seq!r}) is {_shown(table)}, expected a list of ints"
        if len(ids) != len(names):
            return (
                f"block_table({seq!r}) has {len(ids)} blocks, expected {len(names)} "
                "(ceil(length / block_size): a block is taken when a position needs it)"
            )
        for entry, (block, name) in enumerate(zip(ids, names)):
            seq2, entry2, name2 = where.setdefault(("id", block), (seq, entry, name))
            if name2 != name:
                return (
                    f"block_table({seq!r})[{entry}] and block_table({seq2!r})[{entry2}] are "
                    f"both block {block}, where the contract has two different blocks (a "
                    "write into a shared block copies it first)"
                )
            seq2, entry2, block2 = where.setdefault(("name", name), (seq, entry, block))
            if block2 != block:
                return (
                    f"block_table({seq!r})[{entry}] is block {block} but block_table("
                    f"{seq2!r})[{entry2}] is block {block2}: the contract has one shared "
                    "block there (a fork shares every block; full blocks stay shared)"
                )
    return None


def _int(value) -> int | None:
    """value as an int when it is one (a 0-dim integer tensor counts), else None."""
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = value.item()
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _shown(value) -> str:
    """A returned value in a message (never a tensor's contents)."""
    return f"a {type(value).__name__}" if isinstance(value, torch.Tensor) else repr(value)


def _call(method: str, args: tuple) -> str:
    """A step as the call it makes: append('x', t=11) appends 11 positions to 'x'."""
    if method == "append":
        return f"append({args[0]!r}, t={args[1]})"
    return f"{method}({', '.join(map(repr, args))})"
