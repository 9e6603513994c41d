"""Run a plan against a candidate's module, inside the worker process.

A plan is data the judge built: a list of operations on named caches and layers, with the input
tensors inline. This file is trusted code, loaded before the candidate's file, that calls the
candidate's functions one operation at a time and records what each returned or raised. It judges
nothing: outputs go back to the judge, which compares them with its own references.

Operations (every one may carry ``"may_raise": true``; otherwise the first exception stops the plan):

    new          cache, capacity, window    KVCache(), KVCache(capacity=N) or KVCache(window=W)
    append       cache, key, value, counts
    attend       cache, query               -> output
    state        cache, names               -> {name: a copy of the attribute}
    reset        cache
    release      cache, index
    layer        layer, weights{wq,wk,wv,wo}, n_heads, n_kv_heads, head_dim, rope_base
    decode_step  layer, cache, x, counts    -> output, facts.rows{wq,wk,wv}
    inventory    cache, probes{name: [N, D]} -> facts: the cache's tensors and which probes they hold
    reorder      cache, beam_idx
    fork         cache, into                 the fork is stored under the name `into`
    attend_chunk cache, query               -> output (contract section 8, L6+)
    truncate     cache, lengths

Section 8's names (attend_chunk, truncate, KVCache's window) raise NotWritten where the file
lacks them: a file written against the contract before section 8 has not started L6+.

The serving track's PagedKVCache (contract section 4) is reached with three generic operations:

    paged_new    obj, args, kwargs           PagedKVCache(*args, **kwargs); kwargs["dtype"] by name
    call         obj, method, args           obj.method(*args) for the contract's methods
    get          obj, attr                   num_free_blocks or pool_bytes
    beam_search  weights, prompt, beams, steps, ...  -> tokens, beam_idx, scores (beam_search.py)

The real-model item (contract section 8) runs generate of a tiny transformers Llama through
the candidate's cache, and the same with transformers' DynamicCache in a worker holding no
candidate code (graders.worker.real_model):

    real_model            model, assistant, input_ids, attention_mask, mode, attention, ...
                          -> sequences, logits, calls (or missing, or mismatch)
    real_model_reference  the same fields -> sequences, logits

The batching track's Scheduler (contract section 6) is driven whole, one workload an operation:

    drive_scheduler  workload, max_steps    -> the trace (graders.worker.batching.drive)

``"measure": true`` on an append wraps it in `Allocations` and returns, instead of None, what it
allocated and what the cache holds after it: ``{"allocations": n, "bytes": n, "held": n,
"largest": [[dtype, shape, count, bytes each], ...]}``, `held` being the bytes of the storages
that this cache's measured appends created and that are still alive.

An input tensor may be wrapped: ``{"meta": t}`` sends it on the meta device and
``{"noncontiguous": t}`` as a strided view with the same values (heads and time transposed in
memory, every other element of the last dimension). ``"return_inputs": true`` on an
operation sends its tensor inputs back after the call, to show whether the candidate mutated them.
"""

from __future__ import annotations

import inspect
import traceback

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

from graders.worker.batching import drive as _drive
from graders.worker.beam_search import beam_search as _beam_search
from graders.worker.layer import Layer
from graders.worker.real_model import real_model as _real_model
from graders.worker.real_model import reference as _real_model_reference
from graders.worker.wire import TEXT_CHARS

PROJECTIONS = ("wq", "wk", "wv")
LINEAGE = 64  # classes of an exception's lineage sent: ValueError's is 4
CACHE_ROWS = 64  # rows of a cache's lengths sent with an exception raised on it
CACHE_OPS = (
    "append",
    "attend",
    "reset",
    "release",
    "decode_step",
    "reorder",
    "fork",
    "attend_chunk",
    "truncate",
)
SECTION_8 = ("attend_chunk", "truncate")  # L6+: a file without them has not started it


