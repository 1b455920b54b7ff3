"""The ServerApp job with the real ClientApp handlers, in process (no Ray): fast checks of the
whole pipeline. ``test_simulation_e2e.py`` runs the same through ``flwr run``."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Context, RecordDict

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.core.results import round_seconds
from flowerbed.data import DataNotFoundError
from flowerbed.data.federation import load_splits, partition_for
from flowerbed.inprocess import InProcessGrid, resolve_run_config, run_in_process
from flowerbed.models import build_model
from flowerbed.server_app import run_protocol
from flowerbed.strategies.common import aggregate_with_spread
from flowerbed.training.local_client import LocalClient


def history_of(run_dir):
    return json.loads((run_dir / "history.json").read_text())


def test_run_writes_every_result_file(fast_run):
    run_dir = run_in_process(fast_run, num_clients=4)
    names = {p.name for p in run_dir.iterdir()}
    assert {
        "config.json",
        "partitions.csv",
        "partitions.json",
        "history.json",
        "history.csv",
        "accuracy.png",
        "model.pt",
        "model_best.pt",
        "model_best.json",
        "timings.csv",
    } <= names
    assert not [n for n in names if n.endswith(".tmp")], "a temporary file was left behind"
    config = json.loads((run_dir / "config.json").read_text())
    assert config["num-partitions"] == 4 and config["num-server-rounds"] == 2
    history = history_of(run_dir)
    assert [row["round"] for row in history] == [0, 1, 2]
    with open(run_dir / "history.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3 and float(rows[2]["central_accuracy"]) == pytest.approx(
        history[2]["central_accuracy"]
    )
    # wall-clock seconds are in timings.csv, not in the history (which a seed reproduces)
    assert "seconds" not in history[1] and "seconds" not in rows[1]
    seconds = round_seconds(run_dir)
    assert len(seconds) == 2 and all(s > 0 for s in seconds)
    # the saved model is the final global model: it reproduces the last central accuracy
    splits = load_splits(parse_run_config(resolve_run_config(fast_run)))
    model = build_model("cnn", splits.input_shape, splits.num_classes)
    model.load_state_dict(torch.load(run_dir / "model.pt"))
    accuracy = (model.eval()(splits.x_test).argmax(1) == splits.y_test).float().mean().item()
    assert accuracy == pytest.approx(history[-1]["central_accuracy"], abs=1e-6)


def test_the_best_round_is_saved_with_its_round(fast_run):
    # a diverging learning rate: the best round (3) is not the last
    overrides = {**fast_run, "model": "mlp", "learning-rate": 1.0, "num-server-rounds": 4}
    run_dir = run_in_process(overrides, num_clients=4)
    accuracies = [row["central_accuracy"] for row in history_of(run_dir)]
    best_round = int(np.argmax(accuracies))  # the first of equal maxima
    assert best_round != len(accuracies) - 1, accuracies  # the case this test is about
    best = json.loads((run_dir / "model_best.json").read_text())
    assert best == {
        "round": best_round,
        "central_accuracy": accuracies[best_round],
        "selected_on": "test",
    }
    splits = load_splits(parse_run_config(resolve_run_config(overrides)))
    model = build_model("mlp", splits.input_shape, splits.num_classes)
    model.load_state_dict(torch.load(run_dir / "model_best.pt"))
    accuracy = (model.eval()(splits.x_test).argmax(1) == splits.y_test).float().mean().item()
    assert accuracy == pytest.approx(accuracies[best_round], abs=1e-6)


def test_training_improves_the_global_model(fast_run):
    history = history_of(run_in_process({**fast_run, "num-server-rounds": 3}, num_clients=5))
    assert history[-1]["central_accuracy"] > history[0]["central_accuracy"] + 0.3
    assert history[-1]["train_loss"] < history[1]["train_loss"]


def test_same_config_and_seed_give_the_same_history(fast_run):
    first = (run_in_process(fast_run, num_clients=4) / "history.json").read_bytes()
    second = (run_in_process(fast_run, num_clients=4) / "history.json").read_bytes()
    assert first == second
    other = run_in_process({**fast_run, "seed": 7}, num_clients=4) / "history.json"
    assert other.read_bytes() != first


def test_partial_participation_samples_the_requested_fraction(fast_run):
    history = history_of(run_in_process({**fast_run, "fraction-train": 0.5}, num_clients=6))
    assert [row.get("clients_trained") for row in history[1:]] == [3, 3]


def test_failing_client_is_counted_and_the_round_goes_on(fast_run):
    history = history_of(run_in_process({**fast_run, "failing-partitions": "1"}, num_clients=4))
    for row in history[1:]:
        assert row["clients_trained"] == 3 and row["clients_failed"] == 1
        assert "partition 1 fails on purpose" in row["failures"][0]
        assert math.isfinite(row["central_accuracy"])


def test_bytes_are_the_model_size_times_the_messages(fast_run):
    run_dir = run_in_process(fast_run, num_clients=4)
    splits = load_splits(parse_run_config(resolve_run_config(fast_run)))
    model_bytes = ArrayRecord(
        build_model("cnn", splits.input_shape, splits.num_classes).state_dict()
    ).count_bytes()
    row = history_of(run_dir)[1]
    # 4 train messages carry the model (+ a tiny config record); 4 evaluate messages too
    assert 8 * model_bytes <= row["bytes_sent"] < 8 * model_bytes + 8 * 200
    # 4 train replies carry the model and small metric records; evaluate replies only metrics
    assert 4 * model_bytes <= row["bytes_received"] < 4 * model_bytes + 8 * 300


def test_client_accuracy_spread_matches_the_per_client_values(fast_run):
    row = history_of(run_in_process(fast_run, num_clients=4))[2]
    values = list(row["client_accuracies"].values())
    assert len(values) == 4
    assert row["client_accuracy_unweighted_mean"] == pytest.approx(np.mean(values))
    assert row["client_accuracy_std"] == pytest.approx(np.std(values))


def test_every_client_gets_the_partition_the_server_computed(fast_run):
    run_config = resolve_run_config(fast_run)
    config = parse_run_config(run_config)
    server_parts = partition_for(config, 5)
    for pid in range(5):
        context = Context(
            run_id=1,
            node_id=pid,
            node_config={"partition-id": pid, "num-partitions": 5},
            state=RecordDict(),
            run_config=run_config,
        )
        client = LocalClient.from_context(context, parse_run_config(context.run_config))
        local = torch.cat([client.y_train, client.y_test]).sort().values
        expected = client.data.y_train[torch.from_numpy(server_parts[pid])].sort().values
        assert torch.equal(local, expected)
        assert len(client.y_test) == round(0.2 * len(server_parts[pid]))


def test_missing_data_file_fails_before_any_client_trains(fast_run, tmp_path):
    calls = []

    def spying_app(message, context):
        calls.append(message.metadata.message_type)
        return client_app(message, context)

    run_config = resolve_run_config({**fast_run, "dataset": "bloodmnist"})

    with pytest.raises(DataNotFoundError, match="bloodmnist.npz"):
        run_protocol(InProcessGrid(spying_app, run_config, 3), parse_run_config(run_config))
    assert calls == []


def test_more_clients_than_samples_fails_before_training(fast_run):
    with pytest.raises(ValueError, match="clients but only"):
        run_in_process(
            {
                **fast_run,
                "dataset": "breast-cancer",
                "model": "mlp",
                "partitioner": "iid",
                "min-partition-size": 0,
            },
            num_clients=500,
        )


def test_model_that_does_not_fit_the_data_fails_before_training(fast_run):
    with pytest.raises(ValueError, match="model='resnet18' cannot take dataset='breast-cancer'"):
        run_in_process({**fast_run, "dataset": "breast-cancer", "model": "resnet18"}, 2)
    assert not list(Path(fast_run["output-dir"]).glob("*"))  # refused before the run folder


def test_a_data_set_named_alone_takes_the_model_that_fits_it(fast_run):
    run_dir = run_in_process({**fast_run, "dataset": "breast-cancer"}, num_clients=2)
    config = json.loads((run_dir / "config.json").read_text())
    assert config["model"] == "mlp" and config["protocol-defaults"] == "model"


def test_metric_aggregation_adds_the_spread_and_drops_the_partition_id():
    from flwr.app import MetricRecord

    records = [
        RecordDict({"metrics": MetricRecord({"num-examples": n, "accuracy": a, "partition-id": p})})
        for n, a, p in ((10, 0.5, 0), (30, 0.9, 1))
    ]
    metrics = aggregate_with_spread(records, "num-examples")
    assert metrics["accuracy"] == pytest.approx((10 * 0.5 + 30 * 0.9) / 40)
    assert metrics["accuracy-std"] == pytest.approx(0.2)
    assert metrics["accuracy-min"] == 0.5 and metrics["accuracy-max"] == 0.9
    assert "partition-id" not in metrics
