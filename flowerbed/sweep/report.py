"""``flowerbed report FOLDER``: ``report.html`` for a run folder or for a sweep folder.

A run folder (it has ``status.json`` or ``config.json``) gets the run's report
(``flowerbed.report.write_run_report``: finished, failed or interrupted, old runs included).
A sweep folder (it has ``sweep.toml``) gets one page for the sweep: a chosen history column
(``--metric``, default the summary's accuracy column, e.g. ``central_accuracy``; any numeric
column: ``central_auroc``, ``train_loss``, ...) by round, one line per configuration (a grid
point without its seed) with the mean over its completed seeds and a band of ± one sample
standard deviation (ddof 1, as ``summary.md``), the final and best values per configuration
(best: the highest after round 0, the lowest for a loss), and every point with its status and
a link to its run's report. Like the run report it is one self-contained file.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

from ..report import REPORT_FILE, write_run_report
from ..report.markup import Section, absent, esc, img, page, table
from ..report.plots import integer_ticks, png_bytes, pyplot, style
from ..runtime.results import atomic_write
from ..settings import ConfigError
from .folder import SPEC_FILE, load_spec, point_dir, point_state
from .grid import SEED_KEY, SweepSpec
from .summary import (
    NOT_METRICS,
    accuracy_column,
    accuracy_curve,
    after_round_0,
    configurations,
    is_number,
    load_history,
    mean_std,
)


def lower_is_better(metric: str) -> bool:
    return "loss" in metric


def numeric_columns(histories: list[list[dict]]) -> list[str]:
    """Every history column that holds a number in some row (``round`` aside)."""
    columns = {
        key
        for history in histories
        for row in history
        for key, value in row.items()
        if key not in NOT_METRICS and is_number(value)
    }
    return sorted(columns)


def configuration_rows(spec: SweepSpec, sweep_dir: Path, metric: str | None) -> tuple[list, str]:
    """Per configuration: its label, curves of ``metric`` (one per completed seed), runs and
    seeds; and the metric (the summary's accuracy column when None)."""
    groups = configurations(spec, sweep_dir)
    histories = {
        configuration: [load_history(run_dir) for _, run_dir in members if run_dir is not None]
        for configuration, members in groups.items()
    }
    every = [h for hs in histories.values() for h in hs]
    if metric is None:
        metric = accuracy_column(every) or "central_accuracy"
    elif every and metric not in numeric_columns(every):
        raise ConfigError(
            f"--metric {metric!r} is in no run's history; valid choices:"
            f" {', '.join(numeric_columns(every))}"
        )
    rows = []
    for configuration, members in groups.items():
        label = ", ".join(f"{axis}={value}" for axis, value in configuration) or "all points"
        curves = [accuracy_curve(h, metric) for h in histories[configuration]]
        rows.append(
            {
                "label": label,
                "configuration": configuration,
                "curves": [c for c in curves if c],
                "seeds": len(histories[configuration]),
                "runs": len(members),
            }
        )
    return rows, metric


MAX_LINES = 8  # more configurations than this: one panel per value of the first axis


def draw_bands(ax, rows: list[dict], labels: list[str], styles: dict[str, int]) -> None:
    """On ``ax``, per row: the mean over its seeds and ± one sample std as a band."""
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
            ax.fill_between(rounds, mean - std, mean + std, color=line.get_color(), alpha=0.18)
    ax.grid(alpha=0.3)
    integer_ticks(ax)


def band_png(rows: list[dict], metric: str, title: str) -> bytes:
    """One line per configuration; with more than ``MAX_LINES`` and two axes or more, one
    panel per value of the first axis (small multiples sharing the y axis and one legend)."""
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
    rest = [", ".join(f"{a}={v}" for a, v in row["configuration"][1:]) for row in rows]
    styles = {label: i for i, label in enumerate(dict.fromkeys(rest))}
    cols = min(4, len(panels))
    nrows = math.ceil(len(panels) / cols)
    fig, axes = plt.subplots(
        nrows, cols, figsize=(3.2 * cols, 2.6 * nrows + 1.2), sharex=True, sharey=True,
        squeeze=False,
    )  # fmt: skip
    axis_name = rows[0]["configuration"][0][0]
    for ax, (value, members) in zip(axes.flat, panels.items(), strict=False):
        labels = [", ".join(f"{a}={v}" for a, v in r["configuration"][1:]) for r in members]
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


def pair_text(pair) -> str:
    if pair is None:
        return "-"
    mean, std = pair
    return f"{mean:.4f} ± {'-' if std is None else f'{std:.4f}'}"


def write_sweep_report(sweep_dir: Path, metric: str | None = None) -> Path:
    """``report.html`` in ``sweep_dir`` (module docstring); ``metric``: a history column."""
    sweep_dir = Path(sweep_dir)
    spec = load_spec(sweep_dir)
    rows, metric = configuration_rows(spec, sweep_dir, metric)
    sections = []
    axes = [[a.name, ", ".join(a.labels)] for a in spec.axes]
    fixed = [[key, value] for key, value in spec.fixed.items()]
    body = table(["axis", "values"], axes, text_columns=(0, 1))
    body += table(["fixed key", "value"], fixed, text_columns=(0, 1)) if fixed else ""
    body += f"<p>{len(spec.points())} points, {spec.num_clients} clients per run.</p>"
    sections.append(Section("grid", "Grid", body))
    seeds = any(a.name == SEED_KEY for a in spec.axes)
    title = f"{metric} by round: mean" + (" ± sample std over seeds" if seeds else "")
    if any(row["curves"] for row in rows):
        plot = img(band_png(rows, metric, title), f"{metric} by round")
    else:
        plot = absent(f"{metric} in any completed run")
    best_word = "lowest" if lower_is_better(metric) else "highest"
    choose = min if lower_is_better(metric) else max
    table_rows = []
    for row in rows:
        finals = [c[max(c)] for c in row["curves"]]
        bests = [choose(after_round_0(c)) for c in row["curves"]]
        table_rows.append(
            [
                row["label"],
                f"{row['seeds']}/{row['runs']}",
                pair_text(mean_std(finals) if finals else None),
                pair_text(mean_std(bests) if bests else None),
            ]
        )
    body = plot + table(
        ["configuration", "seeds completed", f"final {metric}", f"best ({best_word})"],
        table_rows,
        text_columns=(0, 2, 3),
    )
    body += (
        '<p>Mean ± sample standard deviation over the completed seeds ("-": one seed);'
        " final = the last round; best = the " + best_word + " value after round 0."
        " <code>flowerbed report SWEEP --metric COLUMN</code> draws another history column.</p>"
    )
    sections.append(Section("metric", title, body))
    point_rows = []
    for point in spec.points():
        state = point_state(point_dir(sweep_dir, point))
        link = "-"
        if state.run_dir is not None and (state.run_dir / REPORT_FILE).is_file():
            href = (state.run_dir / REPORT_FILE).relative_to(sweep_dir).as_posix()
            link = f'<a href="{esc(href)}">report</a>'
        point_rows.append((point.name, state.status, state.reason, link))
    lines = ["<table>", "<tr><th class='text'>point</th><th class='text'>status</th>"]
    lines[-1] += "<th class='text'>reason</th><th class='text'>run report</th></tr>"
    for name, status, reason, link in point_rows:
        lines.append(
            f"<tr><td class='text'>{esc(name)}</td><td class='text'>{esc(status)}</td>"
            f"<td class='text'>{esc(reason)}</td><td class='text'>{link}</td></tr>"
        )
    lines.append("</table>")
    sections.append(Section("points", "Points", "\n".join(lines)))
    made = time.strftime("%Y-%m-%d %H:%M")
    text = page(f"Sweep {sweep_dir.name}", f"Sweep folder {sweep_dir}; written {made}.", sections)
    path = sweep_dir / REPORT_FILE
    atomic_write(path, lambda f: f.write(text))
    return path


def main(args: argparse.Namespace) -> int:
    """``flowerbed report FOLDER [--metric COLUMN]``: 0 when written, 2 on bad input."""
    folder = Path(args.folder).expanduser().resolve()
    try:
        if (folder / SPEC_FILE).is_file():
            path = write_sweep_report(folder, args.metric)
        elif (folder / "status.json").is_file() or (folder / "config.json").is_file():
            if args.metric:
                raise ConfigError("--metric is for a sweep folder; a run's report shows them all")
            path = write_run_report(folder)
        else:
            raise ConfigError(
                f"{folder} is neither a run folder (status.json, config.json) nor a sweep"
                f" folder ({SPEC_FILE})"
            )
    except ConfigError as error:
        print(f"flowerbed report: error: {error}", file=sys.stderr)
        return 2
    print(f"written: {path}")
    return 0
