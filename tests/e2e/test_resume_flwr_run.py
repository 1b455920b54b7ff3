"""Resume and reproducibility through `flwr run`: a SCAFFOLD simulation whose processes are
killed (SIGKILL, the local SuperLink with everything it started: ServerApp, Ray, ClientApps)
after round 2 leaves its `status.json` at `running` and its lock behind; whoever looks (here
the sweep's reader) sees it `interrupted`, its ServerApp process gone; it goes on with
`resume=<run folder>` in a new `flwr run` and writes the history of an uninterrupted run, byte
for byte. Two Ray actors train clients side by side in every one of
these runs, so replies arrive in either order: client sampling (3 of 4 per round), aggregation
and the history depend on the seed alone (the same guarantee in process: tests/test_catalog.py,
every protocol twice)."""

import json
import os
import signal
import threading
import time

import pytest

from flowerbed.core.processes import local_superlink_pids, with_descendants
from flowerbed.runtime.checkpoint import checkpointed_round
from flowerbed.runtime.run_lock import LOCK_FILE, read_lock
from flowerbed.simulation import simulate
from flowerbed.sweep.folder import point_state

pytestmark = pytest.mark.e2e

ROUNDS = 4
CONFIG = {
    "strategy": "scaffold",
    "dataset": "digits",
    "model": "mlp",
    "local-epochs": 1,
    "num-server-rounds": ROUNDS,
    # 3 of 4 clients per round: the sample of every round is a function of the seed and the
    # round (rounds_strategy), whatever Flower's heartbeat thread drew from `random` meanwhile,
    # and a client skipped in round 3 resumes with the state it saved before the kill
    "fraction-train": 0.75,
}


def kill_after_round(run_config: dict, out, home, after_round: int):
    """Start the simulation; SIGKILL its whole process tree once round ``after_round`` is
    checkpointed. Returns the run folder."""
    thread = threading.Thread(target=simulate, args=(run_config, 4), kwargs={"flwr_home": home})
    thread.start()
    deadline = time.monotonic() + 600
    folders = []
    while time.monotonic() < deadline and thread.is_alive():
        folders = list(out.glob("*")) if out.is_dir() else []
        if folders and checkpointed_round(folders[0]) >= after_round:
            for pid in with_descendants(local_superlink_pids(home)):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        time.sleep(0.05)
    thread.join(timeout=300)
    assert folders, "the run made no folder"
    return folders[0]


def test_scaffold_killed_after_round_2_resumes_through_flwr_run_into_the_same_history(tmp_path):
    data = str(tmp_path / "data")
    reference = simulate(
        {**CONFIG, "output-dir": str(tmp_path / "reference"), "data-dir": data},
        num_supernodes=4,
        flwr_home=tmp_path / "home-reference",
    )
    assert reference.returncode == 0 and reference.run_dir is not None, reference.log[-3000:]
    assert [row.get("clients_trained") for row in reference.history[1:]] == [3] * ROUNDS

    out = tmp_path / "killed"
    killed_config = {**CONFIG, "output-dir": str(out), "data-dir": data}
    run_dir = kill_after_round(killed_config, out, tmp_path / "home-killed", after_round=2)
    status = json.loads((run_dir / "status.json").read_text())["status"]
    assert status == "running", "the run was not killed before it ended"
    assert 2 <= checkpointed_round(run_dir) < ROUNDS
    lock = read_lock(run_dir)  # left behind by the killed ServerApp process
    assert lock is not None and lock["pid"] != os.getpid()
    state = point_state(out)  # the run folders under `out`, as a sweep reads them
    assert (state.status, state.run_dir) == ("interrupted", run_dir)
    assert f"its process (PID {lock['pid']} on host {lock['host']}) is gone" in state.reason
    assert json.loads((run_dir / "status.json").read_text())["status"] == "interrupted"

    resumed = simulate(
        {**killed_config, "resume": str(run_dir)},
        num_supernodes=4,
        flwr_home=tmp_path / "home-resumed",
    )
    assert resumed.returncode == 0 and resumed.run_dir == run_dir, resumed.log[-3000:]
    assert f"flowerbed round {ROUNDS}/{ROUNDS}" in resumed.log
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"
    assert not (run_dir / LOCK_FILE).exists()
    assert (run_dir / "history.json").read_bytes() == (
        reference.run_dir / "history.json"
    ).read_bytes()
