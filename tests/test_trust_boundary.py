"""Nothing a candidate's file does can fake a pass, crash the tool or hang the grade.

Each hostile file in tests/hostile/ is graded as a candidate would be, the reference solution
it builds on (`kv_cache_base`) carried inside it (the `hostile_file` fixture).
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from tests.grading import grade

pytestmark = pytest.mark.slow  # whole grades: `pytest -m "not slow"` is the quick loop

STARTER = Path(__file__).parent.parent / "starter"
# Seconds a batch of calls (or the import) may take where a file hangs on purpose. Files that do
# not hang keep the default limit: on a loaded machine their correct parts can take seconds, and
# a limit only costs time when something hangs.
FAST = 2.0


def grade_hostile(hostile_file, name: str, **kwargs):
    return grade(hostile_file(name), **kwargs)


def by_id(result) -> dict:
    return {item.id: item for item in result.items}


def test_patching_torch_comparisons_does_not_turn_a_failure_into_a_pass(hostile_file):
    items = by_id(grade_hostile(hostile_file, "patches_comparisons", only={"prefix-equivalence"}))
    assert items["prefix-equivalence"].status == "fail"
    assert "first differs at prefix length" in items["prefix-equivalence"].message


def test_a_lying_tensor_subclass_is_not_accepted_as_output(hostile_file):
    items = by_id(
        grade_hostile(hostile_file, "lying_tensor", only={"attend-shape", "prefix-equivalence"})
    )
    for item in items.values():
        assert item.status == "fail", item
        assert "expected a plain torch.Tensor" in item.message


def test_a_hang_fails_the_items_that_hang_and_the_grade_ends_in_bounded_time(hostile_file):
    start = time.monotonic()
    result = grade_hostile(hostile_file, "hangs_in_attend", timeout=FAST)
    elapsed = time.monotonic() - start
    items = by_id(result)
    assert items["append-time-dim"].status == "pass", "items that never call attend still pass"
    assert items["prefix-equivalence"].status == "timeout"
    # Stopped by its CPU time; on a CI machine too busy to give it 2 s of CPU in 6 s on the
    # clock, by the clock, and the message says it computed all along either way.
    assert re.search(
        r"used 2 s of CPU time without finishing \(a loop that never ends\?\)"
        r"|having used [\d.]+ s of its 2 s of CPU time",
        items["prefix-equivalence"].message,
    ), items["prefix-equivalence"].message
    assert elapsed < 8 * FAST + 15, f"grading a hanging file took {elapsed:.1f} s"
    assert result.exit_code() == 1


def test_a_call_that_waits_forever_is_stopped_on_the_clock_and_the_message_says_it_waited(
    hostile_file,
):
    start = time.monotonic()
    items = by_id(
        grade_hostile(hostile_file, "sleeps_in_attend", timeout=1.0, only={"prefix-equivalence"})
    )
    elapsed = time.monotonic() - start
    assert items["prefix-equivalence"].status == "timeout"
    assert re.search(
        r"did not finish within 3 s, though it used only 0\.\d s of CPU time "
        r"\(waiting for something that never comes\?\)",
        items["prefix-equivalence"].message,
    ), items["prefix-equivalence"].message
    assert elapsed < 3 + 15, f"grading a file that sleeps took {elapsed:.1f} s"


def test_a_hang_at_import_times_out_every_item_under_the_import_limit(hostile_file):
    start = time.monotonic()
    result = grade_hostile(hostile_file, "hangs_at_import", import_timeout=FAST)
    assert time.monotonic() - start < FAST + 15
    assert {i.status for i in result.reported} == {"timeout"}  # L6+ not started
    # Stopped by its CPU time, or on a CI machine too busy to give it 2 s of CPU in 6 s, on the
    # clock; either way the message names the limit and how to raise it.
    assert re.search(
        r"importing the file (used 2 s of CPU time without finishing|did not "
        r"finish within 6 s on the clock)",
        result.unavailable,
    ), result.unavailable
    assert "--import-timeout" in result.unavailable, "the message says how to raise the limit"


def test_exiting_the_process_is_a_graded_error_and_grading_goes_on(hostile_file):
    items = by_id(
        grade_hostile(
            hostile_file,
            "exits_the_process",
            only={"attend-shape", "prefix-equivalence", "append-time-dim"},
        )
    )
    assert items["append-time-dim"].status == "error"
    assert "exited with code 0 before answering" in items["append-time-dim"].message
    assert items["attend-shape"].status == "error"
    assert "SystemExit" in items["attend-shape"].message


def test_a_segfault_is_a_graded_error(hostile_file):
    items = by_id(grade_hostile(hostile_file, "segfaults", only={"attend-shape"}))
    assert items["attend-shape"].status == "error"
    assert "SIGSEGV" in items["attend-shape"].message


def test_noise_on_stdout_and_leftover_children_do_not_disturb_grading(hostile_file):
    result = grade_hostile(
        hostile_file, "spawns_and_prints", only={"prefix-equivalence", "attend-shape"}
    )
    assert [i.status for i in result.items] == ["pass", "pass"], result.items


@pytest.mark.parametrize(
    "name, shows",
    [
        ("syntax_error", "SyntaxError"),
        ("import_error", "ModuleNotFoundError"),
    ],
    ids=["syntax-error", "import-error"],
)
def test_a_file_that_does_not_import_is_an_error_in_every_item(hostile_file, name, shows):
    result = grade_hostile(hostile_file, name)
    assert {i.status for i in result.reported} == {"error"}  # L6+ not started
    assert shows in result.unavailable and "Traceback" not in result.unavailable
    assert all(i.message == "not run: the file does not import" for i in result.reported)
    assert result.exit_code() == 1


def test_missing_names_are_errors_of_the_items_that_need_them(hostile_file):
    items = by_id(
        grade_hostile(hostile_file, "missing_names", only={"append-time-dim", "attend-shape"})
    )
    assert items["append-time-dim"].status == "pass"
    assert items["attend-shape"].status == "error"
    assert "defines no `attend`" in items["attend-shape"].message


def test_the_untouched_starter_is_not_attempted_everywhere():
    result = grade(STARTER / "kv_cache.py", STARTER / "test_kv_cache.py")
    assert {i.status for i in result.items} == {"not_attempted"}, result.items
    assert all("Traceback" not in i.message for i in result.items)
    assert result.level == "below L4" and result.score == 0


def test_a_call_that_kills_the_child_forked_for_the_next_call_costs_nothing(hostile_file):
    items = by_id(
        grade_hostile(
            hostile_file,
            "kills_its_siblings",
            only={"attend-shape", "prefix-equivalence", "ragged-batch"},
        )
    )
    for item in items.values():
        assert item.status == "pass", item
