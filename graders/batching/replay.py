"""The judge's replay of a scheduler's trace: every rule of contract section 6, checked step by
step on the kata's model, and the figures the items compare.

`replay(workload, trace)` walks the trace the driver recorded, as the reply check typed it
(graders.worker.batching's `Trace`, its shape and each step's `produced` checked by
graders.judge.replies.drive_trace), runs each step's valid entries on a `PagedRunner` and
returns `Findings`: the FIRST finding of each rubric id, each naming the step, the request and
the rule, and the summary figures (steps, tokens computed, prompt tokens computed).

What the judge cannot see, it infers from what the tables and starts say:
- A running sequence missing from a step was PREEMPTED at that step when it comes back
  recomputing (its next entry starts before the positions it had computed), or when it never
  comes back (nor finishes) and the count of free blocks after that step's schedule says its
  blocks were given back (a scheduler that leaves a sequence out while it holds its blocks, then
  stalls, preempted no one); an entry that restarts in the very next step was preempted in that
  step. Otherwise it kept its blocks (a decode that waited for tokens, a prefill the budget left
  out). With prefix caching, a comeback at exactly its computed positions, a whole number of
  blocks, may be either: the count of free blocks after the step's schedule decides (the
  reading under which the scheduler's count is true).
- The blocks a sequence holds are those of its latest table, from the step it last ran until it
  finishes (update returned it) or is preempted; `num_free_blocks` is true when it equals
  num_blocks minus the blocks in the union of those tables (a cached block nobody holds is free).
- The waiting queue is the contract's: arrivals at its back; the victims of a step at its front,
  the earliest arrived first.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from graders.batching.model import Decoder, PagedRunner
from graders.shared.untrusted import quote
from graders.worker.batching import DriveError, Entry, Step, Trace


@dataclass(frozen=True)
class Finding:
    """A broken rule: `rule` a rubric id, `step` the trace's step index (None: the end); the
    message names the step, the request and the rule."""

    rule: str
    kind: str  # which check, in a word: what a likely mistake is read from
    step: int | None
    seq_id: str | None
    message: str


@dataclass
class Findings:
    """What a replay found: the first finding of each rule, and the run's figures."""

    first: dict[str, Finding] = field(default_factory=dict)
    steps: int = 0
    tokens_computed: int = 0
    prompt_tokens_computed: int = 0
    prompt_tokens: dict[str, int] = field(default_factory=dict)  # computed, by request
    preemptions: int = 0
    unfinished: list[str] = field(default_factory=list)  # requests short of their tokens
    error: DriveError | None = None
    stalled: bool = False

    def add(self, rule: str, kind: str, step: int | None, seq_id: str | None, message: str) -> None:
        where = "at the end" if step is None else f"step {step}"
        self.first.setdefault(rule, Finding(rule, kind, step, seq_id, f"{where}: {message}"))

    def passed(self, rule: str) -> bool:
        return rule not in self.first


@dataclass(eq=False)
class _Seq:
    """A request as the judge follows it."""

    id: str
    order: int  # place in arrival order
    prompt: int  # its length
    oracle: list[int]
    eos: int | None
    added: bool = False
    state: str = "new"  # new, waiting, running, finished
    outputs: int = 0
    computed: int = 0  # positions computed in its current life
    table: list[int] = field(default_factory=list)  # its latest table while running
    restarted: bool = False

    @property
    def known(self) -> int:
        return self.prompt + self.outputs

    @property
    def done(self) -> bool:
        return self.outputs == len(self.oracle)


def replay(workload: dict, trace: Trace, model: Decoder | None = None) -> Findings:
    """Replay `trace` (the driver's, checked) of a scheduler on `workload`."""
    return _Replay(workload, trace, model or shared_model()).run()


_MODEL: list[Decoder] = []


def shared_model() -> Decoder:
    """The track's decoder, made once a process."""
    if not _MODEL:
        _MODEL.append(Decoder())
    return _MODEL[0]


def name(seq_id: str) -> str:
    """A request id in a message: quoted, escaped, short (a scheduler's ids are untrusted)."""
    return f"'{quote(seq_id, 40)}'"