def execute(module, plan: dict) -> list[dict]:
    """Run `plan["ops"]` against `module`; one result dict per operation run."""
    state = _State(module)
    results = []
    for op in plan["ops"]:
        try:
            results.append({"ok": _OPS[op["op"]](state, op)})
        except BaseException as exc:  # noqa: BLE001 - the candidate may raise anything, SystemExit included
            if isinstance(exc, KeyboardInterrupt):
                raise
            results.append({"raised": _describe_exception(exc)})
            facts = _cache_facts(state, op)
            if facts:
                results[-1]["raised"]["cache"] = facts
            if not op.get("may_raise"):
                break
        if op.get("return_inputs"):
            results[-1]["inputs_after"] = {
                k: _snapshot(op[k]) for k in ("key", "value", "query", "x") if k in op
            }
    return results


class _State:
    def __init__(self, module):
        self.module = module
        self.caches: dict[str, object] = {}
        self.layers: dict[str, torch.nn.Module] = {}
        self.kept: dict[str, list] = {}  # cache name -> `Allocations.kept` of its measured appends
        self.derived: dict[str, dict] = {}  # layer name -> `_ProjectionRows.derived`

    def fn(self, name):
        try:
            return getattr(self.module, name)
        except AttributeError:
            if name in SECTION_8:
                raise NotWritten(
                    f"the file defines no `{name}` (contract section 8, L6+)"
                ) from None
            raise MissingName(
                f"the file defines no `{name}`, which the contract requires"
            ) from None


class MissingName(Exception):
    """The candidate's module lacks a name the contract requires."""


class NotWritten(MissingName):
    """The candidate's module lacks a name of section 8 (L6+): that part is not started."""


def _input(value):
    if isinstance(value, dict) and "meta" in value:
        return value["meta"].to("meta")
    if isinstance(value, dict) and "noncontiguous" in value:
        t = value["noncontiguous"]
        if t.dim() == 4:  # [B, H, t, D] laid out as [B, t, H, 2D], like a projection's output
            B, H, T, D = t.shape
            spread = t.new_zeros(B, T, H, 2 * D).transpose(1, 2)
        else:
            spread = t.new_zeros(*t.shape[:-1], 2 * t.shape[-1])
        spread[..., ::2] = t
        return spread[..., ::2]  # the same values, every other element of a larger tensor
    return value


def _resolve_inputs(op: dict) -> None:
    """Replace wrapped inputs in place, so that `return_inputs` sends back what the candidate got."""
    for key in ("key", "value", "query", "x", "counts"):
        if key in op:
            op[key] = _input(op[key])


def _new(state: _State, op: dict):
    cls = state.fn("KVCache")
    capacity, window = op.get("capacity"), op.get("window")
    if window is not None:
        if not _takes(cls, "window"):
            raise NotWritten("KVCache takes no `window` (contract section 8, L6+)")
        state.caches[op["cache"]] = cls(window=window)
        return
    state.caches[op["cache"]] = cls() if capacity is None else cls(capacity=capacity)


def _takes(cls, name: str) -> bool:
    """Whether calling `cls` accepts the keyword `name` (a **kwargs does)."""
    try:
        parameters = inspect.signature(cls).parameters.values()
    except (TypeError, ValueError):  # no signature to read: let the call say
        return True
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in parameters)


def _append(state: _State, op: dict):
    _resolve_inputs(op)
    args = (state.caches[op["cache"]], op["key"], op["value"])
    if op.get("counts") is not None:
        args += (op["counts"],)
    if not op.get("measure"):
        state.fn("append")(*args)
        return None
    with Allocations(state.kept.setdefault(op["cache"], [])) as allocations:
        state.fn("append")(*args)
    return {
        "allocations": allocations.count,
        "bytes": allocations.bytes,
        "held": allocations.held(),
        "largest": allocations.largest(),
    }


