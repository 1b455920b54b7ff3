"""``flowerbed reproduce PAPER``: run a paper's reproduction (``REPRODUCTIONS``) in a budget and
write its report, ``reproduction.md`` and ``report.html`` (``reproduction_report``).

The study runs through ``driver.run_study`` into ``--out`` (default
``reproductions/<paper>-<budget>`` under the working folder): resumable (a rerun runs only what
``rows.jsonl`` lacks, and again what failed), ``--workers`` at a time, with progress and the
time left. ``--report-only`` writes the report from the rows on disk; ``--dry-run`` prints the
grid (points x seeds), the study's time estimate where it has one and the memory of one run
(the pre-flight's estimate of a run config's process, ``runtime.needs``, for the largest
point), and runs nothing; ``--list`` names every paper, its title, budgets and whether results
exist. ``--ray-address`` or ``--gpus-per-client`` make every run a Ray task (``ray_runs``).

Exit status: 0 when every run of the grid succeeded and the report was written, 1 when some
run failed (it runs again on the next start), 2 for bad input (one line on stderr).

Adding a paper is one line in ``REPRODUCTIONS``.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from ..catalog import parse_run_config
from ..core.results import atomic_write
from ..inprocess import resolve_run_config
from ..ray_cluster import task_address
from ..runtime.needs import GIB, estimate
from ..settings import ConfigError
from . import ctl, fedsa, flkd, qfedfisher, qkt
from .driver import (
    ROWS,
    BudgetError,
    grid_runs,
    missing_runs,
    point_seeds,
    read_rows,
    run_study,
)
from .papers import PAPERS
from .provenance import provenance_lines, recorded_runs
from .ray_runs import RayPlacement
from .reproduction import Reproduction, seconds_of
from .reproduction_report import claim_line, judge_claims, reproduction_tables

BUDGETS = ("smoke", "cpu", "paper")
REPRODUCTIONS: dict[str, Reproduction] = {
    reproduction.paper: reproduction
    for reproduction in (
        ctl.REPRODUCTION,
        fedsa.REPRODUCTION,
        flkd.REPRODUCTION,
        qfedfisher.REPRODUCTION,
        qkt.REPRODUCTION,
    )
}


class InputError(ValueError):
    """Bad input: said in one line, exit status 2."""


def default_folder(paper: str, budget: str) -> Path:
    return Path("reproductions") / f"{paper}-{budget}"


def chosen(paper: str | None) -> Reproduction:
    if paper not in REPRODUCTIONS:
        named = f"unknown paper {paper!r}" if paper else "name a paper"
        raise InputError(f"{named}; one of: {', '.join(REPRODUCTIONS)}")
    return REPRODUCTIONS[paper]


def list_lines() -> list[str]:
    """One line per paper: key, title, budgets, and which budgets have results (rows) in
    their default folder."""
    lines = []
    for key in REPRODUCTIONS:
        done = [b for b in BUDGETS if (default_folder(key, b) / ROWS).is_file()]
        results = f"results: {', '.join(done)}" if done else "no results yet"
        lines.append(f"{key}: {PAPERS[key].title} (budgets {', '.join(BUDGETS)}; {results})")
    return lines


def run_memory(point) -> int | None:
    """The bytes of one run's process at ``point``: the pre-flight's estimate for its run
    config (``settings["config"]``, with its number of ``clients`` where it names one); None
    for a point without a run config (CTL's simulator)."""
    if "config" not in point.settings:
        return None
    config = parse_run_config(resolve_run_config(point.settings["config"]))
    return estimate(config, point.settings.get("clients")).memory_bytes


def memory_line(points, workers: int) -> str:
    """The largest point's memory per run, and with ``workers`` runs at a time."""
    sizes = {point.name: run_memory(point) for point in points}
    sizes = {name: size for name, size in sizes.items() if size is not None}
    if not sizes:
        return "  estimated memory: not known (its runs have no run config to size)"
    name = max(sizes, key=sizes.get)
    line = f"  estimated memory: {sizes[name] / GIB:.1f} GiB per run (point {name})"
    if workers > 1:
        line += f", {workers * sizes[name] / GIB:.1f} GiB with {workers} workers"
    return line + " (one process's estimate: extra models of some protocols not counted)"


def plan_lines(reproduction: Reproduction, budget: str, workers: int = 1) -> list[str]:
    """The grid of ``budget`` (points x seeds), the study's estimate of its time, if any, and
    of one run's memory."""
    points, seeds = reproduction.study.grid(budget)
    runs = len(grid_runs(points, seeds))
    own = any(point.seeds for point in points)  # each point its own seeds
    shape = f"{len(points)} points" + ("," if own else f" x {len(seeds)} seeds =")
    lines = [f"{reproduction.study.name} ({budget}): {shape} {runs} runs"]
    for point in points:
        lines.append(f"  point {point.name}: {point.settings}")
        if own:
            lines.append(f"    seeds: {', '.join(map(str, point_seeds(point, seeds)))}")
    if not own:
        lines.append(f"  seeds: {', '.join(map(str, seeds))}")
    estimate = getattr(reproduction.study, "estimate", None)
    seconds = estimate(budget) if estimate is not None else math.nan
    if math.isfinite(seconds):
        lines.append(f"  estimated time: {seconds / 60:.1f} min on one worker")
    else:  # never measured in this budget: no number rather than a guess
        lines.append("  estimated time: not known (this budget's runs were never timed)")
    lines.append(memory_line(points, workers))
    return lines


def write_reproduction(reproduction: Reproduction, folder: Path, budget: str) -> list[str]:
    """``reproduction.md`` and ``report.html`` from the rows in ``folder``: the headline
    table's part, then each other part's (``Reproduction.parts``: a figure's, the FL + KD
    benchmark's Table 4); the verdict lines."""
    rows = [row for row in read_rows(folder) if "failed" not in row]
    own, of_parts = reproduction.rows_of(rows)
    cells = reproduction.cells(own)
    table = PAPERS[reproduction.paper]
    lines = [claim_line(result) for result in judge_claims(table, cells)]
    more = []
    for part, picked in zip(reproduction.parts, of_parts, strict=True):
        more += part.blocks(picked, budget)
        lines += part.lines(picked)
    files = reproduction_tables(
        table,
        cells,
        reproduction.regime(budget),
        budget,
        seconds_of(own),
        provenance_lines(folder),
        max(0, len(rows) - recorded_runs(folder)),
        more,
    )
    for name, text in files.items():
        atomic_write(folder / name, lambda f, t=text: f.write(t))
    return lines


def reproduce(args: argparse.Namespace) -> int:
    """The command's work (module docstring); InputError for bad input."""
    if args.list:
        print("\n".join(list_lines()))
        return 0
    reproduction = chosen(args.paper)
    if args.workers < 1:
        raise InputError(f"--workers must be at least 1, not {args.workers}")
    placement = None
    if args.ray_address or args.gpus_per_client:
        placement = RayPlacement(task_address(args.ray_address), args.gpus_per_client)
    if args.dry_run:
        print("\n".join(plan_lines(reproduction, args.budget, args.workers)))
        return 0
    folder = args.out or default_folder(reproduction.paper, args.budget)
    study = reproduction.study
    command = (
        f"flowerbed reproduce {reproduction.paper} --budget {args.budget} --out {folder}"
        f" --workers {args.workers}"
    )
    if placement is not None:
        command += f" --ray-address {placement.address} --gpus-per-client {placement.gpus:g}"
    run_study(
        study,
        folder,
        args.budget,
        args.workers,
        args.report_only,
        command=command,
        placement=placement,
    )
    lines = write_reproduction(reproduction, folder, args.budget)
    print("\n".join(lines))
    print(f"written: {folder / 'reproduction.md'} and {folder / 'report.html'}")
    points, seeds = study.grid(args.budget)
    missing = missing_runs(study, folder, args.budget)
    if missing:
        print(
            f"{len(missing)} of {len(grid_runs(points, seeds))} runs have no result (failed or not"
            " run);"
            " run the command again to retry them",
            file=sys.stderr,
        )
        return 1
    return 0


def main(args: argparse.Namespace) -> int:
    """``flowerbed reproduce``: exit status as the module docstring says."""
    try:
        return reproduce(args)
    except (InputError, BudgetError, ConfigError) as error:
        print(f"flowerbed reproduce: error: {error}", file=sys.stderr)
        return 2
