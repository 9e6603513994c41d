"""A correct scheduler (the solution, carried inside) whose first schedule() returns its batch's
first entry a million times: the driver records no more than ENTRIES_PER_SEQ x max_num_seqs
entries (a reply stays small, the judge's memory bounded) and the drive ends on the value the
contract does not allow, a graded failure."""

import sys as _sys
import types as _types

_sys.modules["scheduler_base"] = _base = _types.ModuleType("scheduler_base")
exec(compile(@SOLUTION@, "scheduler_base.py", "exec"), _base.__dict__)
Request, Scheduled = _base.Request, _base.Scheduled


class Scheduler(_base.Scheduler):
    def schedule(self):
        batch = super().schedule()
        return batch[:1] * 1_000_000
