"""Federated then distilled through `flwr run .` (Flower's Ray backend): SCAFFOLD's rounds,
then the server distils the best round's global model into `mlp-small` without labels, and the
run folder holds what the in-process run of the same config holds."""

import json

import pytest

from flowerbed.core.processes import local_superlink_pids
from flowerbed.inprocess import run_in_process
from flowerbed.simulation import simulate as flwr_run

pytestmark = pytest.mark.e2e


def test_scaffold_then_unlabeled_feature_distillation_with_flwr_run(tmp_path, one_thread):
    overrides = {
        "strategy": "scaffold",
        "model": "mlp",
        "partitioner": "label-sorted",
        "num-server-rounds": 2,
        "local-epochs": 1,
        "distill-objective": "feature",
        "distill-mode": "unlabeled",
        "distill-teacher": "best",
        "distill-epochs": 2,
        "output-dir": str(tmp_path / "runs"),
    }
    home = tmp_path / "flwr-home"
    result = flwr_run(overrides, num_supernodes=3, flwr_home=home)
    assert result.returncode == 0, result.log[-3000:]
    assert local_superlink_pids(home) == [], "the local SuperLink was not stopped"
    assert "flowerbed: student mlp-small: test accuracy" in result.log
    summary = json.loads((result.run_dir / "distill.json").read_text())
    assert summary["label_free"] is True and summary["teacher"]["source"] == "best"
    assert (result.run_dir / "student.pt").exists()

    # the same computation in this process, with one math thread as Ray gives each actor
    same = run_in_process({**overrides, "output-dir": str(tmp_path / "same")}, 3)
    reference = json.loads((same / "distill.json").read_text())
    assert summary["teacher"]["round"] == reference["teacher"]["round"]
    assert summary["teacher"]["test_accuracy"] == pytest.approx(
        reference["teacher"]["test_accuracy"], abs=0.01
    )
    assert summary["student"]["final_test_accuracy"] == pytest.approx(
        reference["student"]["final_test_accuracy"], abs=0.02
    )
