"""QFedFisher: Fisher estimate, layer-wise min-max, the client rule of Fig. 3 and the server rule
of eqs. (2)-(4), each against values computed by hand; then a short in-process federation."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flwr.app import ArrayRecord, Message, MetricRecord, RecordDict
from torch import nn

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.inprocess import (
    InProcessGrid,
    resolve_run_config,
    run_in_process,
    use_server_identity,
)
from flowerbed.models.vqc import build_vqc
from flowerbed.server_app import run_protocol
from flowerbed.settings import ConfigError
from flowerbed.strategies.qfedfisher import (
    STATE_FISHER,
    STATE_PARAMS,
    QFedFisher,
    Significance,
    circuit_layer_parameters,
    empirical_fisher,
    fisher_average,
    keep_significant,
    minmax,
    normalize_layerwise,
    top_share,
)


def test_minmax_per_tensor_and_per_circuit_layer_by_hand():
    f = torch.tensor([[1.0, 3.0], [5.0, 9.0]])
    assert torch.allclose(minmax(f), torch.tensor([[0.0, 0.25], [0.5, 1.0]]))
    assert torch.allclose(minmax(f, per_first_axis=True), torch.tensor([[0.0, 1.0], [0.0, 1.0]]))
    # (L=2, n=2, 2) circuit weights: each layer l scaled on its own
    w = torch.tensor([[[0.0, 2.0], [4.0, 8.0]], [[1.0, 1.0], [1.0, 1.0]]])
    expected = torch.tensor([[[0.0, 0.25], [0.5, 1.0]], [[0.0, 0.0], [0.0, 0.0]]])
    assert torch.allclose(minmax(w, per_first_axis=True), expected)
    # no spread, no ranking: 0 (-> the FedAvg value on the server)
    assert minmax(torch.tensor(7.0)).item() == 0.0
    assert torch.equal(minmax(torch.full((3,), 2.0)), torch.zeros(3))


def test_normalisation_is_per_circuit_layer_for_the_vqc_and_per_tensor_otherwise():
    model = build_vqc((8,), 2, qubits=3, layers=2)
    layers = circuit_layer_parameters(model)
    assert layers == {"features.1.qlayer.weights"}
    fisher = {
        "features.1.qlayer.weights": torch.arange(12.0).reshape(2, 3, 2),
        "head.scale": torch.tensor(0.3),
    }
    out = normalize_layerwise(fisher, layers, mode="layer")
    assert torch.allclose(
        out["features.1.qlayer.weights"], (torch.arange(12.0).reshape(2, 3, 2) % 6) / 5
    )
    assert out["head.scale"].item() == 0.0
    whole = normalize_layerwise(fisher, layers, mode="tensor")
    assert torch.allclose(
        whole["features.1.qlayer.weights"], torch.arange(12.0).reshape(2, 3, 2) / 11
    )


def test_empirical_fisher_is_the_mean_of_squared_batch_gradients_by_hand():
    # logits = W x (no bias); dCE/dW = (softmax(Wx) - onehot)^T x / B per batch
    model = nn.Linear(2, 2, bias=False)
    w = np.array([[0.5, -1.0], [0.25, 2.0]])
    with torch.no_grad():
        model.weight.copy_(torch.tensor(w))
    x = np.array([[1.0, 2.0], [-1.0, 0.5], [0.0, 1.0], [2.0, -1.0]])
    y = np.array([0, 1, 1, 0])

    def grad(xb, yb):
        logits = xb @ w.T
        p = np.exp(logits - logits.max(1, keepdims=True))
        p /= p.sum(1, keepdims=True)
        p[np.arange(len(yb)), yb] -= 1
        return p.T @ xb / len(yb)

    expected = (grad(x[:2], y[:2]) ** 2 + grad(x[2:], y[2:]) ** 2) / 2
    fisher = empirical_fisher(
        model, torch.tensor(x, dtype=torch.float32), torch.tensor(y), batch_size=2, generator=None
    )
    np.testing.assert_allclose(fisher["weight"].numpy(), expected, rtol=1e-5)


def test_server_rule_by_hand_including_the_substitution_below_delta():
    thetas = [
        {"w": np.array([1.0, 2.0, 3.0], dtype=np.float32), "bn": np.array([10.0])},
        {"w": np.array([3.0, 4.0, 5.0], dtype=np.float32), "bn": np.array([20.0])},
    ]
    fishers = [
        {"w": np.array([0.5, 0.004, 0.0], dtype=np.float32)},
        {"w": np.array([0.5, 0.004, 1.0], dtype=np.float32)},
    ]
    # sizes 1 and 3: theta_avg = 0.25 theta_1 + 0.75 theta_2
    theta_avg = {"w": np.array([2.5, 3.5, 4.5], dtype=np.float32), "bn": np.array([17.5])}
    out, substituted, total = fisher_average(thetas, fishers, theta_avg, 0.01)
    # F_s = (1.0, 0.008, 1.0): entry 1 is below delta -> theta_avg; entry 0: (0.5+1.5)/1;
    # entry 2: (0*3 + 1*5)/1; the buffer without Fisher -> theta_avg
    np.testing.assert_allclose(out["w"], [2.0, 3.5, 5.0])
    assert out["w"].dtype == np.float32
    np.testing.assert_allclose(out["bn"], [17.5])
    assert (substituted, total) == (1, 3)


def test_fisher_proportional_to_client_sizes_gives_fedavg():
    rng = np.random.default_rng(0)
    thetas = [{"w": rng.normal(size=5)} for _ in range(3)]
    sizes = np.array([1.0, 2.0, 5.0])
    p = sizes / sizes.sum()
    fishers = [{"w": np.full(5, 0.5 * pi)} for pi in p]
    avg = {"w": sum(pi * t["w"] for pi, t in zip(p, thetas))}
    out, substituted, _ = fisher_average(thetas, fishers, avg, 0.01)
    np.testing.assert_allclose(out["w"], avg["w"])
    assert substituted == 0


@pytest.fixture
def task_identity():
    use_server_identity()


def _reply(theta, fisher, n):
    content = RecordDict(
        {
            "arrays": ArrayRecord({k: torch.tensor(v) for k, v in theta.items()}),
            "metrics": MetricRecord({"num-examples": n, "train-loss": 1.0}),
            "fisher": ArrayRecord({k: torch.tensor(v) for k, v in fisher.items()}),
        }
    )
    return Message(content=content, dst_node_id=1, message_type="train")


def test_strategy_aggregate_train_applies_eqs_2_to_4(task_identity):
    strategy = QFedFisher(0.01)
    replies = [
        _reply(
            {"w": np.array([1.0, 2.0, 3.0], dtype=np.float32)},
            {"w": np.array([0.5, 0.004, 0.0], dtype=np.float32)},
            1,
        ),
        _reply(
            {"w": np.array([3.0, 4.0, 5.0], dtype=np.float32)},
            {"w": np.array([0.5, 0.004, 1.0], dtype=np.float32)},
            3,
        ),
    ]
    arrays, metrics = strategy.aggregate_train(1, replies)
    np.testing.assert_allclose(arrays["w"].numpy(), [2.0, 3.5, 5.0])
    assert metrics["fisher-substituted-fraction"] == pytest.approx(1 / 3)
    assert metrics["train-loss"] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="carry no 'fisher'"):
        bare = Message(
            content=RecordDict({k: v for k, v in replies[0].content.items() if k != "fisher"}),
            dst_node_id=1,
            message_type="train",
        )
        strategy.aggregate_train(1, [bare])


def test_client_rule_keeps_significant_own_parameters():
    model = nn.Linear(3, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[10.0, 20.0, 30.0]]))  # the global model
    state = RecordDict(
        {
            STATE_PARAMS: ArrayRecord({"weight": torch.tensor([[1.0, 2.0, 3.0]])}),
            STATE_FISHER: ArrayRecord({"weight": torch.tensor([[0.5, 0.001, 0.01]])}),
        }
    )
    assert keep_significant(model, state, 0.01) == 2
    assert torch.equal(model.weight.detach(), torch.tensor([[1.0, 20.0, 3.0]]))
    fresh = nn.Linear(3, 1)
    before = fresh.weight.detach().clone()
    assert keep_significant(fresh, RecordDict(), 0.01) == 0
    assert torch.equal(fresh.weight.detach(), before)


@pytest.mark.parametrize(
    "key, value, message",
    [
        ("qfedfisher-delta", 0.0, "qfedfisher-delta must be > 0"),
        ("qfedfisher-normalization", "global", "unknown qfedfisher-normalization 'global'"),
        ("qfedfisher-fisher-pass", "sometimes", "unknown qfedfisher-fisher-pass 'sometimes'"),
        ("qfedfisher-threshold", "median", "unknown qfedfisher-threshold 'median'"),
        ("qfedfisher-quantile", 0.0, r"qfedfisher-quantile must be in \(0, 1\], got 0.0"),
        ("qfedfisher-quantile", 1.5, r"qfedfisher-quantile must be in \(0, 1\], got 1.5"),
    ],
)
def test_bad_settings_are_clear_config_errors(key, value, message):
    with pytest.raises(ConfigError, match=message):
        parse_run_config({"strategy": "qfedfisher", key: value})


def test_federation_sends_the_fisher_record_and_counts_its_bytes(tmp_path):
    """A classical model (mlp) on breast-cancer, in process: QFedFisher vs FedAvg traffic."""
    common = {
        "dataset": "breast-cancer",
        "model": "mlp",
        "num-server-rounds": 2,
        "local-epochs": 1,
        "output-dir": str(tmp_path),
        "data-dir": str(tmp_path),
    }
    histories = {}
    for strategy in ("fedavg", "qfedfisher"):
        run_dir = run_in_process({**common, "strategy": strategy}, num_clients=3)
        histories[strategy] = json.loads((run_dir / "history.json").read_text())
    fisher_bytes = ArrayRecord(
        {n: p.detach() for n, p in _mlp_for_breast_cancer().named_parameters()}
    ).count_bytes()
    for avg_row, fisher_row in zip(histories["fedavg"][1:], histories["qfedfisher"][1:]):
        extra = fisher_row["bytes_received"] - avg_row["bytes_received"]
        assert 3 * fisher_bytes <= extra < 3 * fisher_bytes + 3 * 100  # + the fisher-kept metric
        assert fisher_row["clients_trained"] == 3 and np.isfinite(fisher_row["central_loss"])
    assert histories["qfedfisher"][-1]["central_accuracy"] > 0.5


def _mlp_for_breast_cancer():
    from flowerbed.models import build_model

    return build_model("mlp", (30,), 2)


def test_training_pass_fisher_covers_every_parameter_even_without_a_step():
    from flowerbed.strategies.qfedfisher import SquaredGradients

    model = nn.Linear(2, 2)
    hook = SquaredGradients()
    assert set(hook.mean(model)) == {"weight", "bias"}  # a client with no local batch
    assert all(torch.equal(v, torch.zeros_like(v)) for v in hook.mean(model).values())
    model(torch.ones(1, 2)).sum().backward()
    hook(model)
    assert torch.allclose(hook.mean(model)["bias"], torch.ones(2))


def test_server_rule_rejects_fisher_records_with_different_parameters():
    thetas = [{"w": np.ones(2)}, {"w": np.zeros(2)}]
    with pytest.raises(ValueError, match="different parameters"):
        fisher_average(thetas, [{"w": np.ones(2)}, {}], {"w": np.ones(2)}, 0.01)


def _qfedfisher_run(tmp_path, rounds: int, **overrides):
    """A 3-client in-process QFedFisher run: (history, the grid with the clients' contexts)."""
    run_config = resolve_run_config(
        {
            "strategy": "qfedfisher",
            "dataset": "breast-cancer",
            "model": "mlp",
            "num-server-rounds": rounds,
            "local-epochs": 1,
            "output-dir": str(tmp_path / f"{rounds}-rounds"),
            **overrides,
        }
    )
    grid = InProcessGrid(client_app, run_config, 3)
    run_dir = run_protocol(grid, parse_run_config(run_config))
    return json.loads((run_dir / "history.json").read_text()), grid


def test_history_records_the_kept_and_substituted_fractions(tmp_path):
    """Round 2's kept fraction is, per client, the share of its round-1 normalised Fisher at
    or above delta (read from the state a one-round run leaves); the server's substituted
    fraction is a share; nothing is kept before a client has a previous round."""
    history, _ = _qfedfisher_run(tmp_path, 2)
    _, one_round = _qfedfisher_run(tmp_path, 1)
    expected = []
    for context in one_round.contexts.values():
        fisher = context.state[STATE_FISHER].to_torch_state_dict()
        kept = sum(int((f >= 0.01).sum()) for f in fisher.values())
        expected.append(kept / sum(f.numel() for f in fisher.values()))
    first, second = history[1], history[2]
    assert first["client_fisher_kept_fraction_max"] == 0.0  # no previous round yet
    assert second["client_fisher_kept_fraction_mean"] == pytest.approx(np.mean(expected))
    assert second["client_fisher_kept_fraction_min"] == pytest.approx(min(expected))
    assert second["client_fisher_kept_fraction_max"] == pytest.approx(max(expected))
    assert 0 < second["client_fisher_kept_fraction_mean"] < 1
    for row in history[1:]:
        assert 0 <= row["server_fisher_substituted_fraction"] <= 1
    assert "server_fisher_substituted_fraction" not in history[0]
    without_rule, _ = _qfedfisher_run(tmp_path / "off", 2, **{"qfedfisher-client-rule": False})
    assert [row["client_fisher_kept_fraction_max"] for row in without_rule[1:]] == [0.0, 0.0]


def test_top_share_keeps_the_largest_values_of_each_layer_by_hand():
    values = torch.tensor([[0.1, 0.9, 0.5, 0.3], [0.7, 0.2, 0.2, 0.0]])
    # whole tensor: ceil(0.25 x 8) = 2 largest, 0.9 and 0.7
    assert top_share(values, 0.25).tolist() == [[False, True, False, False], [True] + [False] * 3]
    # per first-axis slice (a circuit layer): ceil(0.5 x 4) = 2 per row; row 2's tie kept
    per_layer = top_share(values, 0.5, per_first_axis=True)
    assert per_layer.tolist() == [[False, True, True, False], [True, True, True, False]]
    assert top_share(values, 1e-9).sum() == 1  # at least one entry


def test_quantile_form_in_both_rules_by_hand():
    """q = 1/2 of each 4-entry tensor: the server Fisher-averages the two entries with the
    largest sum of Fisher, whatever delta says; the client keeps its two most informative."""
    significance = Significance(delta=100.0, quantile=0.5)  # delta would mark nothing
    thetas = [{"w": np.array([0.0, 0.0, 0.0, 0.0])}, {"w": np.array([4.0, 4.0, 4.0, 4.0])}]
    fishers = [{"w": np.array([0.3, 0.0, 0.2, 0.0])}, {"w": np.array([0.1, 0.2, 0.0, 0.0])}]
    theta_avg = {"w": np.array([1.0, 1.0, 1.0, 1.0])}
    out, substituted, total = fisher_average(thetas, fishers, theta_avg, significance)
    # F_s = [0.4, 0.2, 0.2, 0.0]: top 2 = entries 0 and the tie 1, 2 (ties kept) -> 3 averaged
    np.testing.assert_allclose(out["w"], [0.1 * 4 / 0.4, 4.0, 0.0, 1.0])
    assert (substituted, total) == (1, 4)
    model = nn.Linear(4, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.full((1, 4), 10.0))
    state = RecordDict(
        {
            STATE_PARAMS: ArrayRecord({"weight": torch.tensor([[1.0, 2.0, 3.0, 4.0]])}),
            STATE_FISHER: ArrayRecord({"weight": torch.tensor([[0.1, 0.9, 0.5, 0.3]])}),
        }
    )
    assert keep_significant(model, state, significance) == 2
    assert model.weight.detach().tolist() == [[10.0, 2.0, 3.0, 10.0]]


def test_quantile_form_keeps_about_its_share_in_a_run(tmp_path):
    overrides = {"qfedfisher-threshold": "quantile", "qfedfisher-quantile": 0.3}
    history, _ = _qfedfisher_run(tmp_path, 2, **overrides)
    kept = history[2]["client_fisher_kept_fraction_mean"]
    assert 0.3 <= kept < 0.45  # ceil per tensor, and ties, keep a little more than q
    for row in history[1:]:
        assert 0.55 - 1e-9 <= row["server_fisher_substituted_fraction"] <= 0.7
