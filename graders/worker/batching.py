"""The batching track's driver: runs a scheduler on a workload and records what it did.

Contract section 6: the candidate's `Scheduler` runs here, in the worker; the kata's model never
does. A correct run's tokens are known in advance (each request's greedy decoding alone, the
workload's "oracle", computed by the judge), so `drive` feeds `update` with those tokens and
records a TRACE of plain data. The judge replays the trace on its own model
(graders.batching.replay): up to the first divergence the trace is what an interactive run would
have been, and the first divergence is what a grade reports. The judge drives its reference
scheduler through this same function, in-process.

Pure Python: no torch, no other module of graders (the judge imports this file too).

A workload (plain data, the judge's):
    {"config": {"num_blocks", "block_size", "max_num_seqs", "max_batched_tokens",
                "prefix_caching"},
     "requests": [{"id", "prompt": [int], "max_new_tokens", "eos": int | None, "arrival"}],
     "oracle": {id: [the tokens the request produces alone]}}
The trace, plain data on the wire: {"steps", "adds", "error", "stalled"}, the fields of `Trace`
below, each step a dict of `Step`'s fields, each batch entry [seq_id, start, tokens, [block,
...]], each add {"id", "at"}, the error a dict of `DriveError`'s fields. The judge checks it once
into those types (graders.judge.replies.drive_trace), which the replay reads.

The loop (a step is one schedule() call; the clock skips idle time, which no step counts):
add every request whose arrival has come (arrival order, ties in list order); if nothing is
waiting or running (has_work() false): stop when no request is left to arrive, else move the
clock to the next arrival. Else schedule(), record each entry, work out what it produced
(`produced_by`), update(produced), record the finished ids and num_free_blocks after schedule
and after update (None while num_free_blocks raises NotImplementedError). The drive stops at
the first exception or value outside the contract (its `DriveError`), at a step that schedules
nothing while has_work() is true (stalled: nothing can change that), or after `max_steps`
steps (stalled).
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from functools import partial
from typing import Literal

MESSAGE_CHARS = 4_000  # of a message or traceback of the candidate's (graders.worker.wire's cut)
ID_CHARS = 100  # of a sequence id the scheduler returned: the workload's are shorter
ENTRIES_PER_SEQ = 4  # a batch holds at most this many entries per max_num_seqs


Call = Literal["init", "add", "schedule", "update", "has_work", "num_free_blocks"]
ErrorKind = Literal["raised", "returned"]  # raised, or returned what the contract does not allow


@dataclass(frozen=True)
class Entry:
    """One entry of a step's batch: the positions start..start + tokens - 1 of `seq_id`
    computed through the block `table`."""

    seq_id: str
    start: int
    tokens: int
    table: tuple[int, ...]

    def prompt_positions(self, prompt: int) -> int:
        """How many of the positions of a prompt of `prompt` tokens this entry computes."""
        return max(0, min(self.start + self.tokens, prompt) - self.start)


@dataclass(frozen=True)
class Step:
    """One schedule() call: at the clock `at`, its batch, the tokens it produced
    (`produced_by`), the ids update() returned finished, and num_free_blocks after schedule()
    and after update() (None while it raises NotImplementedError)."""

    at: int
    batch: tuple[Entry, ...]
    produced: dict[str, int]
    finished: tuple[str, ...]
    free_after_schedule: int | None
    free_after_update: int | None


@dataclass(frozen=True)
class Add:
    """A request added to the scheduler at the clock `at`."""

    seq_id: str
    at: int


@dataclass(frozen=True)
class DriveError:
    """What ended the drive: the scheduler's `call` at step `step` (len(steps) when it happened
    outside the steps recorded) raised (`type` its exception's class name) or returned what the
    contract does not allow (`type` "")."""

    call: Call
    step: int
    kind: ErrorKind
    type: str
    message: str
    traceback: str


@dataclass(frozen=True)
class Trace:
    """A drive: its steps, the adds, what ended it early (or None), whether it stalled (a step
    that scheduled nothing while has_work() was true, or `max_steps` steps)."""

    steps: tuple[Step, ...]
    adds: tuple[Add, ...]
    error: DriveError | None
    stalled: bool


class _Stop(Exception):
    """The drive ends: `error` is the trace's error (a `DriveError`'s fields)."""

    def __init__(self, error: dict):
        super().__init__(error["message"])
        self.error = error


def drive(new_scheduler, workload: dict, max_steps: int, *, request_type) -> dict:
    """Run `new_scheduler(**config)` on `workload`, feeding `update` the oracle's tokens, and
    return the trace as plain data. `request_type` builds each request (the candidate module's
    own `Request`, so `add` receives the type it declares). Never raises for what the scheduler
    does."""
    config = workload["config"]
    requests = sorted(workload["requests"], key=lambda r: r["arrival"])  # stable: ties in order
    oracle = workload["oracle"]
    known: dict[str, int] = {}  # an added request -> its tokens known (prompt, then outputs)
    outputs: dict[str, list[int]] = {r["id"]: [] for r in requests}
    trace = {"steps": [], "adds": [], "error": None, "stalled": False}
    steps = trace["steps"]
    scheduler, clock, pending = None, 0, list(requests)
    try:
        scheduler = _call("init", 0, lambda: new_scheduler(**config))
        while True:
            while pending and pending[0]["arrival"] <= clock:
                request = pending.pop(0)
                built = _call(
                    "add",
                    len(steps),
                    lambda: request_type(
                        id=request["id"],
                        prompt=tuple(request["prompt"]),
                        max_new_tokens=request["max_new_tokens"],
                        eos=request["eos"],
                    ),
                )
                _call("add", len(steps), lambda: scheduler.add(built))
                known[request["id"]] = len(request["prompt"])
                trace["adds"].append({"id": request["id"], "at": clock})
            working = _call("has_work", len(steps), scheduler.has_work)
            if type(working) not in (bool, int):
                raise _Stop(
                    _returned(
                        "has_work", len(steps), f"has_work() returned {_kind(working)}, not a bool"
                    )
                )
            if not working:
                if not pending:
                    break
                clock = pending[0]["arrival"]
                continue
            step = {"at": clock}
            steps.append(step)
            n = len(steps) - 1
            batch = _batch(_call("schedule", n, scheduler.schedule), config, n)
            step["batch"] = batch
            step["free_after_schedule"] = _free(scheduler, n)
            produced = produced_by(batch, known, outputs, oracle)
            step["produced"] = produced
            finished = _call("update", n, lambda: scheduler.update(dict(produced)))
            for seq_id, token in produced.items():
                outputs[seq_id].append(token)
                known[seq_id] += 1
            step["finished"] = _finished(finished, len(requests), n)
            step["free_after_update"] = _free(scheduler, n)
            clock += 1
            if not batch or len(steps) == max_steps:
                trace["stalled"] = True
                break
    except _Stop as stop:
        trace["error"] = stop.error
        if steps and "free_after_update" not in steps[-1]:
            steps.pop()  # a step the scheduler did not complete is in the error alone
    return trace


def produced_by(batch: list, known: dict, outputs: dict, oracle: dict) -> dict:
    """The tokens a step's `batch` produces: for each entry of an added request (`known` holds
    the added ones) still producing (fewer outputs than its oracle) that computes up to its
    last known token (start >= 0, tokens >= 1, start + tokens == known[id]), the oracle's next
    token; a request produces once a step (its first such entry). Any other entry produces
    nothing: the judge names the rule it breaks."""
    produced = {}
    for seq_id, start, tokens, _ in batch:
        if (
            seq_id in known
            and seq_id not in produced
            and len(outputs[seq_id]) < len(oracle[seq_id])
            and start >= 0
            and tokens >= 1
            and start + tokens == known[seq_id]
        ):
            produced[seq_id] = oracle[seq_id][len(outputs[seq_id])]
    return produced


def _call(call: str, step: int, fn):
    """`fn()`, an exception of the scheduler's becoming the drive's error."""
    try:
        return fn()
    except _Stop:
        raise
    except BaseException as exc:  # noqa: BLE001 - the candidate may raise anything, SystemExit too
        if isinstance(exc, KeyboardInterrupt):
            raise
        frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
        raise _Stop(
            {
                "call": call,
                "step": step,
                "kind": "raised",
                "type": type(exc).__name__[:ID_CHARS],
                "message": _text(partial(str, exc))[:MESSAGE_CHARS],
                "traceback": "".join(frames)[-MESSAGE_CHARS:],
            }
        ) from None


def _returned(call: str, step: int, message: str) -> dict:
    return {
        "call": call,
        "step": step,
        "kind": "returned",
        "type": "",
        "message": message,
        "traceback": "",
    }


def _batch(batch, config: dict, n: int) -> list:
    """schedule()'s list of Scheduled as [[seq_id, start, tokens, [block, ...]], ...]."""
    if type(batch) not in (list, tuple):
        raise _Stop(_returned("schedule", n, f"schedule() returned {_kind(batch)}, not a list"))
    most = ENTRIES_PER_SEQ * config["max_num_seqs"]
    if len(batch) > most:
        raise _Stop(
            _returned(
                "schedule",
                n,
                f"schedule() returned {len(batch)} entries, more "
                f"than {ENTRIES_PER_SEQ} x max_num_seqs ({most})",
            )
        )
    return [_entry(entry, config["num_blocks"], n, i) for i, entry in enumerate(batch)]


