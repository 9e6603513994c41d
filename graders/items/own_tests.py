"""own-tests: the candidate's tests pass on the reference and catch the bundled mistakes.

The candidate's test file runs in the tests worker (pytest, in a forked child per run) with
`kv_cache` bound first to the reference solution, then to each bundled mistake
(`graders.mistakes`). A test suite that passes on the reference and fails on every mistake
compares outputs, prefix by prefix; one that catches none of the mistakes whose outputs have
the right shape checks shapes only (the `shape-only-tests` tell).

The item judges the tests, not the implementation being graded: what its runs give depends on
the test file (its path, and its bytes as the worker read them) and on the implementations they
run against. A grade that meets the same of both as the last runs in this process takes their
outcomes instead of running them again: `kata grade --watch` after a save of kv_cache.py alone,
a batch of implementations graded with one test file. Runs that did not all end (a hang, a
crash) are not kept.
"""

from __future__ import annotations

import hashlib
import json
from typing import NamedTuple

from graders import bundled
from graders.candidate import Candidate, CandidateError, Fail, NotAttempted
from graders.isolation import unseen_beside
from graders.mistakes import MISTAKES, SHAPE_MISTAKES
from graders.mutation import REFERENCE
from graders.workers import Reply, WorkerUnavailable

ITEM = "own-tests"

STARTER_TESTS = bundled.STARTER / "test_kv_cache.py"

TEST_TIMEOUT = 60.0
PARALLEL = 2


class _Runs(NamedTuple):
    """The replies of the runs of one test file: `tests` the digest of its bytes as the worker
    read them, `against` that of the requests (the implementations, in order)."""

    tests: str
    against: str
    replies: list[Reply]


_LAST_RUNS: dict[str, _Runs] = {}  # by the test file's path


def grade(candidate: Candidate) -> str:
    if candidate.tests is None:
        raise NotAttempted("no test file: write test_kv_cache.py beside your implementation "
                           "(or pass --tests FILE)")
    tests = candidate.tests.read_bytes()
    if tests == STARTER_TESTS.read_bytes():
        raise NotAttempted("the test file is still the starter's example: write your own tests")
    implementations = [{"source": REFERENCE.read_text(), "name": "reference"}] + [
        {"source": m.source(), "name": m.name} for m in MISTAKES]
    requests = [{"test_path": str(candidate.tests), "implementation": impl, "exitfirst": i > 0}
                for i, impl in enumerate(implementations)]
    replies = _runs(candidate, tests, requests)
    on_reference = _outcome(replies[0], "on the reference solution")
    if not (on_reference["passed"] or on_reference["failed"] or on_reference["errors"]):
        raise Fail("no test ran: the file collects no tests (names must start with test_)")
    if on_reference["exit_code"] != 0:
        failure = on_reference["first_failure"]
        raise Fail(f"your tests fail on the reference solution, so they cannot judge others: "
                   f"{failure or 'pytest exit code ' + str(on_reference['exit_code'])}"
                   f"{unseen_beside(failure or '', str(candidate.tests))}")

    caught = [m.name for m, r in zip(MISTAKES, replies[1:]) if not _passed(r)]
    missed = [m for m in MISTAKES if m.name not in caught]
    by_value = [name for name in caught if name not in SHAPE_MISTAKES]
    candidate.tell("shape-only-tests", not by_value,
                   f"the tests caught {len(caught)} of {len(MISTAKES)} bundled mistakes, "
                   f"{len(by_value)} of them with the right output shape")
    if missed:
        raise Fail(f"your tests pass on {len(missed)} of {len(MISTAKES)} bundled wrong "
                   f"implementations: missed {', '.join(m.description for m in missed)}; "
                   f"caught {', '.join(caught) or 'none'}")
    return (f"{on_reference['passed']} tests pass on the reference and catch all "
            f"{len(MISTAKES)} bundled mistakes ({', '.join(caught)})")


def _runs(candidate: Candidate, tests: bytes, requests: list[dict]) -> list[Reply]:
    """A Reply for each of `requests`: those of the last runs of the same test file (`tests`, its
    bytes as the judge read them) against the same implementations, else the test worker's."""
    path, against = str(candidate.tests), _digest(json.dumps(requests).encode())
    last = _LAST_RUNS.get(path)
    if last and last.against == against and last.tests == _digest(tests):
        return last.replies
    try:
        replies = candidate.test_worker.run(requests, TEST_TIMEOUT, PARALLEL)
    except WorkerUnavailable as exc:
        raise CandidateError(f"the tests could not be run: {exc.reason}") from None
    read = {reply.body.get("tests_sha256") if reply.status == "done" else None
            for reply in replies}
    if len(read) == 1 and None not in read:  # every run ended, all on the same bytes
        _LAST_RUNS[path] = _Runs(read.pop(), against, replies)
    return replies


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _passed(reply: Reply) -> bool:
    """Did the tests pass on this implementation? A run that hangs or crashes did not pass."""
    return reply.status == "done" and "error" not in reply.body and reply.body["exit_code"] == 0


def _outcome(reply: Reply, where: str) -> dict:
    if reply.status == "timeout":
        raise Fail(f"your tests {reply.detail} {where}")
    if reply.status == "crashed":
        raise Fail(f"running your tests {where} crashed: {reply.detail}")
    if "error" in reply.body:
        raise Fail(f"running your tests {where} failed: {reply.body['error'].strip()}")
    return reply.body
