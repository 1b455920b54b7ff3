"""MOON: model-contrastive local training (Li, He, Song, CVPR 2021)."""

from __future__ import annotations

import json
import math

import pytest
import torch
from torch import nn

from flowerbed.catalog import parse_run_config
from flowerbed.core.device import device_of
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.models import MODELS, Classifier
from flowerbed.models.mlp import build_mlp
from flowerbed.settings import ConfigError
from flowerbed.strategies import get_strategy
from flowerbed.strategies.moon import (
    STATE_KEY,
    model_contrastive_loss,
    moon_loss,
    moon_model,
    train_moon,
    with_projection_head,
)


def test_contrastive_loss_by_hand():
    """z = [(1, 0), (0, 1)], z_glob = [(1, 1), (0, 1)], z_prev = [(-1, 0), (1, 1)], T = 0.5.

    Sample 1: sim+ = 1/sqrt2, sim- = -1  -> l = -log(e^{sqrt2} / (e^{sqrt2} + e^{-2}));
    sample 2: sim+ = 1, sim- = 1/sqrt2   -> l = -log(e^{2} / (e^{2} + e^{sqrt2})); mean of both.
    """
    z = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    z_glob = torch.tensor([[1.0, 1.0], [0.0, 1.0]])
    z_prev = torch.tensor([[-1.0, 0.0], [1.0, 1.0]])
    r2 = math.sqrt(2.0)
    l1 = -math.log(math.exp(r2) / (math.exp(r2) + math.exp(-2.0)))
    l2 = -math.log(math.exp(2.0) / (math.exp(2.0) + math.exp(r2)))
    loss = model_contrastive_loss(z, z_glob, z_prev, temperature=0.5)
    assert loss.item() == pytest.approx((l1 + l2) / 2, rel=1e-6)
    # cosine similarity ignores the scale of the representations
    scaled = model_contrastive_loss(3 * z, 0.5 * z_glob, 2 * z_prev, temperature=0.5)
    assert scaled.item() == pytest.approx(loss.item(), rel=1e-6)
    # no previous model (a client's first round): only the positive pair, -log 1 = 0
    assert model_contrastive_loss(z, z_glob, None, temperature=0.5).item() == 0.0


def test_local_loss_is_cross_entropy_plus_mu_times_contrastive_by_hand():
    """The loss wires z, z_glob and z_prev to the trained, global and previous model's
    representation: features are Linear(2, 2) maps, so every z is computable by hand."""

    def model(weight: list[list[float]]) -> Classifier:
        features = nn.Linear(2, 2, bias=False)
        head = nn.Linear(2, 2, bias=False)
        with torch.no_grad():
            features.weight.copy_(torch.tensor(weight))
            head.weight.copy_(torch.eye(2))
        return Classifier(features, head)

    x = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    y = torch.tensor([0, 1])
    local = model([[1.0, 0.0], [0.0, 1.0]])  # z = x = [(1, 0), (0, 1)]
    global_model = model([[1.0, 0.0], [1.0, 1.0]])  # z_glob = x W^T = [(1, 1), (0, 1)]
    previous = model([[-1.0, 1.0], [0.0, 1.0]])  # z_prev = [(-1, 0), (1, 1)]
    mu, seen = 2.0, []
    loss = moon_loss(global_model, previous, mu, 0.5, seen)(local, x, y)
    # logits = z (identity head): CE of [(1, 0), (0, 1)] with labels 0, 1 = log(1 + e^-1)
    ce = math.log(1.0 + math.exp(-1.0))
    r2 = math.sqrt(2.0)
    l_con = (
        -math.log(math.exp(r2) / (math.exp(r2) + math.exp(-2.0)))
        - math.log(math.exp(2.0) / (math.exp(2.0) + math.exp(r2)))
    ) / 2
    assert loss.item() == pytest.approx(ce + mu * l_con, rel=1e-6)
    assert seen == [pytest.approx(l_con, rel=1e-6)]
    loss.backward()  # gradients reach the trained model only
    assert local.features.weight.grad is not None
    assert global_model.features.weight.grad is None and previous.features.weight.grad is None


