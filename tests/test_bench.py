"""`kata bench` in a tiny configuration: every figure is there and positive, the JSON holds them
with the machine and the ratios, and a candidate file that fails in any way costs only its own
row. No timing is asserted: speed goals are the bench's to show, not the tests'."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from benchmarks import plot, report
from benchmarks.bench import (
    BUNDLED_IDS,
    BenchResult,
    Measurement,
    Settings,
    SubjectSpec,
    SubjectStatus,
)
from benchmarks.timing import Summary
from cli import app
from graders.dense.mistakes import MISTAKES
from graders.shared.mutation import REFERENCE

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()
TINY = [
    "--lengths",
    "16,40",
    "--dtypes",
    "float32,bfloat16",
    "--shapes",
    "mha,gqa",
    "--warmup",
    "1",
    "--reps",
    "3",
    "--window",
    "8",
]  # a window both lengths wrap
COMPILED = {"fused", "fused-paged", "fused-paged-int8"}  # compiling has a test of its own
WITHOUT_COMPILED = ",".join(i for i in BUNDLED_IDS if i not in COMPILED)


def transformers_installed() -> bool:
    try:
        import transformers  # noqa: F401
    except ImportError:
        return False
    return True


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench")
    result = runner.invoke(
        app,
        [
            "bench",
            *TINY,
            "--subjects",
            WITHOUT_COMPILED,
            "--json",
            str(out / "bench.json"),
            "--plot",
            str(out / "bench.png"),
        ],
    )
    return result, json.loads((out / "bench.json").read_text()), out


@pytest.mark.slow
def test_the_tiny_bench_exits_0_and_prints_a_table_per_shape_and_dtype(tiny_run):
    result, _, _ = tiny_run
    assert result.exit_code == 0, result.output
    for title in ("mha, float32", "mha, bfloat16", "gqa, float32", "gqa, bfloat16"):
        assert title in result.output
    assert "ms per decode step" in result.output


@pytest.mark.slow
def test_every_subject_has_positive_figures_in_every_cell(tiny_run):
    _, report, _ = tiny_run
    statuses = {s["id"]: s["status"] for s in report["subjects"]}
    expected_ok = {i for i in BUNDLED_IDS if i not in COMPILED}
    if not transformers_installed():
        expected_ok -= {"hf-dynamic", "hf-static"}
    assert {i for i, status in statuses.items() if status == "ok"} == expected_ok
    assert len(report["cells"]) == 2 * 2 * 2
    for cell in report["cells"]:
        assert set(cell["results"]) == expected_ok, cell
        assert cell["capacity"] >= cell["length"] + 1 + 3
        for subject, figures in cell["results"].items():
            ms = figures["ms"]
            assert 0 < ms["min"] <= ms["median"] and ms["q1"] <= ms["median"] <= ms["q3"], subject
            assert figures["held_bytes"] > 0, subject


@pytest.mark.slow
def test_ratios_are_each_median_over_the_reference_median(tiny_run):
    _, report, _ = tiny_run
    for cell in report["cells"]:
        results = cell["results"]
        for subject, figures in results.items():
            for key, reference in (
                ("bare", "bare"),
                ("read", "read"),
                ("hf_static", "hf-static"),
                ("bare_window", "bare-window"),
            ):
                ratio = figures["ratios"][key]
                if reference not in results:
                    assert ratio is None
                    continue
                want = figures["ms"]["median"] / results[reference]["ms"]["median"]
                assert ratio == pytest.approx(want), (subject, key)


@pytest.mark.slow
def test_memory_held_follows_the_storage_each_design_keeps(tiny_run):
    _, report, _ = tiny_run
    cell = next(
        c
        for c in report["cells"]
        if (c["shape"], c["dtype"], c["length"]) == ("mha", "float32", 40)
    )
    held = {subject: figures["held_bytes"] for subject, figures in cell["results"].items()}
    slot = 8 * 128 * 4 * 2  # one position of K and V: 8 heads x 128 dims x 4 bytes, twice
    assert held["bare"] == held["read"] == 40 * slot
    assert held["preallocated"] >= cell["capacity"] * slot  # its doubled storage
    assert held["concat"] < cell["capacity"] * slot  # exactly what it has appended, and lengths
    assert held["paged"] >= cell["capacity"] * slot  # its pool, and attend's gather scratch
    assert held["paged-int8"] < held["paged"]  # int8 values and a float32 scale per token


@pytest.mark.slow
def test_the_windowed_step_holds_w_slots_at_every_length_and_shows_in_its_own_table(tiny_run):
    result, report, _ = tiny_run
    assert report["settings"]["window"] == 8
    for cell in report["cells"]:
        window, floor = cell["results"]["window"], cell["results"]["bare-window"]
        # W + t - 1 slots with t = 1: the ring fed a token at a time, at T=16 as at T=40
        assert window["slots_held"] == floor["slots_held"] == 8, cell
    output = " ".join(result.output.split())
    assert "mha, float32: sliding window W=8" in output
    assert f"window W=8 at T=40 on {report['machine']['cpu']}: " in output
    main_rows = output.split("sliding window")[0]
    assert "bare-window" not in main_rows  # the windowed subjects are in their table only


@pytest.mark.slow
def test_the_json_says_what_machine_and_settings_made_the_figures(tiny_run):
    _, report, _ = tiny_run
    assert report["kata_bench"] == 1
    machine = report["machine"]
    assert {"cpu", "logical_cpus", "torch_threads", "torch", "python", "caches"} <= set(machine)
    assert machine["torch_threads"] >= 1 and machine["torch"]
    assert report["settings"]["lengths"] == [16, 40]
    assert report["settings"]["shapes"]["gqa"] == {
        "name": "gqa",
        "batch": 1,
        "q_heads": 32,
        "kv_heads": 8,
        "head_dim": 128,
    }


@pytest.mark.slow
def test_a_png_is_written_when_matplotlib_is_installed(tiny_run):
    pytest.importorskip("matplotlib")
    _, _, out = tiny_run
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_without_a_png_the_plot_is_drawn_in_text():
    lines = plot.terminal({"concat": [(256, 1.0), (1024, 4.0)], "bare": [(256, 0.1), (1024, 0.4)]})
    axis = next(i for i, line in enumerate(lines) if "+---" in line)
    grid, labels, legend = lines[:axis], lines[axis + 1], "\n".join(lines[axis + 2 :])
    assert grid[0].lstrip().startswith("4 ms |") and grid[-1].startswith("0.1 ms |")
    assert [row.count("a") for row in grid].count(1) == 2, "one marker per measured point"
    assert [row.count("b") for row in grid].count(1) == 2
    assert grid[0].endswith("a") and grid[-1].split("|")[1].startswith("b")
    assert "256" in labels and "1024" in labels
    assert "a concat" in legend and "b bare" in legend


def timed(**medians: float) -> BenchResult:
    """A bench of one cell (mha, float32, T=16) whose subjects, in this order, took their
    median in seconds, with quartiles 10% either side (repetitions of 0.9, 1 and 1.1 times it)."""
    specs = [
        SubjectSpec(name, "floor" if name == "bare" else "solution", name, "contract")
        for name in medians
    ]
    result = BenchResult(
        Settings([16], ["float32"], ["mha"], specs),
        subjects={spec.id: SubjectStatus(spec) for spec in specs},
    )
    for name, median in medians.items():
        result.measurements[(0, name)] = Measurement(seconds=[0.9 * median, median, 1.1 * median])
    return result


def window_line(dtype: str, ratio: float) -> tuple[str, BenchResult]:
    """The rendered report of a window bench (T=1024 and 16384) whose windowed step took
    `ratio` times bare attention over W at T=16384, and the bench."""
    specs = [
        SubjectSpec("window", "solution", "window", "windowed"),
        SubjectSpec("bare-window", "floor", "bare-window", "bare-window"),
    ]
    result = BenchResult(
        Settings([1024, 16384], [dtype], ["mha"], specs, window=1024),
        machine={"cpu": "Some CPU"},
        subjects={spec.id: SubjectStatus(spec) for spec in specs},
    )
    slot = 2 * 8 * 128 * 4  # K and V of one position: 8 KV heads x 128 dims x 4 bytes
    for cell, (window, floor) in enumerate([(1.1e-3, 1e-3), (ratio * 1e-3, 1e-3)]):
        result.measurements[(cell, "window")] = Measurement([window] * 3, 1024 * slot + 16)
        result.measurements[(cell, "bare-window")] = Measurement([floor] * 3, 1024 * slot)
    out = io.StringIO()
    report.render(result, Console(file=out, width=200, color_system=None))
    return " ".join(out.getvalue().split()), result


def test_the_window_line_names_the_cpu_the_ratio_to_bare_attention_over_w_and_the_slots():
    text, result = window_line("float32", 1.15)
    assert (
        "window W=1024 at T=16384 on Some CPU: 1.15× bare attention over 1024 positions "
        "(target at most 1.2×: met), 1024 slots held (W + t - 1 = 1024 for single tokens)"
    ) in text
    assert report.slots_held(result, 1, "window") == 1024  # its lengths' bytes rounded away


@pytest.mark.parametrize(
    ("dtype", "ratio", "verdict"),
    [
        ("float32", 1.2, "(target at most 1.2×: met)"),
        ("float32", 1.25, "(target at most 1.2×: missed)"),
        ("bfloat16", 1.5, "(target read in float32: the floor's scores are bfloat16, a cache's"),
    ],
    ids=["at-the-target", "past-it", "low-precision"],
)
def test_the_window_line_judges_the_target_in_float32_only(dtype, ratio, verdict):
    text, _ = window_line(dtype, ratio)
    assert verdict in text


def test_two_times_are_within_the_noise_when_their_quartiles_overlap():
    assert report.within_noise(Summary(1.0, 0.9, 1.1, 0.9), Summary(1.15, 1.05, 1.25, 1.05))
    assert not report.within_noise(Summary(1.0, 0.9, 1.1, 0.9), Summary(1.3, 1.2, 1.4, 1.2))


def test_a_ratio_within_the_noise_of_1x_or_of_its_neighbour_is_marked():
    result = timed(fast=0.5, bare=1.0, near=1.05, slow=3.0, slower=3.2, far=10.0)
    assert report.noisy_ratios(result, 0, list(result.subjects)) == {
        ("near", "bare"),  # its quartiles overlap bare's: 1x as far as the run can tell
        ("slow", "bare"),
        ("slower", "bare"),  # each other's neighbours, 3.0 and 3.2 overlap
    }


@pytest.mark.parametrize(
    "medians, marked",
    [({"preallocated": 1.05, "bare": 1.0}, True), ({"preallocated": 3.0, "bare": 1.0}, False)],
    ids=["within-the-noise", "clear"],
)
def test_the_table_marks_a_noisy_ratio_and_the_legend_says_what_the_mark_means(medians, marked):
    console = Console(width=200, record=True, file=io.StringIO())
    report.render(timed(**medians), console)
    shown = console.export_text()
    row = next(line for line in shown.splitlines() if "preallocated" in line)
    ratio = f"{medians['preallocated'] / medians['bare']:.2f}"
    assert (f"{report.NOISE_MARK}{ratio}" in row) is marked and ratio in row, shown
    assert (report.NOISE_LEGEND in " ".join(shown.split())) is marked, shown


@pytest.mark.slow
def test_the_fused_paths_are_measured_where_torch_compile_works_and_said_unavailable_elsewhere(
    tmp_path,
):
    """fused-paged's float32 graph is compiled by its check; the bench compiles the int8 one. At
    T=40 the steps stay within 3 blocks: one compilation each, not a second for a new width."""
    out = tmp_path / "bench.json"
    measured = ["fused", "fused-paged-int8"]
    result = runner.invoke(
        app,
        [
            "bench",
            "--lengths",
            "40",
            "--dtypes",
            "float32",
            "--shapes",
            "gqa",
            "--warmup",
            "1",
            "--reps",
            "2",
            "--subjects",
            ",".join([*measured, "paged-int8", "read"]),
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "gqa, float32: ms per step against T" in result.output  # no --plot: the text plot
    report = json.loads(out.read_text())
    results = report["cells"][0]["results"]
    for subject in (s for s in report["subjects"] if s["id"] in measured):
        if subject["status"] == "ok":  # its first output was checked against float64 attention
            assert results[subject["id"]]["ms"]["median"] > 0
        else:
            assert subject["status"] == "unavailable" and "torch.compile" in subject["message"]
    if "fused-paged-int8" in results:  # blocks read where they lie: no gather scratch
        assert results["fused-paged-int8"]["held_bytes"] < results["paged-int8"]["held_bytes"] / 2


@pytest.mark.slow
def test_a_failing_candidate_costs_only_its_own_row(tmp_path, hostile_file):
    hostile = (
        "hangs_in_attend",
        "hangs_at_import",
        "segfaults",
        "exits_the_process",
        "import_error",
    )
    for name in hostile:
        hostile_file(name, filename=f"{name}.py")
    no_scale = next(m for m in MISTAKES if m.name == "no-scale")
    (tmp_path / "no_scale.py").write_text(no_scale.source())
    candidates = [tmp_path / f"{name}.py" for name in (*hostile, "no_scale")]
    candidates += [
        ROOT / "tests/implementations/sdpa.py",
        ROOT / "tests/implementations/paged_heap.py",
    ]
    out = tmp_path / "bench.json"
    result = runner.invoke(
        app,
        [
            "bench",
            *map(str, candidates),
            "--lengths",
            "16,24",
            "--dtypes",
            "float32",
            "--shapes",
            "mha",
            "--warmup",
            "1",
            "--reps",
            "2",
            "--subjects",
            "bare",
            "--timeout",
            "3",
            "--json",
            str(out),
        ],
    )
    assert result.exit_code == 1, result.output
    report = json.loads(out.read_text())
    subjects = {s["id"]: s for s in report["subjects"]}
    assert "no answer within 3 s at mha float32 T=16" in subjects["hangs_in_attend"]["message"]
    assert "no answer within 3 s while loading" in subjects["hangs_at_import"]["message"]
    assert "killed the bench process (SIGSEGV)" in subjects["segfaults"]["message"]
    assert subjects["import_error"]["status"] == "failed"
    assert "does not load" in subjects["import_error"]["message"]
    for cell in report["cells"]:
        results = cell["results"]
        assert {"bare", "sdpa", "paged_heap"} <= set(results)  # nothing of theirs was lost
        assert all(results[s]["ms"]["median"] > 0 for s in ("bare", "sdpa", "paged_heap"))
        assert results["exits_the_process"] == {"error": "SystemExit: bye"}
        assert results["no_scale"]["error"].startswith("wrong output")
        assert not {"hangs_in_attend", "hangs_at_import", "segfaults"} & set(results)
    assert "hangs_in_attend: no answer" in result.output


@pytest.mark.slow
def test_in_a_workspace_the_candidates_own_file_is_measured(tmp_path, monkeypatch):
    shutil.copy(REFERENCE, tmp_path / "kv_cache.py")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(
        app,
        [
            "bench",
            "--lengths",
            "16",
            "--dtypes",
            "float32",
            "--shapes",
            "mha",
            "--warmup",
            "1",
            "--reps",
            "2",
            "--subjects",
            "bare",
            "--json",
            "bench.json",
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "bench.json").read_text())
    assert [s["id"] for s in report["subjects"]] == ["bare", "kv_cache"]
    assert report["cells"][0]["results"]["kv_cache"]["ms"]["median"] > 0


@pytest.mark.slow
def test_the_output_stays_readable_in_an_ascii_terminal_without_colour():
    env = dict(os.environ, PYTHONIOENCODING="ascii", NO_COLOR="1")
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "cli.py"),
            "bench",
            "--lengths",
            "16",
            "--dtypes",
            "float32",
            "--shapes",
            "mha",
            "--subjects",
            "preallocated,bare",
            "--warmup",
            "1",
            "--reps",
            "2",
        ],
        capture_output=True,
        env=env,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr.decode()
    text = done.stdout.decode("ascii")  # raises if anything is not ASCII
    assert "x bare" in text and "+-" in text and "\x1b[" not in text


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lengths", "abc"], "--lengths"),
        (["--lengths", "0"], "--lengths"),
        (["--subjects", "nope"], "no subject 'nope'"),
        (["--dtypes", "int8"], "no dtype 'int8'"),
        (["--shapes", "mqa"], "no shape 'mqa'"),
        (["missing.py"], "does not exist"),
    ],
    ids=[
        "lengths-not-numbers",
        "length-zero",
        "unknown-subject",
        "unknown-dtype",
        "unknown-shape",
        "missing-file",
    ],
)
def test_usage_errors_exit_2_with_one_line(args, message):
    result = runner.invoke(app, ["bench", *args])
    assert result.exit_code == 2
    assert message in result.output
