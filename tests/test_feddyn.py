"""FedDyn: the client's dynamic-regularised steps and gradient state by hand, the server's h and
theta by hand under partial participation, state persistence and a short run."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, RecordDict

from flowerbed.inprocess import run_in_process
from flowerbed.settings import ConfigError
from flowerbed.strategies.feddyn import GRAD_KEY, FedDyn, train_feddyn

LR, ALPHA = 0.05, 0.3


@pytest.mark.parametrize("epochs", [1, 2])
def test_client_steps_and_gradient_state_by_hand(fl, tmp_path, epochs):
    """Full-batch SGD on L(theta) - <g_k, theta> + (alpha/2)||theta - theta0||^2, then
    g_k <- g_k - alpha (theta_K - theta0)."""
    state = RecordDict()
    overrides = {
        "model": "mlp",
        "local-epochs": epochs,
        "momentum": 0.0,
        "batch-size": 10_000,
        "learning-rate": LR,
        "feddyn-alpha": ALPHA,
        "output-dir": str(tmp_path),
    }
    client = fl.local_client(overrides, state=state)
    params = dict(client.new_model().named_parameters())
    g_k = fl.random_like(params, 0.1, 3)
    state[GRAD_KEY] = ArrayRecord(g_k)
    msg = fl.train_msg(client)
    theta0 = msg.content["arrays"].to_torch_state_dict()

    theta = dict(theta0)
    for _ in range(epochs):
        g = fl.full_batch_gradient(client.new_model(), theta, client.x_train, client.y_train)
        theta = {k: theta[k] - LR * (g[k] - g_k[k] + ALPHA * (theta[k] - theta0[k])) for k in theta}

    reply = train_feddyn(client, msg).content["arrays"].to_torch_state_dict()
    stored = state[GRAD_KEY].to_torch_state_dict()
    for k in theta0:
        torch.testing.assert_close(reply[k], theta[k], rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(
            stored[k], g_k[k] - ALPHA * (theta[k] - theta0[k]), rtol=1e-4, atol=1e-6
        )


def test_gradient_state_starts_at_zero(fl, tmp_path):
    state = RecordDict()
    client = fl.local_client(
        {"model": "mlp", "local-epochs": 1, "output-dir": str(tmp_path)}, state=state
    )
    msg = fl.train_msg(client)
    theta0 = fl.arrays_of(msg.content["arrays"])
    theta = fl.arrays_of(train_feddyn(client, msg).content["arrays"])
    stored = fl.arrays_of(state[GRAD_KEY])
    for k in stored:  # from 0: g_k = -alpha (theta - theta0), alpha = 0.01 by default
        np.testing.assert_allclose(stored[k], -0.01 * (theta[k] - theta0[k]), rtol=1e-4, atol=1e-8)


def test_server_h_and_theta_under_partial_participation_by_hand(fl):
    """m = 4 connected, 2 replied, alpha = 0.1, theta = 1, h = 0.05; clients at 2 and 4:
    h = 0.05 - (0.1/4) * ((2 - 1) + (4 - 1)) = -0.05;  theta = mean(2, 4) - h/alpha = 3.5.
    Round 2 from theta = 3.5, one client at 3.5 + 0.4: h = -0.05 - 0.025 * 0.4 = -0.06,
    theta = 3.9 + 0.6 = 4.5."""
    strategy = FedDyn(trainable={"w"}, alpha=0.1, min_train_nodes=1)
    fl.configure(
        strategy, {"w": np.array([1.0]), "bn.running_mean": np.array([0.0], np.float32)}, 4
    )
    strategy.h = {"w": np.array([0.05])}
    new, _ = strategy.aggregate_train(
        1,
        fl.replies(
            [
                ({"w": [2.0], "bn.running_mean": [1.0]}, {"num-examples": 3}),
                ({"w": [4.0], "bn.running_mean": [5.0]}, {"num-examples": 1}),
            ]
        ),
    )
    got = fl.arrays_of(new)
    np.testing.assert_allclose(strategy.h["w"], [-0.05])
    np.testing.assert_allclose(got["w"], [3.5])
    np.testing.assert_allclose(got["bn.running_mean"], [2.0])  # FedAvg value: 0.75 + 1.25
    fl.configure(strategy, got, 4)
    new, _ = strategy.aggregate_train(
        2, fl.replies([({"w": [3.9], "bn.running_mean": [0.0]}, {"num-examples": 1})])
    )
    np.testing.assert_allclose(strategy.h["w"], [-0.06])
    np.testing.assert_allclose(fl.arrays_of(new)["w"], [4.5])


def test_feddyn_runs_and_rejects_bad_alpha(tmp_path):
    run_dir = run_in_process(
        {
            "strategy": "feddyn",
            "model": "mlp",
            "num-server-rounds": 2,
            "local-epochs": 1,
            "fraction-train": 0.5,
            "output-dir": str(tmp_path),
        },
        4,
    )
    history = json.loads((run_dir / "history.json").read_text())
    assert [r["round"] for r in history] == [0, 1, 2]
    assert all(np.isfinite(r["central_accuracy"]) for r in history)
    with pytest.raises(ConfigError, match="feddyn-alpha"):
        run_in_process({"strategy": "feddyn", "feddyn-alpha": 0.0, "output-dir": str(tmp_path)}, 2)
