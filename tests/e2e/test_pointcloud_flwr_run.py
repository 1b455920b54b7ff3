"""Point clouds end to end through `flwr run .` (Flower's Ray backend): FedAvg trains a
PointNet on the offline shape set, with augmented training batches in the Ray actors."""

import pytest

from flowerbed.core.processes import local_superlink_pids
from flowerbed.simulation import simulate as flwr_run

pytestmark = pytest.mark.e2e


def test_fedavg_pointnet_on_shapes_with_flwr_run(tmp_path):
    overrides = {
        "dataset": "shapes",
        "model": "pointnet",
        "num-points": 64,
        "partitioner": "iid",
        "num-server-rounds": 2,
        "local-epochs": 2,
        "optimizer": "adam",
        "learning-rate": 1e-3,
        "batch-size": 24,
        "output-dir": str(tmp_path / "runs"),
    }
    home = tmp_path / "flwr-home"
    result = flwr_run(overrides, num_supernodes=2, flwr_home=home)
    assert result.returncode == 0, result.log[-3000:]
    assert local_superlink_pids(home) == [], "the local SuperLink was not stopped"
    rows = {row["round"]: row for row in result.history}
    assert rows[2]["clients_trained"] == 2 and rows[2]["clients_failed"] == 0
    assert rows[2]["central_accuracy"] > 1 / 6  # above chance on six classes
