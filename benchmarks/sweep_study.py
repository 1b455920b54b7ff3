"""What the benchmarks that were sweeps share as studies of the study driver: one run config
run in this process in a temporary folder and read before the folder goes, a run the
divergence of its model stopped included.

``robustness.py``, ``privacy.py`` and ``strategies.py`` ran a ``flowerbed.sweep`` grid and made
``runs.csv`` from the run folders; as studies (``flowerbed.experiments.study_cli``) a point of
theirs is one cell of that grid and ``run(point, seed)`` calls ``run_history`` with the cell's
run config through ``run_and_read``, as the sweep's in-process path ran it
(``inprocess.run_in_process``, the real ServerApp / ClientApp code, one torch thread), and
makes the row from the run folder as the sweep benchmark's ``run_record`` did.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from flowerbed.experiments.driver import Point, Value
from flowerbed.experiments.study_runs import one_thread_quietly
from flowerbed.inprocess import run_in_process
from flowerbed.runtime.outcome import RunFailed
from flowerbed.sweep.folder import run_dirs

# how ``runtime.history`` says that a round had no update to aggregate (the model diverged)
NO_CLIENT = "no client succeeded"
T = TypeVar("T")


def run_and_read(overrides: dict, num_clients: int, read: Callable[[Path, bool], T]) -> T:
    """``read(run_dir, stopped)`` of one run of ``overrides`` with ``num_clients`` clients in a
    temporary folder, deleted afterwards: ``stopped`` when the run failed at a round in which
    no client could send a finite update (the model had diverged), which ``read`` counts with
    the last global model it had, as the sweeps counted it; any other failure raises."""
    with one_thread_quietly(), tempfile.TemporaryDirectory(prefix="flowerbed-sweep-") as out:
        try:
            run_dir = run_in_process({**overrides, "output-dir": out}, num_clients)
        except RunFailed as error:
            if NO_CLIENT not in str(error):
                raise
            return read(run_dirs(Path(out))[-1], True)
        return read(run_dir, False)


def cell_point(labels: dict[str, str], config: dict, rounds: int, kind: str = "") -> Point:
    """One cell of a sweep's grid as a point: named by ``kind`` (where given), its labels in
    their order and its rounds; its settings the labels, which its rows repeat, and the run
    config."""
    name = "/".join([*([kind] if kind else []), *labels.values(), f"r{rounds}"])
    return Point(name, {"labels": labels, "config": {**config, "num-server-rounds": rounds}})


def run_cell(
    point: Point, seed: int, num_clients: int, read: Callable[[Path, bool], dict[str, Value]]
) -> dict[str, Value]:
    """The row of one seed of a ``cell_point``: its labels and ``read`` of its run
    (``run_and_read``)."""
    config = {**point.settings["config"], "seed": seed}
    return {**point.settings["labels"], **run_and_read(config, num_clients, read)}


def seed_major(rows: list[dict]) -> list[dict]:
    """``rows`` with every point of a seed before the next seed, in their order otherwise: the
    order the sweeps wrote ``runs.csv`` in, which the tables' means are summed in."""
    return sorted(rows, key=lambda row: row["seed"])
