"""A sweep's summary: one row per configuration (a grid point without its seed), averaged
over the seeds that completed.

Per configuration: the final and the best accuracy (mean ± sample standard deviation over
seeds, ddof = 1; "-" for a single seed), the number of seeds, and the final value of every
other numeric column of the runs' history (``runtime.history``: losses, client accuracies,
bytes, the metrics a strategy adds; wall-clock seconds are in each run's ``timings.csv``).
The accuracy is ``central_accuracy`` (the global model on the held-out test set); a protocol without a global model has the first of
``client_models_test_accuracy_mean``, ``client_accuracy`` and ``client_accuracy_unweighted_mean``
instead, and the row names
the column it used. "Best" is the highest value after round 0 (the initial model).

Written atomically into the sweep folder: ``summary.md``, ``summary.csv`` (mean and std in
columns of their own) and ``accuracy.png`` (accuracy per round: the mean line and a ± std band
per configuration). Unfinished points are listed under the table.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np

from ..runtime.results import atomic_write, write_csv
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


def cell(pair: tuple[float, float | None] | None, digits: str = ".4f") -> str:
    if pair is None:
        return ""
    mean, std = pair
    return f"{mean:{digits}} ± {'-' if std is None else format(std, digits)}"


def metric_names(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(key for row in rows for key in row["metrics"]))


def markdown(spec: SweepSpec, rows: list[dict], unfinished: list[str]) -> str:
    axes = [a.name for a in spec.axes if a.name != SEED_KEY]
    metrics = metric_names(rows)
    header = [*axes, "seeds", "accuracy", "final", "best", *(f"final {m}" for m in metrics)]
    lines = [
        (
            'Mean ± sample std over seeds ("-": one seed); final = last round, best = highest'
            " after round 0; other columns: their value in the last round."
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


def plot(path: Path, spec: SweepSpec, rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    axes = [a.name for a in spec.axes if a.name != SEED_KEY]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for row in rows:
        if not row["curves"]:
            continue
        rounds = sorted(set.intersection(*(set(c) for c in row["curves"])))
        values = np.array([[curve[r] for r in rounds] for curve in row["curves"]])
        mean = values.mean(axis=0)
        label = ", ".join(f"{a}={row[a]}" for a in axes) or "all"
        (line,) = ax.plot(rounds, mean, marker="o", markersize=3, label=label)
        if len(values) > 1:
            std = values.std(axis=0, ddof=1)
            ax.fill_between(rounds, mean - std, mean + std, color=line.get_color(), alpha=0.2)
    columns = sorted({row["accuracy"] for row in rows if row["accuracy"]})
    ax.set_xlabel("round")
    ax.set_ylabel(" / ".join(columns) or "accuracy")
    ax.set_title("mean ± std over seeds")
    ax.grid(alpha=0.3)
    if ax.lines:
        ax.legend(fontsize=7)
    fig.tight_layout()
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=100), binary=True)
    plt.close(fig)


def write_summary(sweep_dir: Path, spec: SweepSpec) -> list[dict]:
    """``summary.md``, ``summary.csv`` and ``accuracy.png`` in ``sweep_dir``; the rows."""
    rows = summary_rows(spec, sweep_dir)
    unfinished = []
    for point in spec.points():
        state = point_state(point_dir(sweep_dir, point))
        if not state.finished:
            unfinished.append(
                f"{point.name} ({state.status}{': ' + state.reason if state.reason else ''})"
            )
    text = markdown(spec, rows, unfinished)
    atomic_write(sweep_dir / "summary.md", lambda f: f.write(text))
    flat, columns = csv_rows(spec, rows)
    write_csv(sweep_dir / "summary.csv", flat, columns)
    plot(sweep_dir / "accuracy.png", spec, rows)
    return rows
