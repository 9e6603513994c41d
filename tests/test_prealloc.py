"""prealloc (graders/dense/items/prealloc.py): what its criteria decide on measured appends, and what
its messages say.

The judging is tested on the numbers the worker would report for a design (bytes each append
allocated, bytes held after it), computed here from the design's capacities; the measurement
itself on real files, graded (slow).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from graders.dense.items import prealloc
from graders.dense.items.prealloc import LONG, SHORT, SINGLE, Measured, Run
from tests.grading import grade
from graders.shared.plans import Fail
from tests.wrong import everything

ROOT = Path(__file__).resolve().parent.parent


def _designed(run: Run, grow, rows: int = 1, square: bool = False) -> Measured:
    """What a cache whose capacity goes from `c` to `grow(c, positions)` at each append measures:
    a new K+V storage of `rows` x the batch at each growth, plus (`square`) a bool [capacity,
    capacity] mask; every append also copies its new positions once."""
    row_bytes = run.position_bytes * rows  # K+V of one slot, all rows provisioned
    allocated, held, shapes, capacity = [], [], {}, 0
    for i in range(run.appends):
        grown = grow(capacity, (i + 1) * run.t)
        new = run.t * run.position_bytes
        if grown != capacity:
            new += grown * row_bytes + (grown * grown if square else 0)
            shapes[("float32", (run.B * rows, run.Hkv, grown, run.D))] = grown * row_bytes // 2
            if square:
                shapes[("bool", (grown, grown))] = grown * grown
        capacity = grown
        allocated.append(new)
        held.append(capacity * row_bytes + (capacity * capacity if square else 0))
    largest = sorted(
        (
            (dtype, list(shape), 2 if dtype == "float32" else 1, each)
            for (dtype, shape), each in shapes.items()
        ),
        key=lambda g: -g[3],
    )
    state = {"lengths": torch.full((run.B,), run.positions)}
    return Measured(run, str(run), allocated, held, [list(g) for g in largest[:2]], state)


def doubling(capacity: int, needed: int) -> int:
    return capacity if needed <= capacity else 1 << (needed - 1).bit_length()


def plus_1024(capacity: int, needed: int) -> int:  # the next multiple of 1024 past what it needs
    return capacity if needed <= capacity else 1024 * -(-(needed + 1024) // 1024)


def one_buffer_then_doubling(capacity: int, needed: int) -> int:
    return max(2048, doubling(capacity, needed))


@pytest.mark.parametrize("run", [SINGLE, SHORT, LONG], ids=["single", "short", "long"])
def test_doubling_passes_every_run_with_one_reallocation_in_the_last_half(run):
    measured = _designed(run, doubling)
    prealloc._judge(measured)
    assert len(measured.events) == 1 and 2.9 < measured.ratio < 3.1  # 2x storage, 1x writes


def test_an_overprovisioned_buffer_passes_and_is_said_to_reallocate_zero_times():
    measured = _designed(SINGLE, one_buffer_then_doubling, rows=16)  # 32 rows for a batch of 2
    prealloc._judge(measured)
    said = prealloc._said(measured)
    assert "0 reallocations in the last 128 appends (positions 129 to 256)" in said, said
    assert "allocated 1.0x the 128 MiB the cache holds at the end" in said, said


def test_a_constant_step_of_1024_passes_the_short_runs_and_fails_the_long_one_with_its_count():
    for run in (SINGLE, SHORT):
        prealloc._judge(_designed(run, plus_1024))
    with pytest.raises(Fail) as failed:
        prealloc._judge(_designed(LONG, plus_1024))
    message = str(failed.value)
    assert message.startswith(
        f"{LONG}: 8 reallocations in the last 32 appends (positions 16385 "
        "to 32768); all appends allocated "
    ), message
    assert "at most 4 times in the last half" in message
    assert "the largest allocations: 2 x float32 [1, 2, 32768, 16] (4 MiB each)" in message


def test_a_capacity_squared_mask_fails_on_storage_per_position_and_is_named():
    measured = _designed(SHORT, doubling, square=True)
    assert len(measured.events) == 1 and measured.ratio < prealloc.MAX_RATIO  # only held grows
    with pytest.raises(Fail) as failed:
        prealloc._judge(measured)
    message = str(failed.value)
    assert (
        "grew 8.5x from 256 to 4096 positions (512 bytes to 4.25 KiB a position), at most 4x"
        in message
    ), message
    assert "the largest allocations: 1 x bool [4096, 4096] (16 MiB each)" in message


def test_a_reallocation_is_an_append_allocating_a_quarter_of_the_kv_held():
    run = Run(appends=16, t=1, B=1, Hkv=1, D=1)  # 8 bytes of K+V a position
    quarter = [(i + 1) * 8 // 4 for i in range(16)]  # exactly 1/4 of the K+V after append i
    measured = Measured(
        run, "run", [q - (i == 12) for i, q in enumerate(quarter)], [0] * 16, [], {}
    )
    assert measured.events == [8, 9, 10, 11, 13, 14, 15]  # the last half, but append 12


def test_held_counts_at_least_the_kv_of_the_positions():
    run = Run(appends=32, t=4, B=1, Hkv=1, D=2)  # 16 bytes a position
    measured = Measured(run, "run", [64] * 32, [0] * 32, [], {})  # storage made elsewhere
    assert measured.kept(31) == 128 * 16 and measured.ratio == 1.0
    assert measured.per_position == (16.0, 16.0)


@pytest.fixture(scope="module")
def messages(tmp_path_factory) -> dict[str, str]:
    """The prealloc message of real files, public and hidden cases."""
    folder = tmp_path_factory.mktemp("prealloc")
    wrongs = {w.name: w for w in everything()}
    files = {"max_batch": ROOT / "tests" / "implementations" / "max_batch.py"}
    for name in ("grows-by-1024-slots", "rebuilds-causal-mask"):
        (folder / name).mkdir()
        files[name] = wrongs[name].write(folder / name)
    return {
        name: grade(path, hidden=True, only={"prealloc"}).items[0].message
        for name, path in files.items()
    }


@pytest.mark.slow
def test_an_overprovisioned_buffer_passes_and_its_message_says_what_it_holds(messages):
    message = messages["max_batch"]
    assert message.startswith(
        f"{SINGLE}: 0 reallocations in the last 128 appends (positions "
        "129 to 256); all appends allocated 1.0x the 128 MiB the cache "
        "holds at the end;"
    ), message
    assert "hidden case: " in message


@pytest.mark.slow
def test_a_constant_step_fails_the_long_run_with_its_reallocations_and_their_shapes(messages):
    message = messages["grows-by-1024-slots"]
    assert message.startswith(
        f"{LONG}: 8 reallocations in the last 32 appends (positions 16385 "
        "to 32768); all appends allocated 9.7x the 8 MiB the cache holds "
        "at the end"
    ), message
    assert "the largest allocations: 2 x float32 [1, 2, 32768, 16] (4 MiB each)" in message


@pytest.mark.slow
def test_a_capacity_squared_mask_fails_the_short_run_and_is_named(messages):
    message = messages["rebuilds-causal-mask"]
    assert message.startswith(f"{SHORT}: "), message
    assert "the largest allocations: 2 x bool [4096, 4096] (16 MiB each)" in message
    assert "grew 8.5x from 256 to 4096 positions (512 bytes to 4.25 KiB a position)" in message
