"""What the benchmarks' report steps share: typed result files, mean ± std cells, paired
intervals, and the generated blocks of the documentation pages.

A benchmark writes one row per run into its ``runs.csv`` (the committed record) and makes its
tables from that file alone, into ``table.md`` beside it. A documentation page shows a table by
including that file (``docs_include``: a pymdownx.snippets line, resolved when the site is
built), so that no published number is typed by hand (``tests/test_published_tables.py``
checks the files against ``runs.csv`` and the pages' include lines).
"""

from __future__ import annotations

import csv
import math
import statistics
import sys
from pathlib import Path

from flowerbed.runtime.results import atomic_write, write_csv
from flowerbed.sweep import SweepSpec, mean_std, run_sweep
from flowerbed.sweep.folder import point_dir, point_state


def sweep_records(spec: SweepSpec, sweep: Path, record) -> list[dict]:
    """``record(labels, run_dir, stopped)`` of every point that completed, or that stopped
    because a round came in which no client succeeded (the model had diverged: the run counts
    with the last global model it had), in grid order."""
    records = []
    for point in spec.points():
        state = point_state(point_dir(sweep, point))
        stopped = state.status == "failed" and "no client succeeded" in state.reason
        if state.finished or (stopped and state.run_dir is not None):
            records.append(record(point.labels, state.run_dir, stopped))
    return records


def measure_and_report(
    out: Path, spec: SweepSpec | None, record, fields, report, workers: int = 1
) -> str:
    """What a sweep benchmark does once its arguments are parsed. Unless ``spec`` is None
    (``--report-only``): run the sweep in ``<out>/runs`` (a rerun skips the completed points),
    write one row per run into ``<out>/runs.csv`` (``record``, as ``sweep_records`` calls it;
    ``fields``: its columns) and ``measured.json`` (``record_provenance``). Then write
    ``<out>/table.md``, made by ``report`` from ``runs.csv`` alone, and return its text."""
    out.mkdir(parents=True, exist_ok=True)
    runs_csv = out / "runs.csv"
    if spec is not None:
        sweep = out / "runs"
        run_sweep(spec, sweep, workers=workers, extend=True)
        write_csv(runs_csv, sweep_records(spec, sweep, record), fields)
        record_provenance(out, sys.argv)
    text = report(runs_csv)
    atomic_write(out / "table.md", lambda f: f.write(text))
    return text