class _Replay:
    def __init__(self, workload: dict, trace: Trace, model: Decoder):
        config = workload["config"]
        self.num_blocks, self.bs = config["num_blocks"], config["block_size"]
        self.max_seqs, self.budget = config["max_num_seqs"], config["max_batched_tokens"]
        self.prefix_caching = config["prefix_caching"]
        requests = sorted(workload["requests"], key=lambda r: r["arrival"])
        self.arrivals = [(r["arrival"], r["id"]) for r in requests]
        self.seqs = {
            r["id"]: _Seq(r["id"], n, len(r["prompt"]), workload["oracle"][r["id"]], r["eos"])
            for n, r in enumerate(requests)
        }
        self.runner = PagedRunner(
            model,
            self.num_blocks,
            self.bs,
            {r["id"]: list(r["prompt"]) + workload["oracle"][r["id"]] for r in requests},
        )
        self.trace = trace
        self.queue: deque[str] = deque()  # the waiting queue, its head first
        self.found = Findings(steps=len(trace.steps), error=trace.error, stalled=trace.stalled)
        self.releases, self.ambiguous, self.gone = _releases(
            trace, self.seqs, self.bs, self.prefix_caching
        )

    def run(self) -> Findings:
        for n, step in enumerate(self.trace.steps):
            self._step(n, step)
        self._end()
        return self.found

    def _step(self, n: int, step: Step) -> None:
        for arrival, seq_id in self.arrivals:
            seq = self.seqs[seq_id]
            if arrival <= step.at and not seq.added:
                seq.added, seq.state = True, "waiting"
                self.queue.append(seq_id)
        batch = step.batch
        before = {s.id: (s.known, s.computed) for s in self._running()}
        victims = (
            self.releases.get(n, set())
            | {
                seq_id
                for seq_id in self.ambiguous.get(n, set())
                if self._free_if(batch, released={seq_id})
                == step.free_after_schedule
                != self._free_if(batch, released=set())
            }
            | self._let_go(n, batch, step)
        )
        victims = self._preempt(n, victims)
        valid = self._budgets(n, batch)
        started = self._starts(n, batch, victims)
        self._run(n, step, valid)
        self._decodes_waited(n, batch, before, victims | started)
        self._prefills_waited(n, batch, before, victims, started)
        self._head_of_line(n, batch, victims, step.free_after_schedule)
        self._account(n, step.free_after_schedule, "after schedule()")
        self._finished(n, step.finished)
        self._account(n, step.free_after_update, "after update()")

    def _let_go(self, n: int, batch: tuple[Entry, ...], step: Step) -> set:
        """The running sequences left out at step `n` that never came back, unless the free
        count after the schedule says they kept their blocks (then none was preempted)."""
        gone = {s for s in self.gone.get(n, set()) if self.seqs[s].state == "running"}
        kept = self._free_if(batch, released=set()) == step.free_after_schedule
        if gone and kept and self._free_if(batch, released=gone) != step.free_after_schedule:
            return set()
        return gone

    def _running(self) -> list[_Seq]:
        return [s for s in self.seqs.values() if s.state == "running"]

    def _free_if(self, batch: tuple[Entry, ...], released: set) -> int:
        """Free blocks after this step's schedule were `released` preempted in it."""
        tables = {s.id: s.table for s in self._running() if s.id not in released}
        for entry in batch:
            if entry.seq_id in self.seqs and self.seqs[entry.seq_id].state != "finished":
                tables[entry.seq_id] = entry.table
        held = {b for table in tables.values() for b in table if 0 <= b < self.num_blocks}
        return self.num_blocks - len(held)

    def _preempt(self, n: int, victims: set) -> set:
        """Preempt the running `victims` (the others were never running here: a scheduled
        request that had not arrived); the victims preempted."""
        running = self._running()
        victims = {v for v in victims if self.seqs[v].state == "running"}
        for victim in sorted(victims, key=lambda v: -self.seqs[v].order):
            later = [
                s.id for s in running if s.id not in victims and s.order > self.seqs[victim].order
            ]
            if later:
                self.found.add(
                    "preemption",
                    "victim",
                    n,
                    victim,
                    (
                        f"request {name(victim)} was preempted while {name(later[0])}, which "
                        "arrived later, kept running: the victim is the most recently arrived "
                        "running sequence"
                    ),
                )
            seq = self.seqs[victim]
            seq.state, seq.computed, seq.table, seq.restarted = "waiting", 0, [], True
            self.found.preemptions += 1
            self.queue.appendleft(victim)
        return victims

    def _budgets(self, n: int, batch: tuple[Entry, ...]) -> list[Entry]:
        """Check the step's budgets; the entries the runner can compute."""
        add = self.found.add
        if len(batch) > self.max_seqs:
            add(
                "budgets",
                _over(len(batch), self.max_seqs, "seqs"),
                n,
                None,
                f"{len(batch)} sequences scheduled, more than max_num_seqs ({self.max_seqs})",
            )
        total = sum(entry.tokens for entry in batch)
        if total > self.budget:
            add(
                "budgets",
                _over(total, self.budget, "tokens"),
                n,
                None,
                f"{total} tokens scheduled, more than max_batched_tokens ({self.budget})",
            )
        valid, seen, writers = [], set(), {}
        for entry in batch:
            seq_id, start, tokens, table = entry.seq_id, entry.start, entry.tokens, entry.table
            seq = self.seqs.get(seq_id)
            problem = self._entry_problem(seq, entry)
            if seq_id in seen:
                problem = "twice", f"request {name(seq_id)} is scheduled twice in one step"
            seen.add(seq_id)
            if problem:
                add("budgets", problem[0], n, seq_id, problem[1])
                continue
            for index in range(start // self.bs, (start + tokens - 1) // self.bs + 1):
                block = table[index]
                if block in writers:
                    add(
                        "budgets",
                        "written-twice",
                        n,
                        seq_id,
                        (
                            f"block {block} is written by {name(writers[block])} and "
                            f"{name(seq_id)} in one step"
                        ),
                    )
                writers.setdefault(block, seq_id)
            valid.append(entry)
        for entry in batch:
            seq_id = entry.seq_id
            for block in entry.table:
                if block in writers and writers[block] != seq_id:
                    add(
                        "budgets",
                        "written-shared",
                        n,
                        seq_id,
                        (
                            f"block {block}, written by {name(writers[block])} this step, is also "
                            f"in the table of {name(seq_id)}: a block is shared only from the step "
                            "after the one that computed it"
                        ),
                    )
        running = len(self._running()) + sum(
            1 for seq_id in seen if seq_id in self.seqs and self.seqs[seq_id].state == "waiting"
        )
        if running > self.max_seqs:
            add(
                "budgets",
                _over(running, self.max_seqs, "running"),
                n,
                None,
                f"{running} sequences running, more than max_num_seqs ({self.max_seqs})",
            )
        return valid

    def _entry_problem(self, seq: _Seq | None, entry: Entry) -> tuple[str, str] | None:
        """(kind, message) of the first rule an entry breaks on its own, or None."""
        seq_id, start, tokens, table = entry.seq_id, entry.start, entry.tokens, entry.table
        if seq is None:
            return "unknown", f"it schedules {name(seq_id)}, which is no request of the workload"
        if not seq.added:
            return "not-arrived", f"it schedules {name(seq_id)}, which has not arrived"
        if seq.state == "finished":
            return "finished", f"it schedules {name(seq_id)}, which has finished"
        if start < 0 or tokens < 1:
            return "start-tokens", (
                f"{name(seq_id)} is scheduled with start {start} and tokens {tokens}"
            )
        if start + tokens > seq.known:
            return "past-known", (
                f"{name(seq_id)} computes positions {start}..{start + tokens - 1}, past the "
                f"{seq.known} tokens known (start + tokens never exceeds them)"
            )
        bad = [b for b in table if not 0 <= b < self.num_blocks]
        if bad:
            return "block-range", (
                f"the block table of {name(seq_id)} holds block {bad[0]}, "
                f"not in range(num_blocks={self.num_blocks})"
            )
        if len(table) * self.bs < start + tokens:
            return "cover", (
                f"the block table of {name(seq_id)}, {len(table)} blocks, covers "
                f"{len(table) * self.bs} positions, fewer than start + tokens = "
                f"{start + tokens}"
            )
        return None

    def _starts(self, n: int, batch: tuple[Entry, ...], victims: set) -> set:
        """Requests that start (or restart) this step: check the queue's order, then run them."""
        started = {
            e.seq_id
            for e in batch
            if e.seq_id in self.seqs and self.seqs[e.seq_id].state == "waiting"
        }
        for seq_id in started:
            ahead = list(self.queue)[: self.queue.index(seq_id)]
            skipped = [q for q in ahead if q not in started]
            if skipped:
                why = (
                    " (a preempted request goes back to the front of the queue)"
                    if self.seqs[skipped[0]].restarted
                    else ""
                )
                self.found.add(
                    "fcfs",
                    "queue-order",
                    n,
                    seq_id,
                    (
                        f"request {name(seq_id)} started while {name(skipped[0])}, ahead of it in "
                        f"the waiting queue{why}, was still waiting"
                    ),
                )
        if started and victims:
            first = min(started)
            what = (
                "was preempted and restarted in the same step"
                if first in victims
                else f"started in a step that preempted {name(min(victims))}"
            )
            self.found.add(
                "preemption",
                "start-in-preempting-step",
                n,
                first,
                (
                    f"request {name(first)} {what}: no waiting request starts in a step that "
                    "preempted"
                ),
            )
        for seq_id in started:
            self.queue.remove(seq_id)
            self.seqs[seq_id].state = "running"
        return started

    def _run(self, n: int, step: Step, valid: list[Entry]) -> None:
        produced = step.produced  # the driver's rule, which the reply check held it to
        tokens, misread = self.runner.step(valid)
        if misread:
            self._misread(n, misread)
        for seq_id, token in produced.items():
            if seq_id in tokens and tokens[seq_id] != token and not misread:
                seq = self.seqs[seq_id]
                self.found.add(
                    "batch-equivalence",
                    "token",
                    n,
                    seq_id,
                    (
                        f"request {name(seq_id)} produced token {tokens.get(seq_id)} at position "
                        f"{seq.known}, where decoding it alone produces {token}"
                    ),
                )
        for entry in step.batch:
            seq_id = entry.seq_id
            seq = self.seqs.get(seq_id)
            if seq is not None and seq.state == "running":
                seq.table = entry.table
                if entry in valid:
                    seq.computed = entry.start + entry.tokens
                    prompt = entry.prompt_positions(seq.prompt)
                    self.found.tokens_computed += entry.tokens
                    self.found.prompt_tokens_computed += prompt
                    self.found.prompt_tokens[seq_id] = (
                        self.found.prompt_tokens.get(seq_id, 0) + prompt
                    )
        for seq_id in produced:
            self.seqs[seq_id].outputs += 1

    def _misread(self, n: int, misread) -> None:
        if misread.holder is None:
            holder = "which was never written"
        elif misread.holder == misread.seq_id:
            holder = f"which holds its own position {misread.holder_position}"
        else:
            holder = (
                f"which holds position {misread.holder_position} of request {name(misread.holder)}"
            )
        message = (
            f"request {name(misread.seq_id)}, position {misread.position} read block "
            f"{misread.block} slot {misread.slot}, {holder}"
        )
        other_prefix = misread.same_token and self.prefix_caching
        self.found.add(
            "batch-equivalence",
            "misread-other-prefix" if other_prefix else "misread",
            n,
            misread.seq_id,
            message,
        )
        if self.seqs[misread.seq_id].restarted:
            self.found.add(
                "preemption",
                "misread-after-restart",
                n,
                misread.seq_id,
                message + " (after its restart)",
            )
        if other_prefix:
            self.found.add(
                "prefix-caching",
                "other-prefix",
                n,
                misread.seq_id,
                message
                + (
                    ": the same token after a different prefix; a block's identity is its tokens "
                    "and every token before it"
                ),
            )

    def _decodes_waited(self, n: int, batch: tuple[Entry, ...], before: dict, excused: set) -> None:
        """A running decode left out of a step that had room for it, or gave it to a prefill."""
        scheduled = {e.seq_id for e in batch}
        prefill = any(
            e.seq_id in before and before[e.seq_id][0] - e.start > 1 or e.seq_id not in before
            for e in batch
        )
        room = len(batch) < self.max_seqs and sum(e.tokens for e in batch) < self.budget
        for seq_id, (known, computed) in before.items():
            if known - computed == 1 and seq_id not in scheduled | excused and (prefill or room):
                kind = "decode-left-out-for-prefill" if prefill else "decode-left-out"
                self.found.add(
                    "chunked-prefill",
                    kind,
                    n,
                    seq_id,
                    (
                        f"running request {name(seq_id)} was ready to decode but not scheduled, "
                        + ("while a prefill was" if prefill else "though the budgets had room")
                        + ": every running decode runs every step, before any prefill"
                    ),
                )
                return

    def _prefills_waited(
        self, n: int, batch: tuple[Entry, ...], before: dict, victims: set, started: set
    ) -> None:
        """A running prefill left out of a step in which a waiting request started: running
        prefills continue, chunked to the tokens left, before any waiting request starts."""
        scheduled = {e.seq_id for e in batch}
        for seq_id, (known, computed) in before.items():
            if started and known - computed > 1 and seq_id not in scheduled | victims:
                self.found.add(
                    "chunked-prefill",
                    "prefill-left-out-for-new",
                    n,
                    seq_id,
                    (
                        f"running request {name(seq_id)} had {known - computed} tokens left to "
                        f"prefill but was not scheduled, while {name(min(started))} started: "
                        "running prefills continue before any waiting request starts"
                    ),
                )
                return

    def _head_of_line(
        self, n: int, batch: tuple[Entry, ...], victims: set, reported: int | None
    ) -> None:
        """The head of the waiting queue kept out though a slot, tokens and blocks were free
        (free by the judge's count and by the scheduler's own: a leak is block-accounting's)."""
        if not self.queue or victims:
            return
        head = self.seqs[self.queue[0]]
        free = min(self._free_if([], set()), self.num_blocks if reported is None else reported)
        tokens = sum(e.tokens for e in batch)
        if (
            len(batch) < self.max_seqs
            and len(self._running()) < self.max_seqs
            and tokens < self.budget
            and free >= -(-head.known // self.bs)
        ):
            self.found.add(
                "fcfs",
                "head-kept-out",
                n,
                head.id,
                (
                    f"request {name(head.id)}, the head of the waiting queue, did not start though "
                    f"{self.max_seqs - len(self._running())} sequence slots, "
                    f"{self.budget - tokens} tokens and {free} free blocks were left"
                ),
            )

    def _account(self, n: int, reported: int | None, when: str) -> None:
        judged = self._free_if([], set())
        if reported is not None and reported != judged:
            kind = ("free-count-low" if reported < judged else "free-count-high") + (
                "-by-one" if abs(reported - judged) == 1 else ""
            )
            self.found.add(
                "block-accounting",
                kind,
                n,
                None,
                (
                    f"num_free_blocks {when} is {reported}; the blocks in the running sequences' "
                    f"tables leave {judged} of {self.num_blocks} free"
                ),
            )

    def _finished(self, n: int, finished: tuple[str, ...]) -> None:
        add = self.found.add
        just_done = {s.id for s in self._running() if s.done and s.state == "running"}
        for seq_id in finished:
            seq = self.seqs.get(seq_id)
            if seq is None or seq.state != "running":
                add(
                    "batch-equivalence",
                    "finished-unknown",
                    n,
                    seq_id,
                    (f"update() returned {name(seq_id)} finished, which is no running request"),
                )
                continue
            if not seq.done:
                add(
                    "batch-equivalence",
                    "finished-early",
                    n,
                    seq_id,
                    (
                        f"update() returned {name(seq_id)} finished after {seq.outputs} of the "
                        f"{len(seq.oracle)} tokens it produces alone"
                    ),
                )
            seq.state, seq.table = "finished", []
        for seq_id in sorted(just_done - set(finished), key=lambda s: self.seqs[s].order):
            seq = self.seqs[seq_id]
            why = (
                f"its eos ({seq.eos})"
                if seq.oracle[-1] == seq.eos
                else f"its max_new_tokens ({len(seq.oracle)})"
            )
            add(
                "batch-equivalence",
                "finished-late",
                n,
                seq_id,
                (f"request {name(seq_id)} produced {why} but update() did not return it finished"),
            )

    def _end(self) -> None:
        found, steps = self.found, self.trace.steps
        found.unfinished = [
            s.id for s in sorted(self.seqs.values(), key=lambda s: s.order) if not s.done
        ]
        if found.error is not None:
            return
        if found.stalled:
            last = len(steps) - 1
            empty = not steps[-1].batch
            found.add(
                "preemption",
                "stall-empty" if empty else "stall-max-steps",
                last,
                None,
                (
                    "schedule() returned nothing while has_work() was true"
                    if empty
                    else f"the workload was not done after {len(steps)} steps"
                )
                + ": the scheduler stalls",
            )
            waiting = [self.seqs[s] for s in self.queue]
            long = [
                s
                for s in waiting[:1]
                if s.prompt > self.budget and not s.restarted and s.outputs == 0
            ]  # the head, never started
            reported = steps[-1].free_after_update
            free = min(self._free_if([], set()), self.num_blocks if reported is None else reported)
            if long and free >= -(-self.budget // self.bs):  # room for a chunk: not a leak's stall
                found.add(
                    "chunked-prefill",
                    "long-prompt-never-started",
                    last,
                    long[0].id,
                    (
                        f"the prompt of request {name(long[0].id)}, {long[0].prompt} tokens, longer "
                        f"than max_batched_tokens ({self.budget}), never started: it is computed in "
                        "chunks over several steps"
                    ),
                )
        for seq in sorted(self.seqs.values(), key=lambda s: s.order):
            if not seq.done:
                found.add(
                    "batch-equivalence",
                    "incomplete",
                    None,
                    seq.id,
                    (
                        f"request {name(seq.id)} produced {seq.outputs} of the {len(seq.oracle)} "
                        "tokens it produces alone when "
                        + ("the scheduler stalled" if found.stalled else "has_work() became false")
                    ),
                )
                break
        if (
            not found.stalled
            and steps
            and steps[-1].free_after_update not in (None, self.num_blocks)
        ):
            found.add(
                "block-accounting",
                "not-free-at-end",
                None,
                None,
                (
                    f"num_free_blocks is {steps[-1].free_after_update} of {self.num_blocks} "
                    "once every request is done: every block is free at the end"
                ),
            )


def _over(count: int, cap: int, what: str) -> str:
    """A budget finding's kind: `what`, "-by-one" when the count is one past the cap."""
    return f"{what}-by-one" if count == cap + 1 else what


def _releases(trace: Trace, seqs: dict, bs: int, prefix_caching: bool):
    """The steps at which running sequences were preempted (step -> ids), the steps where a
    sequence may have been (prefix caching: see the module's docstring), and the steps where
    sequences were left out for good (preempted unless the free count says they kept their
    blocks: `Replay._let_go`)."""
    releases: dict[int, set] = {}
    ambiguous: dict[int, set] = {}
    computed: dict[str, int] = {}
    gap: dict[str, int] = {}  # running sequence -> the first step it was missing
    last_seen: dict[str, int] = {}
    for n, step in enumerate(trace.steps):
        present = set()
        for entry in step.batch:
            seq_id, start, tokens = entry.seq_id, entry.start, entry.tokens
            if seq_id not in seqs or seq_id in present:
                continue
            present.add(seq_id)
            if seq_id in computed and start < computed[seq_id]:
                releases.setdefault(gap.get(seq_id, n), set()).add(seq_id)
            elif seq_id in gap and prefix_caching and start == computed[seq_id] and start % bs == 0:
                ambiguous.setdefault(gap[seq_id], set()).add(seq_id)
            gap.pop(seq_id, None)
            if start >= 0 and tokens >= 1:
                computed[seq_id] = start + tokens
            last_seen[seq_id] = n
        for seq_id in computed:
            if seq_id not in present and seq_id not in gap:
                gap[seq_id] = n
        for seq_id in step.finished:
            computed.pop(seq_id, None)
            gap.pop(seq_id, None)
    gone: dict[int, set] = {}
    for seq_id, first_missing in gap.items():  # never back, never finished
        gone.setdefault(first_missing, set()).add(seq_id)
    return releases, ambiguous, gone
