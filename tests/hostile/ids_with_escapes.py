"""A correct scheduler (the solution, carried inside) that adds to its first batch an entry for
a sequence whose id holds a terminal escape and a right-to-left override: the judge names it as
no request of the workload, escaped, so a report cannot repaint the terminal or reorder text."""

import sys as _sys
import types as _types

_sys.modules["scheduler_base"] = _base = _types.ModuleType("scheduler_base")
exec(compile(@SOLUTION@, "scheduler_base.py", "exec"), _base.__dict__)
Request, Scheduled = _base.Request, _base.Scheduled


class Scheduler(_base.Scheduler):
    def schedule(self):
        batch = super().schedule()
        if not getattr(self, "_done", False):
            self._done = True
            batch.append(Scheduled("\x1b[31mPASS\u202e", 0, 1, ()))
        return batch