def table_head(caption: str, first: str, columns: list[str]) -> list[str]:
    """A markdown table's caption paragraph and header rows."""
    return [
        caption,
        "",
        f"| {first} | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]


def read_runs(path: Path, floats: tuple[str, ...], ints: tuple[str, ...]) -> list[dict]:
    """The rows of a ``runs.csv``, with the named columns as floats and ints."""
    with path.open() as f:
        rows = list(csv.DictReader(f))
    for row in rows:
        for key in floats:
            row[key] = float(row[key])
        for key in ints:
            row[key] = int(row[key])
    return rows


def percent_cell(values: list[float]) -> str:
    """``"94.4 ± 0.7"``: mean ± sample std of fractions, in %; one value has std 0; none: –."""
    if not values:
        return "–"
    mean, std = mean_std(values)
    return f"{100 * mean:.1f} ± {100 * (std or 0.0):.1f}"


def column(runs: list[dict], key: str = "final", **labels) -> list:
    """``key`` of every run whose labels match (``column(runs, "final", defence="krum")``)."""
    return [r[key] for r in runs if all(r[name] == value for name, value in labels.items())]


def accuracy_cell(runs: list[dict], stopped_word: str, **labels) -> str:
    """mean ± std of the matching runs' final accuracy, and how many of them stopped early
    (their ``stopped`` round is not 0), e.g. ``"51.3 ± 36.1 (1/3 stopped)"``."""
    stopped = sum(1 for s in column(runs, "stopped", **labels) if s)
    finals = column(runs, "final", **labels)
    note = f" ({stopped}/{len(finals)} {stopped_word})" if stopped else ""
    return percent_cell(finals) + note


def paired_interval(differences: list[float]) -> tuple[float, float, float]:
    """Mean of per-seed paired differences and its 95 % Student-t interval (t with n - 1
    degrees of freedom; n = 3 seeds gives t = 4.30, so only large, consistent gaps exclude 0);
    NaN bounds for a single difference."""
    from scipy import stats

    mean = statistics.mean(differences)
    if len(differences) < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf(0.975, len(differences) - 1) * statistics.stdev(differences)
    half /= math.sqrt(len(differences))
    return mean, mean - half, mean + half


def paired_cell(runs: list[dict], mine: dict, base: dict, key: str = "final") -> str:
    """The runs labelled ``mine`` minus those labelled ``base``, paired by seed, in percentage
    points: ``"+4.2 [+1.0, +7.4]"`` (mean [95 % t interval], ``paired_interval``), in bold
    where the interval excludes 0; – when no seed has both."""

    def by_seed(labels: dict) -> dict[int, float]:
        return {r["seed"]: r[key] for r in runs if all(r[k] == v for k, v in labels.items())}

    mine_values, base_values = by_seed(mine), by_seed(base)
    seeds = sorted(set(mine_values) & set(base_values))
    return interval_cell([100 * (mine_values[s] - base_values[s]) for s in seeds])


def interval_cell(differences: list[float], digits: int = 1) -> str:
    """``"+4.2 [+1.0, +7.4]"``: the mean of per-seed differences and its 95 % t interval
    (``paired_interval``) with ``digits`` decimals, in bold where the interval excludes 0;
    "(1 seed)" instead of an interval for one difference; – for none."""
    if not differences:
        return "–"
    mean, low, high = paired_interval(differences)
    if len(differences) < 2:
        return f"{mean:+.{digits}f} (1 seed)"
    return interval_text(mean, low, high, digits)


def interval_text(mean: float, low: float, high: float, digits: int = 1) -> str:
    """``"+4.2 [+1.0, +7.4]"`` for any interval, in bold where it excludes 0."""
    text = f"{mean:+.{digits}f} [{low:+.{digits}f}, {high:+.{digits}f}]"
    return f"**{text}**" if low > 0 or high < 0 else text


def docs_include(table: Path) -> str:
    """The line of a docs page that includes ``table`` (a file under the repository root) when
    the site is built: ``--8<-- "benchmarks/results/<name>/table.md"`` (pymdownx.snippets)."""
    root = Path(__file__).resolve().parent.parent
    return f'--8<-- "{table.resolve().relative_to(root).as_posix()}"'


PROVENANCE = "measured.json"


def record_provenance(folder: Path, argv: list[str], file: str = PROVENANCE) -> None:
    """Write ``measured.json`` beside a benchmark's ``runs.csv``: the commit the runs were
    measured at (and whether tracked files outside ``benchmarks/results`` had uncommitted
    changes), the command, the machine and
    the date, so a table says where its numbers come from. ``file``: another name, for a
    second experiment measured into the same folder at another time."""
    import json
    import os
    import platform
    import subprocess
    import sys
    from datetime import UTC, datetime

    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        run = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return run.stdout.strip()

    record = {
        "commit": git("rev-parse", "HEAD"),
        # changes to tracked files other than the results themselves (a run rewrites its own
        # committed data files before it records where they come from)
        "uncommitted_changes": bool(
            git(
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                ":(exclude)benchmarks/results",
            )
        ),
        "command": " ".join(["python", *argv]),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.system()}"
        f" {platform.release()}, Python {sys.version.split()[0]}",
        "date": datetime.now(UTC).strftime("%Y-%m-%d"),
    }
    atomic_write(folder / file, lambda f: f.write(json.dumps(record, indent=1) + "\n"))


def provenance_line(folder: Path, file: str = PROVENANCE) -> str:
    """One sentence naming the commit, command, machine and date of ``measured.json`` (or of
    ``file``)."""
    import json

    path = folder / file
    if not path.is_file():
        return "Provenance not recorded (measured before measured.json existed)."
    record = json.loads(path.read_text())
    dirty = " with uncommitted changes" if record["uncommitted_changes"] else ""
    return (
        f"Measured on {record['date']} at commit {record['commit'][:10]}{dirty}, on"
        f" {record['machine']}, by `{record['command']}`."
    )
