"""The one place where what a worker sends back enters the judge: every frame is read within
caps, decoded, and checked against the schema of the reply it should be before any item reads it.

A worker runs the candidate's code, so its replies are an attacker's bytes (contract section 5).
`read` takes one frame off the worker's pipe within `frames.Caps` (the judge's memory stays
bounded whatever arrives) and `decode` decodes it; `status` and `result` check that it answers the
request the judge is waiting for (the batch's fresh nonce and the request's index come back);
`plan_reply`, `tests_reply`, `started` and `loaded` check what each kind of reply must hold:
types, keys, nesting, the tensors the kata's own worker code returns (dtype, shape); a batching
drive's trace comes out as the driver's frozen types (`drive_trace`), which the replay reads. A
reply that breaks any of this raises `MalformedReply`, saying how, never anything else.

Text of the candidate's (an exception's message and traceback, what a crash printed, an import
error, a `Repr`, a string it returned) comes out clipped to `untrusted.MAX_QUOTE` characters.
Values the candidate's own functions returned (attend's output, a paged method's result, a
cache attribute) keep any type the wire carries: judging them is the item's work.
"""

from __future__ import annotations

import math
from typing import get_args

import torch

from graders.shared.untrusted import clip
from graders.worker import batching, frames, real_model, wire

# The status frame of each request, after its "status", "index" and "batch": key -> types.
_NUMBER = (int, float)
STATUS_FIELDS = {
    "done": {},
    "timeout": {"seconds": _NUMBER, "stderr": str, "wall": _NUMBER, "cpu": _NUMBER},
    "crashed": {"how": str, "stderr": str},
    "malformed": {"how": str},
}
STATUS_OPTIONAL = {"wall", "cpu"}  # a timeout on the clock says these too
# Plan operations whose result is None, whatever the candidate's function returned.
RETURNS_NOTHING = {"new", "reset", "release", "layer", "reorder", "fork", "paged_new", "truncate"}
# Plan operations whose result is the candidate's own return value (any type the wire carries).
RETURNS_CANDIDATE_VALUE = {"attend", "attend_chunk", "call", "get"}
TENSOR_INPUTS = ("key", "value", "query", "x")  # what `return_inputs` sends back
RAISED = {"type": str, "lineage": list, "message": str, "traceback": str}
CACHE_ROWS = 64  # an exception's optional "cache": {"lengths": [int] of at most this many rows,
# "capacity": int}, the state of the dense cache it was raised on (graders/worker/ops.py)
TESTS_COUNTS = ("exit_code", "passed", "failed", "errors")
# The beam search's choices; its scores' dtype follows what decode_step returned (floating).
BEAMS = {
    "tokens": (torch.int64,),
    "beam_idx": (torch.int64,),
    "scores": (torch.float16, torch.bfloat16, torch.float32, torch.float64),
}
LARGEST = 3  # groups of an allocation measurement (graders.worker.ops.Allocations.LARGEST)
MAX_TAIL = 4_000  # characters of a traceback kept (its last frames): read for one line


class MalformedReply(Exception):
    """A worker's reply that is not the reply the judge waits for; the message says how."""


def read(fd: int, deadline: float, caps: frames.Caps) -> bytearray:
    """The next frame on `fd`, read within `caps`. MalformedReply when it breaks them (nothing
    past them is read); TimeoutError past `deadline`; frames.PipeClosed when the worker closed
    its pipe."""
    try:
        return frames.read_frame(fd, deadline, caps)
    except frames.PipeClosed:
        raise
    except frames.WireError as exc:
        raise MalformedReply(str(exc)) from None


def decode(frame: bytes):
    """The body of `frame`; MalformedReply for anything `wire.encode` would not have made."""
    try:
        return wire.decode(frame)
    except frames.WireError as exc:
        raise MalformedReply(str(exc)) from None


def status(body, index: int, batch: str) -> dict:
    """The status frame of request `index` of the batch `batch`, checked, its texts clipped."""
    fields = _dict(body, "the status")
    kind = fields.get("status")
    if kind not in STATUS_FIELDS:
        raise MalformedReply(f"a status {_shown(kind)}, not one of {', '.join(STATUS_FIELDS)}")
    _in_step(fields, index, batch, f"the status ({kind})")
    expected = STATUS_FIELDS[kind]
    _keys(fields, {"status", "index", "batch", *expected}, "the status", optional=STATUS_OPTIONAL)
    if ("wall" in fields) != ("cpu" in fields):
        raise MalformedReply("a timeout on the clock without both its wall and cpu times")
    checked = {"status": kind}
    for key, types in expected.items():
        if key in fields:
            checked[key] = _typed(fields[key], types, f"the status's {key}")
    for key in ("stderr", "how"):
        if key in checked:
            checked[key] = clip(checked[key])
    return checked


