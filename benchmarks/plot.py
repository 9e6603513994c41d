"""ms per step against cache length, log-log: a PNG through matplotlib when it is installed (the
`bench` extra), else a plot drawn in text for the terminal."""

from __future__ import annotations

import math
from pathlib import Path

from benchmarks.bench import BenchResult

Series = dict[str, list[tuple[int, float]]]  # subject -> [(length, ms per step)]
MARKERS = "abcdefghijklmnopqrstuvwxyz"


def series(result: BenchResult) -> dict[tuple[str, str], Series]:
    """(shape, dtype) -> each subject's measured (length, median ms), in length order."""
    groups: dict[tuple[str, str], Series] = {}
    for index, cell in enumerate(result.settings.cells):
        group = groups.setdefault((cell.shape, cell.dtype), {})
        for subject in result.subjects:
            summary = result.at(index, subject)
            if summary:
                group.setdefault(subject, []).append((cell.length, summary.median * 1e3))
    return groups


def save_png(result: BenchResult, path: Path) -> None:
    """One log-log panel per shape and dtype. ImportError when matplotlib is not installed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = series(result)
    kinds = {subject: status.spec.kind for subject, status in result.subjects.items()}
    styles = {"floor": "--", "peer": ":"}
    shapes, dtypes = result.settings.shapes, result.settings.dtypes
    fig, axes = plt.subplots(
        len(shapes),
        len(dtypes),
        squeeze=False,
        sharex=True,
        figsize=(5.5 * len(dtypes), 4 * len(shapes)),
    )
    for (shape, dtype), group in groups.items():
        ax = axes[shapes.index(shape)][dtypes.index(dtype)]
        for subject, points in group.items():
            lengths, ms = zip(*points)
            ax.plot(
                lengths,
                ms,
                styles.get(kinds[subject], "-"),
                marker="o",
                markersize=3,
                label=subject,
            )
        ax.set(
            xscale="log",
            yscale="log",
            title=f"{shape}, {dtype}",
            xlabel="cache length T",
            ylabel="ms per decode step",
        )
        ax.grid(True, which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 5), fontsize="small")
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def terminal(group: Series, width: int = 60, height: int = 12) -> list[str]:
    """A log-log plot of one shape and dtype in text: each subject a letter, a legend below."""
    points = [(length, ms) for values in group.values() for length, ms in values]
    if not points:
        return []
    x_lo, x_hi = _log_range(p[0] for p in points)
    y_lo, y_hi = _log_range(p[1] for p in points)

    def column(length: int) -> int:
        return round((math.log(length) - x_lo) / (x_hi - x_lo) * (width - 1))

    grid = [[" "] * width for _ in range(height)]
    for marker, values in zip(MARKERS, group.values()):
        for length, ms in values:
            row = height - 1 - round((math.log(ms) - y_lo) / (y_hi - y_lo) * (height - 1))
            cell = grid[row][column(length)]
            grid[row][column(length)] = marker if cell in (" ", marker) else "*"
    top, bottom = f"{math.exp(y_hi):.3g} ms", f"{math.exp(y_lo):.3g} ms"
    pad = max(len(top), len(bottom))
    labels = {0: top, height - 1: bottom}
    lines = [labels.get(i, "").rjust(pad) + " |" + "".join(row) for i, row in enumerate(grid)]
    lines.append(" " * pad + " +" + "-" * width)
    axis = [" "] * (width + 6)
    for length in sorted({p[0] for p in points}):
        label = str(length)
        start = min(column(length), width - len(label))
        if set(axis[max(start - 1, 0) : start + len(label) + 1]) == {" "}:  # no overlap
            axis[start : start + len(label)] = label
    lines.append(" " * (pad + 2) + "".join(axis).rstrip() + "  T")
    legend = [f"{marker} {subject}" for marker, subject in zip(MARKERS, group)] + ["* several"]
    line = ""
    for entry in legend:
        if line and len(line) + 2 + len(entry) > width:
            lines.append(" " * (pad + 2) + line)
            line = ""
        line = f"{line}  {entry}" if line else entry
    lines.append(" " * (pad + 2) + line)
    return lines


def _log_range(values) -> tuple[float, float]:
    logs = [math.log(v) for v in values]
    lo, hi = min(logs), max(logs)
    return (lo - 0.5, hi + 0.5) if hi - lo < 1e-9 else (lo, hi)
