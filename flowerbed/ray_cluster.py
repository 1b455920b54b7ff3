"""Which Ray cluster a ``flwr run`` simulation joins, and a check that it answers.

Flower's Ray backend calls ``ray.init()`` without an address, so Ray chooses, in the order
``ray.init`` documents:

1. ``RAY_ADDRESS`` in the environment of the simulation process: ``host:port`` of a cluster's
   head (its GCS), ``ray://host:port`` (Ray Client), ``local`` (a private instance, whatever
   else is set) or ``auto`` (as 2; with nothing recorded, Ray joins any Ray it finds running
   on this machine or fails at once, and no check is made here). For ``flwr run .``
   that environment is the one the local SuperLink was started with, that is the environment
   of the ``flwr run`` that started it;
2. the cluster the last ``ray start`` on this machine recorded in
   ``<temp>/ray/ray_current_cluster`` (``<temp>`` is ``RAY_TMPDIR``, else ``TMPDIR``, else
   ``/tmp``);
3. otherwise a private Ray instance for this run alone.

When the chosen address does not answer, ``ray.init`` does not fail: Ray 2.55 retries 20
times, about 36 s each, and the run's log shows nothing after Flower's start-up lines until
a Ray ``ConnectionError`` traceback some thirteen minutes later (781 s measured here; Ray's
own warnings meanwhile go to the simulation process's stderr, which the local SuperLink
discards). ``check_ray_cluster`` turns that into one clear line at once. It opens a TCP
connection to the address with a short timeout: written by hand, because Ray offers no public
call that asks a cluster whether it is there without joining it. A connection proves that a
process listens at the address, not that it is a Ray head of a matching version (Ray checks
the version itself when it joins).
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

from .settings import ConfigError

LOCAL = "local"  # the address of a private Ray instance on this machine
OBJECT_STORE_BYTES = 100 * 2**20  # tasks that hand back small dicts: a small object store
RAY_CLIENT_PORT = 10001  # Ray Client's default port, for ``ray://host`` without one
CONNECT_TIMEOUT = 5.0  # seconds to wait for the head to accept a connection


class RayCluster(NamedTuple):
    """An existing cluster Ray will join: its address and where Ray found it."""

    address: str
    source: str  # "RAY_ADDRESS" or the path of the ray_current_cluster file


def recorded_cluster_file(environ: Mapping[str, str]) -> Path:
    """Where ``ray start`` records the address of the cluster it started (Ray's default temp
    folder: ``RAY_TMPDIR``, else ``TMPDIR`` on Linux, else ``/tmp``)."""
    temp = environ.get("RAY_TMPDIR") or environ.get("TMPDIR") or "/tmp"
    return Path(temp) / "ray" / "ray_current_cluster"


def cluster_to_join(environ: Mapping[str, str] | None = None) -> RayCluster | None:
    """The existing cluster ``ray.init()`` joins with this environment; None for a private
    Ray instance (module docstring, steps 1 to 3)."""
    environ = os.environ if environ is None else environ
    address = environ.get("RAY_ADDRESS", "").strip()
    if address == "local":
        return None
    if address and address != "auto":
        return RayCluster(address, "RAY_ADDRESS")
    recorded = recorded_cluster_file(environ)
    if recorded.is_file() and (text := recorded.read_text().strip()):
        return RayCluster(text, str(recorded))
    return None


def host_and_port(cluster: RayCluster) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``ray://host[:port]`` -> (host, port)."""
    address = cluster.address
    client = address.startswith("ray://")
    rest = address.removeprefix("ray://").rstrip("/")
    host, colon, port = rest.rpartition(":")
    if not colon or "]" in port:  # no port, or the colons of a bare IPv6 address
        host, port = rest, str(RAY_CLIENT_PORT) if client else ""
    host = host.strip("[]")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(
            f"{describe(cluster)} is not a Ray address: expected host:port of the cluster's "
            "head (e.g. 10.0.0.5:6379), ray://host:port (Ray Client) or local"
        )
    return host, int(port)


def describe(cluster: RayCluster) -> str:
    if cluster.source == "RAY_ADDRESS":
        return f"RAY_ADDRESS={cluster.address!r}"
    return f"the Ray cluster {cluster.address!r} recorded by `ray start` in {cluster.source}"


def check_ray_cluster(
    environ: Mapping[str, str] | None = None, timeout: float = CONNECT_TIMEOUT
) -> RayCluster | None:
    """The existing cluster Ray will join (None: a private instance), after checking that its
    head accepts a connection within ``timeout`` seconds; a ``ConfigError`` otherwise."""
    cluster = cluster_to_join(environ)
    if cluster is None:
        return None
    host, port = host_and_port(cluster)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as error:
        reason = "timed out" if isinstance(error, TimeoutError) else error.strerror or str(error)
        remedy = (
            "start the cluster (ray start --head on that host), correct RAY_ADDRESS, or set "
            "RAY_ADDRESS=local for a private Ray instance"
            if cluster.source == "RAY_ADDRESS"
            else "that cluster is gone: delete the file, or set RAY_ADDRESS to a running "
            "cluster or to local for a private Ray instance"
        )
        raise ConfigError(
            f"{describe(cluster)}: no Ray cluster answers at {host}:{port} ({reason} within "
            f"{timeout:g} s); {remedy}"
        ) from None
    return cluster


def in_flower_simulation() -> bool:
    """True in the process of Flower's simulation runtime (``flwr-simulation``), where the
    ServerApp runs beside the Ray backend; the deployment ServerApp uses no Ray."""
    return Path(sys.argv[0]).name == "flwr-simulation"


def task_address(address: str | None) -> str:
    """Where Ray tasks run: ``address``, else ``RAY_ADDRESS``, else ``local`` (a private
    instance); an existing cluster is checked first (``check_ray_cluster``: one line, not
    minutes of Ray's retries, when nothing answers)."""
    address = address or os.environ.get("RAY_ADDRESS") or LOCAL
    if address != LOCAL:
        check_ray_cluster({"RAY_ADDRESS": address})
    return address


@contextmanager
def joined_ray(address: str, workers: int) -> Iterator[object]:
    """The ``ray`` module, joined to the cluster at ``address`` or started as a private
    instance with ``workers`` CPUs (``local``), shut down when the block ends; a Ray that this
    process already joined is used as it is and left running. GPUs stay visible to tasks that
    ask for none (``RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO=0``, Ray's announced default)."""
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")
    import ray  # seconds to import: only the commands that run Ray tasks pay it

    own = not ray.is_initialized()
    if own:
        options = {"logging_level": logging.ERROR, "log_to_driver": False}
        if address == LOCAL:
            options.update(
                num_cpus=workers, include_dashboard=False, object_store_memory=OBJECT_STORE_BYTES
            )
        ray.init(address=address, **options)
    try:
        yield ray
    finally:
        if own:
            ray.shutdown()