def result(body, index: int, batch: str):
    """The reply inside the result frame of request `index` of the batch `batch`."""
    envelope = _dict(body, "the result frame")
    _keys(envelope, {"index", "batch", "reply"}, "the result frame")
    _in_step(envelope, index, batch, "the result frame")
    return envelope["reply"]


def plan_reply(reply, ops: list[dict]) -> dict:
    """A plan's reply, checked against the plan's `ops`: ``{"error": text}`` or ``{"results":
    [...]}``, one result for each operation run (at most one per operation, in order)."""
    reply = _error_or(reply, "results")
    if "error" in reply:
        return reply
    results = _typed(reply["results"], list, "the results")
    if len(results) > len(ops):
        raise MalformedReply(f"{len(results)} results for a plan of {len(ops)} operations")
    return {"results": [_op_result(r, op, n) for n, (r, op) in enumerate(zip(results, ops))]}


def tests_reply(reply) -> dict:
    """A run of the candidate's tests: ``{"error": text}`` or the counts of what happened
    (graders.worker.pytest_runner.run). Keys beyond those the judge reads carry JSON values."""
    reply = _error_or(reply, "exit_code")
    if "error" in reply:
        return reply
    checked = {
        key: _value(value, f"the tests' {key}", candidate=False) for key, value in reply.items()
    }
    for key in TESTS_COUNTS:
        _typed(reply.get(key), int, f"the tests' {key}")
    first = checked.get("first_failure")
    if first is not None:
        _typed(first, str, "the tests' first failure")
    _typed(reply.get("tests_sha256"), str, "the tests' digest")
    return checked


def started(body) -> dict:
    """The first frame of a worker: torch is imported."""
    fields = _dict(body, "the start frame")
    if fields != {"status": "torch-ready"}:
        raise MalformedReply(f"a start frame of {_shown(fields)}")
    return fields


def loaded(body) -> dict:
    """The frame that says how the import of the candidate's file went."""
    fields = _dict(body, "the import frame")
    kind = fields.get("status")
    if kind in ("loaded", "import-timeout"):
        _keys(fields, {"status"}, "the import frame")
        return {"status": kind}
    if kind == "import-error":
        _keys(fields, {"status", "error"}, "the import frame")
        return {"status": kind, "error": clip(_typed(fields["error"], str, "the import error"))}
    raise MalformedReply(f"an import frame whose status is {_shown(kind)}")


def _op_result(result, op: dict, n: int) -> dict:
    what = f"the result of operation {n} ({op['op']})"
    fields = _dict(result, what)
    if ("ok" in fields) == ("raised" in fields):
        raise MalformedReply(
            f"{what} holds {'both' if 'ok' in fields else 'neither'} of a value and an exception"
        )
    allowed = {"ok", "raised"} | ({"inputs_after"} if op.get("return_inputs") else set())
    _keys(fields, allowed, what, optional=allowed)
    checked = {}
    if "raised" in fields:
        checked["raised"] = _raised(fields["raised"], what)
    else:
        checked["ok"] = _ok(fields["ok"], op, what)
    if "inputs_after" in fields:
        checked["inputs_after"] = _inputs_after(fields["inputs_after"], op, what)
    return checked


def _ok(value, op: dict, what: str):
    """The value of a plan operation that returned, as the worker's ops.py makes it."""
    kind = op["op"]
    if kind in RETURNS_CANDIDATE_VALUE:
        return _value(value, what, candidate=True)
    if kind in RETURNS_NOTHING or (kind == "append" and not op.get("measure")):
        if value is not None:
            raise MalformedReply(f"{what} is {_shown(value)}, where nothing was returned")
        return None
    if kind == "append":
        return _measured(value, what)
    if kind == "state":
        fields = _dict(value, what)
        _keys(fields, set(op["names"]), what)
        return {name: _value(v, f"{what}'s {name}", candidate=True) for name, v in fields.items()}
    if kind == "decode_step":
        fields = _dict(value, what)
        _keys(fields, {"output", "rows"}, what)
        rows = _dict(fields["rows"], f"{what}'s rows")
        _keys(rows, {"wq", "wk", "wv"}, f"{what}'s rows")
        return {
            "output": _value(fields["output"], what, candidate=True),
            "rows": {name: _count(n, f"{what}'s rows") for name, n in rows.items()},
        }
    if kind == "inventory":
        return _inventory(value, op, what)
    if kind == "beam_search":
        return _beams(value, op, what)
    if kind == "drive_scheduler":
        return drive_trace(value, op["workload"], op["max_steps"], what)
    if kind in ("real_model", "real_model_reference"):
        return _generation(value, op, what, kind == "real_model")
    raise MalformedReply(f"{what}: the judge knows no operation {_shown(kind)}")