def test_model_has_projection_head_and_output_layer_on_the_projection():
    config = parse_run_config(
        resolve_run_config({"strategy": "moon", "model": "cnn", "moon-projection-dim": 16})
    )
    model = moon_model(config, (1, 8, 8), 10)
    projection = model.features.projection
    assert [(m.in_features, m.out_features) for m in projection if isinstance(m, nn.Linear)] == [
        (128, 128),
        (128, 16),
    ]
    assert (model.head.in_features, model.head.out_features) == (16, 10)
    x = torch.randn(5, 1, 8, 8, device=device_of(model))
    assert model.features(x).shape == (5, 16)  # R_w(x): the compared representation
    assert model(x).shape == (5, 10)
    assert (
        get_strategy("moon").build_model(config, (1, 8, 8), 10).state_dict().keys()
        == model.state_dict().keys()
    )
    assert not hasattr(MODELS["cnn"]((1, 8, 8), 10).features, "projection")  # registry untouched


def test_client_keeps_its_model_and_contrasts_with_it_next_round(fl, monkeypatch):
    """Round 1: no previous model, l_con = 0. The trained model is stored; in round 2 it is
    the negative of the contrastive loss (l_con > 0)."""
    monkeypatch.setitem(MODELS, "tiny-mlp", lambda shape, classes: build_mlp(shape, classes, 8))
    torch.manual_seed(0)
    x, y = torch.randn(16, 4), torch.arange(16) % 2
    settings = {
        "strategy": "moon",
        "learning-rate": 0.1,
        "batch-size": 8,
        "local-epochs": 1,
        "moon-projection-dim": 4,
    }
    client = fl.tiny_client("tiny-mlp", x, y, 2, **settings)
    global_1 = moon_model(client.config, (4,), 2).state_dict()
    reply = train_moon(client, fl.train_message(global_1, 1))
    assert reply.content.metric_records["metrics"]["contrastive-loss"] == 0.0
    sent = reply.content.array_records["arrays"].to_torch_state_dict()
    kept = client.context.state[STATE_KEY].to_torch_state_dict()
    assert all(torch.equal(sent[k], kept[k]) for k in sent)

    reply = train_moon(client, fl.train_message(sent, 2))  # the server's average, say
    assert reply.content.metric_records["metrics"]["contrastive-loss"] > 0.0


@pytest.mark.parametrize(
    "key, value", [("moon-temperature", 0.0), ("moon-mu", -1.0), ("moon-projection-dim", 0)]
)
def test_bad_settings_are_rejected(key, value):
    with pytest.raises(ConfigError, match=key):
        parse_run_config(resolve_run_config({"strategy": "moon", key: value}))


def test_mu_zero_trains_like_fedavg_on_the_same_network(fast_run, monkeypatch):
    """With mu = 0 MOON is FedAvg on the MOON network (encoder + projection + output layer):
    same global models, same centralized and client accuracies, bit for bit."""
    monkeypatch.setitem(
        MODELS,
        "moon-mlp",
        lambda shape, classes: with_projection_head(build_mlp(shape, classes), shape, classes, 256),
    )
    runs = {
        "moon": run_in_process(
            {**fast_run, "strategy": "moon", "model": "mlp", "moon-mu": 0.0, "run-name": "moon"},
            num_clients=3,
        ),
        "fedavg": run_in_process(
            {**fast_run, "strategy": "fedavg", "model": "moon-mlp", "run-name": "fedavg"},
            num_clients=3,
        ),
    }
    histories = {s: json.loads((d / "history.json").read_text()) for s, d in runs.items()}
    assert len(histories["moon"]) == 3
    for a, b in zip(histories["fedavg"], histories["moon"]):
        assert a["central_accuracy"] == b["central_accuracy"]
        assert a["central_loss"] == b["central_loss"]
        assert a.get("client_accuracies") == b.get("client_accuracies")
    models = {s: torch.load(d / "model.pt") for s, d in runs.items()}
    assert models["moon"].keys() == models["fedavg"].keys()
    assert all(torch.equal(models["fedavg"][k], models["moon"][k]) for k in models["fedavg"])
    # and mu > 0 does change training (the contrastive term is live from round 2 on)
    live = run_in_process(
        {**fast_run, "strategy": "moon", "model": "mlp", "run-name": "live"}, num_clients=3
    )
    final = torch.load(live / "model.pt")
    assert not torch.equal(final["head.weight"], models["moon"]["head.weight"])
