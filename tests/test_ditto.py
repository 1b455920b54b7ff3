"""Ditto: a personal model per client regularised toward the global model (Li et al., ICML 2021).

Also holds two helpers the MOON tests import: a ``LocalClient`` on tiny tensors and a train
message, so that a client step can be run on a fixed batch without the data pipeline.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord
from torch import nn

from flowerbed.catalog import parse_run_config
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.models import MODELS, Classifier
from flowerbed.settings import ConfigError
from flowerbed.strategies.ditto import STATE_KEY, evaluate_ditto, train_ditto
from flowerbed.strategies.fedavg import train_plain
from flowerbed.training.loops import evaluate

# --- helpers (also used by test_moon.py) --------------------------------------------------------


# --- a tiny linear softmax model and its gradient by hand ---------------------------------------
def linear_model(input_shape, num_classes) -> Classifier:
    return Classifier(nn.Flatten(), nn.Linear(int(np.prod(input_shape)), num_classes))


@pytest.fixture
def linear(monkeypatch):
    monkeypatch.setitem(MODELS, "tiny-linear", linear_model)
    return "tiny-linear"


X = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 2.0]])
Y = torch.tensor([0, 1, 1, 0])
W_GLOBAL = {
    "head.weight": torch.tensor([[0.5, -0.2], [0.1, 0.3]]),
    "head.bias": torch.tensor([0.0, 0.1]),
}
V_PERSONAL = {
    "head.weight": torch.tensor([[-0.3, 0.4], [0.2, -0.1]]),
    "head.bias": torch.tensor([0.2, -0.2]),
}
LR, LAM = 0.1, 0.5
SETTINGS = {
    "learning-rate": LR,
    "momentum": 0.0,
    "batch-size": 4,
    "local-epochs": 1,
    "ditto-lambda": LAM,
}


def softmax_gradient(weight: np.ndarray, bias: np.ndarray, x: np.ndarray, y: np.ndarray):
    """d/d(W, b) of the mean cross-entropy of softmax(x W^T + b): ((p - onehot)^T x / B, ...)."""
    logits = x @ weight.T + bias
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    g = (p - np.eye(weight.shape[0])[y]) / len(x)
    return g.T @ x, g.sum(axis=0)


@pytest.mark.parametrize("has_personal", [False, True])
def test_personal_update_is_one_manual_gradient_step(fl, linear, has_personal):
    """One batch, one SGD step: v' = v - lr * (grad F_k(v) + lambda * (v - w^t)).

    Without a stored personal model v starts from w^t (the regulariser is then zero)."""
    client = fl.tiny_client(linear, X, Y, 2, strategy="ditto", **SETTINGS)
    if has_personal:
        client.context.state[STATE_KEY] = ArrayRecord(V_PERSONAL)
    start = V_PERSONAL if has_personal else W_GLOBAL
    reply = train_ditto(client, fl.train_message(W_GLOBAL))

    v_w, v_b = start["head.weight"].double().numpy(), start["head.bias"].double().numpy()
    w_w, w_b = W_GLOBAL["head.weight"].double().numpy(), W_GLOBAL["head.bias"].double().numpy()
    g_w, g_b = softmax_gradient(v_w, v_b, X.double().numpy(), Y.numpy())
    expected_w = v_w - LR * (g_w + LAM * (v_w - w_w))
    expected_b = v_b - LR * (g_b + LAM * (v_b - w_b))

    personal = client.context.state[STATE_KEY].to_torch_state_dict()
    np.testing.assert_allclose(personal["head.weight"].numpy(), expected_w, rtol=0, atol=1e-6)
    np.testing.assert_allclose(personal["head.bias"].numpy(), expected_b, rtol=0, atol=1e-6)
    assert "personal-train-loss" in reply.content.metric_records["metrics"]

    # the model sent back is FedAvg's client step from w^t, whatever the personal model is
    fedavg_client = fl.tiny_client(linear, X, Y, 2, strategy="fedavg", **SETTINGS)
    fedavg_reply = train_plain(fedavg_client, fl.train_message(W_GLOBAL))
    sent = reply.content.array_records["arrays"].to_torch_state_dict()
    expected = fedavg_reply.content.array_records["arrays"].to_torch_state_dict()
    assert all(torch.equal(sent[k], expected[k]) for k in expected)
    g_w, g_b = softmax_gradient(w_w, w_b, X.double().numpy(), Y.numpy())
    np.testing.assert_allclose(sent["head.weight"].numpy(), w_w - LR * g_w, rtol=0, atol=1e-6)


def test_evaluation_reports_global_and_personal_model(fl, linear):
    client = fl.tiny_client(linear, X, Y, 2, strategy="ditto", **SETTINGS)
    msg = fl.train_message(W_GLOBAL)
    before = evaluate_ditto(client, msg).content.metric_records["metrics"]
    assert before["personal-accuracy"] == before["accuracy"]  # v_k would start from w^t

    client.context.state[STATE_KEY] = ArrayRecord(V_PERSONAL)
    metrics = evaluate_ditto(client, msg).content.metric_records["metrics"]
    global_loss, global_acc = evaluate(client.model_from(msg), X, Y)
    personal = linear_model((2,), 2)
    personal.load_state_dict(V_PERSONAL)
    personal_loss, personal_acc = evaluate(personal, X, Y)
    assert metrics["accuracy"] == pytest.approx(global_acc)
    assert metrics["loss"] == pytest.approx(global_loss)
    assert metrics["personal-accuracy"] == pytest.approx(personal_acc)
    assert metrics["personal-loss"] == pytest.approx(personal_loss)
    assert personal_acc != global_acc  # the two models are told apart
    assert metrics["num-examples"] == len(Y)


def test_negative_lambda_is_rejected():
    run_config = resolve_run_config({"strategy": "ditto", "ditto-lambda": -1.0})
    with pytest.raises(ConfigError, match="ditto-lambda must be >= 0, got -1.0"):
        parse_run_config(run_config)


def test_global_model_sequence_equals_fedavg(fast_run):
    """The personal models never leave the clients: the global models are FedAvg's."""
    runs = {}
    for strategy in ("fedavg", "ditto"):
        overrides = {**fast_run, "strategy": strategy, "model": "mlp", "run-name": strategy}
        runs[strategy] = run_in_process(overrides, num_clients=3)
    histories = {s: json.loads((d / "history.json").read_text()) for s, d in runs.items()}
    assert len(histories["ditto"]) == 3
    for row in histories["ditto"][1:]:  # the personal models' accuracy is in the history too
        assert 0.0 <= row["client_personal_accuracy_mean"] <= 1.0
    for a, b in zip(histories["fedavg"], histories["ditto"]):
        assert a["central_accuracy"] == b["central_accuracy"]
        assert a["central_loss"] == b["central_loss"]
        assert a.get("client_accuracies") == b.get("client_accuracies")  # global model, local test
    models = {s: torch.load(d / "model.pt") for s, d in runs.items()}
    assert all(torch.equal(models["fedavg"][k], models["ditto"][k]) for k in models["fedavg"])
