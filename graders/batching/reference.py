"""The kata's reference scheduler: contract section 6, rule by rule (the judge's, pure Python).

The judge runs it through the same driver as the candidate's scheduler, in-process, to get the
reference figures (steps to finish a workload, prompt tokens computed) and, with `static=True`,
static batching's. Written on its own, not copied from solutions/: two readings of the contract
that agree are worth more than one.

A sequence is a request plus its tokens (prompt, then the tokens produced so far), `computed`
(the positions whose K/V are written) and its block table. It holds exactly the blocks that cover
the positions computed or being computed (lazy allocation: no reservation of future growth, so
growth can run out of blocks, which is what preemption is for).

Where the contract is silent, this scheduler decides (solutions/scheduler.py and the starter
follow the same decisions):
- A running sequence "decodes" when exactly one of its positions is left to compute (its newest
  token); every other running sequence with positions left is a prefill (a restarted one too).
  Decodes take one token each from the token budget like any other work: with fewer tokens than
  running decodes, the latest decodes wait a step (they are not preempted).
- Preemption is decided on the step's whole plan: the running sequences' work (decodes, then
  prefills chunked to the budget left) is planned; when the new blocks it needs exceed the free
  blocks, the most recently arrived running sequence is preempted and the plan made again, until
  it fits. Prefill chunks are not shrunk to avoid a preemption.
- A waiting request starts with the tokens left in the budget, however few (at least one).
- Ids are unique among live requests (waiting or running); a finished request's id may return.
- Prefix hits: only blocks lying wholly within the first len(tokens) - 1 tokens are looked up, so
  the last known token is always computed in a block of the sequence's own (as vLLM does): a
  fully cached prompt whose length is a multiple of block_size recomputes its last block rather
  than writing into a shared one.
- A block's identity is exact: the tuple of its tokens nested with its parent block's identity
  (no hash collisions). When two sequences compute the same block, the first registered keeps
  the identity; the other's copy is a plain block, free when released.
- Blocks to write are taken from blocks holding no cached data first (lowest id first), then by
  evicting the least recently released cached block. A sequence releases its blocks last block
  first, so its tail is evicted before its head (a block is useless once its prefix is gone).
- `update`'s finished ids are in the step's schedule order; a sequence finishes only on a token
  produced this step.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict, deque
from dataclasses import dataclass, field


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
class _Sequence:
    request: Request
    tokens: list[int]
    computed: int = 0
    table: list[int] = field(default_factory=list)
    keys: list[tuple] = field(default_factory=list)  # identities of the leading full blocks

    @property
    def left(self) -> int:
        """Positions known but not computed yet."""
        return len(self.tokens) - self.computed


class ReferenceScheduler:
    """Iteration-level scheduling over a paged KV pool, as contract section 6 states it."""

    def __init__(
        self,
        num_blocks: int,
        block_size: int,
        max_num_seqs: int,
        max_batched_tokens: int,
        *,
        prefix_caching: bool = False,
        static: bool = False,
    ):
        for name, value in (
            ("num_blocks", num_blocks),
            ("block_size", block_size),
            ("max_num_seqs", max_num_seqs),
            ("max_batched_tokens", max_batched_tokens),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.num_blocks, self.block_size = num_blocks, block_size
        self.max_num_seqs, self.max_batched_tokens = max_num_seqs, max_batched_tokens
        self.prefix_caching, self.static = prefix_caching, static
        self.waiting: deque[_Sequence] = deque()  # arrival order; the preempted go to the front
        self.running: list[_Sequence] = []  # arrival order (every one arrived before any waiting)
        self._refs = [0] * num_blocks  # sequences holding each block
        self._plain = list(range(num_blocks))  # heap: free blocks holding no cached data
        self._cached: dict[tuple, int] = {}  # block identity -> the block computed with it
        self._identity: dict[int, tuple] = {}  # the inverse
        self._unheld: OrderedDict[int, None] = OrderedDict()  # cached, held by none: LRU first
        self._step: dict[str, tuple[_Sequence, int]] = {}  # the last schedule: id -> (seq, n)

    @property
    def num_free_blocks(self) -> int:
        """Blocks no sequence holds; a cached block no one holds is free (it can be evicted)."""
        return len(self._plain) + len(self._unheld)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    def add(self, request: Request) -> None:
        """Queue `request` at the back of the waiting queue (it arrives now).

        ValueError: an id live here, an empty prompt, max_new_tokens < 1, or a request whose
        longest life (prompt + max_new_tokens - 1 positions computed) needs more than the pool.
        """
        live = {seq.request.id for seq in (*self.waiting, *self.running)}
        if request.id in live:
            raise ValueError(f"request {request.id!r} is already queued or running")
        if len(request.prompt) < 1:
            raise ValueError(f"request {request.id!r} has an empty prompt")
        if request.max_new_tokens < 1:
            raise ValueError(f"request {request.id!r}: max_new_tokens must be >= 1")
        if self._blocks_for(len(request.prompt) + request.max_new_tokens - 1) > self.num_blocks:
            raise ValueError(f"request {request.id!r} can never fit {self.num_blocks} blocks")
        self.waiting.append(_Sequence(request, list(request.prompt)))

    def schedule(self) -> list[Scheduled]:
        """This step's batch: running decodes, running prefills, then waiting starts.

        Running work first (decode first, then prefills chunked to the tokens left). When the new
        blocks it needs are not free, preempt the most recently arrived running sequence and plan
        again. Then, unless this step preempted (or, static, anything is running), start waiting
        requests in arrival order while a sequence slot, tokens and blocks remain; the head of the
        queue that does not fit keeps every later one out.
        """
        plan = self._plan_running()
        preempted = False
        while sum(self._new_blocks(seq, n) for seq, n in plan) > self.num_free_blocks:
            self._preempt(self.running[-1])
            preempted = True
            plan = self._plan_running()
        scheduled = list(plan)
        batch = [self._grow(seq, n) for seq, n in plan]
        tokens_left = self.max_batched_tokens - sum(n for _, n in plan)
        admitting = not preempted and not (self.static and self.running)
        while (
            admitting and self.waiting and len(self.running) < self.max_num_seqs and tokens_left > 0
        ):
            seq = self.waiting[0]
            hits = self._prefix_hits(seq)
            start = len(hits) * self.block_size
            n = min(seq.left - start, tokens_left)
            needed = self._blocks_for(start + n) - len(hits)
            if needed + sum(block in self._unheld for block in hits) > self.num_free_blocks:
                break  # head of line: no later request starts before this one
            self.waiting.popleft()
            for block in hits:
                self._hold(block)
            seq.table, seq.computed = list(hits), start
            self.running.append(seq)
            scheduled.append((seq, n))
            batch.append(self._grow(seq, n))
            tokens_left -= n
        self._step = {seq.request.id: (seq, n) for seq, n in scheduled}
        return batch

    def update(self, new_tokens: dict[str, int]) -> list[str]:
        """Record the step: positions computed, tokens produced, full blocks cached, finishes.

        KeyError for an id the last schedule did not return. A sequence finishes when it has
        max_new_tokens outputs or produced its eos; its blocks are released at once (free for
        the next step; its full blocks stay cached until evicted).
        """
        for seq_id in new_tokens:
            if seq_id not in self._step:
                raise KeyError(f"{seq_id!r} was not scheduled in the last step")
        finished = []
        for seq_id, (seq, n) in self._step.items():
            seq.computed += n
            produced = seq_id in new_tokens
            if produced:
                seq.tokens.append(new_tokens[seq_id])
            self._cache_full_blocks(seq)
            outputs = len(seq.tokens) - len(seq.request.prompt)
            if produced and (
                outputs == seq.request.max_new_tokens or seq.tokens[-1] == seq.request.eos
            ):
                self.running.remove(seq)
                self._release(seq)
                finished.append(seq_id)
        self._step = {}
        return finished

    def _plan_running(self) -> list[tuple[_Sequence, int]]:
        """(sequence, positions) of the running work: decodes, then prefills, in arrival order."""
        plan, tokens_left = [], self.max_batched_tokens
        for seq in sorted(self.running, key=lambda s: s.left != 1):  # stable: decodes first
            n = min(seq.left, tokens_left)
            if n > 0:
                plan.append((seq, n))
                tokens_left -= n
        return plan

    def _blocks_for(self, positions: int) -> int:
        return -(-positions // self.block_size)

    def _new_blocks(self, seq: _Sequence, n: int) -> int:
        return max(0, self._blocks_for(seq.computed + n) - len(seq.table))

    def _grow(self, seq: _Sequence, n: int) -> Scheduled:
        """Give `seq` the blocks covering computed + n positions and describe its step."""
        while len(seq.table) < self._blocks_for(seq.computed + n):
            seq.table.append(self._take())
        return Scheduled(seq.request.id, seq.computed, n, tuple(seq.table))

    def _take(self) -> int:
        """A block to write: a plain free one, else evict the least recently used cached one."""
        if self._plain:
            block = heapq.heappop(self._plain)
        else:
            block, _ = self._unheld.popitem(last=False)
            del self._cached[self._identity.pop(block)]
        self._refs[block] = 1
        return block

    def _hold(self, block: int) -> None:
        """One more sequence holds `block` (a prefix hit): it is no longer free."""
        self._refs[block] += 1
        self._unheld.pop(block, None)

    def _release(self, seq: _Sequence) -> None:
        """`seq` lets go of its blocks, last block first (so its tail is evicted first)."""
        for block in reversed(seq.table):
            self._refs[block] -= 1
            if self._refs[block] == 0:
                if block in self._identity:
                    self._unheld[block] = None
                else:
                    heapq.heappush(self._plain, block)
        seq.table = []

    def _preempt(self, seq: _Sequence) -> None:
        """Recompute-style: free its blocks; it restarts from the front of the queue, later."""
        self.running.remove(seq)
        self._release(seq)
        seq.computed, seq.keys = 0, []
        self.waiting.appendleft(seq)

    def _identity_of(self, seq: _Sequence, index: int) -> tuple:
        """Block `index`'s identity: its tokens, nested with all the tokens before it."""
        parent = seq.keys[index - 1] if index else None
        size = self.block_size
        return (parent, tuple(seq.tokens[index * size : (index + 1) * size]))

    def _prefix_hits(self, seq: _Sequence) -> list[int]:
        """Cached blocks `seq`'s tokens begin with, within its first len(tokens) - 1 tokens."""
        hits: list[int] = []
        if not self.prefix_caching:
            return hits
        seq.keys = []
        for index in range((len(seq.tokens) - 1) // self.block_size):
            identity = self._identity_of(seq, index)
            if identity not in self._cached:
                break
            seq.keys.append(identity)
            hits.append(self._cached[identity])
        return hits

    def _cache_full_blocks(self, seq: _Sequence) -> None:
        """Register each newly computed full block: shared from the next step on."""
        if not self.prefix_caching:
            return
        while len(seq.keys) < seq.computed // self.block_size:
            identity = self._identity_of(seq, len(seq.keys))
            seq.keys.append(identity)
            block = seq.table[len(seq.keys) - 1]
            if identity not in self._cached:  # the first computed keeps the identity
                self._cached[identity] = block
                self._identity[block] = identity