def _measured(value, what: str) -> dict:
    fields = _dict(value, what)
    _keys(fields, {"allocations", "bytes", "held", "largest"}, what)
    largest = _typed(fields["largest"], list, f"{what}'s largest allocations")
    if len(largest) > LARGEST:
        raise MalformedReply(f"{what} names {len(largest)} largest allocations, not {LARGEST}")
    for group in largest:
        group = _typed(group, list, f"{what}'s largest allocations")
        if (
            len(group) != 4
            or not isinstance(group[0], str)
            or not isinstance(group[1], list)
            or not all(_is_count(n) for n in (*group[1], group[2], group[3]))
        ):
            raise MalformedReply(f"{what} has an allocation group of {_shown(group)}")
    return {
        "allocations": _count(fields["allocations"], what),
        "bytes": _count(fields["bytes"], what),
        "held": _count(fields["held"], what),
        "largest": [[clip(g[0]), g[1], g[2], g[3]] for g in largest],
    }


def _inventory(value, op: dict, what: str) -> dict:
    fields = _dict(value, what)
    _keys(fields, {"tensors", "held"}, what)
    listing = []
    for entry in _typed(fields["tensors"], list, f"{what}'s tensors"):
        entry = _dict(entry, f"{what}'s tensors")
        _keys(entry, {"path", "shape", "dtype"}, f"{what}'s tensors")
        shape = _typed(entry["shape"], list, f"{what}'s tensor shape")
        if not all(_is_count(n) for n in shape):
            raise MalformedReply(f"{what} has a tensor of shape {_shown(shape)}")
        listing.append(
            {
                "path": clip(_typed(entry["path"], str, what)),
                "shape": shape,
                "dtype": clip(_typed(entry["dtype"], str, what)),
            }
        )
    held = _dict(fields["held"], f"{what}'s probes")
    _keys(held, set(op.get("probes", {})), f"{what}'s probes")
    paths = {}
    for name, found in held.items():
        found = _typed(found, list, f"{what}'s probes")
        paths[name] = [clip(_typed(path, str, f"{what}'s probes")) for path in found]
    return {"tensors": listing, "held": paths}


def _beams(value, op: dict, what: str) -> dict:
    """tokens, beam_idx and scores of the worker's beam search: one row of `beams` per step."""
    fields = _dict(value, what)
    _keys(fields, set(BEAMS), what)
    shape = (op["steps"], op["beams"])
    for name, dtypes in BEAMS.items():
        tensor = fields[name]
        if type(tensor) is not torch.Tensor or tensor.dtype not in dtypes or tensor.shape != shape:
            kinds = " or ".join(str(dtype).removeprefix("torch.") for dtype in dtypes)
            raise MalformedReply(
                f"{what}'s {name} is {_shown(tensor)}, not a {kinds} tensor {list(shape)}"
            )
    return fields


