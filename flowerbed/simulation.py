"""Run ``flwr run .`` as a subprocess in an isolated Flower home, and clean up after it.

``flwr run .`` with the default ``:local:`` connection starts a detached local SuperLink that
outlives the command. ``simulate`` gives it its own ``FLWR_HOME`` and free ports, disables
Flower's per-run dependency reinstall, telemetry and update check (no network needed), and
stops that SuperLink, with the processes it started, by PID when the run is over. Tests and
benchmarks use it; ``flwr_run_command`` gives the same command line and environment to a
caller that runs and watches the process itself.

``ray_address`` runs the simulation on an existing Ray cluster (``RAY_ADDRESS`` for the run's
SuperLink; see ``flowerbed.ray_cluster``), checked before anything starts.

Usage::

    result = simulate({"num-server-rounds": 2, "output-dir": "/tmp/out"}, num_supernodes=10)
    result.run_dir, result.history, result.seconds
    simulate(run_config, num_supernodes=100, ray_address="10.0.0.5:6379")  # on a Ray cluster
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from .ray_cluster import check_ray_cluster
from .runtime.device import check_client_gpus

APP_DIR = Path(__file__).resolve().parent.parent  # the app: pyproject.toml + flowerbed/

OFFLINE_ENV = {
    "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
    "FLWR_TELEMETRY_ENABLED": "0",
    "FLWR_DISABLE_UPDATE_CHECK": "1",
    "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
    "RAY_DEDUP_LOGS": "0",
}


@dataclass
class SimulationResult:
    returncode: int
    log: str
    run_dir: Path | None
    seconds: float

    @property
    def history(self) -> list[dict]:
        if self.run_dir is None:
            raise RuntimeError(f"the run wrote no results; its log ends with:\n{self.log[-3000:]}")
        return json.loads((self.run_dir / "history.json").read_text())


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def format_run_config(run_config: dict) -> str:
    """``{"a": 1, "b": "x"}`` -> ``a=1 b='x'`` (TOML values, as ``--run-config`` wants)."""

    def toml(value):
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, str):
            return "'" + value + "'"
        return repr(value)

    return " ".join(f"{key}={toml(value)}" for key, value in run_config.items())


def local_superlink_pids(flwr_home: Path) -> list[int]:
    """PIDs of SuperLinks started for this Flower home (their database lives in it)."""
    marker = str(flwr_home / "local-superlink")
    return [pid for pid, _, args in processes() if "flower-superlink" in args and marker in args]


def processes() -> list[tuple[int, int, str]]:
    """(pid, parent pid, command line) of every process."""
    out = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,ppid=,args="], capture_output=True, text=True, check=False
    ).stdout
    rows = [line.split(None, 2) for line in out.splitlines()]
    return [(int(row[0]), int(row[1]), row[2] if len(row) > 2 else "") for row in rows]


def with_descendants(pids: list[int]) -> list[int]:
    """``pids`` and every process started under them (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for pid, parent, _ in processes():
        children.setdefault(parent, []).append(pid)
    found, todo = [], list(pids)
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found


def stop_local_superlink(flwr_home: Path) -> None:
    """Stop this Flower home's SuperLinks with the processes they started (SuperExec, the
    simulation runtime: one still waiting for a Ray cluster would otherwise linger)."""
    stop_pids(with_descendants(local_superlink_pids(flwr_home)))


def stop_pids(pids: list[int], timeout: float = 10.0) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + timeout
    for pid in pids:
        while time.monotonic() < deadline:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            time.sleep(0.2)
        else:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def flwr_run_command(
    run_config: dict,
    num_supernodes: int,
    num_cpus_per_client: int,
    flwr_home: Path,
    app_dir: Path = APP_DIR,
    ray_address: str | None = None,
    num_gpus_per_client: float = 0.0,
) -> tuple[list[str], dict[str, str]]:
    """The ``flwr run`` command line and environment of one isolated simulation (module doc)."""
    env = {
        **os.environ,
        **OFFLINE_ENV,
        "FLWR_HOME": str(flwr_home),
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
    }
    if ray_address is not None:
        env["RAY_ADDRESS"] = ray_address
    flwr = str(Path(sys.executable).with_name("flwr"))
    federation = f"num-supernodes={num_supernodes} client-resources-num-cpus={num_cpus_per_client}"
    if num_gpus_per_client:
        federation += f" client-resources-num-gpus={num_gpus_per_client}"
    command = [flwr, "run", str(app_dir), "--stream", "--federation-config", federation]
    if run_config:
        command += ["--run-config", format_run_config(run_config)]
    return command, env


SUPERLINK_TOO_SLOW = "Failed to start local SuperLink within"


def run_command(command: list[str], env: dict, cwd: Path, timeout: float) -> tuple[str, int]:
    """Output and exit status of ``command`` (-1 and the output so far when it times out)."""
    try:
        proc = subprocess.run(
            command, env=env, capture_output=True, text=True, timeout=timeout, cwd=cwd, check=False
        )
        return proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as error:
        out = error.stdout or ""
        return (out.decode() if isinstance(out, bytes) else out), -1


def wait_for_local_superlink(env: dict, timeout: float) -> bool:
    """True once the local SuperLink of ``env`` answers Flower's health probe (the check
    ``flwr run`` makes before it starts one) within ``timeout`` seconds."""
    url = f"http://127.0.0.1:{env['FLWR_LOCAL_SUPERLINK_HTTP_API_PORT']}/health"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:
                if response.status == 200:
                    return True
        except OSError:  # URLError and connection errors: not up yet
            pass
        time.sleep(0.5)
    return False


def simulate(
    run_config: dict,
    num_supernodes: int = 10,
    num_cpus_per_client: int = 1,
    timeout: float = 900.0,
    flwr_home: Path | None = None,
    app_dir: Path = APP_DIR,
    ray_address: str | None = None,
    num_gpus_per_client: float = 0.0,
) -> SimulationResult:
    """Run one simulation of the app in ``app_dir`` and return its log and results folder.

    ``ray_address`` (``host:port`` of a Ray head, or ``ray://host:port``) runs it on that
    existing cluster, after checking that the head answers (``ConfigError`` if not, before
    anything starts); None leaves ``RAY_ADDRESS`` as this process's environment has it.
    ``num_gpus_per_client``: Ray's ``client-resources-num-gpus`` (a fraction shares a GPU);
    more than this machine has is a ``ConfigError`` before anything starts."""
    if ray_address is not None:
        check_ray_cluster({"RAY_ADDRESS": ray_address})
    elif num_gpus_per_client:
        check_client_gpus(num_gpus_per_client)
    home = Path(tempfile.mkdtemp(prefix="flwr-home-")) if flwr_home is None else Path(flwr_home)
    command, env = flwr_run_command(
        run_config,
        num_supernodes,
        num_cpus_per_client,
        home,
        app_dir,
        ray_address,
        num_gpus_per_client,
    )
    started = time.perf_counter()
    try:
        log, returncode = run_command(command, env, app_dir, timeout)
        # Flower waits 15 s for the local SuperLink; on a busy machine it comes up later, and
        # the same command then uses it
        if SUPERLINK_TOO_SLOW in log and wait_for_local_superlink(env, timeout=120.0):
            remaining = max(1.0, timeout - (time.perf_counter() - started))
            retry_log, returncode = run_command(command, env, app_dir, remaining)
            log += retry_log
    finally:
        stop_local_superlink(home)
    seconds = time.perf_counter() - started
    match = re.findall(r"flowerbed: results go to (\S+)", log)
    run_dir = Path(match[-1]) if match and (Path(match[-1]) / "history.json").exists() else None
    return SimulationResult(returncode=returncode, log=log, run_dir=run_dir, seconds=seconds)
