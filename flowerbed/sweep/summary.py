"""A sweep's summary: one row per configuration (a grid point without its seed), averaged
over the seeds that completed.

Per configuration: the final and the best accuracy (mean ± sample standard deviation over
seeds, ddof = 1; a single seed: its value alone), the number of seeds, and the final value of every
other numeric column of the runs' history (``runtime.history``: losses, client accuracies,
bytes, the metrics a strategy adds; wall-clock seconds are in each run's ``timings.csv``).
The accuracy is ``central_accuracy`` (the global model on the held-out test set); a protocol without a global model has the first of
``client_models_test_accuracy_mean``, ``client_accuracy`` and ``client_accuracy_unweighted_mean``
instead, and the row names
the column it used. "Best" is the highest value after round 0 (the initial model).

Written atomically into the sweep folder: ``summary.md``, ``summary.csv`` (mean and std in
columns of their own) and ``accuracy.png`` (accuracy per round: the mean line and a ± std band
per configuration, ``band_png``, which the sweep's report draws too). Unfinished points are
listed under the table. ``terminal_summary`` is the short form ``flowerbed sweep`` prints: the
configuration (the grid keys that vary), seeds, final and best, at most 100 columns wide.
"""

from __future__ import annotations

import json
import math
import statistics
import textwrap
from collections import Counter
from pathlib import Path

import numpy as np

from ..core.results import atomic_write, write_csv
from ..report.plots import integer_ticks, png_bytes, pyplot, style
from .folder import point_dir, point_state
from .grid import SEED_KEY, Point, SweepSpec

ACCURACY_COLUMNS = (
    "central_accuracy",
    "federated_accuracy",
    "client_models_test_accuracy_mean",
    "client_accuracy",
    "client_accuracy_unweighted_mean",
)
NOT_METRICS = {"round"}
TERMINAL_WIDTH = 100  # the terminal summary's lines are at most this long
MAX_LINES = 8  # more configurations than this in a plot: one panel per value of the first axis
MAX_LISTED = 10  # points not completed that the terminal summary names


def load_history(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "history.json").read_text())


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def mean_std(values: list[float]) -> tuple[float, float | None]:
    """Mean and sample standard deviation (None for one value)."""
    return statistics.mean(values), statistics.stdev(values) if len(values) > 1 else None


def accuracy_column(histories: list[list[dict]]) -> str | None:
    """The first accuracy column that every history reports in some row."""
    for column in ACCURACY_COLUMNS:
        if all(any(is_number(row.get(column)) for row in h) for h in histories):
            return column
    return None


def accuracy_curve(history: list[dict], column: str) -> dict[int, float]:
    return {row["round"]: row[column] for row in history if is_number(row.get(column))}


def after_round_0(curve: dict[int, float]) -> list[float]:
    """The values after the initial model's round 0 (all of them if there are none)."""
    return [v for r, v in curve.items() if r >= 1] or list(curve.values())


def configurations(
    spec: SweepSpec, sweep_dir: Path
) -> dict[tuple, list[tuple[Point, Path | None]]]:
    """Points grouped by configuration (grid order), each with its completed run folder."""
    groups: dict[tuple, list[tuple[Point, Path | None]]] = {}
    for point in spec.points():
        state = point_state(point_dir(sweep_dir, point))
        groups.setdefault(point.configuration(), []).append(
            (point, state.run_dir if state.finished else None)
        )
    return groups


def summary_rows(spec: SweepSpec, sweep_dir: Path) -> list[dict]:
    """One row per configuration (module docstring); ``curves`` holds {round: accuracy} per
    seed for the plot."""
    rows = []
    for configuration, members in configurations(spec, sweep_dir).items():
        histories = [load_history(run_dir) for _, run_dir in members if run_dir is not None]
        row: dict = {**dict(configuration), "seeds": len(histories), "runs": len(members)}
        row["configuration"], row["label"] = configuration, configuration_label(configuration)
        column = accuracy_column(histories) if histories else None
        row["accuracy"] = column or ""
        row["curves"] = [accuracy_curve(h, column) for h in histories] if column else []
        if column:
            finals = [curve[max(curve)] for curve in row["curves"]]
            bests = [max(after_round_0(curve)) for curve in row["curves"]]
            row["final"], row["best"] = mean_std(finals), mean_std(bests)
        metrics: dict[str, list[float]] = {}
        for history in histories:
            for key, value in history[-1].items():
                if key not in NOT_METRICS and key != column and is_number(value):
                    metrics.setdefault(key, []).append(float(value))
        row["metrics"] = {key: mean_std(values) for key, values in metrics.items()}
        rows.append(row)
    return rows


def configuration_label(configuration: tuple[tuple[str, str], ...]) -> str:
    return ", ".join(f"{axis}={value}" for axis, value in configuration) or "all points"


