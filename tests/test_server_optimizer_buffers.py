"""``server-optimizer-buffers``: batch-norm running statistics averaged (default) or sent
through the server optimiser with the parameters (the point-cloud FL + KD benchmark's code),
on ``cnn-bn``; expected values computed by hand with numpy from Flower's FedAdam formula.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from flowerbed.catalog import SETTINGS, parse_run_config
from flowerbed.inprocess import run_in_process
from flowerbed.settings import ConfigError
from flowerbed.strategies import get_strategy
from flowerbed.strategies.common import flower_kwargs

KEY = "server-optimizer-buffers"
OPTIMISERS = ("fedavgm", "fedadam", "fedyogi", "fedadagrad")
ETA, BETA_1, BETA_2, TAU = 0.05, 0.9, 0.99, 0.001
ADAM = {"adaptive-eta": ETA, "adaptive-beta-1": BETA_1, "adaptive-beta-2": BETA_2}
ADAM["adaptive-tau"] = TAU
NUM_EXAMPLES = (1, 3)  # sample weights 0.25, 0.75


def build(name: str, **overrides):
    config = parse_run_config({"strategy": name, "model": "cnn-bn", **overrides})
    return get_strategy(name).build_server(config, **flower_kwargs(config))


def cnn_bn_state(seed: int) -> dict[str, np.ndarray]:
    """A cnn-bn state dict whose running statistics moved (forward passes in train mode)."""
    from flowerbed.models import build_model

    torch.manual_seed(seed)
    model = build_model("cnn-bn", (1, 8, 8), 10)
    model.train()
    with torch.no_grad():
        for _ in range(seed):  # num_batches_tracked = seed
            model(torch.randn(6, 1, 8, 8) * (1 + seed) + seed)
    return {k: v.numpy().copy() for k, v in model.state_dict().items()}


def one_round(fl, strategy):
    """Global model = state 0; two clients reply states 1 and 3 with n = 1 and 3."""
    x = cnn_bn_state(0)
    clients = [cnn_bn_state(1), cnn_bn_state(3)]
    fl.configure(strategy, x)
    aggregated, _ = strategy.aggregate_train(
        1, fl.replies([(c, {"num-examples": n}) for c, n in zip(clients, NUM_EXAMPLES)])
    )
    return x, clients, fl.arrays_of(aggregated)


def fedavg(clients: list[dict], key: str) -> np.ndarray:
    w = np.array(NUM_EXAMPLES, dtype=np.float64) / sum(NUM_EXAMPLES)
    return sum(wi * c[key].astype(np.float64) for wi, c in zip(w, clients))


def fedadam_round_1(x: np.ndarray, average: np.ndarray) -> np.ndarray:
    """Flower's FedAdam, first round (server_round = 1): m = (1 - b1) Delta,
    v = (1 - b2) Delta^2, eta_norm = eta sqrt(1 - b2^2) / (1 - b1^2) (Flower's bias correction
    uses the power server_round + 1), x + eta_norm m / (sqrt(v) + tau)."""
    delta = average - x.astype(np.float64)
    m, v = (1 - BETA_1) * delta, (1 - BETA_2) * delta**2
    eta_norm = ETA * np.sqrt(1 - BETA_2**2) / (1 - BETA_1**2)
    return x + eta_norm * m / (np.sqrt(v) + TAU)


def keys_of(state: dict, suffix: str) -> list[str]:
    return [k for k in state if k.endswith(suffix)]


def test_default_is_average_and_declared_once_for_the_four_optimisers():
    assert parse_run_config({})[KEY] == "average"
    assert SETTINGS[KEY].default == "average"
    assert SETTINGS[KEY].valid_choices() == ("average", "optimize")
    for name in OPTIMISERS:
        declared = [s for s in get_strategy(name).settings if s.key == KEY]
        assert len(declared) == 1 and declared[0] is SETTINGS[KEY], name
        strategy = build(name)
        assert strategy.buffers == "average"
        assert not any("running" in k or "num_batches" in k for k in strategy.trainable)


@pytest.mark.parametrize("value", ["all", "Optimize", ""])
def test_bad_value_names_the_key_and_the_choices(value):
    with pytest.raises(ConfigError) as error:
        parse_run_config({"strategy": "fedadam", KEY: value})
    message = str(error.value)
    assert KEY in message and repr(value) in message
    assert "valid choices: average, optimize" in message


def test_average_gives_running_statistics_the_fedavg_value(fl):
    """FedAdam round 1 on cnn-bn, default rule: every running_mean / running_var is the
    sample-weighted mean of the clients' values, the parameters take the Adam step, and no
    buffer has a moment."""
    strategy = build("fedadam", **ADAM)
    x, clients, new = one_round(fl, strategy)
    running = keys_of(x, "running_mean") + keys_of(x, "running_var")
    assert len(running) == 6
    for k in running:
        np.testing.assert_allclose(new[k], fedavg(clients, k), rtol=1e-6, atol=1e-7)
        assert not np.allclose(new[k], x[k])  # the clients did move them
    for k in keys_of(x, "num_batches_tracked"):  # 0.25 * 1 + 0.75 * 3 = 2.5 -> 2 (rint)
        assert new[k].dtype == np.int64 and new[k] == np.rint(2.5)
    weight = "features.0.weight"  # a parameter: the Adam rule
    np.testing.assert_allclose(
        new[weight], fedadam_round_1(x[weight], fedavg(clients, weight)), rtol=1e-5, atol=1e-7
    )
    assert set(strategy.m_t) == set(strategy.trainable) == set(strategy.v_t)


def test_optimize_sends_running_statistics_through_fedadam(fl):
    """The same round with ``optimize``: running_mean / running_var follow Flower's FedAdam
    rule (and so differ from the plain average), the parameters take the same step as with
    ``average``, and the integer num_batches_tracked is still averaged."""
    strategy = build("fedadam", **ADAM, **{KEY: "optimize"})
    x, clients, new = one_round(fl, strategy)
    running = keys_of(x, "running_mean") + keys_of(x, "running_var")
    for k in running:
        average = fedavg(clients, k)
        np.testing.assert_allclose(new[k], fedadam_round_1(x[k], average), rtol=1e-5, atol=1e-6)
        assert np.abs(new[k] - average).max() > 1e-3  # not the FedAvg value
    for k in keys_of(x, "num_batches_tracked"):
        assert new[k].dtype == np.int64 and new[k] == np.rint(2.5)
    floats = {k for k, v in x.items() if np.issubdtype(v.dtype, np.floating)}
    assert set(strategy.m_t) == set(strategy.v_t) == floats == strategy.trainable | set(running)
    reference = build("fedadam", **ADAM)
    _, _, averaged = one_round(fl, reference)
    for k in strategy.trainable:  # Adam is per coordinate: the parameters do not care
        np.testing.assert_allclose(new[k], averaged[k], rtol=1e-6)


@pytest.mark.parametrize("name", OPTIMISERS)
def test_optimize_moves_statistics_with_every_optimiser(fl, name):
    """Each of the four: with ``optimize`` the running statistics enter the optimiser's state
    and leave the FedAvg value (FedAvgM at server learning rate 0.5: x + 0.5 Delta); with
    ``average`` they keep it."""
    rules = {"server-learning-rate": 0.5} if name == "fedavgm" else {}
    results = {}
    for rule in ("average", "optimize"):
        strategy = build(name, **rules, **{KEY: rule})
        x, clients, new = one_round(fl, strategy)
        results[rule] = new
        state = strategy.momentum_vector if name == "fedavgm" else strategy.m_t
        assert len(state) == len(strategy.optimised)  # one moment per optimised entry
        assert ("features.1.running_mean" in strategy.optimised) == (rule == "optimize")
    for k in keys_of(x, "running_mean") + keys_of(x, "running_var"):
        average = fedavg(clients, k)
        np.testing.assert_allclose(results["average"][k], average, rtol=1e-6, atol=1e-7)
        assert np.abs(results["optimize"][k] - average).max() > 1e-3
        if name == "fedavgm":
            np.testing.assert_allclose(
                results["optimize"][k], x[k] + 0.5 * (average - x[k]), rtol=1e-5, atol=1e-6
            )
    for k in keys_of(x, "num_batches_tracked"):
        assert results["optimize"][k] == results["average"][k] == 2


def test_one_round_in_process_changes_only_the_statistics(tmp_path):
    """The whole job, FedAdam on cnn-bn, one round, same seed: ``optimize`` and ``average``
    give the same parameters (the same client updates, per-coordinate Adam) but other running
    statistics; num_batches_tracked is the same."""
    common = {
        "strategy": "fedadam",
        "model": "cnn-bn",
        "partitioner": "label-sorted",
        "num-server-rounds": 1,
        "local-epochs": 1,
        "batch-size": 24,
        "output-dir": str(tmp_path),
    }
    models = {}
    for rule in ("average", "optimize"):
        run_dir = run_in_process({**common, KEY: rule, "run-name": rule}, num_clients=3)
        models[rule] = torch.load(run_dir / "model.pt")
    average, optimize = models["average"], models["optimize"]
    for k, v in average.items():
        if "running" in k:
            assert not torch.allclose(optimize[k], v), k
        else:
            torch.testing.assert_close(optimize[k], v)
