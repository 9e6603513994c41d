"""`python -m graders.tolerances` is how the tolerances were chosen; it must keep running."""

from __future__ import annotations

from graders import tolerances


def test_the_tolerance_measurement_runs_and_correct_code_sits_well_inside(monkeypatch, capsys):
    monkeypatch.setattr(tolerances, "EXTRA_SEEDS", 1)
    tolerances.main()
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    shares = [float(row[-1]) for row in rows if "solution" in row and "reference" in row]
    assert shares and max(shares) < 0.5, f"correct code uses {max(shares):.2f} of a tolerance"
