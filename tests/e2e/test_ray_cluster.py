"""A simulation and a sweep on an existing two-node Ray cluster, and an address where no
cluster answers.

The cluster: ``ray start --head`` and one ``ray start --address`` worker on this machine, one
CPU each, each with its own short temp folder (Ray's socket paths must stay under 107
characters) and free ports. Ray replaces ``--node-ip-address 127.0.0.1`` by the machine's
own address and binds its ports on every interface: nothing leaves the machine, but the ports
are not loopback-only. Each ``ray start --block`` leads its own process group, which holds
every process Ray starts for that node (GCS, raylet, agents, the ClientApp actors); the
teardown stops those groups by PID, never with ``ray stop``, which would stop every Ray on
the machine.

Proof that clients ran on both nodes, without code for it in the package: Ray's timeline
(``ray.timeline``, read by joining the cluster as a driver after the run) says which worker
process executed each ``ClientAppActor.run`` task, and each node's log folder holds the log
files (``worker-<worker id>-<job id>-<pid>.err``) of the workers that ran on that node. A
sweep's points are counted in those logs directly: Ray writes ``:task_name:run_point`` into
a worker's ``.out`` log as each task starts.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from flowerbed.core.processes import (
    local_superlink_pids,
    processes,
    stop_local_superlink,
    with_descendants,
)
from flowerbed.simulation import (
    APP_DIR,
    SUPERLINK_TOO_SLOW,
    flwr_run_command,
    free_port,
    simulate,
    wait_for_local_superlink,
)
from flowerbed.sweep import Axis, SweepSpec, run_sweep

pytestmark = pytest.mark.e2e

RAY = str(Path(sys.executable).with_name("ray"))
STARTED = "Ray runtime started"


@dataclass
class RayNode:
    temp_dir: Path
    log: Path
    process: subprocess.Popen

    def log_text(self) -> str:
        return self.log.read_text(errors="replace")

    def task_starts(self, task: str) -> int:
        """How many times a worker on this node started ``task``: Ray writes the line
        ``:task_name:<task>`` into the worker's ``.out`` log as each task starts (for the
        driver's log prefixes), so it is there even when the task's timeline events are lost."""
        sessions = (p for p in self.temp_dir.glob("session_*") if not p.is_symlink())
        logs = (log for session in sessions for log in session.glob("logs/worker-*.out"))
        marker = f":task_name:{task}"
        return sum(log.read_text(errors="replace").count(marker) for log in logs)

    def worker_ids(self) -> set[str]:
        """Ids of the Ray worker processes that ran on this node (its log file names)."""
        names = (p.name for p in self.temp_dir.glob("session_*/logs/worker-*.err"))
        return {m[1] for name in names if (m := re.match(r"worker-([0-9a-f]+)-", name))}


@dataclass
class RayCluster:
    address: str = ""
    nodes: list[RayNode] = field(default_factory=list)

    def start_node(self, *options: str, timeout: float = 240) -> RayNode:
        """``ray start --block`` in a new session (it leads the process group of everything
        Ray starts for the node); returns once Ray reports the node started."""
        temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))  # short: socket paths
        log = temp_dir / "ray-start.log"  # removed with the folder
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        with open(log, "w") as out:
            process = subprocess.Popen(
                [RAY, "start", "--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1"]
                + ["--temp-dir", str(temp_dir), "--object-store-memory", str(100 * 2**20)]
                + ["--disable-usage-stats", *options],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        node = RayNode(temp_dir, log, process)
        self.nodes.append(node)
        deadline = time.monotonic() + timeout
        while STARTED not in node.log_text():
            assert process.poll() is None, f"ray start exited:\n{node.log_text()[-3000:]}"
            assert time.monotonic() < deadline, f"no Ray node after {timeout} s:\n{node.log_text()}"
            time.sleep(0.5)
        return node

    def stop(self) -> list[int]:
        """SIGTERM to each node's process group (``ray start --block`` stops its node), then
        SIGKILL whatever is left; returns the PIDs still alive after that (none expected)."""
        groups = [node.process.pid for node in self.nodes]
        for group in reversed(groups):  # the worker before the head
            signal_group(group, signal.SIGTERM)
        deadline = time.monotonic() + 30
        while members(groups) and time.monotonic() < deadline:
            time.sleep(0.5)
        for group in groups:
            signal_group(group, signal.SIGKILL)
        for node in self.nodes:
            node.process.wait(timeout=30)
        time.sleep(1)
        left = members(groups)
        for node in self.nodes:
            shutil.rmtree(node.temp_dir, ignore_errors=True)
        return left


def signal_group(group: int, signum: int) -> None:
    try:
        os.killpg(group, signum)
    except ProcessLookupError:
        pass


def members(groups: list[int]) -> list[int]:
    """PIDs of the live processes in these process groups."""
    ps = ["ps", "-eo", "pid=,pgid=,stat="]
    out = subprocess.run(ps, capture_output=True, text=True, check=False)
    rows = (line.split() for line in out.stdout.splitlines())
    return [int(pid) for pid, pgid, stat in rows if int(pgid) in groups and "Z" not in stat]


@pytest.fixture(scope="module")
def ray_cluster():
    """Head and one worker, one CPU each: Flower's pool gets one ClientApp actor per node."""
    cluster = RayCluster()
    try:
        port = free_port()
        cluster.start_node(
            "--head",
            "--port",
            str(port),
            "--ray-client-server-port",
            str(free_port()),
            "--dashboard-port",
            str(free_port()),
            "--include-dashboard=false",
        )
        cluster.address = f"127.0.0.1:{port}"
        cluster.start_node("--address", cluster.address)
        yield cluster
    finally:
        left = cluster.stop()
    assert left == [], f"Ray processes left after the teardown: {left}"


