"""End to end through `flwr run .` (Ray): the VQC trained with QFedFisher for two rounds."""

import pytest
from flwr.app import ArrayRecord

from flowerbed.core.processes import local_superlink_pids
from flowerbed.models.vqc import build_vqc
from flowerbed.simulation import simulate

pytestmark = pytest.mark.e2e


def test_flwr_run_trains_the_vqc_with_qfedfisher(tmp_path):
    home = tmp_path / "flwr-home"
    overrides = {
        "strategy": "qfedfisher",
        "model": "vqc",
        "dataset": "breast-cancer",
        "vqc-layers": 2,
        "num-server-rounds": 2,
        "local-epochs": 1,
        "optimizer": "adam",
        "learning-rate": 0.05,
        "output-dir": str(tmp_path / "runs"),
        "data-dir": str(tmp_path / "data"),
    }
    result = simulate(overrides, num_supernodes=3, flwr_home=home)
    assert result.returncode == 0, result.log[-3000:]
    assert local_superlink_pids(home) == [], "the local SuperLink was not stopped"
    assert "QFedFisher round 2:" in result.log and "entries not significant" in result.log
    history = result.history
    model = build_vqc((30,), 2, layers=2)  # breast-cancer: 5 qubits, all entries trainable
    model_bytes = ArrayRecord(model.state_dict()).count_bytes()
    assert [row["round"] for row in history] == [0, 1, 2]
    for row in history[1:]:
        assert row["clients_trained"] == 3 and row["clients_failed"] == 0
        # each training reply carries the parameters and their Fisher record
        assert row["bytes_received"] >= 3 * 2 * model_bytes
        assert 0.0 <= row["server_fisher_substituted_fraction"] <= 1.0
    assert 0.0 <= history[-1]["central_accuracy"] <= 1.0
