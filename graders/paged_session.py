"""The judge's model of a paged pool, and the session that plays a script on the candidate's.

`Book` is what the contract (section 4) says a PagedKVCache holds after each call, in the
judge's own terms; `Session` sends each step to the candidate's cache (through a plan) and to
the book, then compares what comes back. The serving graders of paged-cow, paged-free,
admission and eviction, public and hidden, are scripts over a Session.
"""

from __future__ import annotations

import torch

from graders import cases, reference
from graders.candidate import Fail, Plan, Raised
from graders.compare import TOLERANCE, close, first_divergence

TOL = TOLERANCE[torch.float32]


class Full(Exception):
    """The book's CacheFull."""


class Book:
    """What the contract says a PagedKVCache must hold after each call, in the judge's terms.

    Tables list the judge's own block names (1, 2, 3, ... in the order blocks are taken); a name
    is held by as many tables as share it, and is free when none does. `reserved` counts the
    blocks still promised to each admitted sequence: its own new blocks (copy-on-write copies
    included) are paid from them first, nobody else may take them, and a reserved block no one
    holds still counts as free (the starter's docstrings say so). Each method does what the
    candidate's must, or raises what it must raise (`Full` for CacheFull).
    """

    def __init__(self, num_blocks: int, block_size: int):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.tables: dict = {}  # seq -> block names; the dict's order is the order of adding
        self.lengths: dict = {}
        self.holders: dict[int, int] = {}  # block name -> how many tables hold it
        self.reserved: dict = {}  # admitted seq -> blocks still promised to it
        self.ever_shared: set[int] = set()  # blocks a fork gave a second holder
        self.taken = 0

    @property
    def num_free(self) -> int:
        return self.num_blocks - len(self.holders)

    def blocks(self, tokens: int) -> int:
        return -(-tokens // self.block_size)

    def unreserved(self) -> int:
        return self.num_free - sum(self.reserved.values())

    def can_admit(self, tokens: int) -> bool:
        return self.blocks(tokens) <= self.unreserved()

    def add(self, seq) -> None:
        if seq in self.tables:
            raise ValueError(seq)
        self.tables[seq], self.lengths[seq] = [], 0

    def admit(self, seq, max_tokens: int) -> bool:
        if not self.can_admit(max_tokens):
            return False
        self.add(seq)
        self.reserved[seq] = self.blocks(max_tokens)
        return True

    def append(self, seq, t: int) -> None:
        if seq not in self.tables:
            raise KeyError(seq)
        table, length = self.tables[seq], self.lengths[seq]
        copy = length % self.block_size != 0 and self.holders[table[-1]] > 1  # shared, partial
        new = self.blocks(length + t) - len(table)
        own = self.reserved.get(seq, 0)
        if new + copy > own + self.unreserved():
            raise Full(seq)
        if seq in self.reserved:
            self.reserved[seq] = own - min(own, new + copy)
        if copy:
            self.holders[table[-1]] -= 1
            table[-1] = self._take()
        table.extend(self._take() for _ in range(new))
        self.lengths[seq] += t

    def fork(self, src, dst) -> None:
        if src not in self.tables:
            raise KeyError(src)
        self.add(dst)
        self.tables[dst], self.lengths[dst] = list(self.tables[src]), self.lengths[src]
        for block in self.tables[dst]:
            self.holders[block] += 1
        self.ever_shared.update(self.tables[dst])

    def free(self, seq) -> None:
        if seq not in self.tables:
            raise KeyError(seq)
        for block in self.tables.pop(seq):
            self.holders[block] -= 1
            if not self.holders[block]:
                del self.holders[block]
        del self.lengths[seq]
        self.reserved.pop(seq, None)

    def evict(self):
        if not self.tables:
            raise ValueError("nothing to evict")
        seq = next(reversed(self.tables))
        self.free(seq)
        return seq

    def _take(self) -> int:
        self.taken += 1
        self.holders[self.taken] = 1
        return self.taken


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
    only, so that a message never shows a hidden case's script.
    """

    def __init__(self, case: str, num_blocks: int, block_size: int, *, seed: int,
                 watch=("tables", "length", "attend", "num_free_blocks"), heads: int = 2,
                 head_dim: int = 8, hidden: bool = False):
        self.case, self.watch, self.hidden = case, set(watch), hidden
        self.book = Book(num_blocks, block_size)
        self.g, self.heads, self.head_dim = cases.generator(seed), heads, head_dim
        self.plan = Plan()
        self.plan.paged_new("p", num_blocks, block_size, heads, head_dim)
        self.kv: dict = {}  # seq -> (keys, values) [heads, n, head_dim]: what was written to it
        self.checks: list = []  # (step label, what, op index or indices, expected)
        self.steps, self.forked = 0, False

    def add(self, seq): return self.step("add", seq)
    def admit(self, seq, max_tokens): return self.step("admit", seq, max_tokens)
    def can_admit(self, tokens): return self.step("can_admit", tokens)
    def append(self, seq, t): return self.step("append", seq, t)
    def fork(self, src, dst): return self.step("fork", src, dst)
    def free(self, seq): return self.step("free", seq)
    def evict(self): return self.step("evict")

    def step(self, method: str, *args) -> tuple:
        """One call, to the book and into the plan: what the book returned or raised is expected
        (and returned: ("returns", value) or ("raises", exception name))."""
        self.steps += 1
        label = f"step {self.steps} ({method if self.hidden else _call(method, args)})"
        book, plan, sent = self.book, self.plan, args
        if method == "append":
            values = cases.randn(self.g, self.heads, args[1], self.head_dim)
            sent = (args[0], torch.zeros_like(values), values)
        room = f"free blocks before it: {book.num_free}, unreserved: {book.unreserved()}"
        victim = next(reversed(book.tables), None)
        alone = victim is not None and not book.ever_shared.intersection(book.tables[victim])
        freed = len(book.tables[victim]) if alone else 0
        filled = [s for s in book.tables if book.lengths[s]]
        try:
            outcome = ("returns", getattr(book, method)(*args))
        except (KeyError, ValueError, Full) as exc:
            outcome = ("raises", "CacheFull" if isinstance(exc, Full) else type(exc).__name__)
        count = method == "evict" and alone and "freed" in self.watch
        reads = outcome == ("raises", "CacheFull") and "unchanged" in self.watch and filled
        before = plan.get("p", "num_free_blocks") if count else None
        q = cases.randn(self.g, len(filled), self.heads, 1, self.head_dim) if reads else None
        attended = plan.call("p", "attend", filled, q, may_raise=True) if reads else None
        self.checks.append((label, method, plan.call("p", method, *sent, may_raise=True),
                            (*outcome, room)))
        if count:
            self.checks.append((label, "freed", (before, plan.get("p", "num_free_blocks")), freed))
        if reads:
            after = plan.call("p", "attend", filled, q, may_raise=True)
            self.checks.append((label, "unchanged", (attended, after), (filled, tuple(q.shape))))
        if outcome[0] == "returns":
            self._remember(method, args, sent, outcome[1])
        if method != "can_admit":
            self._observe(label)
        return outcome

    def _remember(self, method: str, args: tuple, sent: tuple, value) -> None:
        """What each sequence holds, after a call that succeeded."""
        if method == "append":
            self.kv[args[0]] = tuple(torch.cat(pair, dim=1)
                                     for pair in zip(self.kv[args[0]], sent[1:]))
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
            self.checks.append((label, "tables", got, {s: list(book.tables[s]) for s in seqs}))
        for seq in seqs if "length" in self.watch else ():
            self.checks.append((label, "length", plan.call("p", "length", seq, may_raise=True),
                                (seq, book.lengths[seq])))
        filled = [s for s in seqs if book.lengths[s]]
        if "attend" in self.watch and filled:
            q = cases.randn(self.g, len(filled), self.heads, 1, self.head_dim)
            want = [reference.causal_attention(q[i : i + 1], k[None], v[None])  # float64
                    for i, (k, v) in enumerate(self.kv[s] for s in filled)]
            index = plan.call("p", "attend", filled, q, may_raise=True)
            self.checks.append((label, "attend", index, (filled, torch.cat(want), self.forked)))
        if "num_free_blocks" in self.watch:
            self.checks.append((label, "num_free_blocks", plan.get("p", "num_free_blocks"),
                                book.num_free))

    def check(self, results, hints: dict[str, str]) -> None:
        """Fail at the first outcome or reading that is not the book's, with its step's label."""
        for label, what, index, want in self.checks:
            got = ([results[i] for i in index] if isinstance(index, (list, tuple))
                   else results[index])
            problem = _problem(what, got, want)
            if problem:
                detail = {"append": 1, "free": 1, "attend": 2}.get(what)  # a finer hint's key
                hint = hints.get(what if detail is None else f"{what}:{want[detail]}",
                                 hints.get(what, ""))
                raise Fail(f"{self.case}, {label}: {problem}" + (f". {hint}" if hint else ""))


def _problem(what: str, got, want) -> str | None:
    """What is wrong with `got`, an outcome or a reading, or None."""
    if what == "length" and isinstance(got, Raised):
        return f"length({want[0]!r}) raised {got.type} ({got.message[:120]})"
    if what in ("num_free_blocks", "length"):
        expected = want if what == "num_free_blocks" else want[1]
        name = what if what == "num_free_blocks" else f"length({want[0]!r})"
        return None if _int(got) == expected else f"{name} is {_shown(got)}, expected {expected}"
    if what == "freed":
        if None in map(_int, got) or _int(got[1]) - _int(got[0]) != want:
            return f"num_free_blocks went from {got[0]!r} to {got[1]!r}, expected {want} more"
        return None
    if what == "tables":
        return _sharing(got, want)
    if what in ("attend", "unchanged"):
        return _attention_problem(what, got, want)
    if isinstance(got, Raised):
        if want[0] == "raises" and got.is_a(want[1]):
            return None
        room = f" ({want[2]})" if what == "append" else ""
        return (f"it raised {got.type} ({got.message[:120]}), expected "
                f"{want[1] if want[0] == 'raises' else 'no exception'}{room}")
    if want[0] == "raises":
        return f"expected {want[1]}, but it returned {_shown(got)}"
    if want[1] is not None and not (type(got) is type(want[1]) and got == want[1]):
        return f"it returned {_shown(got)}, expected {want[1]!r}"
    return None


def _attention_problem(what: str, got, want) -> str | None:
    """attend's output against float64 ("attend"), or against itself before a failed append."""
    if what == "unchanged":
        (expected, got), (seqs, shape) = got, want
    else:
        seqs, expected, _ = want
        shape = tuple(expected.shape)
    for out in (expected, got):
        if isinstance(out, Raised):
            return f"attend raised {out.type} ({out.message[:120]})"
        if not isinstance(out, torch.Tensor) or tuple(out.shape) != shape:
            return f"attend returned {_shown(out)}, expected a tensor of shape {list(shape)}"
    if what == "unchanged":
        wrong = (~close(got, expected, TOL)).nonzero()
        return None if not len(wrong) else (
            f"the attention of sequence {seqs[int(wrong[0, 0])]!r} is not what it was before "
            "the append that raised CacheFull")
    d = first_divergence([got], [expected], TOL)
    return None if d is None else (
        f"attend row {d.row} (sequence {seqs[d.row]!r}), head {d.head} is not attention over "
        f"that sequence's own positions: max abs error {d.max_abs:.2e} (tolerance {TOL})")


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
            return (f"block_table({seq!r}) has {len(ids)} blocks, expected {len(names)} "
                    "(ceil(length / block_size): a block is taken when a position needs it)")
        for entry, (block, name) in enumerate(zip(ids, names)):
            seq2, entry2, name2 = where.setdefault(("id", block), (seq, entry, name))
            if name2 != name:
                return (f"block_table({seq!r})[{entry}] and block_table({seq2!r})[{entry2}] are "
                        f"both block {block}, where the contract has two different blocks (a "
                        "write into a shared block copies it first)")
            seq2, entry2, block2 = where.setdefault(("name", name), (seq, entry, block))
            if block2 != block:
                return (f"block_table({seq!r})[{entry}] is block {block} but block_table("
                        f"{seq2!r})[{entry2}] is block {block2}: the contract has one shared "
                        "block there (a fork shares every block; full blocks stay shared)")
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