class Allocations(TorchDispatchMode):
    """Counts the storages that operations create, and their bytes; names the largest.

    An operator's output whose storage none of its inputs owns is new memory (`empty`, `cat`,
    `clone`, `zeros`, a gather); an in-place write or a view is not, unless it moved a tensor's
    storage to new memory (`resize_` past its size: counted at its new size). Any storage design
    is measured alike: one big buffer, doubling, 1.5x growth, a list of fixed blocks. Not seen:
    `untyped_storage().resize_()`, which no operator dispatches.

    `kept`: a list that gets a weak reference to each new storage; pass one list to the
    Allocations of successive calls and `held()` is the bytes of all their storages still alive
    afterwards, wherever the caller keeps them (attributes, lists, closures). `largest()`: the
    new storages grouped by the dtype and shape of the tensor that created them, the LARGEST
    groups of the biggest storages, each ``[dtype, shape, count, bytes each]``: a reply of a few
    numbers, whatever the call allocated.
    """

    LARGEST = 3

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        """False: torch would otherwise wrap `__torch_dispatch__` in torch._dynamo.disable, and
        the first dispatch would import torch._dynamo: 1 s of the worker's start, and modules
        that make every forked child about twice as costly to fork and to end (its heap). Code
        the candidate compiles is still counted: while torch.compile traces, the counting is
        hidden from it (`_untraced_count`) and runs as the code does (tested)."""
        return False

    def __init__(self, kept: list | None = None):
        super().__init__()
        self.count = self.bytes = 0
        self.kept: list[tuple[StorageWeakRef, int]] = [] if kept is None else kept
        self.groups: dict[tuple[str, tuple[int, ...], int], int] = {}  # (dtype, shape, bytes): n

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.compiler.is_compiling():  # torch.compile tracing: counted as it runs, untraced
            return _untraced_count()(self, func, args, kwargs or {})
        return self._count(func, args, kwargs or {})

    def _count(self, func, args, kwargs):
        if func._schema.is_mutable:  # in place: new memory only where it moved a tensor's storage
            return self._in_place(func, args, kwargs)
        result = func(*args, **kwargs)
        if func.is_view:
            return result
        outputs = [
            out
            for out in _tensors(result)
            if out.device.type != "meta" and out.untyped_storage().nbytes()
        ]
        if not outputs:
            return result
        inputs = {
            t.untyped_storage().data_ptr()
            for t in _tensors((args, kwargs))
            if t.device.type != "meta"
        }
        for out in outputs:
            storage = out.untyped_storage()
            if storage.data_ptr() not in inputs:
                inputs.add(storage.data_ptr())
                self._new(storage, out)
        return result

    def _in_place(self, func, args, kwargs):
        """Run an in-place op (`resize_`, `out=`, a write); a tensor whose storage it moved to new
        memory (a resize past its size) counts as a new storage of its new size."""
        tensors = [t for t in _tensors((args, kwargs)) if t.device.type != "meta"]
        before = [t.untyped_storage().data_ptr() for t in tensors]
        result = func(*args, **kwargs)
        for t, pointer in zip(tensors, before):
            storage = t.untyped_storage()
            if storage.data_ptr() != pointer and storage.nbytes():
                self._new(storage, t)
        return result

    def _new(self, storage, tensor: torch.Tensor) -> None:
        nbytes = storage.nbytes()
        self.count += 1
        self.bytes += nbytes
        group = (str(tensor.dtype).removeprefix("torch."), tuple(tensor.shape), nbytes)
        self.groups[group] = self.groups.get(group, 0) + 1
        self.kept.append((StorageWeakRef(storage), nbytes))

    def held(self) -> int:
        """Bytes of the storages in `kept` still alive (the freed ones leave the list)."""
        alive = {ref: (ref, nbytes) for ref, nbytes in self.kept if not ref.expired()}
        self.kept[:] = alive.values()  # a storage resized since: once, at its last size
        return sum(nbytes for _, nbytes in self.kept)

    def largest(self) -> list[list]:
        """The LARGEST (dtype, shape) groups, biggest storages first: [dtype, shape, count, bytes
        each]."""
        top = sorted(self.groups.items(), key=lambda g: (-g[0][2], -g[1]))[: self.LARGEST]
        return [[dtype, list(shape), count, nbytes] for (dtype, shape, nbytes), count in top]


def _untraced_count():
    """Allocations._count hidden from torch.compile, which has imported torch._dynamo by the
    time it traces (not cached: torch.compile would trace through a cache, with a warning)."""
    import torch._dynamo

    return torch._dynamo.disable(Allocations._count)


