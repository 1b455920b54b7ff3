"""One driver for every study: a grid of points x seeds, run once each, resumable, in parallel.

A study declares what it measures and nothing about how it is run:

* ``grid(budget)``: the ``Point``s and the seeds of a budget (``smoke``, ``cpu``, ``paper``, or
  any name the study knows; ``BudgetError`` for one it does not); a point may name its own
  seeds (``Point.seeds``), which replace the budget's for it: the points of CTL's
  reproduction keep different seeds, each simulation by its own discard rule;
* ``run(point, seed)``: one measurement, a dict of values (numbers or strings), computed from
  the point's settings and the seed alone;
* ``report(rows)``: the tables, ``{file name: markdown}``, made from the rows alone; or, for
  a table that is made by a writer (below) or names the provenance files beside the rows,
  ``{file name: make}``, ``make(folder)`` returning the markdown;
* ``alternate`` (a class attribute, False when absent): the points are variants timed against
  each other, so they run in turn within each seed (seed-major: A, B, C for seed 0, then A, B,
  C for seed 1...; otherwise every seed of A first), and one at a time (``workers`` > 1 is
  refused: runs side by side would measure their contention).

``run_study(study, folder, budget)`` runs every (point, seed) not yet in ``folder/rows.jsonl``,
appending each row as it finishes (one JSON line, ``point``, ``seed`` and the values, written
with ``os.write`` on a file opened for appending; a line a kill cut short is ended and left
out), so a study that is killed continues where it stopped when started again; ``workers`` > 1 runs that many at once in
separate processes (``spawn``: a worker imports the study afresh, nothing is inherited, and its
rows are the same as in one process). A (point, seed) that raises is recorded as failed, with
its error, and run again next time. Progress goes to ``say``: done of total, and the time left
from the mean time of a run so far. ``report_only`` makes the tables from the rows on disk.
The tables are written atomically into ``folder``, or by ``write(path, make)``, which makes a
table (``make()``) and writes it: the benchmarks pass ``result_tables.write_table``, which
records the intervals a table shows while it is made, so each table must be made inside its own
call; that is why a table can be a function rather than its text. A study whose tables are text
(every paper's, which ``flowerbed reproduce`` runs) is written as before.

Nothing here knows a paper or a benchmark: the studies do (``flowerbed.experiments``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Protocol, TypeVar

from ..core.results import atomic_write
from .provenance import append_provenance, study_record
from .ray_runs import RayPlacement, rows_on_ray

ROWS = "rows.jsonl"
Value = float | int | str
Table = str | Callable[[Path], str]  # a table's text, or what makes it from the rows' folder
Write = Callable[[Path, Callable[[], str]], str]  # make a table and write it there; its text
T = TypeVar("T")


class BudgetError(ValueError):
    """A budget the study does not know."""


class WorkersError(ValueError):
    """A number of workers the study cannot run with."""


def budget_of(budgets: Mapping[str, T], name: str) -> T:
    """What ``budgets`` holds for ``name``; ``BudgetError`` naming it and the choices."""
    if name not in budgets:
        raise BudgetError(f"unknown budget {name!r}; one of: {', '.join(budgets)}")
    return budgets[name]


@dataclass(frozen=True)
class Point:
    """One point of a study's grid: a name unique in the study, the settings it runs with, and
    its own seeds where they are not the grid's (empty: the grid's)."""

    name: str
    settings: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    seeds: tuple[int, ...] = field(default=(), hash=False, compare=False)


def point_seeds(point: Point, seeds: list[int]) -> list[int]:
    """The seeds ``point`` runs with: its own where it names them, else the grid's ``seeds``."""
    return list(point.seeds) if point.seeds else list(seeds)


def grid_runs(points: list[Point], seeds: list[int]) -> list[tuple[Point, int]]:
    """Every (point, seed) of a grid, point-major, each point with its seeds (``point_seeds``)."""
    return [(point, seed) for point in points for seed in point_seeds(point, seeds)]


class Study(Protocol):
    name: str

    def grid(self, budget: str) -> tuple[list[Point], list[int]]: ...

    def run(self, point: Point, seed: int) -> dict[str, Value]: ...

    def report(self, rows: list[dict[str, Value]]) -> dict[str, Table]: ...


def alternates(study: Study) -> bool:
    """Whether ``study`` times its points against each other (module docstring)."""
    return bool(getattr(study, "alternate", False))


def check_workers(study: Study, workers: int) -> None:
    """``WorkersError`` for fewer than one worker, or more than one for a study that
    alternates its points."""
    if workers < 1:
        raise WorkersError(f"workers must be at least 1, got {workers}")
    if workers > 1 and alternates(study):
        raise WorkersError(
            f"workers must be 1 for {study.name}, got {workers}: it times its variants against"
            " each other, in turn, and runs side by side would measure their contention"
        )


