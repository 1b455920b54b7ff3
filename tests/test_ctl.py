"""CTL as a Flower protocol (``flowerbed.methods.ctl``): the same curves as the NumPy reference
simulator, nothing but predictions and coefficient rows leave a node, failures, bad input."""

import json
import logging
import math
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from flwr.app import Error, Message

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.methods.ctl import ROUND, SHARE
from flowerbed.methods.ctl.node import Node
from flowerbed.methods.ctl.reference import nodes_for, params_for, simulate
from flowerbed.runtime.outcome import RunFailed
from flowerbed.settings import ConfigError

SIMULATION_1 = {
    "strategy": "ctl",
    "dataset": "breast-cancer-shifted",
    "sim-shifts": 20,
    "partitioner": "kmeans-pca",
    "num-server-rounds": 4,
    "seed": 3,
}


def curves(run_dir: Path) -> np.ndarray:
    """(rounds + 1, nodes, tasks) accuracies from ``ctl_metrics.json``."""
    log = json.loads((run_dir / "ctl_metrics.json").read_text())
    return np.array([[node["task-accuracies"] for node in r["nodes"]] for r in log["rounds"]])


@pytest.mark.parametrize(
    "overrides",
    [{"ctl-guests": "best"}, {"ctl-guests": "random-redraw", "ctl-clip-h": True}],
    ids=["best", "random-redraw"],
)
def test_flower_protocol_and_reference_simulator_give_the_same_curves(overrides, tmp_path):
    run = {**SIMULATION_1, **overrides, "output-dir": str(tmp_path)}
    flower = curves(run_in_process(run, num_clients=6))
    config = parse_run_config(resolve_run_config(run))
    reference = simulate(nodes_for(config, 6), params_for(config))["accuracy"]
    assert flower.shape == reference.shape == (5, 6, 3)
    np.testing.assert_array_equal(flower, reference)
    assert flower[-1].mean() > flower[0].mean() + 0.1  # it learns


def test_history_and_metrics_files(tmp_path):
    run_dir = run_in_process({**SIMULATION_1, "output-dir": str(tmp_path)}, num_clients=6)
    history = json.loads((run_dir / "history.json").read_text())
    assert [row["round"] for row in history] == [0, 1, 2, 3, 4]
    acc = curves(run_dir)
    for row, round_acc in zip(history, acc):
        assert row["client_models_test_accuracy_mean"] == pytest.approx(round_acc.mean())
        assert row["client_accuracy_unweighted_mean"] == pytest.approx(round_acc[:, 0].mean())
        assert row["nonlocal_accuracy_mean"] == pytest.approx(round_acc[:, 1:].mean())
    assert history[0]["bytes_sent"] > 0 and history[1]["clients_trained"] == 6
    log = json.loads((run_dir / "ctl_metrics.json").read_text())
    assert np.array(log["tasks"]).shape == (6, 3)
    node = log["rounds"][1]["nodes"][0]
    assert len(node["guests"]) == len(node["lambdas"]) == 2 and len(node["coefficients"]) == 6
    assert "ctl_metrics.csv" in {p.name for p in run_dir.iterdir()}
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"


def test_only_predictions_and_coefficient_rows_leave_a_node(tmp_path):
    seen: list[Message] = []

    def recording_app(msg, context):
        reply = client_app(msg, context)
        seen.append(reply)
        return reply

    run_in_process(
        {**SIMULATION_1, "num-server-rounds": 2, "output-dir": str(tmp_path)},
        num_clients=4,
        app=recording_app,
    )
    kinds = {reply.metadata.message_type for reply in seen}
    assert kinds == {"query", SHARE, ROUND}  # the handshake, the share, the rounds
    for reply in seen:
        arrays = {
            f"{name}/{key}": array.numpy().shape
            for name, record in reply.content.array_records.items()
            for key, array in record.items()
        }
        if reply.metadata.message_type == ROUND:
            # 2 representatives per node, one coefficient per node: no (d,) weight vector
            assert arrays == {"shared/predictions": (8,), "shared/coefficients": (4,)}
        elif reply.metadata.message_type == SHARE:
            assert arrays == {
                "share/centroids": (2, 30),
                "share/counts": (2,),
                "share/moments": (2, 4, 30),
            }


def test_one_step_follows_the_bernoulli_kl_gradient_by_hand():
    # alpha = 1, no cross-entropy, one guest predicting 0.8 on one representative: from the
    # zero model (p = 0.5) the gradient is (p_k - p_j) x~ = (0.5 - 0.8) x~, so with step 1
    # the weights become 0.3 x~ and the bias 0.3
    x = torch.tensor([[0.0, 1.0], [2.0, 3.0], [4.0, 2.0]], dtype=torch.float64)
    client = SimpleNamespace(
        config=SimpleNamespace(ctl_steps=1, ctl_learning_rate=1.0),
        context=SimpleNamespace(state={}),
        x_train=x,
        y_train=torch.tensor([0, 1, 1]),
    )
    node = Node(client)
    rep = np.array([[1.0, 3.0]])
    node.descend(
        rep,
        rep_share=np.array([1.0]),
        guest_predictions=np.array([[0.2], [0.8]]),
        lambdas=np.array([0.0, 1.0]),
        alpha=1.0,
        ce_weight=0.0,
    )
    rep_std = (rep[0] - x.numpy().mean(axis=0)) / x.numpy().std(axis=0)
    np.testing.assert_allclose(node.weight, 0.3 * rep_std, rtol=1e-12)
    assert node.bias == pytest.approx(0.3)


