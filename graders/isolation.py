"""How a worker is walled off from the judge and the machine: bubblewrap, or a process fallback.

Chosen once per grade (`Sandbox.resolve`):

    bwrap    the worker runs in a bubblewrap sandbox: new PID, mount, network, IPC and UTS
             namespaces; a read-only view of the Python environment and of the worker side of
             the kata (graders/worker) only; the candidate's files read-only; a private /tmp.
    process  where bubblewrap is missing or cannot make namespaces: the worker in its own
             session, a working directory of its own, the kata's modules blocked from import.

Both add the resource limits (`graders.worker.limits`) and the judge's guard: it is not
dumpable and is the child subreaper of everything a worker starts, so that `reap_strays` can
kill every process a candidate left before any report is written.
"""

from __future__ import annotations

from dataclasses import dataclass

GIB = 1 << 30
MODES = ("auto", "require", "process")


class SandboxUnavailable(Exception):
    """`--sandbox require` and bubblewrap cannot run here; the message says what to install."""


@dataclass(frozen=True)
class Sandbox:
    """What the user asked for: `mode` is "auto" (bubblewrap where it works, else the process
    fallback), "require" (bubblewrap or nothing) or "process"; `memory` is the address-space
    limit in bytes of every process the candidate's code runs in."""

    mode: str = "auto"
    memory: int = 4 * GIB
