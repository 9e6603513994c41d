"""Your scheduler: the batching track (continuous batching over a paged KV pool).

A serving engine runs one model step at a time over a batch of sequences. Your scheduler decides,
at every step, which sequences run and how many positions each computes, and which KV blocks of
the pool hold them (Orca's iteration-level scheduling, vLLM's scheduler). The kata owns the model
and the memory: its own small decoder runs each step you return, writes K and V into the blocks
your tables name, attends through them, and checks every token against the request's greedy
decoding alone. You never touch a tensor: you return plans.

Words. A sequence's tokens are its prompt, then the tokens produced so far. A step computes
positions start .. start + tokens - 1 of each scheduled sequence; when they reach its last known
token, the model produces its next token. A sequence that has computed all but its newest token
"decodes" (tokens = 1); one with more left is a prefill (a prompt, or a restart after
preemption). Position p lives in block table[p // block_size], slot p % block_size.

The loop the grader runs (one step = one schedule() call):
    add(request) for each request arriving now        # in arrival order
    batch = schedule()                                 # this step's work
    finished = update({seq_id: token produced, ...})   # {} when none was produced

Budgets, every step: at most max_num_seqs sequences scheduled and at most max_num_seqs running
(admitted and holding blocks); at most max_batched_tokens tokens in all; block ids in
range(num_blocks); a table covers at least start + tokens positions; no block is written by two
sequences in one step, and a block written in a step is in no other table of that step. Hold only
the blocks you have computed into (allocate as you grow): reserving a request's whole future
wastes the pool.

Order within a step:
  1. every running sequence that can decode does (decode first), in arrival order;
  2. running prefills continue, chunked to the tokens left, in arrival order;
  3. waiting requests start in arrival order with what is left: a prompt longer than what is
     left starts with a chunk of it. A waiting request never starts before an earlier one still
     waiting (head of line): when the head does not fit, nobody behind it starts this step.

Preemption. When the new blocks the running sequences need this step (steps 1-2) are more than
the free blocks, preempt the most recently arrived running sequence, and plan again, until the
rest fits. Start no waiting request in a step that preempted. A preempted sequence frees all of
its blocks, goes back to the front of the waiting queue, and later computes again from start 0
(or from the end of its cached prefix), prompt and produced tokens alike.

Prefix caching (prefix_caching=True). A full block computed (prompt or output) is identified by
its tokens AND all the tokens before it: the same 16 tokens after a different prefix have
different K and V. A new sequence whose tokens begin with cached full blocks shares them
(reference counts) and starts after them, but only blocks before its last token (that token is
computed in a block of its own: it produces the next one). A block is shared only from the step
after the one that computed it. A cached block nobody holds stays reusable until its memory is
needed: take never-cached free blocks first, then evict the least recently released (a sequence
releases its last block first). num_free_blocks counts it as free.

An example: block_size 4, max_num_seqs 2, max_batched_tokens 8, 6 blocks. A (a 5-token prompt,
max_new_tokens 3) and B (10 tokens, 2) arrive at step 0; C (3 tokens, 2) arrives at step 1.

    step  batch (seq: start+tokens [table])        produced     why
    0     A: 0+5 [0 1]   B: 0+3 [2]                 A            B gets the 3 tokens left
    1     A: 5+1 [0 1]   B: 3+7 [2 3 4]             A, B         decode first, B's last chunk
    2     A: 6+1 [0 1]   B: 10+1 [2 3 4]            A, B         both finish (max_new_tokens)
    3     C: 0+3 [0]                                C            C waited for a sequence slot
    4     C: 3+1 [0]                                C            C finishes

And preemption: block_size 2, 4 blocks, the same budgets. A (a 3-token prompt, max_new_tokens
4) and B (3 tokens, 3) arrive at step 0:

    0     A: 0+3 [0 1]   B: 0+3 [2 3]               A, B         the pool is full
    1     A: 3+1 [0 1]   B: 3+1 [2 3]               A, B         slot 1 of the last blocks
    2     A: 4+1 [0 1 2]                            A            A needs a block: B (newest) goes
    3     A: 5+1 [0 1 2]                            A            A finishes
    4     B: 0+5 [0 1 2]                            B            B recomputes its prompt and its
                                                                 2 tokens, and produces its 3rd

Replace every `raise NotImplementedError` below. Grade it:
    kata grade --track batching starter/scheduler.py
Rubric: batch-equivalence, budgets, iteration-level, preemption, fcfs, block-accounting,
chunked-prefill, prefix-caching.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Request:
    id: str
    prompt: tuple[int, ...]  # token ids, at least one
    max_new_tokens: int  # >= 1
    eos: int | None = None  # generation also ends when this token is produced


@dataclass(frozen=True)
class Scheduled:
    seq_id: str
    start: int  # first position computed this step (0 after a preemption)
    tokens: int  # positions computed this step: a prefill chunk, or 1 to decode
    block_table: tuple[int, ...]  # the sequence's blocks in position order, covering start+tokens


class Scheduler:
    """Iteration-level scheduling of requests over a pool of num_blocks KV blocks.

    Attribute the grader reads (plain attribute or property, your choice):
        num_free_blocks: int  blocks no sequence holds (a cached block no sequence holds is
                              free). Current after every call; num_blocks once all is done.
    """

    def __init__(self, num_blocks: int, block_size: int, max_num_seqs: int,
                 max_batched_tokens: int, *, prefix_caching: bool = False):
        """An empty scheduler over num_blocks blocks of block_size positions each."""
        self.num_blocks, self.block_size = num_blocks, block_size
        self.max_num_seqs, self.max_batched_tokens = max_num_seqs, max_batched_tokens
        self.prefix_caching = prefix_caching

    @property
    def num_free_blocks(self) -> int:
        """Blocks no sequence holds, unheld cached blocks included."""
        raise NotImplementedError

    def add(self, request: Request) -> None:
        """`request` arrives now: it joins the back of the waiting queue.

        ValueError for an id already waiting or running, an empty prompt, max_new_tokens < 1,
        or a request that could never fit the pool: its longest life computes
        len(prompt) + max_new_tokens - 1 positions, ceil(that / block_size) blocks.
        """
        raise NotImplementedError

    def schedule(self) -> list[Scheduled]:
        """This step's batch, in the order above: decodes, running prefills, new requests.

        Preempt (most recently arrived running sequence first) when the running sequences' new
        blocks are not free; then start nobody. start + tokens never exceeds the tokens known.
        Never an empty batch while there is work: that is a stall.
        """
        raise NotImplementedError

    def update(self, new_tokens: dict[str, int]) -> list[str]:
        """Record the last step: its positions are computed, new_tokens[seq_id] were produced.

        Returns the ids that finished this step: max_new_tokens produced, or eos produced (it
        counts as output). A finished sequence's blocks are free for the next step (with prefix
        caching, its full blocks stay cached until their memory is needed). KeyError for an id
        the last schedule() did not return.
        """
        raise NotImplementedError

    def has_work(self) -> bool:
        """Anything waiting or running."""
        raise NotImplementedError
