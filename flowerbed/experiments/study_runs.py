"""What every paper's study does around its in-process runs (``inprocess.run_in_process``):
the run config of a point with its seed, refused at once when the data set's files are
missing (``seeded_config``); one torch thread, no ``report.html`` and Flower's log at WARNING
while the runs go (``one_thread_quietly``); a table cell of per-seed values
(``mean_std_cell``)."""

from __future__ import annotations

import logging
import os
import statistics
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from flwr.common.logger import FLOWER_LOGGER

from ..data.registry import missing_data
from ..inprocess import default_run_config
from ..report import ENV_SWITCH as REPORT_SWITCH
from .driver import Point


def seeded_config(point: Point, seed: int) -> dict:
    """The point's run config (``point.settings["config"]``) with ``seed``; FileNotFoundError
    naming the missing path when the data set's files are not in its ``data-dir``, before any
    run starts."""
    config = {**point.settings["config"], "seed": seed}
    missing = missing_data(config["dataset"], data_dir(config))
    if missing:
        raise FileNotFoundError(missing)
    return config


@contextmanager
def one_thread_quietly() -> Iterator[None]:
    """One torch thread (a row does not depend on how many runs share the machine, and
    ``--workers`` runs use one core each), no ``report.html`` (its run folder is deleted: the
    report would be a quarter of a smoke run's time) and Flower's logger at WARNING (a study's
    runs would otherwise print every round of every method; the driver says the progress), all
    as they were afterwards."""
    threads, switch = torch.get_num_threads(), os.environ.get(REPORT_SWITCH)
    flower_level = FLOWER_LOGGER.level
    torch.set_num_threads(1)
    os.environ[REPORT_SWITCH] = "0"
    FLOWER_LOGGER.setLevel(logging.WARNING)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        FLOWER_LOGGER.setLevel(flower_level)
        if switch is None:
            os.environ.pop(REPORT_SWITCH)
        else:
            os.environ[REPORT_SWITCH] = switch


def data_dir(config: dict) -> Path:
    """The folder the run reads its data set's files from (the run config's ``data-dir``)."""
    return Path(str(config.get("data-dir", default_run_config()["data-dir"]))).expanduser()


def mean_std_cell(values: list[float], digits: int = 1) -> str:
    """``75.0 ± 1.2 (n=3)`` (mean ± sample std with ``digits`` decimals, and n); – for none."""
    if not values:
        return "–"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.{digits}f} ± {std:.{digits}f} (n={len(values)})"
