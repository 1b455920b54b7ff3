"""FedNova: the client's normalised update and a_i, the server rule with unequal a_i, FedNova ==
FedAvg with equal local work; heterogeneous local work. (a_i itself, ``effective_steps``, is
tested in test_terms.py; the message builders are the ``fl`` fixture of conftest.py.)
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from flowerbed.catalog import parse_run_config
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.settings import ConfigError
from flowerbed.strategies.fedavg import train_plain
from flowerbed.strategies.fednova import FedNova, train_fednova
from flowerbed.training.terms import effective_steps

# --- a_i ---------------------------------------------------------------------------------------


# --- client step -------------------------------------------------------------------------------


@pytest.mark.parametrize("mu", [0.0, 0.2])
def test_client_reports_normalised_update_and_a(fl, tmp_path, mu):
    overrides = {
        "model": "mlp",
        "local-epochs": 2,
        "momentum": 0.9,
        "fednova-proximal-mu": mu,
        "output-dir": str(tmp_path),
    }
    client = fl.local_client(overrides)
    msg = fl.train_msg(client)
    reply = train_fednova(client, msg)
    metrics = reply.content["metrics"]
    steps = int(metrics["num-steps"])
    assert steps == 2 * -(-len(client.x_train) // client.config.batch_size)
    a = metrics["fednova-a"]
    assert a == pytest.approx(effective_steps(steps, 0.9, 0.05 * mu))
    x = msg.content["arrays"].to_torch_state_dict()
    d = reply.content["arrays"].to_torch_state_dict()
    if mu == 0:
        # the same seeded local training as FedAvg's client: y = x - a d
        y = (
            train_plain(fl.local_client(overrides), fl.train_msg(client))
            .content["arrays"]
            .to_torch_state_dict()
        )
        for k in x:
            torch.testing.assert_close(x[k] - a * d[k], y[k], rtol=1e-5, atol=1e-6)
    else:
        assert all(torch.isfinite(v).all() for v in d.values())


# --- server rule -------------------------------------------------------------------------------


def test_server_rule_with_unequal_a_by_hand(fl):
    """p = (1/4, 3/4), a = (2, 6): tau_eff = 5; sum p d = (0.25, -0.025); x <- x - 5 sum p d."""
    strategy = FedNova(trainable={"w"}, min_train_nodes=1)
    x = {
        "w": np.array([1.0, 2.0], np.float32),
        "bn.running_mean": np.array([0.0], np.float32),
        "bn.num_batches_tracked": np.array(0),
    }
    fl.configure(strategy, x)
    new, metrics = strategy.aggregate_train(
        1,
        fl.replies(
            [
                (
                    {
                        "w": [0.1, 0.2],
                        "bn.running_mean": [1.0],
                        "bn.num_batches_tracked": np.array(4),
                    },
                    {"num-examples": 1, "fednova-a": 2.0},
                ),
                (
                    {
                        "w": [0.3, -0.1],
                        "bn.running_mean": [3.0],
                        "bn.num_batches_tracked": np.array(8),
                    },
                    {"num-examples": 3, "fednova-a": 6.0},
                ),
            ]
        ),
    )
    got = fl.arrays_of(new)
    np.testing.assert_allclose(got["w"], [1 - 1.25, 2 + 0.125], rtol=1e-6)
    assert got["w"].dtype == np.float32
    np.testing.assert_allclose(got["bn.running_mean"], [2.5])  # FedAvg value, not a step
    assert got["bn.num_batches_tracked"] == 7 and got["bn.num_batches_tracked"].dtype == np.int64
    assert metrics["fednova-tau-eff"] == pytest.approx(5.0)


def test_server_with_equal_a_is_fedavg_by_hand(fl):
    """Equal a: x - a * sum p (x - y_i) / a = sum p y_i."""
    strategy = FedNova(trainable={"w"}, min_train_nodes=1)
    x = np.array([1.0, -1.0])
    ys, ns, a = [np.array([0.5, 0.0]), np.array([2.0, 1.0])], [2, 6], 3.0
    fl.configure(strategy, {"w": x})
    new, _ = strategy.aggregate_train(
        1,
        fl.replies(
            [({"w": (x - y) / a}, {"num-examples": n, "fednova-a": a}) for y, n in zip(ys, ns)]
        ),
    )
    np.testing.assert_allclose(fl.arrays_of(new)["w"], 0.25 * ys[0] + 0.75 * ys[1])


@pytest.mark.parametrize("partitioner", ["iid", "label-sorted"])
def test_fednova_with_equal_local_work_equals_fedavg(tmp_path, partitioner):
    """Equal parts (IID, or label-sorted shards as in the point-cloud FL + KD benchmark): every
    client runs the same number of steps (equal a_i), so FedNova's global model is FedAvg's."""
    common = {
        "model": "mlp",
        "partitioner": partitioner,
        "num-server-rounds": 2,
        "local-epochs": 1,
        "momentum": 0.5,
        "output-dir": str(tmp_path),
    }
    runs = {
        s: run_in_process({**common, "strategy": s, "run-name": s}, num_clients=5)
        for s in ("fedavg", "fednova")
    }
    histories = {s: json.loads((d / "history.json").read_text()) for s, d in runs.items()}
    steps = {s: torch.load(d / "model.pt") for s, d in runs.items()}
    for k in steps["fedavg"]:
        torch.testing.assert_close(steps["fednova"][k], steps["fedavg"][k], rtol=1e-4, atol=1e-5)
    for a, b in zip(histories["fedavg"], histories["fednova"]):
        assert a["central_accuracy"] == pytest.approx(b["central_accuracy"], abs=1e-3)


def test_fednova_needs_sgd(tmp_path):
    with pytest.raises(ConfigError, match="optimizer"):
        run_in_process({"strategy": "fednova", "optimizer": "adam", "output-dir": str(tmp_path)}, 2)


# --- heterogeneous local work (run-config local-epochs-max) -------------------------------------


def test_local_epochs_drawn_per_client_and_round_in_range(fl, tmp_path):
    overrides = {"local-epochs": 1, "local-epochs-max": 4, "output-dir": str(tmp_path)}
    draws = {
        (pid, r): fl.local_client(overrides, pid).local_epochs(r)
        for pid in range(4)
        for r in range(1, 6)
    }
    assert set(draws.values()) <= {1, 2, 3, 4} and len(set(draws.values())) > 1
    assert draws == {(pid, r): fl.local_client(overrides, pid).local_epochs(r) for pid, r in draws}
    assert fl.local_client({"local-epochs": 3}).local_epochs(5) == 3  # off by default


def test_local_epochs_max_below_local_epochs_is_rejected_before_training(tmp_path):
    with pytest.raises(ConfigError, match="local-epochs-max"):
        run_in_process({"local-epochs": 3, "local-epochs-max": 2, "output-dir": str(tmp_path)}, 2)


def test_heterogeneous_work_shows_in_num_steps(fl, tmp_path):
    overrides = {
        "model": "mlp",
        "local-epochs": 1,
        "local-epochs-max": 3,
        "output-dir": str(tmp_path),
    }
    client = fl.local_client(overrides, 1)
    steps_per_epoch = -(-len(client.x_train) // client.config.batch_size)
    for r in (1, 2, 3):
        reply = train_plain(client, fl.train_msg(client, server_round=r))
        assert reply.content["metrics"]["num-steps"] == client.local_epochs(r) * steps_per_epoch
    assert parse_run_config(resolve_run_config(overrides)).get("local-epochs-max", 0) == 3