def sweep_title(sweep_dir: Path, spec: SweepSpec) -> str:
    """``Sweep demo: strategy × seed``; a folder whose name says sweep is not prefixed again
    (``sweep: strategy × seed``, not ``Sweep sweep``)."""
    name = sweep_dir.name
    head = name if "sweep" in name.lower() else f"Sweep {name}"
    return f"{head}: {' × '.join(a.name for a in spec.axes)}"


def cell(pair: tuple[float, float | None] | None, digits: str = ".4f") -> str:
    """``mean ± std``; a single seed's value alone (its n is in the seeds column); "" for
    none."""
    if pair is None:
        return ""
    mean, std = pair
    return f"{mean:{digits}}" if std is None else f"{mean:{digits}} ± {std:{digits}}"


def metric_names(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(key for row in rows for key in row["metrics"]))


def markdown(spec: SweepSpec, rows: list[dict], unfinished: list[str]) -> str:
    axes = [a.name for a in spec.axes if a.name != SEED_KEY]
    metrics = metric_names(rows)
    header = [*axes, "seeds", "accuracy", "final", "best", *(f"final {m}" for m in metrics)]
    lines = [
        (
            "Mean ± sample std over seeds (one seed: its value alone); final = last round, best ="
            " highest after round 0; other columns: their value in the last round."
        ),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in rows:
        cells = [row[a] for a in axes] + [f"{row['seeds']}/{row['runs']}", row["accuracy"] or "-"]
        cells += [cell(row.get("final")), cell(row.get("best"))]
        cells += [cell(row["metrics"].get(m), ".4g") for m in metrics]
        lines.append("| " + " | ".join(map(str, cells)) + " |")
    if unfinished:
        lines += ["", f"Not completed ({len(unfinished)}): " + "; ".join(unfinished)]
    return "\n".join(lines) + "\n"


def csv_rows(spec: SweepSpec, rows: list[dict]) -> tuple[list[dict], list[str]]:
    axes = [a.name for a in spec.axes if a.name != SEED_KEY]
    metrics = metric_names(rows)
    columns = [*axes, "seeds", "runs", "accuracy"]
    for name in ("final", "best", *metrics):
        columns += [f"{name}_mean", f"{name}_std"]
    out = []
    for row in rows:
        flat = {c: row[c] for c in (*axes, "seeds", "runs", "accuracy")}
        pairs = {"final": row.get("final"), "best": row.get("best"), **row["metrics"]}
        for name, pair in pairs.items():
            flat[f"{name}_mean"], flat[f"{name}_std"] = pair if pair else (None, None)
        out.append(flat)
    return out, columns


def draw_bands(ax, rows: list[dict], labels: list[str], styles: dict[str, int]) -> None:
    """On ``ax``, per row: the mean over its seeds' ``curves`` and ± one sample std as a
    shaded band (none for a single seed)."""
    for row, label in zip(rows, labels, strict=True):
        if not row["curves"]:
            continue
        rounds = sorted(set.intersection(*(set(c) for c in row["curves"])))
        if not rounds:
            continue
        values = np.array([[curve[r] for r in rounds] for curve in row["curves"]])
        mean = values.mean(axis=0)
        (line,) = ax.plot(rounds, mean, label=label, **style(styles[label]))
        if len(values) > 1:
            std = values.std(axis=0, ddof=1)
            ax.fill_between(
                rounds, mean - std, mean + std, color=line.get_color(), alpha=0.22, linewidth=0
            )
    ax.grid(alpha=0.3)
    integer_ticks(ax)


def band_png(rows: list[dict], metric: str, title: str) -> bytes:
    """Per configuration (a row with ``configuration``, ``label`` and ``curves``: {round:
    value} per seed), the mean line and its ± std band; with more than ``MAX_LINES`` and two
    axes or more, one panel per value of the first axis (small multiples sharing the y axis
    and one legend)."""
    plt = pyplot()
    facets = len(rows) > MAX_LINES and all(len(row["configuration"]) >= 2 for row in rows)
    if not facets:
        labels = [row["label"] for row in rows]
        styles = {label: i for i, label in enumerate(labels)}
        fig, ax = plt.subplots(figsize=(8, 4.5))
        draw_bands(ax, rows, labels, styles)
        ax.set_xlabel("round")
        ax.set_ylabel(metric)
        ax.set_title(title, fontsize=10)
        if ax.lines:
            ax.legend(fontsize=7, loc="best")
        fig.tight_layout()
        return png_bytes(fig)
    panels: dict[str, list[dict]] = {}
    for row in rows:
        panels.setdefault(row["configuration"][0][1], []).append(row)
    rest = [configuration_label(row["configuration"][1:]) for row in rows]
    styles = {label: i for i, label in enumerate(dict.fromkeys(rest))}
    cols = min(4, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(
        nrows, cols, figsize=(3.2 * cols, 2.6 * nrows + 1.2), sharex=True, sharey=True,
        squeeze=False,
    )  # fmt: skip
    axis_name = rows[0]["configuration"][0][0]
    for ax, (value, members) in zip(axes.flat, panels.items(), strict=False):
        labels = [configuration_label(r["configuration"][1:]) for r in members]
        draw_bands(ax, members, labels, styles)
        ax.set_title(f"{axis_name}={value}", fontsize=9)
    for i, ax in enumerate(axes.flat):
        if i >= len(panels):
            ax.axis("off")
        elif i + cols >= len(panels):  # nothing below it: its own round axis
            ax.set_xlabel("round")
            ax.xaxis.set_tick_params(labelbottom=True)
    for ax in axes[:, 0]:
        ax.set_ylabel(metric)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), fontsize=7)
    fig.suptitle(title, fontsize=10)
    legend_rows = math.ceil(len(labels) / min(4, max(len(labels), 1)))
    fig.tight_layout(rect=(0, 0.02 + 0.03 * legend_rows, 1, 1))
    return png_bytes(fig)