def _entry(entry, num_blocks: int, n: int, i: int) -> list:
    what = f"schedule()'s entry {i}"
    fields = []
    for name in ("seq_id", "start", "tokens", "block_table"):
        try:
            fields.append(_call("schedule", n, lambda: getattr(entry, name)))
        except _Stop as stop:
            if stop.error["type"] != "AttributeError":
                raise
            raise _Stop(
                _returned(
                    "schedule", n, f"{what} is {_kind(entry)} without a {name}, not a Scheduled"
                )
            ) from None
    seq_id, start, tokens, table = fields
    if type(seq_id) is not str:
        raise _Stop(_returned("schedule", n, f"{what} has a seq_id of {_kind(seq_id)}, not a str"))
    for name, value in (("start", start), ("tokens", tokens)):
        if not _is_int(value):
            raise _Stop(
                _returned(
                    "schedule",
                    n,
                    f"{what} has a {name} of {_kind(value)}, not an int of int64's range",
                )
            )
    if type(table) not in (list, tuple):
        raise _Stop(
            _returned("schedule", n, f"{what} has a block_table of {_kind(table)}, not a tuple")
        )
    if len(table) > num_blocks:
        raise _Stop(
            _returned(
                "schedule",
                n,
                f"{what} has a block_table of {len(table)} blocks, "
                f"more than the pool's {num_blocks}",
            )
        )
    for block in table:
        if not _is_int(block):
            raise _Stop(
                _returned(
                    "schedule", n, f"{what} has a block_table holding {_kind(block)}, not only ints"
                )
            )
    return [seq_id[:ID_CHARS], start, tokens, list(table)]


