"""A correct scheduler (the solution, carried inside) that, at import, replaces the worker's
rule for the tokens a step produces with one that also "produces" for every entry, so the
trace would claim outputs the scheduler never computed up to. The judge re-derives each step's
tokens from its own copy of the workload: the reply is malformed."""

import sys as _sys
import types as _types

from graders.worker import batching as _batching

_sys.modules["scheduler_base"] = _base = _types.ModuleType("scheduler_base")
exec(compile(@SOLUTION@, "scheduler_base.py", "exec"), _base.__dict__)
Request, Scheduled, Scheduler = _base.Request, _base.Scheduled, _base.Scheduler

_honest = _batching.produced_by


def _generous(batch, known, outputs, oracle):
    produced = _honest(batch, known, outputs, oracle)
    for seq_id, *_ in batch:
        if seq_id in known and seq_id not in produced and len(outputs[seq_id]) < len(oracle[seq_id]):
            produced[seq_id] = oracle[seq_id][len(outputs[seq_id])]
    return produced


_batching.produced_by = _generous