def _attend(state: _State, op: dict):
    _resolve_inputs(op)
    return state.fn("attend")(state.caches[op["cache"]], op["query"])


def _state(state: _State, op: dict):
    """A snapshot: tensors are copied now, since a later operation may write into a view."""
    cache = state.caches[op["cache"]]
    return {name: _snapshot(getattr(cache, name, Missing)) for name in op["names"]}


def _snapshot(value):
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def _reset(state: _State, op: dict):
    state.fn("reset")(state.caches[op["cache"]])


def _release(state: _State, op: dict):
    state.fn("release")(state.caches[op["cache"]], op["index"])


def _layer(state: _State, op: dict):
    state.layers[op["layer"]] = Layer(
        op["weights"], op["n_heads"], op["n_kv_heads"], op["head_dim"], op["rope_base"]
    ).requires_grad_(False)


def _decode_step(state: _State, op: dict):
    _resolve_inputs(op)
    layer = state.layers[op["layer"]]
    counter = _ProjectionRows(layer, state.derived.setdefault(op["layer"], {}))
    args = (layer, state.caches[op["cache"]], op["x"])
    counts = op.get("counts")
    with counter:
        out = (
            state.fn("decode_step")(*args)
            if counts is None
            else state.fn("decode_step")(*args, counts)
        )
    return {"output": out, "rows": counter.rows}


class _ProjectionRows(TorchFunctionMode):
    """Counts the input rows each of wq, wk, wv multiplies, however the candidate calls it.

    `layer.wk(x)`, `F.linear(x, layer.wk.weight)` and `x @ layer.wk.weight.T` all reach a torch
    function with the weight (or a view of it) as an argument; the other tensor arguments' size
    divided by d_model is the number of token rows projected. A tensor computed from weights
    alone stands for the weights it holds: `torch.cat` of wq, wk and wv into one fused weight (as
    gpt-fast's `wqkv`), a transposed or converted copy. `F.linear(x, wqkv)` then projects x's
    rows once for each of wq, wk and wv. `derived` keeps those tensors for the layer across
    calls, so a fused weight made at the first step and kept still counts at the later ones.
    """

    def __init__(self, layer: torch.nn.Module, derived: dict):
        super().__init__()
        self.weights = {name: getattr(layer, name).weight for name in PROJECTIONS}
        self.derived = derived  # storage address -> (StorageWeakRef, names of the weights in it)
        self.rows = {name: 0 for name in PROJECTIONS}

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        if func in _VIEW_FUNCS:  # a view or copy of its first argument, whatever else it is given
            first = args[0] if args and isinstance(args[0], torch.Tensor) else None
            self._derive(result, frozenset() if first is None else self._weights_in(first))
            return result
        tensors = _tensors((args, kwargs))
        held = [self._weights_in(t) for t in tensors]
        names = frozenset().union(*held)
        others = [t for t, weights in zip(tensors, held) if not weights]
        if names and others:  # weights times something else: a projection
            for name in names:
                self.rows[name] += sum(t.numel() for t in others) // self.weights[name].shape[1]
        else:  # made of weights alone (or of none): what it returns stands for them
            self._derive(result, names)
        return result

    def _derive(self, result, names: frozenset[str]) -> None:
        """Remember that the tensors in `result` are made of the weights `names` alone."""
        if not names:
            return
        for out in _tensors(result):
            if out.device.type != "meta" and out.untyped_storage().nbytes():
                storage = out.untyped_storage()
                self.derived[storage.data_ptr()] = (StorageWeakRef(storage), names)

    def _weights_in(self, t: torch.Tensor) -> frozenset[str]:
        """The projections whose weights `t` reads or was computed from alone."""
        found = frozenset(
            name for name, weight in self.weights.items() if _shares_storage(t, weight)
        )
        if t.device.type == "meta":
            return found
        ref, names = self.derived.get(t.untyped_storage().data_ptr(), (None, frozenset()))
        return found | names if ref is not None and not ref.expired() else found


