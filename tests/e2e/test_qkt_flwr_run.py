"""QKT end to end through `flwr run .` (Flower's Ray backend): local training, the one transfer
round, the knowledge-transfer metrics on disk, and the same numbers as the in-process run."""

import json

import pytest
import torch

from flowerbed.core.processes import local_superlink_pids
from flowerbed.inprocess import run_in_process
from flowerbed.simulation import simulate

pytestmark = pytest.mark.e2e


def test_qkt_with_flwr_run(tmp_path):
    overrides = {
        "strategy": "qkt",
        "partitioner": "pathological",
        "optimizer": "adam",
        "learning-rate": 0.003,
        "kt-local-max-epochs": 3,
        "kt-local-patience": 2,
        "kt-epochs": 1,
        "kt-query-threshold": 10,
        "kt-query": "multi",
        "output-dir": str(tmp_path / "runs"),
    }
    home = tmp_path / "flwr-home"
    result = simulate(overrides, num_supernodes=4, flwr_home=home)
    assert result.returncode == 0, result.log[-3000:]
    assert local_superlink_pids(home) == [], "the local SuperLink was not stopped"
    assert "(local training)" in result.log and "(transfer)" in result.log
    history = result.history
    assert [row["round"] for row in history] == [1, 2]
    assert all(row["clients_trained"] == 4 and row["clients_failed"] == 0 for row in history)
    assert history[1]["bytes_sent"] > 2.9 * history[0]["bytes_received"]  # 3 teachers per student
    metrics = json.loads((result.run_dir / "kt_metrics.json").read_text())
    assert metrics["communication_rounds"] == 1 and metrics["query_mode"] == "multi"
    assert len(metrics["clients"]) == 4 and all(len(c["query"]) >= 2 for c in metrics["clients"])
    # Ray actors and this process run the same computation (one math thread each, as Ray's
    # actors have; float sums may still differ in the last bits)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        reference = json.loads(
            (run_in_process(overrides, num_clients=4) / "kt_metrics.json").read_text()
        )
    finally:
        torch.set_num_threads(threads)
    assert [c["query"] for c in metrics["clients"]] == [c["query"] for c in reference["clients"]]
    for key in ("acc", "query_gain", "forgetting", "uniform_acc"):
        assert metrics["summary"][key] == pytest.approx(reference["summary"][key], abs=0.03), key
