"""The phases' one way of asking the nodes (``protocols.messaging``): a message per node, the
good answers kept in partition order, every failure dropped and logged."""

import logging
from types import SimpleNamespace

from flwr.app import Error, Message, MetricRecord, RecordDict

from flowerbed.inprocess import use_server_identity
from flowerbed.protocols.messaging import by_partition, send_to_nodes
from flowerbed.runtime.recording_grid import RecordingGrid

ACTION = "train.example"
PARTITION = {13: 0, 11: 1, 12: 2, 10: 3}  # node id -> partition id (ids not in partition order)


class Nodes:
    """A Flower grid whose node 11 (partition 1) fails and node 10 (partition 3) never
    answers; the others reply, in reverse order, with what they were sent."""

    def __init__(self) -> None:
        self.sent: list[Message] = []

    def get_node_ids(self):
        return list(PARTITION)

    def send_and_receive(self, messages, *, timeout=None):
        replies = []
        for msg in messages:
            self.sent.append(msg)
            node = msg.metadata.dst_node_id
            if node == 10:
                continue
            if node == 11:
                reply = Message(
                    Error(code=0, reason="Traceback ...\nRuntimeError: boom"), reply_to=msg
                )
            else:
                sent = int(msg.content.metric_records["sent"]["value"])
                metrics = MetricRecord({"partition-id": PARTITION[node], "value": sent})
                reply = Message(RecordDict({"metrics": metrics}), reply_to=msg)
            reply.metadata.__dict__["_src_node_id"] = node
            replies.append(reply)
        return replies[::-1]


def run_on(fake: Nodes):
    use_server_identity()
    grid = RecordingGrid(fake)
    grid.partition_of = dict(PARTITION)
    return SimpleNamespace(grid=grid, config=SimpleNamespace(round_timeout=5.0))


def content(value: int) -> RecordDict:
    return RecordDict({"sent": MetricRecord({"value": value})})


def test_a_failing_node_is_dropped_and_logged_and_the_good_answers_kept_in_order(caplog):
    fake = Nodes()
    run = run_on(fake)
    logger = logging.getLogger("flwr")
    logger.addHandler(caplog.handler)
    try:
        replies = send_to_nodes(run, ACTION, content(7))
    finally:
        logger.removeHandler(caplog.handler)
    # one message per node of the run, in partition order, all of the one type
    assert [m.metadata.dst_node_id for m in fake.sent] == [13, 11, 12, 10]
    assert {m.metadata.message_type for m in fake.sent} == {ACTION}
    # the good answers, in partition order; the failed and the silent node left out
    assert [PARTITION[r.metadata.src_node_id] for r in replies] == [0, 2]
    assert all(not r.has_error() for r in replies)
    assert list(by_partition(run, replies)) == [0, 2]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    expected = (
        f"flowerbed: 2 of 4 node(s) answered {ACTION}; left out: partition 1: RuntimeError:"
        " boom; 1 node(s) did not reply in time"
    )
    assert set(warnings) == {expected}  # (the test handler may see it twice)
    # the grid counted both failures in the round, as for any other message
    assert run.grid.rounds[1].clients_failed == 2


def test_one_content_per_chosen_node_asks_only_those(caplog):
    fake = Nodes()
    run = run_on(fake)
    logger = logging.getLogger("flwr")
    logger.addHandler(caplog.handler)
    try:
        replies = by_partition(run, send_to_nodes(run, ACTION, {12: content(2), 13: content(0)}))
    finally:
        logger.removeHandler(caplog.handler)
    assert sorted(m.metadata.dst_node_id for m in fake.sent) == [12, 13]
    assert {k: int(r.content.metric_records["metrics"]["value"]) for k, r in replies.items()} == {
        0: 0,
        2: 2,
    }
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]  # nobody failed