def test_a_node_failing_a_round_keeps_its_previous_predictions(tmp_path):
    def flaky_app(msg, context):
        config = msg.content.config_records.get("config")
        failing = (
            msg.metadata.message_type == ROUND
            and int(context.node_config["partition-id"]) == 1
            and config is not None
            and int(config["server-round"]) == 2
        )
        if failing:
            return Message(Error(code=0, reason="node 1 is down"), reply_to=msg)
        return client_app(msg, context)

    run = {**SIMULATION_1, "output-dir": str(tmp_path)}
    run_dir = run_in_process(run, num_clients=4, app=flaky_app)
    history = json.loads((run_dir / "history.json").read_text())
    assert history[2]["clients_failed"] == 1 and history[3]["clients_failed"] == 0
    log = json.loads((run_dir / "ctl_metrics.json").read_text())
    assert [n["partition"] for n in log["rounds"][2]["nodes"]] == [0, 2, 3]
    # round 3 uses node 1's round-1 predictions: the curves differ from the clean run's
    clean = curves(run_in_process({**run, "run-name": "clean"}, num_clients=4))
    round_3 = [n["task-accuracies"] for n in log["rounds"][3]["nodes"]]
    assert len(round_3) == 4 and not np.array_equal(round_3, clean[3])


def test_a_node_missing_at_the_start_fails_the_run_in_one_line(tmp_path):
    run = {**SIMULATION_1, "output-dir": str(tmp_path), "failing-partitions": "2"}
    with pytest.raises(RunFailed, match=r"partitions \[2\] failed round 0"):
        run_in_process(run, num_clients=4)


@pytest.mark.parametrize(
    "overrides, clients, message",
    [
        (
            {"dataset": "synthetic-iid", "sim-nodes": 4, "partitioner": "dirichlet"},
            4,
            "strategy='ctl' needs binary labels .* 10 classes",
        ),
        (
            {"ctl-num-guests": 4},
            4,
            r"ctl-num-guests=4 but each node has 3 other node\(s\) in a federation of 4",
        ),
        (
            {"ctl-tasks": 5},
            4,
            r"ctl-tasks=5 but each node has 3 other node\(s\) .*; valid range: 0 to 3",
        ),
    ],
    ids=["multiclass", "guests", "tasks"],
)
def test_bad_settings_stop_before_any_round(overrides, clients, message, tmp_path):
    run = {**SIMULATION_1, **overrides, "output-dir": str(tmp_path)}
    with pytest.raises(ConfigError, match=message) as caught:
        run_in_process(run, num_clients=clients)
    assert "\n" not in str(caught.value)
    assert not list(tmp_path.glob("*/history.json"))


def test_nodes_lacking_a_class_run_share_no_representative_for_it_and_are_logged(tmp_path, caplog):
    # label-sorted over 4 nodes: node 0 holds only class 0, node 1 both, nodes 2 and 3 only
    # class 1 (seed 3)
    run = {
        **SIMULATION_1,
        "dataset": "breast-cancer",
        "partitioner": "label-sorted",
        "num-server-rounds": 2,
        "output-dir": str(tmp_path),
    }
    seen: list[Message] = []

    def recording_app(msg, context):
        reply = client_app(msg, context)
        seen.append(reply)
        return reply

    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(caplog.handler)
    try:
        run_dir = run_in_process(run, num_clients=4, app=recording_app)
    finally:
        flwr_logger.removeHandler(caplog.handler)
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"
    shares = {  # the in-process grid's node ids are 1000 + partition id
        r.metadata.src_node_id - 1000: r.content.array_records["share"]
        for r in seen
        if r.metadata.message_type == SHARE
    }
    holds = {k: (share["counts"].numpy() > 0).tolist() for k, share in sorted(shares.items())}
    assert holds == {0: [True, False], 1: [True, True], 2: [False, True], 3: [False, True]}
    # the missing class: count 0, zeros as its centroid and moments
    assert not shares[0]["centroids"].numpy()[1].any() and not shares[0]["moments"].numpy()[1].any()
    assert not shares[2]["centroids"].numpy()[0].any() and shares[2]["centroids"].numpy()[1].any()
    for reply in seen:
        if reply.metadata.message_type == ROUND:  # every prediction finite, placeholders too
            assert np.isfinite(reply.content.array_records["shared"]["predictions"].numpy()).all()
    (warning,) = {  # a set: caplog may see the record through two handlers
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "CTL: node(s)" in r.getMessage()
    }
    assert "node(s) 0 (class 1), 2 (class 0), 3 (class 0) hold no training sample" in warning
    assert "weight n_h = 0" in warning and "H = 1" in warning
    history = json.loads((run_dir / "history.json").read_text())
    assert [row["round"] for row in history] == [0, 1, 2]
    assert all(math.isfinite(row["client_models_test_accuracy_mean"]) for row in history)


def test_all_guests_scale_and_local_variants_differ_as_documented(tmp_path):
    config = parse_run_config(resolve_run_config({**SIMULATION_1, "num-server-rounds": 3}))
    nodes = nodes_for(config, 5)
    params = params_for(config)
    scaled = simulate(nodes, replace(params, guests="all"))
    unscaled = simulate(nodes, replace(params, guests="all", all_scale=False))
    # lambda of All is scaled by num-guests / (K - 1) = 2 / 4
    np.testing.assert_allclose(scaled["lambdas"][1], 0.5 * unscaled["lambdas"][1])
    full = simulate(nodes, replace(params, guests="local"))
    fair = simulate(nodes, replace(params, guests="local", local_ce="scaled"))
    assert not full["lambdas"].any() and not fair["lambdas"].any()
    assert not np.allclose(full["weights"], fair["weights"])
