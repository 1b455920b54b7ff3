"""``flowerbed report FOLDER``: ``report.html`` for a run folder or for a sweep folder.

A run folder (it has ``status.json`` or ``config.json``) gets the run's report
(``flowerbed.report.write_run_report``: finished, failed or interrupted, old runs included).
A sweep folder (it has ``sweep.toml``) gets one page for the sweep: a chosen history column
(``--metric``, default the summary's accuracy column, e.g. ``central_accuracy``; any numeric
column: ``central_auroc``, ``train_loss``, ...) by round, one line per configuration (a grid
point without its seed) with the mean over its completed seeds and a band of ± one sample
standard deviation (ddof 1, as ``summary.md``), the final and best values per configuration
(best: the highest after round 0, the lowest for a loss; a configuration with one seed
completed: its value alone, no band), and every point with its status and a link to its run's
report. Like the run report it is one self-contained file.

``flowerbed sweep`` writes it itself, with the summary (``write_sweep_files``): after each
point completes (an interrupted sweep has one) and at the end, each time atomically (a
temporary file, then ``os.replace``), drawing the default metric; ``flowerbed report SWEEP
--metric COLUMN`` rewrites it for another column.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from ..core.results import atomic_write
from ..report import REPORT_FILE, write_run_report
from ..report.markup import Section, absent, esc, img, page, table
from ..settings import ConfigError
from .folder import SPEC_FILE, load_spec, point_dir, point_state
from .grid import SEED_KEY, SweepSpec
from .summary import (
    NOT_METRICS,
    accuracy_column,
    accuracy_curve,
    after_round_0,
    band_png,
    cell,
    configuration_label,
    configurations,
    is_number,
    load_history,
    mean_std,
    sweep_title,
    write_summary,
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
        curves = [accuracy_curve(h, metric) for h in histories[configuration]]
        rows.append(
            {
                "label": configuration_label(configuration),
                "configuration": configuration,
                "curves": [c for c in curves if c],
                "seeds": len(histories[configuration]),
                "runs": len(members),
            }
        )
    return rows, metric


def sweep_page(sweep_dir: Path, metric: str | None = None) -> tuple[str, str, bytes | None]:
    """``report.html``'s text for ``sweep_dir`` (module docstring), the history column it
    draws (``metric``, or the default) and the plot's PNG (None when nothing to draw)."""
    spec = load_spec(sweep_dir)
    rows, metric = configuration_rows(spec, sweep_dir, metric)
    sections = []
    axes = [[a.name, ", ".join(a.labels)] for a in spec.axes]
    fixed = [[key, value] for key, value in spec.fixed.items()]
    body = table(["axis", "values"], axes, text_columns=(0, 1))
    body += table(["fixed key", "value"], fixed, text_columns=(0, 1)) if fixed else ""
    body += f"<p>{len(spec.points())} points, {spec.num_clients} clients per run.</p>"
    sections.append(Section("grid", "Grid", body))
    seeds = any(a.name == SEED_KEY and len(a.labels) > 1 for a in spec.axes)
    title = f"{metric} by round" + (": mean ± sample std over seeds" if seeds else "")
    png = band_png(rows, metric, title) if any(row["curves"] for row in rows) else None
    plot = img(png, f"{metric} by round") if png else absent(f"{metric} in any completed run")
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
                cell(mean_std(finals) if finals else None) or "-",
                cell(mean_std(bests) if bests else None) or "-",
            ]
        )
    body = plot + table(
        ["configuration", "seeds completed", f"final {metric}", f"best ({best_word})"],
        table_rows,
        text_columns=(0, 2, 3),
    )
    body += (
        "<p>Mean ± sample standard deviation over the completed seeds, shaded as a band in the"
        " plot; a configuration with one seed completed shows its value alone, without a band."
        " Final = the last round; best = the " + best_word + " value after round 0."
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
    text = page(
        sweep_title(sweep_dir, spec), f"Sweep folder {sweep_dir}; written {made}.", sections
    )
    return text, metric, png


def write_sweep_report(sweep_dir: Path, metric: str | None = None) -> Path:
    """``report.html`` in ``sweep_dir``, written atomically; ``metric``: a history column."""
    text, _, _ = sweep_page(Path(sweep_dir), metric)
    path = Path(sweep_dir) / REPORT_FILE
    atomic_write(path, lambda f: f.write(text))
    return path


def write_sweep_files(sweep_dir: Path, spec: SweepSpec) -> list[dict]:
    """Everything a sweep writes about itself (``report.html``, ``summary.md``,
    ``summary.csv``, ``accuracy.png``: the report's plot when it draws the summary's accuracy
    column), each atomically; the summary's rows."""
    text, metric, png = sweep_page(sweep_dir)
    atomic_write(sweep_dir / REPORT_FILE, lambda f: f.write(text))
    return write_summary(sweep_dir, spec, drawn=(metric, png) if png else None)


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
