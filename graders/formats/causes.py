"""Causes: a grade's failures grouped by what explains them, so that every format says a cause once.

One bug usually fails many items: an append that grows the wrong dimension breaks every item
that appends. `causes(result)` walks the items that do not pass, in rubric order, and puts each
one under the cause that explains it, on this evidence, the strongest first:

- an item it depends on (the rubric's `depends_on`, followed through) does not pass either: it
  joins that item's cause (never for an item not attempted, whose stub is its own reason);
- it hung, and an item before it hung: one hang;
- it raised the exception another item raised, of the same type from the same place in the
  candidate's file (the messages may differ in their numbers);
- its message names the likely mistake another's names;
- it is not attempted with the same message as another ("`append` still raises
  NotImplementedError").

Anything else leads a cause of its own. A cause's first item (its lead) gives the evidence and
the hint; the others it takes down are named with their points. Items the worker could not run
are left out: the closing block gives their reason once. Grouping changes no status or score.

A message's likely mistake (what follows LIKELY) is the item's reading of its own evidence:
`evidence` leaves it out, for the items whose failure an earlier cause explains better.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from graders.judge.result import GradeResult, ItemResult
from graders.shared import rubric as rubric_data

LIKELY = (
    ". Likely mistake: "  # how an item's message names a likely mistake (compare.require_close)
)

Joined = Literal["depends", "hang", "exception", "mistake", "not-attempted"]


@dataclass(frozen=True)
class Cause:
    """A reason items fail: `lead`, the first item that shows it, and `members`, the other
    items it takes down (rubric order), each with how it joined (`joined`, in the same order)."""

    lead: ItemResult
    members: tuple[ItemResult, ...] = ()
    joined: tuple[Joined, ...] = ()

    @property
    def items(self) -> tuple[ItemResult, ...]:
        return (self.lead, *self.members)

    @property
    def points_lost(self) -> float:
        return sum(i.max_points - i.points for i in self.items)


def causes(result: GradeResult, first: frozenset[str] | set[str] = frozenset()) -> list[Cause]:
    """The causes of `result`'s failures: those whose lead is in `first` (graded first, --ff)
    ahead, then those of code that runs and fails before those of code not written yet (a stub,
    no test file), each group in the rubric order of its lead."""
    rubric = rubric_data.load()
    failing = {i.id: i for i in result.reported if i.status != "pass" and not i.unavailable}
    lead_of: dict[str, str] = {}
    how: dict[str, Joined] = {}

    def root(item_id: str, seen: frozenset[str] = frozenset()) -> tuple[str, Joined | None]:
        """The lead of `item_id`'s cause and how it joined (None: it leads)."""
        if item_id in lead_of:
            return lead_of[item_id], how.get(item_id)
        item = failing[item_id]
        found = _by_dependency(item, failing, rubric, seen | {item_id}, root)
        if found is None:
            found = _by_likeness(item, [failing[i] for i in lead_of], lead_of)
        lead, joined = found if found else (item_id, None)
        lead_of[item_id] = lead
        if joined:
            how[item_id] = joined
        return lead, joined

    for item_id in failing:  # rubric order: an earlier item is there to join first
        root(item_id)
    grouped: dict[str, list[ItemResult]] = {}
    for item_id, lead in lead_of.items():
        grouped.setdefault(lead, [])
        if lead != item_id:
            grouped[lead].append(failing[item_id])
    order = [i.id for i in result.items]
    found = [
        Cause(
            failing[lead],
            tuple(sorted(members, key=lambda i: order.index(i.id))),
            tuple(how[m.id] for m in sorted(members, key=lambda i: order.index(i.id))),
        )
        for lead, members in grouped.items()
    ]
    return sorted(
        found,
        key=lambda c: (
            c.lead.id not in first,
            c.lead.status == "not_attempted",
            order.index(c.lead.id),
        ),
    )


def cause_of(result: GradeResult) -> dict[str, str]:
    """For every item grouped under a cause, the id of that cause's lead (its own id for a
    lead); items that pass, or that the worker could not run, are not in it."""
    return {item.id: cause.lead.id for cause in causes(result) for item in cause.items}


def evidence(message: str) -> str:
    """`message` without its likely mistake: what the item saw, not what it guessed."""
    return message.split(LIKELY, 1)[0]


def likely(message: str) -> str | None:
    """The likely mistake `message` names, or None."""
    parts = message.split(LIKELY, 1)
    return parts[1].strip() if len(parts) == 2 else None


def _by_dependency(
    item: ItemResult,
    failing: dict[str, ItemResult],
    rubric: rubric_data.Rubric,
    seen: frozenset[str],
    root,
) -> tuple[str, Joined] | None:
    """The cause of the first failing item `item` depends on (the earliest lead, in rubric
    order, of its failing dependencies), or None."""
    if item.status == "not_attempted":
        return None
    deps = [d for d in rubric.item(item.id).depends_on if d in failing and d not in seen]
    if not deps:
        return None
    order = [i.id for i in rubric.items]
    leads = [root(d, seen)[0] for d in deps]
    return min(leads, key=order.index), "depends"


def _by_likeness(
    item: ItemResult, earlier: list[ItemResult], lead_of: dict[str, str]
) -> tuple[str, Joined] | None:
    """The cause of an earlier item that failed the same way: a hang, the same exception
    (type and place), the same likely mistake, or not attempted with the same message."""
    for other in earlier:
        if item.status == other.status == "timeout":
            return lead_of[other.id], "hang"
        if (
            item.signature
            and other.signature
            and item.status == other.status == "error"
            and (item.signature[0], item.signature[2]) == (other.signature[0], other.signature[2])
        ):
            return lead_of[other.id], "exception"
        named = likely(item.message)
        if named and item.status == other.status == "fail" and likely(other.message) == named:
            return lead_of[other.id], "mistake"
        if item.status == other.status == "not_attempted" and item.message == other.message:
            return lead_of[other.id], "not-attempted"
    return None
