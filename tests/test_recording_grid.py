"""The recording grid drops poisoned replies: a client that sends NaN or Inf weights (the
``nonfinite`` failure mode of the fault-injection mod) is counted as failed, with the reason, and
the global model is the aggregate of the others, exactly as if that client had raised, for every
family of server rule. Its handshake asks every node, or one (``handshake='lazy'``) and learns
the others' partitions from their replies."""

import json

import numpy as np
import pytest
import torch
from flwr.app import Message, MessageType, MetricRecord, RecordDict

from flowerbed.inprocess import run_in_process, use_server_identity
from flowerbed.runtime.recording_grid import RecordingGrid

POISONED = 1


VQC = {"model": "vqc", "vqc-layers": 1, "optimizer": "adam"}
KT = {"kt-local-max-epochs": 2, "kt-local-patience": 1, "kt-epochs": 1, "kt-query-threshold": 10}


@pytest.mark.parametrize(
    "overrides",
    [
        {"strategy": "fedavg"},
        {"strategy": "fedmedian"},
        {"strategy": "fedadam"},
        {"strategy": "fednova", "local-epochs-max": 2},
        {"strategy": "scaffold"},
        {"strategy": "qfedfisher", **VQC},
        {"strategy": "qkt", "partitioner": "pathological", **KT},
    ],
    ids=lambda o: o["strategy"],
)
def test_a_poisoned_client_counts_as_failed_and_the_others_are_aggregated(overrides, tmp_path):
    common = {"num-server-rounds": 2, "local-epochs": 1, "model": "mlp", **overrides}
    common["failing-partitions"] = str(POISONED)
    poisoned = run_in_process(
        {**common, "failure-mode": "nonfinite", "output-dir": str(tmp_path / "a")}, 4
    )
    failing = run_in_process({**common, "output-dir": str(tmp_path / "b")}, 4)
    history = json.loads((poisoned / "history.json").read_text())
    reference = json.loads((failing / "history.json").read_text())
    first = history[0] if overrides["strategy"] == "qkt" else history[1]
    assert first["clients_failed"] == 1 and first["clients_trained"] == 3
    assert "partition 1: non-finite values (NaN or Inf) in arrays/" in first["failures"][0]
    column = (
        "client_models_test_accuracy_mean" if "qkt" in overrides["strategy"] else "central_accuracy"
    )
    assert [r[column] for r in history] == [r[column] for r in reference]
    if (poisoned / "model.pt").exists():
        model = torch.load(poisoned / "model.pt")
        expected = torch.load(failing / "model.pt")
        assert all(torch.isfinite(v).all() for v in model.values() if v.is_floating_point())
        assert all(torch.equal(model[k], expected[k]) for k in model)
    else:
        kt = json.loads((poisoned / "kt_metrics.json").read_text())["clients"]
        assert kt == json.loads((failing / "kt_metrics.json").read_text())["clients"]


class ShuffledNodes:
    """A grid whose node ids are not in partition order (as Flower's random ids); it answers the
    handshake and train messages, in reverse order, and counts the messages it was sent."""

    def __init__(self, num_nodes: int = 6) -> None:
        ids = np.random.default_rng(0).permutation(np.arange(100, 100 + num_nodes))
        self.partition = {int(node): pid for pid, node in enumerate(ids)}
        self.sent: list[Message] = []

    def get_node_ids(self):
        return set(self.partition)

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            info = {"partition-id": self.partition[node], "num-partitions": len(self.partition)}
            name = "info" if msg.metadata.message_type == MessageType.QUERY else "metrics"
            metrics = MetricRecord({**info, "num-examples": 1})
            reply = Message(RecordDict({name: metrics}), reply_to=msg)
            reply.metadata.__dict__["_src_node_id"] = node
            replies.append(reply)
        return replies[::-1]


def train_all(grid: RecordingGrid, nodes) -> list[Message]:
    messages = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.TRAIN) for n in nodes]
    return grid.send_and_receive(messages)


@pytest.mark.parametrize("ask_all", [True, False])
def test_the_handshake_asks_every_node_or_one_and_replies_come_in_partition_order(ask_all):
    use_server_identity()
    fake = ShuffledNodes()
    grid = RecordingGrid(fake)
    info = grid.handshake(1, 10.0, 10.0, ask_all=ask_all)
    grid.num_partitions = 6  # as start_run settles it from the handshake
    queries = [m for m in fake.sent if m.metadata.message_type == MessageType.QUERY]
    smallest = min(fake.partition)
    assert len(queries) == (6 if ask_all else 1)
    assert info == (
        {n: (p, 6) for n, p in fake.partition.items()}
        if ask_all
        else {smallest: (fake.partition[smallest], 6)}
    )
    listed = grid.get_node_ids()
    by_partition = sorted(fake.partition, key=fake.partition.get)
    assert listed == (by_partition if ask_all else sorted(fake.partition))
    replies = train_all(grid, listed)
    assert [fake.partition[r.metadata.src_node_id] for r in replies] == list(range(6))
    assert grid.partition_of == fake.partition  # learnt from the replies when not asked
    assert grid.get_node_ids() == listed  # the order does not move as partitions are learnt
    assert grid.rounds[1].clients_trained == 6
    assert [m["partition-id"] for m in grid.rounds[1].train] == list(range(6))


def test_a_lazy_handshake_runs_the_same_job_when_node_ids_follow_partitions(tmp_path):
    """In-process node ids are 1000 + partition id: listing nodes by id is listing them by
    partition, so both handshakes sample the same clients and give the same history."""
    common = {"num-server-rounds": 2, "local-epochs": 1, "model": "mlp", "fraction-train": 0.5}
    common["fraction-evaluate"] = 0.5
    histories = []
    for mode in ("all", "lazy"):
        run_dir = run_in_process(
            {**common, "handshake": mode, "output-dir": str(tmp_path / mode)}, 6
        )
        rows = json.loads((run_dir / "history.json").read_text())
        histories.append([(r["central_accuracy"], r.get("client_accuracies")) for r in rows])
    assert histories[0] == histories[1]
    assert len(histories[0][1][1]) == 3  # three of the six clients evaluated
