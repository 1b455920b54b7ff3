"""One driver for every study: a grid of points x seeds, run once each, resumable, in parallel.

A study declares what it measures and nothing about how it is run:

* ``grid(budget)``: the ``Point``s and the seeds of a budget (``smoke``, ``cpu``, ``paper``, or
  any name the study knows; ``BudgetError`` for one it does not);
* ``run(point, seed)``: one measurement, a dict of values (numbers or strings), computed from
  the point's settings and the seed alone;
* ``report(rows)``: the tables, ``{file name: markdown}``, made from the rows alone.

``run_study(study, folder, budget)`` runs every (point, seed) not yet in ``folder/rows.jsonl``,
appending each row as it finishes (one JSON line, ``point``, ``seed`` and the values, written
with ``os.write`` on a file opened for appending; a line a kill cut short is ended and left
out), so a study that is killed continues where it stopped when started again; ``workers`` > 1 runs that many at once in
separate processes (``spawn``: a worker imports the study afresh, nothing is inherited, and its
rows are the same as in one process). A (point, seed) that raises is recorded as failed, with
its error, and run again next time. Progress goes to ``say``: done of total, and the time left
from the mean time of a run so far. ``report_only`` makes the tables from the rows on disk.
The tables are written atomically into ``folder``.

Nothing here knows a paper or a benchmark: the studies do (``flowerbed.experiments``).
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ..core.results import atomic_write
from .provenance import append_provenance, study_record
from .ray_runs import RayPlacement, rows_on_ray

ROWS = "rows.jsonl"
Value = float | int | str


class BudgetError(ValueError):
    """A budget the study does not know."""


@dataclass(frozen=True)
class Point:
    """One point of a study's grid: a name unique in the study and the settings it runs with."""

    name: str
    settings: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)


class Study(Protocol):
    name: str

    def grid(self, budget: str) -> tuple[list[Point], list[int]]: ...

    def run(self, point: Point, seed: int) -> dict[str, Value]: ...

    def report(self, rows: list[dict[str, Value]]) -> dict[str, str]: ...


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


def write_report(study: Study, folder: Path) -> dict[str, str]:
    """The study's tables from the rows on disk, each written atomically into ``folder``."""
    tables = study.report([row for row in read_rows(folder) if "failed" not in row])
    for name, text in tables.items():
        atomic_write(Path(folder) / name, lambda f, t=text: f.write(t))
    return tables


def run_study(
    study: Study,
    folder: Path,
    budget: str,
    workers: int = 1,
    report_only: bool = False,
    say: Callable[[str], None] = print,
    command: str | None = None,
    placement: RayPlacement | None = None,
) -> dict[str, str]:
    """Run what is missing of ``study``'s grid for ``budget`` into ``folder`` (module docstring)
    and write its tables; returns them. Failed runs are said, and left for the next start. An
    invocation that measured something appends where it did so to ``measured.jsonl``
    (``provenance.append_provenance``: commit, ``command``, by default this process's command
    line, machine, versions, date). With a ``placement`` every run is a Ray task (``ray_runs``),
    ``workers`` at a time."""
    if workers < 1:
        raise ValueError(f"workers must be at least 1, got {workers}")
    points, seeds = study.grid(budget)  # BudgetError before anything runs
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if not report_only:
        close_cut_line(folder)
        command = " ".join(["python", *sys.argv]) if command is None else command
        started_at = study_record(folder, command)  # the code that runs is this moment's
        done = measured(read_rows(folder))
        todo = [(p, s) for p in points for s in seeds if (p.name, s) not in done]
        total = len(points) * len(seeds)
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
    return write_report(study, folder)


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