# Functions whose result is a view or copy of their first argument alone; they project nothing
# even when given a second tensor (an index, or the tensor whose dtype `.to` takes).
_VIEW_FUNCS = {torch.Tensor.__getitem__, torch.Tensor.view, torch.Tensor.reshape, torch.Tensor.to}


def _shares_storage(t: torch.Tensor, weight: torch.Tensor) -> bool:
    """`t` is the weight or reads its memory (a view, `.T`, `.data`, `.detach()`)."""
    if t.device.type == "meta" or t.device != weight.device:
        return False
    return t.untyped_storage().data_ptr() == weight.untyped_storage().data_ptr()


def _tensors(value) -> list[torch.Tensor]:
    """The tensors in `value`, however deeply nested in lists, tuples and dicts, in order."""
    found, pending = [], [value]  # pending: a stack, its next value last
    while pending:
        value = pending.pop()
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            pending.extend(reversed(value))
        elif isinstance(value, dict):
            pending.extend(reversed(value.values()))
    return found


def _reorder(state: _State, op: dict):
    state.fn("reorder")(state.caches[op["cache"]], op["beam_idx"])


def _fork(state: _State, op: dict):
    state.caches[op["into"]] = state.fn("fork")(state.caches[op["cache"]])


def _attend_chunk(state: _State, op: dict):
    _resolve_inputs(op)
    return state.fn("attend_chunk")(state.caches[op["cache"]], op["query"])


def _truncate(state: _State, op: dict):
    state.fn("truncate")(state.caches[op["cache"]], op["lengths"])


PAGED_METHODS = {
    "add",
    "admit",
    "can_admit",
    "append",
    "attend",
    "fork",
    "free",
    "evict",
    "length",
    "block_table",
}
PAGED_ATTRIBUTES = {"num_free_blocks", "pool_bytes"}


def _paged_new(state: _State, op: dict):
    kwargs = dict(op.get("kwargs", {}))
    if "dtype" in kwargs:
        kwargs["dtype"] = getattr(torch, kwargs["dtype"])
    state.caches[op["obj"]] = state.fn("PagedKVCache")(*op.get("args", ()), **kwargs)


def _call(state: _State, op: dict):
    if op["method"] not in PAGED_METHODS:
        raise ValueError(f"plan: {op['method']} is not a contract method")
    args = [_input(a) for a in op.get("args", ())]
    return getattr(state.caches[op["obj"]], op["method"])(*args)


def _get(state: _State, op: dict):
    if op["attr"] not in PAGED_ATTRIBUTES:
        raise ValueError(f"plan: {op['attr']} is not a contract attribute")
    return getattr(state.caches[op["obj"]], op["attr"])


def _inventory(state: _State, op: dict):
    """The tensors reachable from the cache object, and which of them hold probe vectors.

    A probe set (say every step's queries, `[N, D]`) counts as held when most of its vectors
    appear, within a relative 1e-3, as rows along the last dimension of the cache's tensors taken
    together (a list with one tensor per step holds them as much as one big tensor does); the
    answer names the tensors that hold any.
    """
    found = reachable_tensors(state.caches[op["cache"]])
    listing = [
        {"path": path, "shape": list(t.shape), "dtype": str(t.dtype).removeprefix("torch.")}
        for path, t in found
    ]
    held = {}
    for name, probes in op.get("probes", {}).items():
        hits = {path: _found(t, probes) for path, t in found}
        anywhere = torch.zeros(len(probes), dtype=torch.bool)
        for hit in hits.values():
            anywhere |= hit
        most = anywhere.float().mean() > 0.5
        held[name] = [path for path, hit in hits.items() if hit.any()] if most else []
    return {"tensors": listing, "held": held}


