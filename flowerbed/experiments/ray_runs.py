"""A study's runs as Ray tasks: on a Ray cluster, or on this machine's GPUs.

``flowerbed reproduce --ray-address ADDRESS`` (or ``RAY_ADDRESS``) sends every (point, seed)
of the grid to the cluster at ``ADDRESS`` as one task, at most ``--workers`` at a time, and
``--gpus-per-client G`` gives each task ``G`` GPUs (a fraction shares one), on the cluster or,
without an address, on a private Ray instance of this machine. A run trains its federation's
clients one after another in one process (``run_in_process``), so a client's GPU is its run's.
Ray makes the GPUs it assigns the only ones the task sees (``CUDA_VISIBLE_DEVICES``), and the
run's ``device='auto'`` trains on them.

A task asks for one CPU and ``G`` GPUs. A cluster with fewer GPUs than one task asks for is a
``ConfigError`` before any task starts (Ray would wait for them forever). A task whose worker
dies (memory, a signal) is a failed row, run again on the next start, like a run that raised.
Every node of a cluster needs flowerbed installed; the rows come back to this process, which
writes them (the output folder need not be shared).

Written by hand on Ray's public task API (``ray.remote``, ``ray.wait``), as the sweeps'
``sweep.execute`` is: Ray offers no driver for a resumable grid.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..ray_cluster import joined_ray
from ..runtime.outcome import one_line
from ..settings import ConfigError


@dataclass(frozen=True)
class RayPlacement:
    """Where a study's runs go: the Ray address (``ray_cluster.task_address``: a cluster's head,
    or ``local``) and the GPUs of each run."""

    address: str
    gpus: float = 0.0

    def __post_init__(self):
        if not self.gpus >= 0:
            raise ConfigError(f"--gpus-per-client must be at least 0, got {self.gpus:g}")


def check_gpus(ray, gpus: float) -> None:
    """``ConfigError`` where the cluster has fewer GPUs than one task asks for."""
    have = ray.cluster_resources().get("GPU", 0)
    if gpus > have:
        raise ConfigError(
            f"--gpus-per-client {gpus:g} asks for more GPUs than the Ray cluster has ({have:g});"
            " give fewer, or 0 to train on the CPU"
        )


def rows_on_ray(
    run: Callable[..., dict], study, todo: list, workers: int, placement: RayPlacement
) -> Iterator[dict]:
    """The rows of ``todo``'s (point, seed) runs, each ``run(study, point, seed)`` as a Ray
    task placed as ``placement`` says, at most ``workers`` at a time (module docstring), in
    the order they finish."""
    with joined_ray(placement.address, workers) as ray:
        check_gpus(ray, placement.gpus)
        task = ray.remote(num_cpus=1, num_gpus=placement.gpus, max_retries=0)(run)
        queue, pending = list(todo), {}
        while queue or pending:
            while queue and len(pending) < workers:
                point, seed = queue.pop(0)
                pending[task.remote(study, point, seed)] = (point, seed)
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                point, seed = pending.pop(ref)
                try:
                    row = ray.get(ref)
                except ray.exceptions.RayError as error:  # the worker died: run it again later
                    row = {"point": point.name, "seed": seed, "failed": one_line(error)}
                yield row