def tasks_per_node(cluster: RayCluster, task: str) -> list[int]:
    """How many ``task`` executions each node of ``cluster`` ran (Ray's timeline joined with
    the nodes' worker log files)."""
    import ray

    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    try:
        events = ray.timeline()
    finally:
        ray.shutdown()
    workers = Counter(e["tid"].split(":", 1)[1] for e in events if e["cat"] == f"task::{task}")
    return [sum(workers[w] for w in node.worker_ids()) for node in cluster.nodes]


def test_simulation_runs_clients_on_both_nodes_of_an_existing_ray_cluster(
    ray_cluster, tmp_path, fast_run
):
    home = tmp_path / "flwr-home"
    result = simulate(fast_run, num_supernodes=4, flwr_home=home, ray_address=ray_cluster.address)
    assert result.returncode == 0, result.log[-3000:]
    assert local_superlink_pids(home) == []
    assert (
        f"flowerbed: clients run on the Ray cluster at {ray_cluster.address} (from RAY_ADDRESS)"
        in result.log
    )
    rows = {row["round"]: row for row in result.history}
    assert sorted(rows) == [0, 1, 2]
    for r in (1, 2):
        assert rows[r]["clients_trained"] == 4 and rows[r]["clients_failed"] == 0, rows[r]
    # 4 clients x (the partition handshake + 2 rounds x (train + evaluate)) = 20 ClientApp
    # calls, shared by the two nodes. Ray may drop the task events of a worker's last second
    # when the run's driver exits, so the timeline can count fewer, never more.
    runs = tasks_per_node(ray_cluster, "ClientAppActor.run")
    print(f"ClientApp calls per node (head, worker): {runs}")
    assert min(runs) > 0 and sum(runs) <= 20, runs


def test_a_sweep_runs_its_points_on_both_nodes_of_an_existing_ray_cluster(ray_cluster, tmp_path):
    """``flowerbed sweep --ray-address``: each point is a Ray task (one CPU); with one CPU per
    node and two workers, both nodes run points, into the one sweep folder."""
    spec = SweepSpec(
        (Axis.of_key("strategy", ["fedavg", "fedprox"]), Axis.of_key("seed", [0, 1])),
        {"num-server-rounds": 1, "local-epochs": 1, "model": "mlp", "data-dir": str(tmp_path)},
        num_clients=2,
    )
    results = run_sweep(
        spec, tmp_path / "sweep", workers=2, ray_address=ray_cluster.address, progress=False
    )
    assert [r.state.status for r in results] == ["completed"] * 4, [r.state for r in results]
    assert (tmp_path / "sweep" / "summary.csv").read_text().count("\n") == 3  # header + 2
    # Counted from the workers' logs: Ray's timeline lost the task events of the worker
    # node's last points once (CI counted [2, 0] for a sweep that completed 4 points).
    points = [node.task_starts("run_point") for node in ray_cluster.nodes]
    print(f"sweep points per node (head, worker): {points}")
    assert min(points) > 0 and sum(points) == 4, points


def flwr_run_until(command: list[str], env: dict, text: str, timeout: float) -> list[str]:
    """Run ``flwr run`` until its streamed log shows ``text`` or ``timeout`` seconds pass, then
    kill it; its output lines. As ``simulate`` does, once more when Flower gave up waiting for
    a slow local SuperLink."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    for _ in range(2):
        run = subprocess.Popen(
            command,
            env=env,
            cwd=APP_DIR,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        reader = threading.Thread(target=lines.extend, args=(run.stdout,), daemon=True)
        reader.start()  # extend appends each line as it comes
        try:
            while not any(text in line for line in lines) and time.monotonic() < deadline:
                if run.poll() is not None and not reader.is_alive():
                    break
                time.sleep(0.5)
        finally:
            run.kill()
            run.wait()
        slow = SUPERLINK_TOO_SLOW in "".join(lines) and not any(text in line for line in lines)
        if not slow or not wait_for_local_superlink(env, timeout=120):
            return lines
    return lines


def test_flwr_run_with_an_unanswering_ray_address_fails_in_one_line_before_round_one(
    tmp_path, fast_run
):
    """What a user of plain ``flwr run`` meets: RAY_ADDRESS in the environment of the run's
    SuperLink. Ray itself would wait about twelve minutes without a word in the run's log;
    the ServerApp reports the address at once and sends no message."""
    port = free_port()
    home = tmp_path / "flwr-home"
    command, env = flwr_run_command(fast_run, 2, 1, home, ray_address=f"127.0.0.1:{port}")
    expected = f"flowerbed: run failed: RAY_ADDRESS='127.0.0.1:{port}': no Ray cluster answers"
    started = time.monotonic()
    try:
        log = "".join(flwr_run_until(command, env, expected, timeout=300))
        seconds = time.monotonic() - started
        runtime = with_descendants(local_superlink_pids(home))  # SuperLink, SuperExec, simulation
    finally:
        stop_local_superlink(home)
    assert expected in log, log[-3000:]
    assert "[ROUND 1" not in log and "results go to" not in log
    print(f"the error reached the run's log {seconds:.1f} s after flwr run started")
    deadline = time.monotonic() + 15  # killed, then reaped by their new parent
    while (
        left := {pid for pid, _, _ in processes()} & set(runtime)
    ) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert len(runtime) >= 3 and not left, f"still running: {left} of {runtime}"