def read_rows(folder: Path) -> list[dict[str, Value]]:
    """The rows recorded in ``folder`` (a last line cut short by a kill is left out)."""
    path = Path(folder) / ROWS
    if not path.is_file():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def append_row(folder: Path, row: dict[str, Value]) -> None:
    """One row as one ``os.write`` on a file opened for appending (module docstring)."""
    descriptor = os.open(Path(folder) / ROWS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(descriptor, (json.dumps(row, sort_keys=True) + "\n").encode())
    finally:
        os.close(descriptor)


def close_cut_line(folder: Path) -> None:
    """End a last line that a kill cut short, so that the next row starts a line of its own
    (the cut line stays unreadable and is left out by ``read_rows``)."""
    path = Path(folder) / ROWS
    if path.is_file() and path.stat().st_size:
        with path.open("rb+") as f:
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")


def measured(rows: Iterable[dict[str, Value]]) -> set[tuple[str, int]]:
    """The (point, seed) pairs with a row that did not fail."""
    return {(row["point"], row["seed"]) for row in rows if "failed" not in row}


def measured_rows(folder: Path) -> list[dict[str, Value]]:
    """The rows in ``folder`` that did not fail: what the tables are made of."""
    return [row for row in read_rows(folder) if "failed" not in row]


def missing_runs(study: Study, folder: Path, budget: str) -> set[tuple[str, int]]:
    """The (point, seed) pairs of ``budget``'s grid without a row that did not fail."""
    points, seeds = study.grid(budget)
    return {(p.name, s) for p, s in grid_runs(points, seeds)} - measured(read_rows(folder))


def run_order(study: Study, points: list[Point], seeds: list[int]) -> list[tuple[Point, int]]:
    """Every (point, seed) in the order they run: point-major, or seed-major for a study that
    alternates its points (module docstring; with points' own seeds: every point's first
    seed, then every point's second...)."""
    runs = grid_runs(points, seeds)
    if alternates(study):  # a stable sort: the points keep their order within a position
        runs.sort(key=lambda run: point_seeds(run[0], seeds).index(run[1]))
    return runs


def one_run(study: Study, point: Point, seed: int) -> dict[str, Value]:
    """``study.run`` as a row: its values with the point, the seed and the seconds it took, or
    ``failed`` with the error's last line and ``traceback`` when it raised."""
    started = time.perf_counter()
    try:
        values = study.run(point, seed)
    except Exception as error:  # noqa: BLE001 - recorded, and run again next time
        return {
            "point": point.name,
            "seed": seed,
            "failed": f"{type(error).__name__}: {error}",
            "traceback": traceback.format_exc(limit=-5),
        }
    return {**values, "point": point.name, "seed": seed, "seconds": time.perf_counter() - started}


def progress_line(done: int, total: int, seconds: list[float], workers: int, to_run: int) -> str:
    """``k of n runs done, about M min left``: ``to_run`` runs still to start or finish in this
    invocation, at the mean seconds of the runs so far, ``workers`` at a time."""
    line = f"{done} of {total} runs done"
    if seconds and to_run:
        left = to_run * (sum(seconds) / len(seconds)) / max(1, workers)
        line += f", about {left / 60:.1f} min left" if left >= 60 else f", about {left:.0f} s left"
    return line


def write_file(path: Path, make: Callable[[], str]) -> str:
    """The default ``Write``: ``make()``'s text, written atomically to ``path``."""
    text = make()
    atomic_write(path, lambda f: f.write(text))
    return text


def write_report(study: Study, folder: Path, write: Write = write_file) -> dict[str, str]:
    """The study's tables from the rows on disk, each written into ``folder`` by ``write``
    (module docstring); their texts."""
    folder = Path(folder)
    texts = {}
    for name, table in study.report(measured_rows(folder)).items():
        make = partial(str, table) if isinstance(table, str) else partial(table, folder)
        texts[name] = write(folder / name, make)
    return texts


def run_study(
    study: Study,
    folder: Path,
    budget: str,
    workers: int = 1,
    report_only: bool = False,
    say: Callable[[str], None] = print,
    command: str | None = None,
    write: Write = write_file,
    placement: RayPlacement | None = None,
) -> dict[str, str]:
    """Run what is missing of ``study``'s grid for ``budget`` into ``folder`` (module docstring)
    and write its tables (``write``); returns their texts. Failed runs are said, and left for
    the next start. An invocation that measured something appends where it did so to
    ``measured.jsonl`` (``provenance.append_provenance``: commit, ``command``, by default this
    process's command line, machine, versions, date). With a ``placement`` every run is a Ray
    task (``ray_runs``), ``workers`` at a time. ``WorkersError`` and ``BudgetError`` come
    before anything runs or is written."""
    check_workers(study, workers)
    points, seeds = study.grid(budget)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not report_only:
        close_cut_line(folder)
        command = " ".join(["python", *sys.argv]) if command is None else command
        started_at = study_record(folder, command)  # the code that runs is this moment's
        done = measured(read_rows(folder))
        todo = [(p, s) for p, s in run_order(study, points, seeds) if (p.name, s) not in done]
        total = len(grid_runs(points, seeds))
        say(f"{study.name} ({budget}): {total - len(todo)} of {total} runs already done")
        seconds: list[float] = []
        finished = total - len(todo)
        rows = run_all(study, todo, workers, placement)
        for attempted, row in enumerate(rows, start=1):
            append_row(folder, row)
            finished += "failed" not in row
            if "failed" in row:
                say(f"{row['point']} seed {row['seed']} failed: {row['failed']}")
            else:
                seconds.append(float(row["seconds"]))
            say(progress_line(finished, total, seconds, workers, len(todo) - attempted))
        if seconds:  # what this invocation measured, and where (``provenance``)
            append_provenance(folder, started_at, len(seconds))
    return write_report(study, folder, write)


def run_all(
    study: Study, todo: list[tuple[Point, int]], workers: int, placement: RayPlacement | None
):
    """The rows of ``todo``'s runs as they finish: as Ray tasks where ``placement`` says,
    else in this process in order, or ``workers`` at a time in spawned processes."""
    if placement is not None:
        yield from rows_on_ray(one_run, study, todo, workers, placement)
        return
    if workers == 1:
        for point, seed in todo:
            yield one_run(study, point, seed)
        return
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=context) as pool:
        pending = {pool.submit(one_run, study, point, seed) for point, seed in todo}
        while pending:
            finished, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in finished:
                yield future.result()
