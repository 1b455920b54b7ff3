"""SCAFFOLD (option II): corrected client steps and c_i by hand, c_i persistence, the server's x
and c under partial participation by hand, and the zero-control-variate equivalence with FedAvg.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, RecordDict

from flowerbed.inprocess import run_in_process
from flowerbed.settings import ConfigError
from flowerbed.strategies.fedavg import train_plain
from flowerbed.strategies.scaffold import C_KEY, CI_KEY, DC_PREFIX, Scaffold, train_scaffold

LR = 0.05


def _full_batch_client(fl, tmp_path, epochs: int, state=None):
    """mlp on one client's digits, one batch per epoch (batch = all local data): fixed batches."""
    overrides = {
        "model": "mlp",
        "local-epochs": epochs,
        "momentum": 0.0,
        "batch-size": 10_000,
        "learning-rate": LR,
        "output-dir": str(tmp_path),
    }
    return fl.local_client(overrides, state=state)


@pytest.mark.parametrize("epochs", [1, 2])
def test_client_corrected_steps_and_ci_update_by_hand(fl, tmp_path, epochs):
    """K full-batch SGD steps y <- y - eta (g(y) + c - c_i); option II gives c_i+ = mean_k g(y_k)."""
    state = RecordDict()
    client = _full_batch_client(fl, tmp_path, epochs, state)
    model = client.new_model()
    params = dict(model.named_parameters())
    c = fl.random_like(params, 0.1, 1)
    c_i = fl.random_like(params, 0.1, 2)
    state[CI_KEY] = ArrayRecord(c_i)
    msg = fl.train_msg(client, extra={C_KEY: ArrayRecord(c)})
    x = {k: v for k, v in msg.content["arrays"].to_torch_state_dict().items()}

    # by hand: the corrected full-batch steps and the gradients seen
    y, grads = dict(x), []
    for _ in range(epochs):
        g = fl.full_batch_gradient(client.new_model(), y, client.x_train, client.y_train)
        grads.append(g)
        y = {k: y[k] - LR * (g[k] + c[k] - c_i[k]) for k in y}
    expected_ci = {k: sum(g[k] for g in grads) / epochs for k in x}

    reply = train_scaffold(client, msg)
    got = reply.content["arrays"].to_torch_state_dict()
    for k, x_k in x.items():
        torch.testing.assert_close(got[k], y[k] - x_k, rtol=1e-4, atol=1e-6)  # Delta y
        torch.testing.assert_close(
            got[DC_PREFIX + k], expected_ci[k] - c_i[k], rtol=1e-3, atol=1e-5
        )
        torch.testing.assert_close(
            state[CI_KEY].to_torch_state_dict()[k], expected_ci[k], rtol=1e-3, atol=1e-5
        )


def test_ci_starts_at_zero_and_persists_across_rounds(fl, tmp_path):
    state = RecordDict()
    client = _full_batch_client(fl, tmp_path, 1, state)
    zeros = {k: torch.zeros_like(p) for k, p in client.new_model().named_parameters()}
    msg = fl.train_msg(client, extra={C_KEY: ArrayRecord(zeros)})
    assert CI_KEY not in state
    first = fl.arrays_of(train_scaffold(client, msg).content["arrays"])
    stored = fl.arrays_of(state[CI_KEY])
    for k in zeros:  # from c_i = 0: Delta c_i = c_i+
        np.testing.assert_allclose(first[DC_PREFIX + k], stored[k], rtol=1e-6)
    # next round: the client starts from the stored c_i (a client rebuilt from the same state)
    again = _full_batch_client(fl, tmp_path, 1, state)
    second = fl.arrays_of(
        train_scaffold(again, fl.train_msg(again, 2, {C_KEY: ArrayRecord(zeros)})).content["arrays"]
    )
    new_ci = fl.arrays_of(state[CI_KEY])
    for k in zeros:
        np.testing.assert_allclose(
            second[DC_PREFIX + k], new_ci[k] - stored[k], rtol=1e-4, atol=1e-6
        )


