"""The in-process federation and the one wrapper of Flower's private API (fails on a Flower
upgrade that breaks it)."""

import pytest
from flwr.app import Message, MessageType, RecordDict

from flowerbed.client_app import app as client_app
from flowerbed.inprocess import InProcessGrid, resolve_run_config, use_server_identity


def test_server_identity_lets_this_process_create_messages():
    use_server_identity()
    msg = Message(RecordDict(), message_type=MessageType.QUERY, dst_node_id=1000)
    assert msg.metadata.dst_node_id == 1000 and msg.metadata.message_type == MessageType.QUERY


def test_grid_delivers_copies_keeps_per_node_state_and_turns_errors_into_replies():
    grid = InProcessGrid(client_app, resolve_run_config({}), num_nodes=3)
    assert grid.get_node_ids() == [1000, 1001, 1002]
    messages = [
        Message(RecordDict(), message_type=MessageType.QUERY, dst_node_id=n) for n in (1002, 1000)
    ]
    replies = grid.send_and_receive(messages)
    info = [r.content.metric_records["info"] for r in replies]
    assert [int(i["partition-id"]) for i in info] == [2, 0]
    assert all(int(i["num-partitions"]) == 3 for i in info)
    bad = Message(RecordDict(), message_type="query.no_such_action", dst_node_id=1001)
    (reply,) = grid.send_and_receive([bad])
    assert reply.has_error() and "no_such_action" in reply.error.reason


def test_unknown_overrides_are_rejected_like_flwr_run():
    with pytest.raises(KeyError, match="unknown run-config key 'no-such-key'"):
        resolve_run_config({"no-such-key": 1})
