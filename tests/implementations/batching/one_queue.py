"""A correct scheduler in another style: one list of sequences with states, not two queues.

Every running sequence arrived before every waiting one (a preempted sequence is the newest
running one, and goes back ahead of every waiting one), so one list in arrival order, each entry
marked waiting or running, is both queues at once: the running ones are a prefix of the live
ones, a preempted sequence simply changes state in place, and "the front of the waiting queue"
is the first waiting entry. Blocks are counted in a dict of holders per block; the prefix cache
names a block by the flat tuple of every token up to its end; least recently used is a release
counter, the smallest evicted first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import count

WAITING, RUNNING = "waiting", "running"


@dataclass(frozen=True)
class Request:
    id: str
    prompt: tuple[int, ...]
    max_new_tokens: int
    eos: int | None = None


@dataclass(frozen=True)
class Scheduled:
    seq_id: str
    start: int
    tokens: int
    block_table: tuple[int, ...]


@dataclass(eq=False)
class Entry:
    request: Request
    tokens: list[int]
    state: str = WAITING
    done: int = 0  # positions computed
    table: list[int] = field(default_factory=list)
    named: int = 0  # leading full blocks already named in the cache (or taken from it)


class Scheduler:
    def __init__(self, num_blocks, block_size, max_num_seqs, max_batched_tokens, *,
                 prefix_caching=False):
        self.num_blocks, self.block_size = num_blocks, block_size
        self.max_num_seqs, self.max_batched_tokens = max_num_seqs, max_batched_tokens
        self.prefix_caching = prefix_caching
        self.entries: list[Entry] = []  # every live request, in arrival order
        self.holders: dict[int, int] = {}  # block -> sequences holding it (absent: none)
        self.names: dict[tuple, int] = {}  # tokens up to a full block's end -> block
        self.name_of: dict[int, tuple] = {}
        self.released_at: dict[int, int] = {}  # unheld named block -> release tick
        self.ticks = count()
        self.step: list[tuple[Entry, int]] = []

    @property
    def num_free_blocks(self):
        return self.num_blocks - len(self.holders)

    def has_work(self):
        return bool(self.entries)

    def add(self, request):
        if any(e.request.id == request.id for e in self.entries) or not request.prompt \
                or request.max_new_tokens < 1 or self.blocks(
                    len(request.prompt) + request.max_new_tokens - 1) > self.num_blocks:
            raise ValueError(f"request {request.id!r} cannot be added")
        self.entries.append(Entry(request, list(request.prompt)))

    def blocks(self, positions):
        return -(-positions // self.block_size)

    def running(self):
        return [e for e in self.entries if e.state == RUNNING]

    def plan(self):
        budget, plan = self.max_batched_tokens, []
        for want_decode in (True, False):
            for e in self.running():
                left = len(e.tokens) - e.done
                if (left == 1) == want_decode and left and budget:
                    plan.append((e, min(left, budget)))
                    budget -= plan[-1][1]
        return plan

    def schedule(self):
        plan, preempted = self.plan(), False
        while sum(max(0, self.blocks(e.done + n) - len(e.table)) for e, n in plan) \
                > self.num_free_blocks:
            victim = self.running()[-1]
            self.drop(victim)
            victim.state, victim.done, victim.named = WAITING, 0, 0
            preempted = True
            plan = self.plan()
        out = [self.grow(e, n) for e, n in plan]
        budget = self.max_batched_tokens - sum(n for _, n in plan)
        for e in [e for e in self.entries if e.state == WAITING]:
            if preempted or len(self.running()) >= self.max_num_seqs or budget == 0:
                break
            hits = self.hits(e)
            n = min(len(e.tokens) - len(hits) * self.block_size, budget)
            fresh = self.blocks(len(hits) * self.block_size + n) - len(hits)
            if fresh + sum(b not in self.holders for b in hits) > self.num_free_blocks:
                break
            for b in hits:
                self.holders[b] = self.holders.get(b, 0) + 1
                self.released_at.pop(b, None)
            e.state, e.table, e.done, e.named = RUNNING, list(hits), len(hits) * self.block_size, \
                len(hits)
            plan.append((e, n))
            out.append(self.grow(e, n))
            budget -= n
        self.step = plan
        return out

    def grow(self, e, n):
        while len(e.table) < self.blocks(e.done + n):
            unused = [b for b in range(self.num_blocks)
                      if b not in self.holders and b not in self.name_of]
            if unused:
                block = unused[0]
            else:
                block = min(self.released_at, key=self.released_at.get)
                del self.released_at[block], self.names[self.name_of.pop(block)]
            self.holders[block] = 1
            e.table.append(block)
        return Scheduled(e.request.id, e.done, n, tuple(e.table))

    def drop(self, e):
        for b in reversed(e.table):
            self.holders[b] -= 1
            if not self.holders[b]:
                del self.holders[b]
                if b in self.name_of:
                    self.released_at[b] = next(self.ticks)
        e.table = []

    def hits(self, e):
        found = []
        if self.prefix_caching:
            for i in range((len(e.tokens) - 1) // self.block_size):
                block = self.names.get(tuple(e.tokens[:(i + 1) * self.block_size]))
                if block is None:
                    break
                found.append(block)
        return found

    def update(self, new_tokens):
        ids = {e.request.id for e, _ in self.step}
        for i in new_tokens:
            if i not in ids:
                raise KeyError(i)
        finished = []
        for e, n in self.step:
            e.done += n
            if e.request.id in new_tokens:
                e.tokens.append(new_tokens[e.request.id])
            while self.prefix_caching and e.named < e.done // self.block_size:
                e.named += 1
                name = tuple(e.tokens[:e.named * self.block_size])
                if name not in self.names:
                    self.names[name] = e.table[e.named - 1]
                    self.name_of[e.table[e.named - 1]] = name
            produced = len(e.tokens) - len(e.request.prompt)
            if e.request.id in new_tokens and (produced == e.request.max_new_tokens
                                               or e.tokens[-1] == e.request.eos):
                self.drop(e)
                self.entries.remove(e)
                finished.append(e.request.id)
        self.step = []
        return finished