def test_server_x_and_c_under_partial_participation_by_hand(fl):
    """N = 4 connected, |S| = 2 replied, eta_g = 0.5:
    x = (1, 2) + 0.5 * mean((0.2, 0.4), (0.4, 0)) = (1.15, 2.1)
    c = (0.1, -0.1) + (2/4) * mean((1, 2), (3, -2)) = (1.1, -0.1)
    buffer: FedAvg value with n = (1, 3): 0.25 * 1 + 0.75 * 3 = 2.5
    """
    strategy = Scaffold(trainable={"w"}, server_learning_rate=0.5, min_train_nodes=1)
    x = {"w": np.array([1.0, 2.0], np.float32), "bn.running_var": np.array([0.0], np.float32)}
    messages = fl.configure(strategy, x, num_nodes=4)
    np.testing.assert_array_equal(
        messages[0].content[C_KEY]["w"].numpy(), [0.0, 0.0]
    )  # c starts at 0
    strategy.c = {"w": np.array([0.1, -0.1], np.float32)}
    new, _ = strategy.aggregate_train(
        1,
        fl.replies(
            [
                (
                    {"w": [0.2, 0.4], DC_PREFIX + "w": [1.0, 2.0], "bn.running_var": [1.0]},
                    {"num-examples": 1},
                ),
                (
                    {"w": [0.4, 0.0], DC_PREFIX + "w": [3.0, -2.0], "bn.running_var": [3.0]},
                    {"num-examples": 3},
                ),
            ]
        ),
    )
    got = fl.arrays_of(new)
    assert list(got) == ["w", "bn.running_var"]  # just the model: centralized evaluation loads it
    np.testing.assert_allclose(got["w"], [1.15, 2.1], rtol=1e-6)
    np.testing.assert_allclose(got["bn.running_var"], [2.5])
    np.testing.assert_allclose(strategy.c["w"], [1.1, -0.1], rtol=1e-6)
    # the next round sends the new c beside the model
    sent = fl.configure(strategy, got, num_nodes=4)[0].content
    np.testing.assert_allclose(sent[C_KEY]["w"].numpy(), [1.1, -0.1], rtol=1e-6)
    np.testing.assert_allclose(sent["arrays"]["w"].numpy(), [1.15, 2.1], rtol=1e-6)


def test_client_with_zero_control_variates_steps_like_fedavg_sgd(fl, tmp_path):
    overrides = {"model": "mlp", "momentum": 0.0, "local-epochs": 1, "output-dir": str(tmp_path)}
    client = fl.local_client(overrides)
    zeros = {
        k: Array(np.zeros(p.shape, np.float32)) for k, p in client.new_model().named_parameters()
    }
    msg = fl.train_msg(client, extra={C_KEY: ArrayRecord(zeros)})
    x = msg.content["arrays"].to_torch_state_dict()
    delta = train_scaffold(client, msg).content["arrays"].to_torch_state_dict()
    y = (
        train_plain(fl.local_client(overrides), fl.train_msg(client))
        .content["arrays"]
        .to_torch_state_dict()
    )
    for k in x:
        torch.testing.assert_close(x[k] + delta[k], y[k])


def test_scaffold_first_round_equals_fedavg_with_sgd(tmp_path):
    """Round 1 (c = c_i = 0), plain SGD, eta_g = 1, equal client sizes: the same model."""
    common = {
        "model": "mlp",
        "partitioner": "iid",
        "num-server-rounds": 1,
        "local-epochs": 2,
        "momentum": 0.0,
        "output-dir": str(tmp_path),
    }
    runs = {
        s: run_in_process({**common, "strategy": s, "run-name": s}, num_clients=3)
        for s in ("fedavg", "scaffold")
    }
    models = {s: torch.load(d / "model.pt") for s, d in runs.items()}
    for k in models["fedavg"]:
        torch.testing.assert_close(models["scaffold"][k], models["fedavg"][k], rtol=1e-5, atol=1e-6)
    history = json.loads((runs["scaffold"] / "history.json").read_text())
    # SCAFFOLD's training messages and replies carry c / Delta c beside the model
    fedavg = json.loads((runs["fedavg"] / "history.json").read_text())
    assert history[1]["bytes_sent"] > 1.4 * fedavg[1]["bytes_sent"]
    assert history[1]["bytes_received"] > 1.4 * fedavg[1]["bytes_received"]


def test_scaffold_partial_participation_runs(tmp_path):
    run_dir = run_in_process(
        {
            "strategy": "scaffold",
            "model": "mlp",
            "fraction-train": 0.5,
            "num-server-rounds": 2,
            "local-epochs": 1,
            "output-dir": str(tmp_path),
        },
        4,
    )
    history = json.loads((run_dir / "history.json").read_text())
    assert [row["clients_trained"] for row in history[1:]] == [2, 2]
    assert all(np.isfinite(row["central_accuracy"]) for row in history)


def test_scaffold_rejects_bad_settings(tmp_path):
    with pytest.raises(ConfigError, match="optimizer"):
        run_in_process(
            {"strategy": "scaffold", "optimizer": "adam", "output-dir": str(tmp_path)}, 2
        )
    with pytest.raises(ConfigError, match="scaffold-server-learning-rate"):
        run_in_process(
            {
                "strategy": "scaffold",
                "scaffold-server-learning-rate": 0.0,
                "output-dir": str(tmp_path),
            },
            2,
        )
