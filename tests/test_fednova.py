"""FedNova: a_i by hand for each optimizer, the client's normalised update, the server rule
with unequal a_i, FedNova == FedAvg with equal local work; heterogeneous local work.

``replies``/``train_msg`` build Flower messages for server-rule tests (used by the other
issue-3 test files too).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

from flowerbed.client import LocalClient
from flowerbed.config import ConfigError, RunConfig
from flowerbed.simulation import resolve_run_config, run_in_process
from flowerbed.strategies.fedavg import train_plain
from flowerbed.strategies.fednova import FedNova, effective_steps, train_fednova
from flowerbed.training import train_local


def _task_identity() -> None:
    from flwr.common.constant import SUPERLINK_NODE_ID
    from flwr.supercore.task_identity import TaskIdentity

    TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, SUPERLINK_NODE_ID


def replies(clients: list[tuple[dict, dict]]) -> list[Message]:
    """Reply messages, one per (arrays, metrics) pair, as clients would send them."""
    _task_identity()
    out = []
    for node, (arrays, metrics) in enumerate(clients):
        sent = Message(content=RecordDict(), message_type=MessageType.TRAIN, dst_node_id=10 + node)
        record = ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})
        out.append(
            Message(RecordDict({"arrays": record, "metrics": MetricRecord(metrics)}), reply_to=sent)
        )
    return out


def arrays_of(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


def configure(strategy, arrays: dict, num_nodes: int = 4) -> list[Message]:
    """Run ``configure_train`` against a fake grid of ``num_nodes`` nodes."""
    _task_identity()

    class Grid:
        def get_node_ids(self):
            return list(range(100, 100 + num_nodes))

    record = ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})
    return list(strategy.configure_train(1, record, ConfigRecord(), Grid()))


def local_client(
    overrides: dict, partition_id: int = 0, num_partitions: int = 4, state=None
) -> LocalClient:
    run_config = resolve_run_config(overrides)
    context = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": partition_id, "num-partitions": num_partitions},
        state=state if state is not None else RecordDict(),
        run_config=run_config,
    )
    return LocalClient.from_context(context)


def train_msg(client: LocalClient, server_round: int = 1, extra: dict | None = None) -> Message:
    """The training message a server would send: the client's fresh model as global model."""
    _task_identity()
    torch.manual_seed(0)
    content = RecordDict(
        {
            "arrays": ArrayRecord(client.new_model().state_dict()),
            "config": ConfigRecord({"server-round": server_round}),
            **(extra or {}),
        }
    )
    return Message(content=content, message_type=MessageType.TRAIN, dst_node_id=1)


# --- a_i ---------------------------------------------------------------------------------------


def test_effective_steps_closed_forms_by_hand():
    assert effective_steps(5) == 5.0
    # momentum 0.5, 3 steps: [3 - 0.5 (1 - 0.125) / 0.5] / 0.5 = 4.25
    assert effective_steps(3, momentum=0.5) == pytest.approx(4.25)
    # proximal eta*mu = 0.1, 3 steps: 1 -> 1.9 -> 2.71 = [1 - 0.9^3] / 0.1
    assert effective_steps(3, lr_mu=0.1) == pytest.approx(2.71)
    rho, tau = 0.9, 17
    assert effective_steps(tau, momentum=rho) == pytest.approx(
        (tau - rho * (1 - rho**tau) / (1 - rho)) / (1 - rho)
    )
    with pytest.raises(ValueError):
        effective_steps(0)


@pytest.mark.parametrize("momentum,mu", [(0.0, 0.0), (0.9, 0.0), (0.0, 0.5), (0.7, 0.3)])
def test_effective_steps_match_pytorch_sgd_on_a_constant_gradient(momentum, mu):
    """x - y = eta * a * g after tau real SGD steps whose loss gradient is the constant g."""
    lr, tau = 0.1, 7
    g = torch.tensor([1.0, -2.0, 0.5])
    layer = torch.nn.Linear(3, 1, bias=False)
    x = layer.weight.detach().clone()

    def linear_loss(model, xb, yb):
        return (model.weight * g).sum()

    def proximal(model):
        return 0.5 * mu * (model.weight - x).pow(2).sum()

    result = train_local(
        layer,
        torch.zeros(tau, 1),
        torch.zeros(tau, dtype=torch.long),
        epochs=1,
        batch_size=1,
        optimizer=torch.optim.SGD(layer.parameters(), lr=lr, momentum=momentum),
        generator=torch.Generator().manual_seed(0),
        loss_fn=linear_loss,
        extra_loss=proximal if mu else None,
    )
    assert result.num_steps == tau
    a = effective_steps(tau, momentum, lr * mu)
    torch.testing.assert_close(x - layer.weight.detach(), lr * a * g.unsqueeze(0))