def unfinished_points(spec: SweepSpec, sweep_dir: Path) -> list[str]:
    """``name (status: reason)`` for every point not completed, in grid order."""
    unfinished = []
    for point in spec.points():
        state = point_state(point_dir(sweep_dir, point))
        if not state.finished:
            unfinished.append(
                f"{point.name} ({state.status}{': ' + state.reason if state.reason else ''})"
            )
    return unfinished


def clipped(text: str, width: int, middle: bool = False) -> str:
    """``text`` in at most ``width`` characters: its end (or ``middle``) cut for "…"."""
    if len(text) <= width:
        return text
    head = (width - 1) // 2 if middle else width - 1
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def terminal_summary(
    sweep_dir: Path,
    spec: SweepSpec,
    rows: list[dict],
    unfinished: list[str],
    width: int = TERMINAL_WIDTH,
) -> str:
    """The summary for a terminal, every line at most ``width`` characters: one row per
    configuration (named by the grid keys that vary; a long name is clipped), the seeds
    completed of those asked, final and best accuracy; the points not completed below.
    ``summary.md`` and ``summary.csv`` keep every column."""
    varying = [a.name for a in spec.axes if a.name != SEED_KEY and len(a.labels) > 1]
    counts = Counter(row["accuracy"] for row in rows if row["accuracy"])
    columns = [column for column, _ in counts.most_common()] or ["accuracy"]
    marks = {column: "*†‡§"[:i] for i, column in enumerate(columns)}  # the main one: none
    table = [["configuration", "seeds", "final", "best"]]
    for row in rows:
        table.append(
            [
                ", ".join(f"{a}={row[a]}" for a in varying) or "all points",
                f"{row['seeds']}/{row['runs']}{marks.get(row['accuracy'], '')}",
                cell(row.get("final")) or "-",
                cell(row.get("best")) or "-",
            ]
        )
    widths = [max(len(r[i]) for r in table) for i in range(1, 4)]
    first = min(max(len(r[0]) for r in table), max(width - sum(widths) - 2 * 3, 12))
    done = sum(r["seeds"] for r in rows)
    notes = [
        f"{sweep_title(sweep_dir, spec)}; {len(spec.points())} points, {done} completed.",
        f"{columns[0]}: mean ± sample std over the seeds completed (one seed: its value alone).",
        "final = the last round; best = the highest after round 0.",
        *(f"{marks[c]} {c} instead (no global model)." for c in columns[1:]),
    ]
    lines = [line for note in notes for line in textwrap.wrap(note, width)] + [""]
    for r in table:
        cells = [clipped(r[0], first, middle=True).ljust(first)]
        cells += [text.ljust(w) for text, w in zip(r[1:], widths)]
        lines.append("  ".join(cells).rstrip())
    if unfinished:
        lines += ["", f"Not completed ({len(unfinished)}):"]
        lines += [clipped(f"  {text}", width) for text in unfinished[:MAX_LISTED]]
        if len(unfinished) > MAX_LISTED:
            lines.append(f"  ... and {len(unfinished) - MAX_LISTED} more (summary.md lists all)")
    return "\n".join(lines) + "\n"


def write_summary(
    sweep_dir: Path, spec: SweepSpec, drawn: tuple[str, bytes] | None = None
) -> list[dict]:
    """``summary.md``, ``summary.csv`` and ``accuracy.png`` in ``sweep_dir``; the rows.
    ``drawn``: (a history column, its plot) drawn already (the report's), which is
    ``accuracy.png`` when every configuration's accuracy is that column (a plot costs more
    than all the rest)."""
    rows = summary_rows(spec, sweep_dir)
    text = markdown(spec, rows, unfinished_points(spec, sweep_dir))
    atomic_write(sweep_dir / "summary.md", lambda f: f.write(text))
    flat, columns = csv_rows(spec, rows)
    write_csv(sweep_dir / "summary.csv", flat, columns)
    accuracy = sorted({row["accuracy"] for row in rows if row["accuracy"]})
    if drawn is not None and accuracy == [drawn[0]]:
        png = drawn[1]
    else:
        png = band_png(rows, " / ".join(accuracy) or "accuracy", "mean ± std over seeds")
    atomic_write(sweep_dir / "accuracy.png", lambda f: f.write(png), binary=True)
    return rows
