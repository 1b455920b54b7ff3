"""The recording grid drops poisoned replies: a client that sends NaN or Inf weights (the
``nonfinite`` failure mode of the fault-injection mod) is counted as failed, with the reason, and
the global model is the aggregate of the others, exactly as if that client had raised, for every
family of server rule."""

import json

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, MetricRecord, RecordDict

from flowerbed.inprocess import run_in_process, use_server_identity
from flowerbed.runtime.recording_grid import nonfinite_entry

POISONED = 1


def test_nonfinite_entry_finds_nan_and_inf_in_arrays_and_counts():
    use_server_identity()
    finite = RecordDict({"arrays": ArrayRecord({"w": torch.ones(2)})})
    assert nonfinite_entry(finite) is None
    assert (
        nonfinite_entry(RecordDict({"arrays": ArrayRecord({"w": torch.tensor([1.0, np.inf])})}))
        == "arrays/w"
    )
    counts = RecordDict({"metrics": MetricRecord({"num-examples": float("nan"), "loss": 1.0})})
    assert nonfinite_entry(counts) == "metrics/num-examples"
    # other metrics may be NaN by design (the accuracy of an empty split)
    assert (
        nonfinite_entry(RecordDict({"metrics": MetricRecord({"accuracy": float("nan")})})) is None
    )


VQC = {"model": "vqc", "vqc-layers": 1, "optimizer": "adam"}
KT = {"kt-local-max-epochs": 2, "kt-local-patience": 1, "kt-epochs": 1, "kt-query-threshold": 10}


@pytest.mark.parametrize(
    "overrides",
    [
        {"strategy": "fedavg"},
        {"strategy": "fedmedian"},
        {"strategy": "fedadam"},
        {"strategy": "fednova", "local-epochs-max": 2},
        {"strategy": "scaffold"},
        {"strategy": "qfedfisher", **VQC},
        {"strategy": "qkt", "partitioner": "pathological", **KT},
    ],
    ids=lambda o: o["strategy"],
)
def test_a_poisoned_client_counts_as_failed_and_the_others_are_aggregated(overrides, tmp_path):
    common = {"num-server-rounds": 2, "local-epochs": 1, "model": "mlp", **overrides}
    common["failing-partitions"] = str(POISONED)
    poisoned = run_in_process(
        {**common, "failure-mode": "nonfinite", "output-dir": str(tmp_path / "a")}, 4
    )
    failing = run_in_process({**common, "output-dir": str(tmp_path / "b")}, 4)
    history = json.loads((poisoned / "history.json").read_text())
    reference = json.loads((failing / "history.json").read_text())
    first = history[0] if overrides["strategy"] == "qkt" else history[1]
    assert first["clients_failed"] == 1 and first["clients_trained"] == 3
    assert "partition 1: non-finite values (NaN or Inf) in arrays/" in first["failures"][0]
    column = (
        "client_models_test_accuracy_mean" if "qkt" in overrides["strategy"] else "central_accuracy"
    )
    assert [r[column] for r in history] == [r[column] for r in reference]
    if (poisoned / "model.pt").exists():
        model = torch.load(poisoned / "model.pt")
        expected = torch.load(failing / "model.pt")
        assert all(torch.isfinite(v).all() for v in model.values() if v.is_floating_point())
        assert all(torch.equal(model[k], expected[k]) for k in model)
    else:
        kt = json.loads((poisoned / "kt_metrics.json").read_text())["clients"]
        assert kt == json.loads((failing / "kt_metrics.json").read_text())["clients"]
