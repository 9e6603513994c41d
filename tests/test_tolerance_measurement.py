"""`python -m graders.shared.tolerances`, how the tolerances were chosen: it measures the items' own
public cases, prints a row for every case and style, and its figures are the errors it names
(recomputed here for the reference solution); correct styles sit well inside every tolerance,
and the mistake it shows fails only where the docstring says. Run on the public seeds alone."""

from __future__ import annotations

import pytest
import torch

from graders.dense.items import gqa, low_precision, prefix_equivalence
from graders.shared import tolerances
from tests.test_tolerances import _decoded, _expected


def test_the_measurement_draws_the_items_own_public_cases():
    items_cases = {0: prefix_equivalence._public_cases()[0].seq}
    items_cases.update(
        {seed: case.seq for (*_, seed), case in zip(gqa.PUBLIC, gqa._public_cases())}
    )
    for name, *_, seed in tolerances.SHAPES:
        measured = next(
            seqs[0] for case, _, seqs in tolerances._cases(torch.float32) if case == name
        )
        assert all(torch.equal(measured[n], items_cases[seed][n]) for n in "qkv"), name
    for dtype in tolerances.LOW_PRECISION:
        drawn = {case: seqs[0] for case, _, seqs in tolerances._cases(dtype)}
        for kind in ("ordinary", "large logits"):
            item = low_precision._case_inputs()[dtype, kind]
            measured = drawn[f"low-precision {kind}"]
            assert all(torch.equal(measured[n], item[n]) for n in "qkv"), (dtype, kind)


@pytest.fixture(scope="module")
def table() -> dict[tuple[str, str, str], list[float]]:
    """`python -m graders.shared.tolerances` on the public seeds alone: (dtype, case, style) -> its
    figures (max abs, eps units, share of the tolerance; or the float32-softmax reference's
    max abs)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tolerances, "EXTRA_SEEDS", 0)
        lines = []
        patch.setattr("builtins.print", lambda line: lines.append(line))
        tolerances.main()
    assert lines[0].split()[:3] == ["dtype", "case", "style"]
    return {
        (line[:9].strip(), line[10:37].strip(), line[38:71].strip()): [
            float(x) for x in line[72:].split()
        ]
        for line in lines[1:]
    }


def test_the_measurement_prints_a_row_for_every_case_and_style(table):
    styles = {
        "reference solution",
        "concat baseline",
        "float32 product",
        "sdpa",
        "MISTAKE softmax in cache dtype",
        "MISTAKE the same, q scaled first",
        "float32-softmax reference",
    }
    low = {"low-precision ordinary", "low-precision large logits"}
    for dtype in ("float32", "float64", "bfloat16", "float16"):
        want = {name for name, *_ in tolerances.SHAPES} | (low if "16" in dtype else set())
        assert {case for d, case, _ in table if d == dtype} == want, dtype
        for case in want:
            assert {style for d, c, style in table if (d, c) == (dtype, case)} == styles


@pytest.mark.parametrize(
    "dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16], ids=str
)
def test_the_measured_figures_of_the_reference_solution_are_its_errors(table, dtype):
    """The printed max abs, eps units and share, recomputed here from the solution's outputs."""
    eps = torch.finfo(dtype if dtype in tolerances.LOW_PRECISION else torch.float32).eps
    for case, tol, seqs in tolerances._cases(dtype):
        seq, T = seqs[0], seqs[0]["k"].shape[2]
        errors = [
            (got.double() - e).abs()
            for got, e in zip(_decoded(seq, (1,) * T), _expected(seq, (1,) * T))
        ]
        expected = _expected(seq, (1,) * T)
        abs_err = max(float(err.max()) for err in errors)
        units = max(float((err / (eps * (1 + e.abs()))).max()) for err, e in zip(errors, expected))
        share = max(
            float((err / (tol.atol + tol.rtol * e.abs())).max()) for err, e in zip(errors, expected)
        )
        printed = table[str(dtype)[6:], case, "reference solution"]
        assert printed[0] == pytest.approx(abs_err, rel=0.06), case
        assert printed[1] == pytest.approx(units, abs=0.006), case
        assert printed[2] == pytest.approx(share, abs=6e-4), case


def test_correct_styles_sit_well_inside_and_the_mistake_fails_only_at_large_logits(table):
    for (dtype, case, style), figures in table.items():
        if style == "float32-softmax reference":
            # within a few float32 roundings, but itself off at logits near 20000
            assert (figures[0] > 1e-4) == (case == "low-precision large logits"), (dtype, case)
            assert figures[0] < (1e-2 if "large" in case else 1e-6), (dtype, case)
        elif style.startswith("MISTAKE") and case == "low-precision large logits":
            assert figures[2] > 10, (dtype, style)
        elif style.startswith("MISTAKE") and "16" in dtype:
            assert 0.1 < figures[2] < 1, (dtype, case, style)  # not detectable: not claimed
        else:
            assert figures[2] < 0.25, f"{style} uses {figures[2]} of {dtype}'s {case} tolerance"


def test_each_case_is_measured_on_its_public_seed_and_extra_seeds_more_all_distinct(monkeypatch):
    monkeypatch.setattr(tolerances, "EXTRA_SEEDS", 2)
    for dtype in tolerances.DTYPES:
        for case, _, seqs in tolerances._cases(dtype):
            assert len(seqs) == 3, (dtype, case)
            keys = [seq["k"] for seq in seqs]
            assert not any(torch.equal(a, b) for i, a in enumerate(keys) for b in keys[i + 1 :]), (
                f"{dtype}, {case}: two seeds draw the same case"
            )
