"""own-tests: the candidate's tests pass on the reference and catch the bundled mistakes.

The candidate's test file runs in the tests worker (pytest, in a forked child per run, in a
sandbox of its own: `GradeWorkers`) with `kv_cache` bound in turn to the reference solution, to
a correct implementation made for this grade (`graders.dense.disguise`: the reference with its private
names, the order of its definitions and its layout rewritten from the grade's seed) and to each
bundled mistake (`graders.dense.mistakes`), disguised with the same seed. A test suite that passes on
the reference and on the disguise and fails on every mistake compares outputs, prefix by prefix;
one that catches none of the mistakes whose outputs have the right shape checks shapes only (the
`shape-only-tests` tell). One that passes on the reference but not on the disguise recognises
the reference instead of judging it ("your tests fail a correct implementation").

The runs cannot tell one implementation from another but by what it computes: the worker is sent
each one's source and a file name (`__file__`), never its name; every run but the reference's
gets a fresh file name from the seed; every run stops at the first failure; and the runs are
sent in an order drawn from the seed. The seed is the hidden run's (recorded in the report;
`--seed` replays it), else PUBLIC_SEED: a public grade of the same files gives the same verdict.

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
import random
from functools import lru_cache
from typing import NamedTuple

from graders.dense.disguise import disguise
from graders.dense.mistakes import MISTAKES, SHAPE_MISTAKES
from graders.judge.candidate import Candidate
from graders.judge.isolation import unseen_beside
from graders.judge.workers import Reply, WorkerUnavailable
from graders.shared import bundled, hidden_cases, mutation
from graders.shared.plans import CandidateError, Fail, NotAttempted

ITEM = "own-tests"

STARTER_TESTS = bundled.STARTER / "test_kv_cache.py"
REFERENCE_FILE = "<reference>"  # the reference's __file__ in the runs: it is no secret

TEST_TIMEOUT = 60.0
PARALLEL = 2
PUBLIC_SEED = 0  # the disguise's seed outside hidden runs
SEED_OFFSET = 29_000  # of the disguise's seed from the hidden run's (graders.shared.hidden_cases)


class _Runs(NamedTuple):
    """The replies of the runs of one test file: `tests` the digest of its bytes as the worker
    read them, `against` that of the requests (the implementations, in order)."""

    tests: str
    against: str
    replies: list[Reply]


_LAST_RUNS: dict[str, _Runs] = {}  # by the test file's path


def grade(candidate: Candidate) -> str:
    if candidate.tests is None:
        raise NotAttempted(
            "no test file: write test_kv_cache.py beside your implementation (or pass --tests FILE)"
        )
    tests = candidate.tests.read_bytes()
    if tests == STARTER_TESTS.read_bytes():
        raise NotAttempted("the test file is still the starter's example: write your own tests")
    replies = _runs(candidate, tests, implementations(_seed()))
    malformed = next((reply for reply in replies if reply.malformed), None)
    if malformed is not None:  # the candidate's code answered for the worker: not a verdict
        raise CandidateError(f"running your tests: {malformed.detail}")
    on_reference = _outcome(replies[0], "on the reference solution")
    if not (on_reference["passed"] or on_reference["failed"] or on_reference["errors"]):
        raise Fail("no test ran: the file collects no tests (names must start with test_)")
    if on_reference["exit_code"] != 0:
        failure = on_reference["first_failure"]
        raise Fail(
            f"your tests fail on the reference solution, so they cannot judge others: "
            f"{failure or 'pytest exit code ' + str(on_reference['exit_code'])}"
            f"{unseen_beside(failure or '', str(candidate.tests))}"
        )
    on_disguise = _outcome(replies[1], "on a correct implementation")
    if on_disguise["exit_code"] != 0:
        failure = on_disguise["first_failure"] or f"pytest exit code {on_disguise['exit_code']}"
        raise Fail(
            "your tests fail a correct implementation (the reference with other private "
            "names, order and layout: tests must judge what the code computes, not "
            f"recognise the reference): {failure}"
        )

    caught = [m.name for m, r in zip(MISTAKES, replies[2:]) if not _passed(r)]
    missed = [m for m in MISTAKES if m.name not in caught]
    by_value = [name for name in caught if name not in SHAPE_MISTAKES]
    candidate.tell(
        "shape-only-tests",
        not by_value,
        f"the tests caught {len(caught)} of {len(MISTAKES)} bundled mistakes, "
        f"{len(by_value)} of them with the right output shape",
    )
    if missed:
        raise Fail(
            f"your tests pass on {len(missed)} of {len(MISTAKES)} bundled wrong "
            f"implementations: missed {', '.join(m.description for m in missed)}; "
            f"caught {', '.join(caught) or 'none'}"
        )
    return (
        f"{on_reference['passed']} tests pass on the reference and catch all "
        f"{len(MISTAKES)} bundled mistakes ({', '.join(caught)})"
    )


def implementations(seed: int) -> list[dict]:
    """What the tests run against, as the worker is sent them (``{"source", "file"}``): the
    reference (wherever `graders.shared.mutation.REFERENCE` points), its disguise, then each of
    MISTAKES disguised, all from `seed`."""
    draw = random.Random(f"own-tests:{seed}")
    reference = mutation.REFERENCE.read_text()
    return [{"source": reference, "file": REFERENCE_FILE}] + [
        {"source": source, "file": f"/tmp/{draw.getrandbits(40):010x}/kv_cache.py"}
        for source in _disguised(reference, seed)
    ]


@lru_cache(maxsize=4)
def _disguised(reference: str, seed: int) -> tuple[str, ...]:
    """The reference's disguise and each mistake's, from `seed`: drawn once a process for each
    reference and seed (0.2-0.6 s of a grade; --watch and an interview grade again and again)."""
    return tuple([disguise(reference, seed)] + [disguise(m.source(), seed) for m in MISTAKES])


def _seed() -> int:
    try:
        return hidden_cases.seed(SEED_OFFSET)
    except LookupError:  # not a hidden run
        return PUBLIC_SEED


def _runs(candidate: Candidate, tests: bytes, against: list[dict]) -> list[Reply]:
    """A Reply for each implementation of `against`: those of the last runs of the same test file
    (`tests`, its bytes as the judge read them) against the same implementations, else the test
    worker's, sent in an order drawn from the implementations."""
    path = str(candidate.tests)
    requests = [{"test_path": path, "implementation": impl, "exitfirst": True} for impl in against]
    order = list(range(len(requests)))
    random.Random(_digest(json.dumps(against).encode())).shuffle(order)
    sent = [requests[i] for i in order]
    digest = _digest(json.dumps(sent).encode())
    last = _LAST_RUNS.get(path)
    if last and last.against == digest and last.tests == _digest(tests):
        return last.replies
    try:
        replies = [None] * len(sent)
        for i, reply in zip(order, candidate.test_worker.run(sent, TEST_TIMEOUT, PARALLEL)):
            replies[i] = reply
    except WorkerUnavailable as exc:
        raise CandidateError(f"the tests could not be run: {exc.reason}") from None
    read = {reply.body.get("tests_sha256") if reply.status == "done" else None for reply in replies}
    if len(read) == 1 and None not in read:  # every run ended, all on the same bytes
        _LAST_RUNS[path] = _Runs(read.pop(), digest, replies)
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
