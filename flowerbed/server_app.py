"""flowerbed's ServerApp: run config -> run context -> the protocol's phases -> results on disk.

1. parse and check the run config against every declared key (``flowerbed.catalog``): a bad
   value stops here, before any data is loaded; in a simulation, the existing Ray cluster the
   backend joins must answer (``ray_cluster``), else Ray would wait minutes without a word;
2. start the run (``runtime.context.start_run``): data, the protocol's global model,
   handshake, partition table, run folder, seeds. In a simulation, with NumPy's BLAS on one
   thread (``one_blas_thread_while_ray_starts``);
3. run the protocol's phases in order (``protocols.phase.Protocol``); each logs and writes
   its own history rows and results;
4. plot the history; ``status.json`` in the run folder says how the run ended
   (``runtime.outcome``), and so do the trackers' runs (``runtime.trackers``); flowerbed's own
   errors are logged as one line. The run holds its folder's lock (``runtime.run_lock``) until
   its last status is written, and ``report.html`` (``report``) after it.

It names no algorithm: what ``strategy=<name>`` runs is the registered protocol's business.
"""

from __future__ import annotations

import logging
from contextlib import AbstractContextManager, nullcontext
from logging import ERROR, INFO
from pathlib import Path

from flwr.app import Context
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp
from threadpoolctl import threadpool_limits

from .catalog import (
    CONCERNS,
    check_model,
    get_protocol,
    parse_run_config,
    protocol_defaults_note,
)
from .ray_cluster import check_ray_cluster, in_flower_simulation
from .report import written_report
from .runtime.context import start_run
from .runtime.outcome import CLEAR_ERRORS, OneLineErrors, one_line, recorded_outcome
from .runtime.trackers import closed_with_outcome
from .settings import RunConfig

app = ServerApp()
logging.getLogger("flwr").addFilter(OneLineErrors())  # flowerbed's errors: one line, no traceback


@app.main()
def main(grid: Grid, context: Context) -> None:
    try:
        config = parse_run_config(context.run_config)
        if in_flower_simulation() and (cluster := check_ray_cluster()):
            log(INFO, "flowerbed: clients run on the Ray cluster at %s (from %s)", *cluster)
        run_protocol(grid, config)
    except CLEAR_ERRORS as error:
        log(ERROR, "flowerbed: run failed: %s", one_line(error))
        raise


def run_protocol(grid: Grid, config: RunConfig) -> Path:
    """Run the protocol ``config.strategy`` on ``grid``; returns its results folder, whose
    ``status.json`` says how the run ended."""
    spec = get_protocol(config.strategy)
    if note := protocol_defaults_note(config):
        log(INFO, "flowerbed: %s", note)
    check_model(config)
    protocol = spec.protocol(config)
    protocol.check_server_data(config)
    with one_blas_thread_while_ray_starts():
        run = start_run(grid, config, spec.build_model, CONCERNS)
    with (
        run.lock,
        written_report(run.run_dir),  # report.html, after status.json, however the run ended
        recorded_outcome(run.run_dir, note=lambda: run.ended_early),
        closed_with_outcome(run.history.trackers),
    ):
        protocol.run(run)
        run.history.plot(f"{config.strategy} on {config.dataset} ({run.num_partitions} clients)")
    return run.run_dir


def one_blas_thread_while_ray_starts() -> AbstractContextManager:
    """In Flower's simulation process, NumPy's BLAS on one thread (``threadpoolctl``) while the
    run starts; elsewhere nothing.

    Why: that process starts Ray (which forks its services) in its main thread while the
    ServerApp's thread loads the data. OpenBLAS stops its worker threads before a fork
    (``pthread_atfork``), so a multi-threaded BLAS call under way in the other thread waits for
    them for ever: seen here as the generation of Synthetic(1, 1) for 1,000 clients stuck in
    ``exec_blas`` for minutes. On one thread a BLAS call has no workers to wait for. Ray is up
    once the handshake has its replies, so the rounds run with the usual threads."""
    if not in_flower_simulation():
        return nullcontext()
    return threadpool_limits(limits=1, user_api="blas")