def reachable_tensors(obj, max_depth: int = 3) -> list[tuple[str, torch.Tensor]]:
    """(path, tensor) for each tensor reachable from `obj` through attributes, lists, tuples and
    dicts, at most `max_depth` levels down; each tensor once."""
    found, seen = [], set()

    def visit(value, path, depth):
        if isinstance(value, torch.Tensor):
            if id(value) not in seen:
                seen.add(id(value))
                found.append((path, value))
            return
        if depth > max_depth or id(value) in seen:
            return
        seen.add(id(value))
        if isinstance(value, dict):
            for k, v in value.items():
                visit(v, f"{path}[{k!r}]", depth + 1)
        elif isinstance(value, (list, tuple)):
            for i, v in enumerate(value):
                visit(v, f"{path}[{i}]", depth + 1)
        elif hasattr(value, "__dict__") and not isinstance(value, type):
            for k, v in vars(value).items():
                visit(v, f"{path}.{k}", depth + 1)

    visit(obj, "cache", 0)
    return found


def _found(t: torch.Tensor, probes: torch.Tensor) -> torch.Tensor:
    """[N] bool: which probe vectors appear as rows along the last dimension of `t`."""
    width = probes.shape[-1]
    none = torch.zeros(len(probes), dtype=torch.bool)
    if (
        not t.is_floating_point()
        or t.device.type != "cpu"
        or t.numel() == 0
        or t.shape[-1] != width
    ):
        return none
    rows = t.detach().reshape(-1, width).double()
    rows = rows[torch.isfinite(rows).all(dim=-1)]
    if rows.numel() == 0:
        return none
    probes = probes.double()
    distance = torch.cdist(probes, rows).min(dim=-1).values  # [N]
    return distance / probes.norm(dim=-1).clamp_min(1e-12) < 1e-3


def _drive_scheduler(state: _State, op: dict):
    """The candidate module's Scheduler driven on op["workload"], each request built with its
    own Request: the trace (what the scheduler raises or returns wrongly is in it)."""
    return _drive(
        state.fn("Scheduler"), op["workload"], op["max_steps"], request_type=state.fn("Request")
    )


class _MissingType:
    def __repr__(self):
        return "<missing attribute>"


Missing = _MissingType()


def _cache_facts(state: _State, op: dict) -> dict | None:
    """The state of the dense cache an operation that raised acted on, as the judge's message
    names it: {"lengths": [int, ...] (its first CACHE_ROWS rows), "capacity": int}, each only
    when the cache holds it as the contract says (an int64 tensor, an int); None when neither."""
    cache = state.caches.get(op.get("cache")) if op["op"] in CACHE_OPS else None
    if cache is None:
        return None
    facts = {}
    try:  # the candidate's properties run here, and may raise too
        lengths, capacity = getattr(cache, "lengths", None), getattr(cache, "capacity", None)
        if (
            type(lengths) is torch.Tensor
            and lengths.dtype == torch.int64
            and lengths.dim() == 1
            and lengths.device.type == "cpu"
        ):
            facts["lengths"] = [int(n) for n in lengths[:CACHE_ROWS].tolist()]
        if type(capacity) is int and 0 <= capacity < 2**63:  # what a tensor's size can be
            facts["capacity"] = capacity
    except Exception:  # noqa: BLE001 - facts for a message: none is fine
        return None
    return facts or None


def _describe_exception(exc: BaseException) -> dict:
    """The exception as the judge reads it: texts of the candidate's, each cut to TEXT_CHARS (the
    message its start, the traceback its end: the last frames)."""
    frames = traceback.format_exception(type(exc), exc, exc.__traceback__)
    return {
        "type": type(exc).__name__[:TEXT_CHARS],
        "lineage": [cls.__name__[:TEXT_CHARS] for cls in type(exc).__mro__][:LINEAGE],
        "message": str(exc)[:TEXT_CHARS],
        "traceback": "".join(frames)[-TEXT_CHARS:],
    }


_OPS = {
    "new": _new,
    "append": _append,
    "attend": _attend,
    "state": _state,
    "reset": _reset,
    "release": _release,
    "layer": _layer,
    "decode_step": _decode_step,
    "inventory": _inventory,
    "reorder": _reorder,
    "fork": _fork,
    "attend_chunk": _attend_chunk,
    "truncate": _truncate,
    "paged_new": _paged_new,
    "call": _call,
    "get": _get,
    "beam_search": _beam_search,
    "drive_scheduler": _drive_scheduler,
    "real_model": _real_model,
    "real_model_reference": lambda state, op: _real_model_reference(op),
}
