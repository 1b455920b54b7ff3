"""FedBN: batch norm stays with each client, everything else is averaged (Li et al., ICLR 2021)."""

from __future__ import annotations

import json

import pytest
import torch
from flwr.app import ArrayRecord, Message, MessageType, MetricRecord, RecordDict
from flwr.serverapp.strategy import FedAvg
from torch import nn

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.inprocess import (
    InProcessGrid,
    resolve_run_config,
    run_in_process,
    use_server_identity,
)
from flowerbed.models import MODELS, Classifier
from flowerbed.server_app import run_protocol
from flowerbed.strategies.fedbn import STATE_KEY, batchnorm_keys, with_local_entries
from flowerbed.training.local_client import LocalClient


def tiny_bn_model(input_shape, num_classes) -> Classifier:
    """Conv(C, 4, 3x3) -> BatchNorm2d(4) -> ReLU -> Flatten | Linear(4*H*W, classes)."""
    channels, height, width = input_shape
    features = nn.Sequential(
        nn.Conv2d(channels, 4, kernel_size=3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.Flatten()
    )
    return Classifier(features, nn.Linear(4 * height * width, num_classes))


@pytest.fixture
def bn_model(monkeypatch):
    """Registers the tiny batch-norm model as ``tiny-bn`` for this test only."""
    monkeypatch.setitem(MODELS, "tiny-bn", tiny_bn_model)
    return "tiny-bn"


def test_batchnorm_keys_are_the_bn_layer_entries():
    model = tiny_bn_model((1, 8, 8), 10)
    assert batchnorm_keys(model) == [
        "features.1.weight",
        "features.1.bias",
        "features.1.running_mean",
        "features.1.running_var",
        "features.1.num_batches_tracked",
    ]
    assert batchnorm_keys(MODELS["cnn"]((1, 8, 8), 10)) == []


def test_aggregation_by_hand_keeps_bn_local_and_averages_the_rest():
    """Two clients, n = 1 and 3. Server: the n-weighted mean of every entry; a client then
    puts its own batch-norm entries back.  lin: (1*[1, 2] + 3*[5, 6]) / 4 = [4, 5];
    bn.weight: (1*10 + 3*20) / 4 = 17.5 on the server (evaluation model only), but client A
    trains next round from bn.weight = 10 (its own), client B from 20."""
    use_server_identity()
    local = {
        "A": {"lin": torch.tensor([1.0, 2.0]), "bn.weight": torch.tensor([10.0])},
        "B": {"lin": torch.tensor([5.0, 6.0]), "bn.weight": torch.tensor([20.0])},
    }
    replies = []
    for node, (name, n) in enumerate((("A", 1), ("B", 3)), start=1):
        sent = Message(RecordDict(), dst_node_id=node, message_type=MessageType.TRAIN)
        content = RecordDict(
            {"arrays": ArrayRecord(local[name]), "metrics": MetricRecord({"num-examples": n})}
        )
        replies.append(Message(content, reply_to=sent))
    aggregated, _ = FedAvg().aggregate_train(1, replies)
    received = aggregated.to_torch_state_dict()
    assert received["lin"].tolist() == [4.0, 5.0]
    assert received["bn.weight"].tolist() == [17.5]

    for name, own_bn in (("A", 10.0), ("B", 20.0)):
        merged = with_local_entries(received, {"bn.weight": local[name]["bn.weight"]})
        assert merged["lin"].tolist() == [4.0, 5.0]
        assert merged["bn.weight"].tolist() == [own_bn]
    # a client that has not trained yet starts from what it receives
    assert with_local_entries(received, None)["bn.weight"].tolist() == [17.5]
    with pytest.raises(ValueError, match="not in the received model"):
        with_local_entries(received, {"other.weight": torch.zeros(1)})


def test_federation_each_client_trains_from_its_own_bn_and_the_shared_average(
    bn_model, fast_run, monkeypatch
):
    """Three clients, two rounds, a model with batch norm, the real ServerApp and ClientApp.

    Every local training is spied on (the model it starts from and ends with). In round 2 each
    client must start from: non-BN entries = the n-weighted mean of the round-1 results, BN
    entries = its own round-1 result."""
    calls = {1: {}, 2: {}}  # round -> partition -> (start state, end state, n)
    real_train = LocalClient.train

    def spy(client, model, server_round, **hooks):
        start = {k: v.cpu().clone() for k, v in model.state_dict().items()}
        result = real_train(client, model, server_round, **hooks)
        end = {k: v.cpu().clone() for k, v in model.state_dict().items()}
        calls[server_round][client.partition_id] = (start, end, result.num_examples)
        return result

    monkeypatch.setattr(LocalClient, "train", spy)
    run_config = resolve_run_config({**fast_run, "strategy": "fedbn", "model": bn_model})
    grid = InProcessGrid(client_app, run_config, 3)
    run_dir = run_protocol(grid, parse_run_config(run_config))

    first, second = calls[1], calls[2]
    assert sorted(first) == sorted(second) == [0, 1, 2]
    bn_keys = set(batchnorm_keys(tiny_bn_model((1, 8, 8), 10)))
    total = sum(n for _, _, n in first.values())
    for key in first[0][1]:
        if key in bn_keys:
            for pid in range(3):
                assert torch.equal(second[pid][0][key], first[pid][1][key]), key
        else:
            mean = sum(end[key].double() * n / total for _, end, n in first.values())
            for pid in range(3):
                torch.testing.assert_close(second[pid][0][key].double(), mean, rtol=1e-5, atol=1e-6)
    # the clients' batch norms really differ (non-IID data), so the test is not vacuous
    means = [first[pid][1]["features.1.running_mean"] for pid in range(3)]
    assert not torch.allclose(means[0], means[1])
    # what each client keeps is its last local result
    for context in grid.contexts.values():
        pid = int(context.node_config["partition-id"])
        kept = context.state[STATE_KEY].to_torch_state_dict()
        assert set(kept) == bn_keys
        assert all(torch.equal(kept[k], second[pid][1][k]) for k in kept)
    history = json.loads((run_dir / "history.json").read_text())
    assert [row["clients_trained"] for row in history[1:]] == [3, 3]


def test_without_batch_norm_fedbn_is_fedavg(fast_run):
    """The MLP has no batch norm: FedBN must reproduce FedAvg bit for bit."""
    runs = {}
    for strategy in ("fedavg", "fedbn"):
        overrides = {**fast_run, "strategy": strategy, "model": "mlp", "run-name": strategy}
        runs[strategy] = run_in_process(overrides, num_clients=3)
    histories = {s: json.loads((d / "history.json").read_text()) for s, d in runs.items()}
    for a, b in zip(histories["fedavg"], histories["fedbn"]):
        assert a["central_accuracy"] == b["central_accuracy"]
        assert a["central_loss"] == b["central_loss"]
        assert a.get("client_accuracies") == b.get("client_accuracies")
    models = {s: torch.load(d / "model.pt") for s, d in runs.items()}
    assert all(torch.equal(models["fedavg"][k], models["fedbn"][k]) for k in models["fedavg"])