def _generation(value, op: dict, what: str, candidate: bool) -> dict:
    """A real-model generation (graders.worker.real_model): sequences int64 [B, P + N] and
    logits float32 [N, rows, vocab], both the shapes the operation asked for, with the count of
    each contract call (the candidate's worker only); or, from the candidate's worker, the
    names its file lacks, or the mismatch the adapter found (text, clipped) with the counts."""
    fields = _dict(value, what)
    if candidate and "missing" in fields:
        _keys(fields, {"missing"}, what)
        names = _typed(fields["missing"], list, f"{what}'s missing names")
        if not names or not all(name in real_model.NEEDS for name in names):
            raise MalformedReply(f"{what} names missing functions {_shown(names)}")
        return {"missing": list(dict.fromkeys(names))}
    counted = {"calls"} if candidate else set()
    if candidate and "mismatch" in fields:
        _keys(fields, {"mismatch", "calls"}, what)
        return {
            "mismatch": clip(_typed(fields["mismatch"], str, f"{what}'s mismatch")),
            "calls": _calls(fields["calls"], what),
        }
    _keys(fields, {"sequences", "logits"} | counted, what)
    batch, prompt = op["input_ids"].shape
    rows = batch * (op["beams"] if op["mode"] == "beam" else 1)
    shapes = {
        "sequences": (torch.int64, (batch, prompt + op["new_tokens"])),
        "logits": (torch.float32, (op["new_tokens"], rows, op["model"]["config"]["vocab_size"])),
    }
    for name, (dtype, shape) in shapes.items():
        tensor = fields[name]
        if (
            type(tensor) is not torch.Tensor
            or tensor.dtype != dtype
            or tuple(tensor.shape) != shape
        ):
            raise MalformedReply(
                f"{what}'s {name} is {_shown(tensor)}, not a "
                f"{str(dtype).removeprefix('torch.')} tensor {list(shape)}"
            )
    checked = {"sequences": fields["sequences"], "logits": fields["logits"]}
    if candidate:
        checked["calls"] = _calls(fields["calls"], what)
    return checked


def _calls(value, what: str) -> dict:
    """How many times the adapter called each contract function: a count for each name."""
    calls = _dict(value, f"{what}'s calls")
    _keys(calls, set(real_model.COUNTED), f"{what}'s calls")
    return {name: _count(n, f"{what}'s calls") for name, n in calls.items()}


TRACE_KEYS = {"steps", "adds", "error", "stalled"}
STEP_KEYS = {"at", "batch", "produced", "finished", "free_after_schedule", "free_after_update"}
DRIVE_ERROR = {"call": str, "step": int, "kind": str, "type": str, "message": str, "traceback": str}


def drive_trace(value, workload: dict, max_steps: int, what: str = "the trace") -> batching.Trace:
    """A batching drive's trace (graders.worker.batching), checked into its types: its shape
    within the driver's caps (steps <= max_steps, entries <= ENTRIES_PER_SEQ x max_num_seqs,
    tables <= num_blocks, ids of at most ID_CHARS, ints of int64's range), the requests added
    when they arrived, and each step's `produced` the one the driver's rule gives
    (`produced_by`): what the judge then replays is what the driver would have recorded. The
    judge's own drives (the reference scheduler's) pass here too."""
    fields = _dict(value, what)
    _keys(fields, TRACE_KEYS, what)
    config, requests = workload["config"], workload["requests"]
    steps = _typed(fields["steps"], list, f"{what}'s steps")
    if len(steps) > max_steps:
        raise MalformedReply(f"{what} holds {len(steps)} steps, at most {max_steps} are driven")
    stalled = _typed(fields["stalled"], bool, f"{what}'s stalled")
    error = None if fields["error"] is None else _drive_error(fields["error"], len(steps), what)
    arrival = {r["id"]: r["arrival"] for r in requests}
    adds = _typed(fields["adds"], list, f"{what}'s adds")
    order = [r["id"] for r in sorted(requests, key=lambda r: r["arrival"])]
    added = []
    for n, add in enumerate(adds):
        add = _dict(add, f"{what}'s adds")
        _keys(add, {"id", "at"}, f"{what}'s adds")
        if (
            n >= len(order)
            or add["id"] != order[n]
            or type(add["at"]) is not int
            or add["at"] < arrival[order[n]]
        ):
            raise MalformedReply(
                f"{what} adds {_shown(add)} where the driver adds the "
                "workload's requests in arrival order, each once it arrived"
            )
        added.append(batching.Add(order[n], add["at"]))
    known: dict[str, int] = {}
    outputs: dict[str, list] = {r["id"]: [] for r in requests}
    prompts = {r["id"]: len(r["prompt"]) for r in requests}
    checked, clock = [], -1
    for n, step in enumerate(steps):
        where = f"{what}'s step {n}"
        step = _dict(step, where)
        _keys(step, STEP_KEYS, where)
        if type(step["at"]) is not int or step["at"] <= clock:
            raise MalformedReply(f"{where} is at {_shown(step['at'])}, not after {clock}")
        clock = step["at"]
        for add in added:
            if add.at <= clock and add.seq_id not in known:
                known[add.seq_id] = prompts[add.seq_id]
        if any(a <= clock and seq_id not in known for seq_id, a in arrival.items()):
            raise MalformedReply(f"{where} runs before a request that arrived was added")
        raw = _typed(step["batch"], list, where)
        batch = tuple(_entry(entry, config, where) for entry in raw)
        if len(batch) > batching.ENTRIES_PER_SEQ * config["max_num_seqs"]:
            raise MalformedReply(
                f"{where} holds {len(batch)} entries, more than the driver records"
            )
        produced = batching.produced_by(raw, known, outputs, workload["oracle"])
        if step["produced"] != produced or any(  # 7.0 and True compare equal to ints
            type(token) is not int for token in step["produced"].values()
        ):
            raise MalformedReply(f"{where}'s produced tokens are not those the driver gives")
        for seq_id, token in produced.items():
            outputs[seq_id].append(token)
            known[seq_id] += 1
        finished = _typed(step["finished"], list, f"{where}'s finished")
        if len(finished) > len(requests) or not all(
            type(f) is str and len(f) <= batching.ID_CHARS for f in finished
        ):
            raise MalformedReply(f"{where}'s finished ids are {_shown(finished)}")
        for key in ("free_after_schedule", "free_after_update"):
            if step[key] is not None:
                _bounded(step[key], f"{where}'s {key}")
        checked.append(
            batching.Step(
                step["at"],
                batch,
                produced,
                tuple(finished),
                step["free_after_schedule"],
                step["free_after_update"],
            )
        )
    return batching.Trace(tuple(checked), tuple(added), error, stalled)