def _finished(finished, most: int, n: int) -> list:
    if type(finished) not in (list, tuple, set, frozenset):
        raise _Stop(_returned("update", n, f"update() returned {_kind(finished)}, not a list"))
    if len(finished) > most:
        raise _Stop(
            _returned(
                "update",
                n,
                f"update() returned {len(finished)} finished ids, "
                f"more than the workload's {most} requests",
            )
        )
    ids = list(finished)
    for seq_id in ids:
        if type(seq_id) is not str:
            raise _Stop(
                _returned(
                    "update", n, f"update() returned a finished id of {_kind(seq_id)}, not a str"
                )
            )
    return [seq_id[:ID_CHARS] for seq_id in ids]


def _free(scheduler, n: int) -> int | None:
    """num_free_blocks now; None while it still raises NotImplementedError (the other rules can
    be judged without it)."""
    try:
        free = _call("num_free_blocks", n, lambda: scheduler.num_free_blocks)
    except _Stop as stop:
        if stop.error["type"] == "NotImplementedError":
            return None
        raise
    if not _is_int(free):
        raise _Stop(
            _returned("num_free_blocks", n, f"num_free_blocks is {_kind(free)}, not an int")
        )
    return free


def _is_int(value) -> bool:
    """A plain int of int64's range (what the wire and the judge's tensors hold)."""
    return type(value) is int and -(2**63) <= value < 2**63


def _kind(value) -> str:
    """A value of the candidate's named by its type alone (its repr would run its code)."""
    if value is None:
        return "None"
    if type(value) is int and not _is_int(value):
        return "an int out of int64's range"
    kind = type(value).__name__[:ID_CHARS]
    return f"{'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}"


def _text(fn) -> str:
    try:
        return fn()
    except BaseException:  # noqa: BLE001 - an exception whose __str__ raises
        return "<the exception's message could not be read>"
