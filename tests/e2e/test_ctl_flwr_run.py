"""CTL end to end through `flwr run .` (Flower's Ray backend): the node models live in the Ray
actors' context state, the server relays predictions and coefficient rows, and the accuracy
curves are those of the NumPy reference simulator."""

import json

import numpy as np
import pytest

from flowerbed.catalog import parse_run_config
from flowerbed.core.processes import local_superlink_pids
from flowerbed.inprocess import resolve_run_config
from flowerbed.methods.ctl.reference import nodes_for, params_for, simulate
from flowerbed.simulation import simulate as flwr_run

pytestmark = pytest.mark.e2e


def test_ctl_with_flwr_run(tmp_path):
    overrides = {
        "strategy": "ctl",
        "dataset": "breast-cancer-shifted",
        "sim-shifts": 20,
        "partitioner": "kmeans-pca",
        "num-server-rounds": 3,
        "seed": 3,
        "output-dir": str(tmp_path / "runs"),
    }
    home = tmp_path / "flwr-home"
    result = flwr_run(overrides, num_supernodes=4, flwr_home=home)
    assert result.returncode == 0, result.log[-3000:]
    assert local_superlink_pids(home) == [], "the local SuperLink was not stopped"
    assert "CTL (best guests) final accuracy" in result.log
    history = result.history
    assert [row["round"] for row in history] == [0, 1, 2, 3]
    assert all(row["clients_trained"] == 4 for row in history[1:])
    log = json.loads((result.run_dir / "ctl_metrics.json").read_text())
    flower = np.array([[n["task-accuracies"] for n in r["nodes"]] for r in log["rounds"]])
    config = parse_run_config(resolve_run_config(overrides))
    reference = simulate(nodes_for(config, 4), params_for(config))["accuracy"]
    np.testing.assert_array_equal(flower, reference)
