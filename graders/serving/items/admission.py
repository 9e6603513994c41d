"""admission: admit reserves a request's future growth, not just its first token.

Public: one pool of 10 blocks of 4 positions, every outcome judged against the judge's model of
the pool (graders/serving/model.py): admit(seq, max_tokens) reserves ceil(max_tokens / 4) blocks
when the free blocks not promised to other admitted sequences cover them.
- A is admitted for 21 tokens (6 blocks) and has written 1 token: 9 blocks are free, but 5 are
  still promised to A. B asking for 20 tokens (5 blocks) must be refused while the pool is still
  mostly empty, and nothing changes: B is unknown (an append to it raises KeyError) and
  can_admit gives the same answers (False for 5 blocks, True for 4). A cache that looks only at
  the free blocks, rounds the blocks down, or counts tokens where blocks are meant, admits B
  or refuses A.
- C, added without admission, may take the 4 unreserved blocks but not one more: its next
  append is CacheFull although 5 blocks are free. A then grows to its 21 tokens with no
  CacheFull: its reservation held.
- Freed, an admitted sequence gives back what it had not used: D admitted for the whole pool
  with 1 token written makes E (1 block) wait; once D is freed, E is admitted. A cache that
  keeps a freed sequence's reservation refuses E forever.
Free counts (whether a reserved block counts as free, leaks) are paged-free's to judge; here
only admit, can_admit and append outcomes are.

Hidden: seeded random scripts of admits, adds, appends, can_admit and frees
(graders.serving.scripts.play), block sizes 1 and 16, pools small enough that refusals are
frequent. Admitted sequences grow within their max_tokens and never get CacheFull; sequences
added without admission get CacheFull rather than take promised blocks (and are then freed, as
a scheduler drops a request that does not fit: whether CacheFull changed nothing is paged-free's
question); free gives back what was left of a reservation.
"""

from __future__ import annotations

from graders.judge.candidate import Candidate
from graders.serving.scripts import play
from graders.serving.session import Session
from graders.shared import cases, hidden_cases

ITEM = "admission"

HINTS = {
    "admit": "admit only if ceil(max_tokens / block_size) blocks are free beyond what is still "
    "promised to other admitted sequences (their reservations minus what they took)",
    "can_admit": "can_admit asks admit's question: count blocks, and subtract outstanding "
    "reservations from the free blocks",
    "append:CacheFull": "a sequence without a reservation may only take free blocks that no "
    "admitted sequence has been promised",
    "append:KeyError": "a refused admit adds nothing: the sequence stays unknown",
    "append": "an admitted sequence's appends are paid from its own reservation, up to "
    "max_tokens; no one else may have taken those blocks",
}

# seed, block_size, num_blocks, longest append, largest max_tokens
HIDDEN_CASES = [
    (5500 + i, *shape)
    for i, shape in enumerate(((16, 12, 40, 80), (1, 40, 8, 24), (16, 20, 20, 200), (1, 24, 6, 16)))
]
HIDDEN_WEIGHTS = {"admit": 3, "add": 1, "append": 6, "can_admit": 2, "free": 2}


def grade(candidate: Candidate) -> str:
    s = Session("reservations", 10, 4, seed=500, watch=())
    s.admit("A", 21)  # ceil(21 / 4) = 6 blocks promised
    s.append("A", 1)  # takes 1 of them: 9 free, 5 still promised
    s.can_admit(20)  # 5 blocks > 9 - 5: False
    s.admit("B", 20)  # refused, though 9 blocks are free
    s.append("B", 1)  # B was not added: KeyError
    s.can_admit(16)  # 4 blocks: True
    s.add("C")
    s.append("C", 16)  # the 4 unreserved blocks
    s.append("C", 1)  # 5 blocks are free, all promised to A: CacheFull
    s.can_admit(1)  # False
    s.append("A", 7), s.append("A", 9), s.append("A", 4)  # A reaches its 21 tokens
    s.free("A"), s.free("C")
    s.admit("D", 40)  # the whole pool
    s.append("D", 1)
    s.admit("E", 4)  # refused: D's 9 unused blocks are promised
    s.free("D")  # its reservation goes with it
    s.can_admit(40)
    s.admit("E", 4)
    s.append("E", 4)
    s.check(candidate.run(s.plan), HINTS)
    return (
        "reservations of admitted sequences kept from others (refusals with a mostly empty "
        "pool, CacheFull for unreserved appends), growth to max_tokens, released on free"
    )


def grade_hidden(candidate: Candidate) -> str:
    for seed, block_size, num_blocks, longest, most in hidden_cases.seeded(HIDDEN_CASES):
        case = hidden_cases.name(seed, f"random admits, appends and frees, block_size {block_size}")
        s = Session(case, num_blocks, block_size, seed=seed, hidden=True, watch=())
        play(
            s,
            cases.generator(seed),
            50,
            HIDDEN_WEIGHTS,
            longest,
            most_admitted=most,
            drop_full=True,
        )
        s.check(hidden_cases.run(candidate, s.plan, case), HINTS)
    return (
        f"{len(HIDDEN_CASES)} random scripts: every admit and can_admit answer, and every "
        "append's CacheFull or not, as outstanding reservations say"
    )
