"""Run ``flwr run .`` as a subprocess in an isolated Flower home, and clean up after it.

``flwr run .`` with the default ``:local:`` connection starts a detached local SuperLink that
outlives the command. ``simulate`` gives it its own ``FLWR_HOME`` and free ports, disables
Flower's per-run dependency reinstall, telemetry and update check (no network needed), and
stops that SuperLink by PID when the run is over. Tests and benchmarks use it.

Usage::

    result = simulate({"num-server-rounds": 2, "output-dir": "/tmp/out"}, num_supernodes=10)
    result.run_dir, result.history, result.seconds
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
from dataclasses import dataclass
from pathlib import Path

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
    out = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=False
    ).stdout
    marker = str(flwr_home / "local-superlink")
    return [
        int(line.split(None, 1)[0])
        for line in out.splitlines()
        if "flower-superlink" in line and marker in line
    ]


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


def simulate(
    run_config: dict,
    num_supernodes: int = 10,
    num_cpus_per_client: int = 1,
    timeout: float = 900.0,
    flwr_home: Path | None = None,
    app_dir: Path = APP_DIR,
) -> SimulationResult:
    """Run one simulation of the app in ``app_dir`` and return its log and results folder."""
    own_home = flwr_home is None
    home = Path(tempfile.mkdtemp(prefix="flwr-home-")) if own_home else Path(flwr_home)
    env = {
        **os.environ,
        **OFFLINE_ENV,
        "FLWR_HOME": str(home),
        "FLWR_LOCAL_SUPERLINK_HTTP_API_PORT": str(free_port()),
        "FLWR_LOCAL_CONTROL_API_PORT": str(free_port()),
    }
    flwr = str(Path(sys.executable).with_name("flwr"))
    federation = f"num-supernodes={num_supernodes} client-resources-num-cpus={num_cpus_per_client}"
    command = [flwr, "run", str(app_dir), "--stream", "--federation-config", federation]
    if run_config:
        command += ["--run-config", format_run_config(run_config)]
    started = time.perf_counter()
    try:
        proc = subprocess.run(
            command,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=app_dir,
            check=False,
        )
        log, returncode = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as error:
        log = (
            (error.stdout or b"").decode()
            if isinstance(error.stdout, bytes)
            else (error.stdout or "")
        )
        returncode = -1
    finally:
        stop_pids(local_superlink_pids(home))
    seconds = time.perf_counter() - started
    match = re.findall(r"flowerbed: results go to (\S+)", log)
    run_dir = Path(match[-1]) if match and (Path(match[-1]) / "history.json").exists() else None
    return SimulationResult(returncode=returncode, log=log, run_dir=run_dir, seconds=seconds)
