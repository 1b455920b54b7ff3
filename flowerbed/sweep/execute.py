"""Run a sweep's points as Ray tasks, at most ``workers`` at a time, on this machine or on a
Ray cluster.

Every unfinished point is one task (``ray.remote(num_cpus=1)``) running ``run_point``: in
process by default (``run_in_process``: the real ServerApp job and ClientApp handlers, one
torch thread), or through ``flwr run`` (``simulate``: a Flower simulation with a private Ray
instance of its own, on the node the task landed on, of a generated app, as ``flowerbed run``
runs: the installed package, whatever the install). ``ray.init`` joins the cluster at
``ray_address`` or ``RAY_ADDRESS`` (checked first: an address where nothing answers is one
line, not minutes of Ray retries), and starts a private instance with ``workers`` CPUs
otherwise. On a cluster, every node writes its points into the sweep folder, which must
therefore be on a file system all nodes share, and every node needs flowerbed installed.

A point that fails is recorded (its run folder's ``status.json``, or ``sweep_error.log`` when
it failed before making one) and the sweep goes on; Ray does not retry it. Interrupting the
sweep stops its running points (they read as ``interrupted`` once their processes are gone):
the next run of the same sweep redoes them.

The sweep's files (``summary.md``, ``summary.csv``, ``accuracy.png``, ``report.html``:
``report.write_sweep_files``) are rewritten after each point completes, once the next points
have been started (a write that fails is one line, and the sweep goes on), and at the end.
"""

from __future__ import annotations

import io
import logging
import traceback
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from ..core.results import atomic_write
from ..inprocess import run_in_process
from ..ray_cluster import joined_ray, task_address
from ..runtime.outcome import one_line
from ..settings import ConfigError
from ..simulation import generated_app, simulate
from .folder import ERROR_FILE, POINT_LOG, PointState, point_dir, point_state, prepare, run_dirs
from .grid import Point, SweepSpec, check_grid
from .progress import Progress
from .report import write_sweep_files

VIA = ("inprocess", "flwr")
POLL_SECONDS = 1.0  # how often the progress line's clock moves


@dataclass(frozen=True)
class PointResult:
    point: Point
    state: PointState

    @property
    def run_dir(self) -> Path | None:
        return self.state.run_dir


@contextmanager
def flower_log_to(path: Path):
    """Flower's log lines (flowerbed's included) also go to ``path`` while the block runs."""
    handler = logging.FileHandler(path, mode="a")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        handler.close()


def run_point(folder: str, name: str, overrides: dict, via: str, num_clients: int) -> dict:
    """One attempt at one point, in the point's ``folder`` (the body of the Ray task);
    returns its ``PointState`` as a dict. Never raises for a failed run."""
    folder_path = Path(folder)
    folder_path.mkdir(parents=True, exist_ok=True)
    (folder_path / ERROR_FILE).unlink(missing_ok=True)
    before = set(run_dirs(folder_path))
    run_config = {**overrides, "output-dir": str(folder_path), "run-name": name}
    error = trace = ""
    try:
        if via == "flwr":
            with generated_app() as app:
                result = simulate(
                    run_config, num_supernodes=num_clients, ray_address="local", app_dir=app
                )
            with open(folder_path / POINT_LOG, "a") as log:
                log.write(result.log)
            if result.run_dir is None:
                error = f"flwr run made no run folder (exit status {result.returncode})"
                trace = result.log[-3000:]
        else:
            torch.set_num_threads(1)  # one point per CPU: threads would only contend
            with flower_log_to(folder_path / POINT_LOG):
                run_in_process(run_config, num_clients)
    except Exception as failure:  # noqa: BLE001 - recorded, the sweep goes on
        error, trace = one_line(failure), traceback.format_exc()
    if error and not set(run_dirs(folder_path)) - before:
        atomic_write(folder_path / ERROR_FILE, lambda f: f.write(f"{error}\n\n{trace}"))
    state = point_state(folder_path)
    return {"status": state.status, "run_dir": state.run_dir, "reason": state.reason}


def run_sweep(
    spec: SweepSpec,
    sweep_dir: Path,
    workers: int = 1,
    via: str = "inprocess",
    ray_address: str | None = None,
    extend: bool = False,
    progress: bool = True,
) -> list[PointResult]:
    """Run every unfinished point of ``spec`` in ``sweep_dir`` and write its summary and
    report (after each point and at the end); the result of every point, finished before or
    now, in grid order.

    Bad input (the grid, ``workers``, ``via``, an address where no Ray cluster answers, a
    folder holding another grid) is a ``ConfigError`` before anything runs or is written."""
    if via not in VIA:
        raise ConfigError(f"unknown via {via!r}; valid choices: {', '.join(VIA)}")
    if not isinstance(workers, int) or workers < 1:
        raise ConfigError(f"workers must be an integer, at least 1, got {workers!r}")
    check_grid(spec)
    address = task_address(ray_address)
    sweep_dir = Path(sweep_dir).expanduser().resolve()
    spec = prepare(sweep_dir, spec, extend)
    points = check_grid(spec)
    states = {p.name: point_state(point_dir(sweep_dir, p)) for p in points}
    todo = [p for p in points if not states[p.name].finished]
    if todo:
        stream = None if progress else io.StringIO()
        bar = Progress(len(points), len(points) - len(todo), workers, stream)
        write_files = partial(write_sweep_files, sweep_dir, spec)
        states.update(
            execute(sweep_dir, todo, spec.num_clients, workers, via, address, bar, write_files)
        )
    write_sweep_files(sweep_dir, spec)
    return [PointResult(p, states[p.name]) for p in points]


def execute(
    sweep_dir: Path,
    todo: list[Point],
    num_clients: int,
    workers: int,
    via: str,
    address: str,
    bar: Progress,
    after_point: Callable[[], object] = lambda: None,
) -> dict[str, PointState]:
    """The states of ``todo`` after running them as Ray tasks, ``workers`` at a time;
    ``after_point()`` once points have completed and the next ones are started."""
    with joined_ray(address, workers) as ray:
        return run_tasks(ray, sweep_dir, todo, num_clients, workers, via, bar, after_point)


def run_tasks(ray, sweep_dir, todo, num_clients, workers, via, bar, after_point):
    """``execute``'s loop, with ``ray`` joined."""
    task = ray.remote(num_cpus=1, max_retries=0)(run_point)
    queue, pending, states, changed = list(todo), {}, {}, False
    try:
        while queue or pending:
            while queue and len(pending) < workers:
                point = queue.pop(0)
                folder = str(point_dir(sweep_dir, point))
                ref = task.remote(folder, point.name, point.overrides, via, num_clients)
                pending[ref] = point
                bar.start(point.name)
            if changed and pending:  # the last one's files are written by the caller
                changed = False
                try:
                    after_point()
                except Exception as error:  # noqa: BLE001 - the points go on; retried later
                    bar.note(f"sweep report not written: {one_line(error)}")
            bar.show()
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=POLL_SECONDS)
            for ref in ready:
                point = pending.pop(ref)
                try:
                    state = PointState(**ray.get(ref))
                except ray.exceptions.RayError as error:  # the worker died (memory, a signal)
                    state = PointState("failed", None, one_line(error))
                    folder = point_dir(sweep_dir, point)
                    atomic_write(folder / ERROR_FILE, lambda f, e=error: f.write(f"{e}\n"))
                states[point.name] = state
                changed = True
                bar.finish(point.name, state.finished)
                if not state.finished:
                    bar.note(f"{point.name}: {state.status}: {state.reason}")
        bar.show()
    finally:
        bar.close()
    return states