def _drive_error(value, steps: int, what: str) -> batching.DriveError:
    """The trace's error: a call of the driver's, at a step the trace reaches, its texts
    clipped."""
    error = _dict(value, f"{what}'s error")
    _keys(error, set(DRIVE_ERROR), f"{what}'s error")
    for key, types in DRIVE_ERROR.items():
        _typed(error[key], types, f"{what}'s error {key}")
    if (
        error["call"] not in get_args(batching.Call)
        or error["kind"] not in get_args(batching.ErrorKind)
        or not 0 <= error["step"] <= steps
    ):
        raise MalformedReply(f"{what}'s error is {_shown(error)}")
    return batching.DriveError(
        error["call"],
        error["step"],
        error["kind"],
        clip(error["type"], batching.ID_CHARS),
        clip(error["message"]),
        error["traceback"][-MAX_TAIL:],
    )


def _entry(entry, config: dict, where: str) -> batching.Entry:
    """[seq_id, start, tokens, [block, ...]] as the driver records an entry of a batch."""
    entry = _typed(entry, list, f"{where}'s entry")
    if len(entry) != 4 or type(entry[0]) is not str or len(entry[0]) > batching.ID_CHARS:
        raise MalformedReply(f"{where} has an entry of {_shown(entry)}")
    _bounded(entry[1], f"{where}'s start")
    _bounded(entry[2], f"{where}'s tokens")
    table = _typed(entry[3], list, f"{where}'s block table")
    if len(table) > config["num_blocks"]:
        raise MalformedReply(
            f"{where} has a table of {len(table)} blocks, more than the driver records"
        )
    for block in table:
        _bounded(block, f"{where}'s block table")
    return batching.Entry(entry[0], entry[1], entry[2], tuple(table))


def _inputs_after(value, op: dict, what: str) -> dict:
    """The tensor inputs of an operation after it: those the operation was sent, as tensors
    (a meta input comes back as one without data). The candidate may have changed their
    values, even their shape (`resize_`): the item judges that."""
    fields = _dict(value, f"{what}'s inputs")
    _keys(fields, {k for k in TENSOR_INPUTS if k in op}, f"{what}'s inputs")
    for name, tensor in fields.items():
        if not isinstance(tensor, (torch.Tensor, wire.Opaque)):
            raise MalformedReply(f"{what}'s input {name} came back as {_shown(tensor)}")
    return {name: _value(tensor, what, candidate=True) for name, tensor in fields.items()}


def _raised(value, what: str) -> dict:
    fields = _dict(value, f"{what}'s exception")
    _keys(fields, set(RAISED) | {"cache"}, f"{what}'s exception", optional={"cache"})
    for key, types in RAISED.items():
        _typed(fields[key], types, f"{what}'s exception {key}")
    lineage = [clip(_typed(name, str, f"{what}'s exception lineage")) for name in fields["lineage"]]
    checked = {
        "type": clip(fields["type"]),
        "lineage": lineage,
        "message": clip(fields["message"]),
        "traceback": fields["traceback"][-MAX_TAIL:],
    }
    if "cache" in fields:
        checked["cache"] = _cache_state(fields["cache"], f"{what}'s exception")
    return checked


