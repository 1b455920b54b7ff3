"""The fault-injection client mod: listed partitions fail their training, nothing else does."""

import json

import pytest
from flwr.app import Context, Message, MessageType, RecordDict

from flowerbed.inprocess import run_in_process, use_server_identity
from flowerbed.trust.fault_injection import fail_on_purpose, failing_partition_ids


def context(partition_id: int, failing: str) -> Context:
    return Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": partition_id, "num-partitions": 4},
        state=RecordDict(),
        run_config={"failing-partitions": failing},
    )


def test_listed_partitions_raise_and_the_others_pass_through():
    use_server_identity()
    msg = Message(RecordDict(), message_type=MessageType.TRAIN, dst_node_id=1)
    answered = []

    def handler(m, c):
        answered.append(int(c.node_config["partition-id"]))
        return m

    assert failing_partition_ids({"failing-partitions": "1, 3"}) == {1, 3}
    with pytest.raises(RuntimeError, match="partition 3 fails on purpose"):
        fail_on_purpose(msg, context(3, "1,3"), handler)
    assert fail_on_purpose(msg, context(2, "1,3"), handler) is msg
    assert answered == [2]


def test_a_failing_partition_trains_in_no_phase_but_answers_the_handshake(tmp_path):
    """One-shot protocol: the failing client is missing from both training phases (local fit,
    exchange), yet it took part in the handshake (4 partitions in the table)."""
    run_dir = run_in_process(
        {
            "strategy": "local",
            "failing-partitions": "2",
            "kt-local-max-epochs": 1,
            "output-dir": str(tmp_path),
        },
        num_clients=4,
    )
    history = json.loads((run_dir / "history.json").read_text())
    assert [(r["clients_trained"], r["clients_failed"]) for r in history] == [(3, 1), (3, 0)]
    assert "fails on purpose" in history[0]["failures"][0]
    assert len(json.loads((run_dir / "partitions.json").read_text())["label_counts"]) == 4