# --- client step -------------------------------------------------------------------------------


@pytest.mark.parametrize("mu", [0.0, 0.2])
def test_client_reports_normalised_update_and_a(tmp_path, mu):
    overrides = {
        "model": "mlp",
        "local-epochs": 2,
        "momentum": 0.9,
        "fednova-proximal-mu": mu,
        "output-dir": str(tmp_path),
    }
    client = local_client(overrides)
    msg = train_msg(client)
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
            train_plain(local_client(overrides), train_msg(client))
            .content["arrays"]
            .to_torch_state_dict()
        )
        for k in x:
            torch.testing.assert_close(x[k] - a * d[k], y[k], rtol=1e-5, atol=1e-6)
    else:
        assert all(torch.isfinite(v).all() for v in d.values())


# --- server rule -------------------------------------------------------------------------------


def test_server_rule_with_unequal_a_by_hand():
    """p = (1/4, 3/4), a = (2, 6): tau_eff = 5; sum p d = (0.25, -0.025); x <- x - 5 sum p d."""
    strategy = FedNova(trainable={"w"}, min_train_nodes=1)
    x = {
        "w": np.array([1.0, 2.0], np.float32),
        "bn.running_mean": np.array([0.0], np.float32),
        "bn.num_batches_tracked": np.array(0),
    }
    configure(strategy, x)
    new, metrics = strategy.aggregate_train(
        1,
        replies(
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
    got = arrays_of(new)
    np.testing.assert_allclose(got["w"], [1 - 1.25, 2 + 0.125], rtol=1e-6)
    assert got["w"].dtype == np.float32
    np.testing.assert_allclose(got["bn.running_mean"], [2.5])  # FedAvg value, not a step
    assert got["bn.num_batches_tracked"] == 7 and got["bn.num_batches_tracked"].dtype == np.int64
    assert metrics["fednova-tau-eff"] == pytest.approx(5.0)


def test_server_with_equal_a_is_fedavg_by_hand():
    """Equal a: x - a * sum p (x - y_i) / a = sum p y_i."""
    strategy = FedNova(trainable={"w"}, min_train_nodes=1)
    x = np.array([1.0, -1.0])
    ys, ns, a = [np.array([0.5, 0.0]), np.array([2.0, 1.0])], [2, 6], 3.0
    configure(strategy, {"w": x})
    new, _ = strategy.aggregate_train(
        1,
        replies(
            [({"w": (x - y) / a}, {"num-examples": n, "fednova-a": a}) for y, n in zip(ys, ns)]
        ),
    )
    np.testing.assert_allclose(arrays_of(new)["w"], 0.25 * ys[0] + 0.75 * ys[1])


def test_fednova_with_equal_local_work_equals_fedavg(tmp_path):
    """IID partition into equal parts: every client runs the same number of steps (equal a_i)."""
    common = {
        "model": "mlp",
        "partitioner": "iid",
        "num-server-rounds": 2,
        "local-epochs": 1,
        "momentum": 0.5,
        "output-dir": str(tmp_path),
    }
    runs = {
        s: run_in_process({**common, "strategy": s, "run-name": s}, num_clients=4)
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


def test_local_epochs_drawn_per_client_and_round_in_range(tmp_path):
    overrides = {"local-epochs": 1, "local-epochs-max": 4, "output-dir": str(tmp_path)}
    draws = {
        (pid, r): local_client(overrides, pid).local_epochs(r)
        for pid in range(4)
        for r in range(1, 6)
    }
    assert set(draws.values()) <= {1, 2, 3, 4} and len(set(draws.values())) > 1
    assert draws == {(pid, r): local_client(overrides, pid).local_epochs(r) for pid, r in draws}
    assert local_client({"local-epochs": 3}).local_epochs(5) == 3  # off by default


def test_local_epochs_max_below_local_epochs_is_rejected_before_training(tmp_path):
    with pytest.raises(ConfigError, match="local-epochs-max"):
        run_in_process({"local-epochs": 3, "local-epochs-max": 2, "output-dir": str(tmp_path)}, 2)


def test_heterogeneous_work_shows_in_num_steps(tmp_path):
    overrides = {
        "model": "mlp",
        "local-epochs": 1,
        "local-epochs-max": 3,
        "output-dir": str(tmp_path),
    }
    client = local_client(overrides, 1)
    steps_per_epoch = -(-len(client.x_train) // client.config.batch_size)
    for r in (1, 2, 3):
        reply = train_plain(client, train_msg(client, server_round=r))
        assert reply.content["metrics"]["num-steps"] == client.local_epochs(r) * steps_per_epoch
    assert RunConfig.from_run_config(resolve_run_config(overrides)).get("local-epochs-max", 0) == 3
