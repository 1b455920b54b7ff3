"""End to end through `flwr run .` on Flower's Ray backend, each run with its own FLWR_HOME and
ports; `simulate` stops the detached local SuperLink by PID afterwards."""

import json
import os
import signal

import pytest

from flowerbed.core.processes import local_superlink_pids, processes
from flowerbed.inprocess import run_in_process
from flowerbed.simulation import results_folder, simulate

pytestmark = pytest.mark.e2e


def test_flwr_run_trains_logs_and_writes_results_like_the_in_process_run(tmp_path, fast_run):
    home = tmp_path / "flwr-home"
    overrides = {**fast_run, "failing-partitions": "2"}
    result = simulate(overrides, num_supernodes=4, flwr_home=home)
    assert result.returncode == 0, result.log[-3000:]
    assert local_superlink_pids(home) == [], "the local SuperLink was not stopped"
    assert result.ended_early == ""  # flwr run returned when the run had ended
    # the per-client label table and one concise line per round are in the log
    assert "label counts per client" in result.log and "client     0     1" in result.log
    assert "flowerbed round 2/2: test acc" in result.log
    history = result.history
    assert [row["round"] for row in history] == [0, 1, 2]
    for row in history[1:]:
        assert row["clients_trained"] == 3 and row["clients_failed"] == 1
    # Ray actors and the in-process path run the same computation. Ray gives each actor one
    # math thread, this process has two: float sums may differ in the last bits, no more.
    reference = json.loads((run_in_process(overrides, num_clients=4) / "history.json").read_text())
    assert [r["central_accuracy"] for r in history] == pytest.approx(
        [r["central_accuracy"] for r in reference], abs=1e-3
    )
    assert [r.get("train_loss") for r in history[1:]] == pytest.approx(
        [r.get("train_loss") for r in reference[1:]], rel=1e-5
    )


def test_a_run_that_flwr_run_leaves_behind_is_stopped_and_its_folder_says_why(tmp_path, fast_run):
    """``flwr run --stream`` can return while the SuperLink still runs the run (its log stream
    ended; here the command is stopped in round 2): the run is stopped with every process, the
    SuperLink's view of it is asked, and the run folder says why."""
    home, me = tmp_path / "flwr-home", os.getpid()

    def stop_flwr_run_only(line: str) -> None:
        if "[ROUND 2/" in line:
            for pid, parent, args in processes():
                if parent == me and " run " in args and "--stream" in args:
                    os.kill(pid, signal.SIGTERM)

    overrides = {**fast_run, "num-server-rounds": 50}
    result = simulate(overrides, num_supernodes=2, flwr_home=home, on_line=stop_flwr_run_only)
    assert local_superlink_pids(home) == [], "the local SuperLink was not stopped"
    assert result.returncode == -signal.SIGTERM, result.log[-3000:]
    said = "flwr run returned (exit status -15) while the SuperLink had run "
    assert result.ended_early.startswith(said), result.ended_early
    assert result.ended_early.endswith(" running; flowerbed stopped it")
    status = json.loads((results_folder(result.log) / "status.json").read_text())
    assert (status["status"], status["reason"]) == ("interrupted", result.ended_early)


def test_flwr_run_with_a_bad_value_stops_before_training(tmp_path, fast_run):
    result = simulate(
        {**fast_run, "partitioner": "zipf"}, num_supernodes=2, flwr_home=tmp_path / "home"
    )
    assert (
        "unknown partitioner 'zipf'; valid choices: iid, dirichlet, dirichlet-sized, pathological, label-sorted"
        in result.log
    )
    assert "[ROUND 1" not in result.log
    assert result.run_dir is None
    assert result.ended_early == ""  # the run ended (failed) before it made its folder


# The stateful strategies whose client state must survive between rounds inside Ray actors
# (SCAFFOLD's c_i, Ditto's personal model), two rounds each through the real `flwr run`.
STATEFUL = {"dataset": "digits", "num-server-rounds": 2, "local-epochs": 1}


@pytest.mark.parametrize("name", ["scaffold", "ditto"])
def test_stateful_strategy_runs_two_rounds_with_flwr_run(name, tmp_path):
    home = tmp_path / "flwr-home"
    overrides = {**STATEFUL, "strategy": name, "output-dir": str(tmp_path / "runs")}
    result = simulate(overrides, num_supernodes=4, flwr_home=home)
    assert result.returncode == 0, result.log[-3000:]
    assert local_superlink_pids(home) == [], "the local SuperLink is still running"
    rows = {row["round"]: row for row in result.history}
    for r in (1, 2):
        assert rows[r]["clients_trained"] == 4 and rows[r]["clients_failed"] == 0, rows[r]
        assert 0.0 <= rows[r]["central_accuracy"] <= 1.0


def test_flwr_run_with_an_attacker_and_a_robust_strategy_runs_like_in_process(tmp_path, fast_run):
    """Through Ray: partition 0 scales its update tenfold (the attack mod inside the actors),
    the trimmed mean aggregates; the same history as the in-process run."""
    overrides = {
        **fast_run,
        "model": "mlp",
        "strategy": "trimmedavg",
        "attack": "scale",
        "attackers": "0",
    }
    result = simulate(overrides, num_supernodes=4, flwr_home=tmp_path / "home")
    assert result.returncode == 0, result.log[-3000:]
    assert "this run is attacked on purpose: attack='scale' (attack-scale=10.0)" in result.log
    for row in result.history[1:]:
        assert row["clients_trained"] == 4 and row["clients_failed"] == 0
    reference = json.loads((run_in_process(overrides, num_clients=4) / "history.json").read_text())
    assert [r["central_accuracy"] for r in result.history] == pytest.approx(
        [r["central_accuracy"] for r in reference], abs=1e-3
    )


def test_flwr_run_drops_a_nonfinite_client_and_fails_a_run_without_clients(tmp_path, fast_run):
    """Through Ray: a client replying NaN weights is dropped (counted, named, the model stays
    finite); a run whose clients all fail ends `failed` in one log line, without model.pt."""
    overrides = {**fast_run, "model": "mlp", "failing-partitions": "1", "failure-mode": "nonfinite"}
    result = simulate(overrides, num_supernodes=3, flwr_home=tmp_path / "home-a")
    assert result.returncode == 0, result.log[-3000:]
    assert (
        "partition 1's reply was dropped: non-finite values (NaN or Inf) in arrays/" in result.log
    )
    for row in result.history[1:]:
        assert row["clients_trained"] == 2 and row["clients_failed"] == 1
    assert json.loads((result.run_dir / "status.json").read_text())["status"] == "completed"

    failing = {
        **fast_run,
        "model": "mlp",
        "failing-partitions": "0,1",
        "output-dir": str(tmp_path / "b"),
    }
    result = simulate(failing, num_supernodes=2, flwr_home=tmp_path / "home-b")
    assert (
        "flowerbed: run failed: round 1: no client succeeded (2 failed; partition 0: " in result.log
    )
    # one line, not a traceback (the failing clients' own tracebacks come from Flower's engine)
    assert "flowerbed/runtime/history.py" not in result.log
    (run_dir,) = (tmp_path / "b").iterdir()
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "failed" and status["reason"].startswith("round 1: no client")
    assert not (run_dir / "model.pt").exists()
