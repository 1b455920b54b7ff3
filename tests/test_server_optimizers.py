"""Flower's server optimisers (FedAvgM, FedAdam, FedYogi, FedAdagrad) as flowerbed runs them:
hyperparameters from the run config, the pseudo-gradient on trainable parameters only
(batch-norm buffers keep the FedAvg value), values by hand; FedProx with mu = 0 is FedAvg.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from flowerbed.catalog import parse_run_config
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.strategies import get_strategy
from flowerbed.strategies.common import flower_kwargs

BUFFERS = {"bn.running_mean": np.array([0.0], np.float32), "bn.num_batches_tracked": np.array(0)}


def build(name: str, **overrides):
    config = parse_run_config(resolve_run_config({"strategy": name, **overrides}))
    return get_strategy(name).build_server(config, **flower_kwargs(config))


def test_hyperparameters_come_from_the_run_config():
    avgm = build("fedavgm", **{"server-learning-rate": 0.5, "server-momentum": 0.7})
    assert (avgm.server_learning_rate, avgm.server_momentum) == (0.5, 0.7)
    for name in ("fedadam", "fedyogi"):
        opt = build(
            name,
            **{
                "adaptive-eta": 0.3,
                "adaptive-beta-1": 0.8,
                "adaptive-beta-2": 0.95,
                "adaptive-tau": 0.01,
            },
        )
        assert (opt.eta, opt.beta_1, opt.beta_2, opt.tau) == (0.3, 0.8, 0.95, 0.01)
    adagrad = build("fedadagrad", **{"adaptive-eta": 0.2, "adaptive-tau": 0.05})
    assert (adagrad.eta, adagrad.tau) == (0.2, 0.05)
    # the model of the run decides what is trainable: cnn has no buffers, resnet18 has BN
    assert not any("running" in k for k in build("fedadam").trainable)
    resnet = build("fedadam", model="resnet18")
    assert not any("running" in k or "num_batches" in k for k in resnet.trainable)
    assert any(k.endswith("bn1.weight") for k in resnet.trainable)


def _round(fl, strategy, x: dict, ys: list[float], buffers: list[tuple[float, int]], ns: list[int]):
    """One round: the global model ``x``; clients reply w = y, their buffers, n."""
    fl.configure(strategy, x)
    return strategy.aggregate_train(
        1,
        fl.replies(
            [
                (
                    {
                        "w": np.array([y], np.float32),
                        "bn.running_mean": np.array([rm], np.float32),
                        "bn.num_batches_tracked": np.array(nb),
                    },
                    {"num-examples": n},
                )
                for y, (rm, nb), n in zip(ys, buffers, ns)
            ]
        ),
    )[0]


def _model(w: float) -> dict:
    return {"w": np.array([w], np.float32), **BUFFERS}


def test_fedadam_moves_parameters_by_hand_and_averages_buffers(fl):
    """x = 1, clients at 2 and 4 (n = 1, 3): Delta = 3.5 - 1 = 2.5; round 1 of Flower's FedAdam:
    m = 0.1 * 2.5, v = 0.01 * 2.5^2, eta_norm = eta sqrt(1 - b2^2) / (1 - b1^2)."""
    from flowerbed.strategies.server_optimizers import FedAdamTrainable

    eta, b1, b2, tau = 0.1, 0.9, 0.99, 0.001
    strategy = FedAdamTrainable(
        trainable={"w"}, eta=eta, beta_1=b1, beta_2=b2, tau=tau, min_train_nodes=1
    )
    new = fl.arrays_of(
        _round(fl, strategy, _model(1.0), [2.0, 4.0], [(2.0, 10), (4.0, 30)], [1, 3])
    )
    m, v = 0.1 * 2.5, 0.01 * 2.5**2
    eta_norm = eta * math.sqrt(1 - b2**2) / (1 - b1**2)
    assert new["w"][0] == pytest.approx(1.0 + eta_norm * m / (math.sqrt(v) + tau), rel=1e-6)
    # buffers: the FedAvg value, untouched by Adam
    np.testing.assert_allclose(new["bn.running_mean"], [0.25 * 2 + 0.75 * 4])
    assert new["bn.num_batches_tracked"] == 25 and new["bn.num_batches_tracked"].dtype == np.int64
    assert set(strategy.m_t) == {"w"} and set(strategy.v_t) == {"w"}  # no moments for buffers


def test_fedavgm_two_rounds_by_hand_buffers_averaged(fl):
    """lr 1, momentum 0.9. Round 1: x 0 -> avg 1: v = -1, x = 1. Round 2: avg 1.5: pseudo-gradient
    -0.5, v = 0.9 * -1 - 0.5 = -1.4, x = 1 + 1.4 = 2.4. Buffers follow the averages only."""
    from flowerbed.strategies.server_optimizers import FedAvgMTrainable

    strategy = FedAvgMTrainable(
        trainable={"w"}, server_learning_rate=1.0, server_momentum=0.9, min_train_nodes=1
    )
    first = fl.arrays_of(
        _round(fl, strategy, _model(0.0), [1.0, 1.0], [(5.0, 4), (7.0, 8)], [1, 1])
    )
    assert first["w"][0] == pytest.approx(1.0)
    np.testing.assert_allclose(first["bn.running_mean"], [6.0])
    second = fl.arrays_of(_round(fl, strategy, first, [1.0, 2.0], [(1.0, 10), (3.0, 12)], [1, 1]))
    assert second["w"][0] == pytest.approx(2.4, rel=1e-6)
    np.testing.assert_allclose(second["bn.running_mean"], [2.0])  # not 6 + momentum
    assert second["bn.num_batches_tracked"] == 11


@pytest.mark.parametrize("name", ["fedavgm", "fedadam", "fedyogi", "fedadagrad"])
def test_batchnorm_buffers_are_not_moved_by_the_optimiser(fl, name):
    """resnet18 (batch norm): after a round every buffer equals the clients' FedAvg value."""
    strategy = build(name, model="resnet18", **{"server-momentum": 0.9})
    x = {k: v.numpy() for k, v in _resnet_state(0).items()}
    clients = [_resnet_state(s) for s in (1, 2)]
    fl.configure(strategy, x)
    new = fl.arrays_of(
        strategy.aggregate_train(
            1,
            fl.replies(
                [
                    ({k: v.numpy() for k, v in c.items()}, {"num-examples": n})
                    for c, n in zip(clients, (1, 3))
                ]
            ),
        )[0]
    )
    buffers = [k for k in x if k not in strategy.trainable]
    assert buffers and all("running" in k or "num_batches" in k for k in buffers)
    for k in buffers:
        expected = 0.25 * clients[0][k].numpy() + 0.75 * clients[1][k].numpy()
        np.testing.assert_allclose(new[k], expected.astype(x[k].dtype), rtol=1e-5, atol=1e-7)
    moved = [k for k in strategy.trainable if not np.allclose(new[k], x[k])]
    assert moved  # and the parameters did take an optimiser step


def _resnet_state(seed: int) -> dict:
    from flowerbed.models import build_model

    torch.manual_seed(seed)
    model = build_model("resnet18", (1, 8, 8), 10)
    model.train()
    with torch.no_grad():
        model(torch.randn(4, 1, 8, 8) + seed)  # move the batch-norm statistics
    return model.state_dict()


def test_fedprox_with_mu_zero_equals_fedavg(tmp_path):
    common = {
        "model": "mlp",
        "num-server-rounds": 2,
        "local-epochs": 1,
        "proximal-mu": 0.0,
        "output-dir": str(tmp_path),
    }
    runs = {
        s: run_in_process({**common, "strategy": s, "run-name": s}, num_clients=3)
        for s in ("fedavg", "fedprox")
    }
    models = {s: torch.load(d / "model.pt") for s, d in runs.items()}
    for k in models["fedavg"]:
        torch.testing.assert_close(models["fedprox"][k], models["fedavg"][k])