def _cache_state(value, what: str) -> dict:
    """An exception's "cache": lengths, a list of at most CACHE_ROWS ints, and capacity, an int;
    either may be absent."""
    fields = _dict(value, f"{what}'s cache state")
    _keys(
        fields, {"lengths", "capacity"}, f"{what}'s cache state", optional={"lengths", "capacity"}
    )
    if "capacity" in fields:
        _bounded(fields["capacity"], f"{what}'s cache capacity")
    if "lengths" in fields:
        lengths = _typed(fields["lengths"], list, f"{what}'s cache lengths")
        if len(lengths) > CACHE_ROWS:
            raise MalformedReply(
                f"{what}'s cache lengths hold {len(lengths)} rows, at most {CACHE_ROWS} are sent"
            )
        for n in lengths:
            _bounded(n, f"{what}'s cache lengths")
    return fields


def _bounded(n, what: str) -> int:
    """An int of int64's range (no number of digits a message could not hold)."""
    if type(n) is not int or not -(2**63) <= n < 2**63:
        raise MalformedReply(f"{what} is {_shown(n) if type(n) is not int else 'out of range'}")
    return n


def _error_or(reply, key: str) -> dict:
    """`reply` as a dict holding `key`, or ``{"error": clipped text}`` when it holds "error"."""
    fields = _dict(reply, "the reply")
    if "error" in fields:
        _keys(fields, {"error"}, "the reply")
        return {"error": clip(_typed(fields["error"], str, "the reply's error"))}
    if key not in fields:
        raise MalformedReply(
            f"the reply holds neither {key!r} nor 'error': {_shown(sorted(fields))}"
        )
    return fields


def _value(value, what: str, candidate: bool):
    """A value as decoded, its texts clipped. Not `candidate` (a value the kata's worker code
    made, beyond the keys the judge reads): JSON values only, no tensors."""
    if isinstance(value, wire.Repr):
        return wire.Repr(clip(value))
    if isinstance(value, str):
        return clip(value)
    if isinstance(value, wire.Opaque):
        return wire.Opaque(
            clip(value.dtype), value.shape, clip(value.device), clip(value.type_name)
        )
    if isinstance(value, torch.Tensor) and not candidate:
        raise MalformedReply(f"{what} is a tensor")
    if isinstance(value, list):
        return [_value(v, what, candidate) for v in value]
    if isinstance(value, dict):
        return {clip(k): _value(v, what, candidate) for k, v in value.items()}
    return value


def _in_step(fields: dict, index: int, batch: str, what: str) -> None:
    if fields.get("batch") != batch or fields.get("index") != index:
        raise MalformedReply(
            f"{what} answers request {_shown(fields.get('index'))} of batch "
            f"{_shown(fields.get('batch'))}, not request {index} of {batch} "
            "(out of step)"
        )


def _dict(value, what: str) -> dict:
    if not isinstance(value, dict):
        raise MalformedReply(f"{what} is {_shown(value)}, not a dict")
    return value


def _keys(fields: dict, expected: set, what: str, optional: set = frozenset()) -> None:
    missing = expected - optional - fields.keys()
    extra = fields.keys() - expected
    if missing:
        raise MalformedReply(f"{what} lacks {', '.join(map(repr, sorted(missing)))}")
    if extra:
        raise MalformedReply(f"{what} holds unexpected keys: {_shown(sorted(extra))}")


def _typed(value, types, what: str):
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        raise MalformedReply(f"{what} is {_shown(value)}")
    if not isinstance(value, types) or (isinstance(value, float) and not math.isfinite(value)):
        raise MalformedReply(f"{what} is {_shown(value)}")
    return value


def _is_count(n) -> bool:
    return type(n) is int and n >= 0


def _count(n, what: str) -> int:
    if not _is_count(n):
        raise MalformedReply(f"{what} holds {_shown(n)}, not a count")
    return n


def _shown(value) -> str:
    """What arrived, named in a few words: its type, and a short clipped repr."""
    if isinstance(value, torch.Tensor):
        return f"a {str(value.dtype).removeprefix('torch.')} tensor {list(value.shape)}"
    if isinstance(value, wire.Opaque):
        return f"a tensor without data {list(value.shape)[:8]}"
    return f"{type(value).__name__} {clip(repr(value), 60)}"
