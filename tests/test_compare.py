"""graders.shared.compare: what counts as close, where outputs first part, and the messages it gives."""

from __future__ import annotations

import pytest
import torch

from graders.shared.compare import (
    TOLERANCE,
    Tolerance,
    close,
    first_divergence,
    require_close,
    require_shape,
)
from graders.shared.plans import Fail

TOL = Tolerance(atol=1e-3, rtol=1e-2)


def outputs(steps: int = 3, shape=(2, 4, 1, 8), seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=torch.float64) for _ in range(steps)]


def test_close_is_atol_plus_rtol_times_the_expected_value():
    expected = torch.tensor([0.0, 1.0, -100.0], dtype=torch.float64)
    bound = TOL.atol + TOL.rtol * expected.abs()
    assert close(expected + 0.99 * bound, expected, TOL).all()
    assert not close(expected + 1.01 * bound, expected, TOL).any()


def test_an_error_exactly_at_the_bound_is_close():
    tol = Tolerance(atol=2.0**-10, rtol=2.0**-7)  # powers of two: every sum below is exact
    expected = torch.tensor([0.0, 4.0, -8.0], dtype=torch.float64)
    bound = tol.atol + tol.rtol * expected.abs()
    assert close(expected + bound, expected, tol).all()
    assert close(expected - bound, expected, tol).all()


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_nan_and_inf_are_never_close_even_to_themselves(bad):
    value = torch.tensor([bad])
    assert not close(value, value, TOL).any()


def test_every_cache_dtype_has_a_tolerance_no_tighter_than_float32s():
    assert set(TOLERANCE) == {torch.float32, torch.float64, torch.bfloat16, torch.float16}
    assert all(t.atol >= TOLERANCE[torch.float32].atol for t in TOLERANCE.values())


def test_no_divergence_when_every_step_is_within_tolerance():
    expected = outputs()
    assert first_divergence([e + 1e-5 for e in expected], expected, TOL) is None


def test_the_first_divergence_names_step_row_head_and_errors():
    expected = outputs()
    got = [e.clone() for e in expected]
    got[1][1, 2, 0, 5] += 0.5
    got[2][0, 0, 0, 0] += 9.0  # a later, larger error is not the first
    found = first_divergence(got, expected, TOL)
    assert (found.step, found.row, found.head, found.position) == (1, 1, 2, -1)
    assert found.max_abs == pytest.approx(0.5)
    assert found.max_rel == pytest.approx(0.5 / abs(float(expected[1][1, 2, 0, 5])))


def test_a_divergence_over_many_positions_names_the_position():
    expected = outputs(1, shape=(1, 1, 6, 4))
    got = [expected[0].clone()]
    got[0][0, 0, 4, 1] = float("nan")
    found = first_divergence(got, expected, TOL)
    assert found.position == 4 and found.max_abs == float("inf")
    assert "position 4" in found.describe() and "row 0, head 0" in found.describe()


def test_require_close_fails_with_the_case_the_place_and_the_tolerance():
    expected = outputs()
    got = [e.clone() for e in expected]
    got[2][0, 1, 0, 0] += 1.0
    with pytest.raises(Fail) as failure:
        require_close(got, expected, TOL, case="B=2, MHA", step_name="prefix length", first_step=1)
    message = str(failure.value)
    assert message.startswith("B=2, MHA: first differs at prefix length 3, row 0, head 1")
    assert str(TOL) in message and "Likely mistake" not in message


def test_require_close_names_the_likely_mistake_whose_outputs_match():
    expected = outputs()
    unscaled = [e * 2.0 for e in expected]
    with pytest.raises(Fail, match=r"Likely mistake: no 1/sqrt\(D\) scale$"):
        require_close(
            unscaled,
            expected,
            TOL,
            case="c",
            likely={"values are keys": [e * 3.0 for e in expected], "no 1/sqrt(D) scale": unscaled},
        )
    require_close(expected, expected, TOL, case="c", likely={"anything": unscaled})


def test_a_non_finite_output_where_the_reference_is_finite_is_said_in_words():
    expected = outputs()
    got = [e.clone() for e in expected]
    got[1][0, 3, 0, 2] += 0.5  # a finite error first in the step...
    got[1][1, 2, 0, 5] = float("nan")  # ...but the NaN is where the step is reported
    found = first_divergence(got, expected, TOL)
    assert (found.step, found.row, found.head, found.nonfinite) == (1, 1, 2, "NaN")
    with pytest.raises(Fail) as failure:
        require_close(got, expected, TOL, case="ragged rows", likely={"anything": got})
    message = str(failure.value)
    assert message == (
        "ragged rows: non-finite output (NaN) where the float64 reference is "
        "finite, first at step 1, row 1, head 2: uninitialized or stale cache "
        "slots likely reached attention (e.g. a row read past its length: a "
        "masked slot gets weight 0, and 0 * NaN = NaN)"
    )
    with pytest.raises(Fail, match=r"head 2: the scores overflowed$"):
        require_close(got, expected, TOL, case="c", nonfinite_cause="the scores overflowed")


def test_a_reference_that_is_not_finite_itself_is_no_non_finite_output():
    expected = outputs(1)
    expected[0][0, 0, 0, 0] = float("inf")
    found = first_divergence([expected[0].clone()], expected, TOL)
    assert found.nonfinite is None
    assert found.error(TOL).startswith("max abs error") and found.error(TOL).endswith(str(TOL))


def test_require_shape_fails_a_wrong_shape_naming_both_and_passes_the_right_one():
    out = torch.zeros(2, 4, 8)  # the time dimension missing
    with pytest.raises(Fail) as failure:
        require_shape(out, (2, 4, 1, 8), "attend's output", ": did attend squeeze dim 2?")
    message = str(failure.value)
    assert message.startswith("attend's output") and message.endswith("squeeze dim 2?")
    assert "[2, 4, 8]" in message and "[2, 4, 1, 8]" in message
    with pytest.raises(Fail):  # as many elements, in another order
        require_shape(torch.zeros(2, 1, 4, 8), (2, 4, 1, 8), "attend's output")
    require_shape(torch.zeros(2, 4, 1, 8), [2, 4, 1, 8], "attend's output")
    require_shape(torch.zeros(2, 4, 1, 8), torch.Size([2, 4, 1, 8]), "attend's output")


def test_a_divergence_at_position_0_names_position_0_and_step_0_by_default():
    expected = outputs(1, shape=(1, 2, 2, 4))  # two positions: the fewest that are named
    got = [expected[0].clone()]
    got[0][0, 1, 0, 3] += 1.0
    found = first_divergence(got, expected, TOL)
    assert (found.step, found.head, found.position) == (0, 1, 0)
    assert found.describe().startswith("first differs at step 0, row 0, head 1, position 0: ")
