"""Virtual clients (``runtime.virtual_clients``): a few SuperNodes carry many clients, with the
outputs of one SuperNode per client, the same sample for the same seed, and a handshake and
message batches bounded by the SuperNodes, not the clients."""

import json

import pytest
from flwr.app import ConfigRecord, Context, Error, Message, MessageType, RecordDict

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.inprocess import default_run_config, run_in_process, use_server_identity
from flowerbed.runtime.virtual_clients import RECORD, VirtualClients, act_as_client
from flowerbed.settings import ConfigError
from flowerbed.simulation import VIRTUAL_ABOVE, federation_layout


@pytest.fixture(autouse=True)
def server_identity():
    use_server_identity()


def to_client(client: int) -> Message:
    return Message(
        content=RecordDict({"config": ConfigRecord({"server-round": 1})}),
        dst_node_id=client,
        message_type=MessageType.TRAIN,
        group_id="1",
    )


class CarrierGrid:
    """Answers each carried message with the client it was carried for (or an error for the
    clients in ``failing``); records every batch it was given."""

    def __init__(self, failing=(), silent=()) -> None:
        self.batches: list[list[Message]] = []
        self.failing, self.silent = set(failing), set(silent)

    def send_and_receive(self, messages, timeout=None):
        messages = list(messages)
        self.batches.append(messages)
        replies = []
        for message in messages:
            client = message.content.config_records[RECORD]["partition-id"]
            if client in self.silent:
                continue
            if client in self.failing:
                replies.append(Message(Error(code=0, reason=f"client {client}"), reply_to=message))
            else:
                content = RecordDict({"metrics": ConfigRecord({"carried-for": client})})
                replies.append(Message(content, reply_to=message))
        return replies


def test_messages_go_in_waves_of_one_per_carrier_and_come_back_from_their_clients():
    grid = CarrierGrid(failing={7})
    clients = VirtualClients(carriers=[501, 502, 503], num_clients=10)
    sent = [to_client(c) for c in (9, 0, 7, 4, 2, 5, 8)]
    replies = clients.send_and_receive(grid, sent)

    # 7 messages, 3 carriers: waves of 3, 3, 1, in client order, each carrier once per wave
    assert [len(batch) for batch in grid.batches] == [3, 3, 1]
    for batch in grid.batches:
        assert len({m.metadata.dst_node_id for m in batch}) == len(batch)
        assert {m.metadata.dst_node_id for m in batch} <= {501, 502, 503}
    carried = [m.content.config_records[RECORD]["partition-id"] for b in grid.batches for m in b]
    assert carried == [0, 2, 4, 5, 7, 8, 9]
    assert {
        m.content.config_records[RECORD]["num-partitions"] for b in grid.batches for m in b
    } == {10}
    # each reply is its client's: the sender is the client, the content the carrier's answer
    assert sorted(r.metadata.src_node_id for r in replies) == [0, 2, 4, 5, 7, 8, 9]
    for reply in replies:
        if reply.metadata.src_node_id == 7:
            assert reply.has_error() and "client 7" in reply.error.reason
        else:
            carried_for = reply.content.config_records["metrics"]["carried-for"]
            assert carried_for == reply.metadata.src_node_id
    # the strategy's messages are not changed (their bytes were counted as they are)
    assert all(RECORD not in m.content for m in sent)


def test_a_missing_reply_is_missing_and_the_time_up_sends_no_more_waves():
    grid = CarrierGrid(silent={4})
    clients = VirtualClients(carriers=[501, 502], num_clients=10)
    replies = clients.send_and_receive(grid, [to_client(c) for c in (1, 4, 6)])
    assert sorted(r.metadata.src_node_id for r in replies) == [1, 6]

    late = CarrierGrid()
    assert clients.send_and_receive(late, [to_client(c) for c in range(5)], timeout=0) == []
    assert late.batches == []  # no wave sent once the time is up


def test_no_carrier_is_an_error():
    with pytest.raises(ValueError, match="at least one SuperNode"):
        VirtualClients(carriers=[], num_clients=10)


def test_act_as_client_handles_the_message_as_its_client_and_restores_the_carrier():
    context = Context(
        run_id=1,
        node_id=501,
        node_config={"partition-id": 0, "num-partitions": 3},
        state=RecordDict({"carrier-leftover": ConfigRecord({"x": 1})}),
        run_config={},
    )
    seen = {}

    def handler(msg, ctx):
        seen["node_config"] = dict(ctx.node_config)
        seen["state"] = list(ctx.state.keys())
        seen["records"] = list(msg.content.keys())
        ctx.state["client-state"] = ConfigRecord({"y": 2})  # kept on disk by client_state
        return Message(RecordDict(), reply_to=msg)

    carried = VirtualClients([501], 40).carried(to_client(17), 501)
    act_as_client(carried, context, handler)
    assert seen == {
        "node_config": {"partition-id": 17, "num-partitions": 40},
        "state": [],
        "records": ["config"],
    }
    assert dict(context.node_config) == {"partition-id": 0, "num-partitions": 3}
    assert list(context.state.keys()) == []

    plain = to_client(2)  # a message for the node itself is handled as it is
    act_as_client(plain, context, handler)
    assert seen["node_config"] == {"partition-id": 0, "num-partitions": 3}


SCAFFOLD = {
    "dataset": "digits",
    "model": "mlp",
    "strategy": "scaffold",  # client state (c_i) that must follow the client, not the node
    "num-server-rounds": 3,
    "fraction-train": 0.25,
    "fraction-evaluate": 0.5,
    "local-epochs": 1,
}


def counting(app, counts):
    def delivered(message, context):
        counts.setdefault(message.metadata.message_type, set()).add(context.node_id)
        return app(message, context)

    return delivered


def test_virtual_clients_give_the_outputs_of_one_supernode_per_client(tmp_path):
    real = run_in_process({**SCAFFOLD, "output-dir": str(tmp_path / "real")}, num_clients=12)
    nodes: dict[str, set[int]] = {}
    virtual = run_in_process(
        {**SCAFFOLD, "output-dir": str(tmp_path / "virtual"), "virtual-clients": 12},
        num_clients=3,
        app=counting(client_app, nodes),
    )
    # three SuperNodes did all the work: the handshake asked them alone
    assert all(len(ids) <= 3 for ids in nodes.values())
    assert len(nodes[MessageType.QUERY]) == 3
    assert json.loads((virtual / "history.json").read_text()) == json.loads(
        (real / "history.json").read_text()
    )
    assert (virtual / "client_table.jsonl").read_text() == (real / "client_table.jsonl").read_text()
    # each client's SCAFFOLD state is its own, as with one node per client
    states = sorted(p.name for p in (virtual / "client-state").iterdir())
    assert states == sorted(p.name for p in (real / "client-state").iterdir())
    assert len(states) > 3


def recording_trained(app, trained):
    """``app``, noting the client each training message is carried for, per round."""

    def delivered(message, context):
        if message.metadata.message_type == MessageType.TRAIN:
            client = message.content.config_records[RECORD]["partition-id"]
            server_round = message.content.config_records["config"]["server-round"]
            trained.setdefault(server_round, []).append(client)
        return app(message, context)

    return delivered


DIGITS_200 = {
    "dataset": "digits",
    "model": "logreg",
    "partitioner": "iid",
    "num-server-rounds": 2,
    "fraction-train": 0.03,
    "fraction-evaluate": 0.0,
    "local-epochs": 1,
    "virtual-clients": 200,
}


def test_same_seed_samples_the_same_partitions_among_hundreds_of_clients(tmp_path):
    samples = []
    for i, seed in enumerate((5, 5, 6)):
        trained: dict[int, list[int]] = {}
        overrides = {**DIGITS_200, "output-dir": str(tmp_path / f"{i}"), "seed": seed}
        run_in_process(overrides, 4, app=recording_trained(client_app, trained))
        samples.append({r: sorted(clients) for r, clients in trained.items()})
    first, again, other = samples
    assert sorted(first) == [1, 2] and all(len(s) == 6 for s in first.values())  # 3 % of 200
    assert first[1] != first[2]  # a new sample every round
    assert first == again
    assert first != other


def test_protocols_with_state_outside_the_rounds_and_site_data_are_refused():
    base = default_run_config()
    with pytest.raises(ConfigError, match="virtual-clients=30: strategy='qkt' cannot run virtual"):
        parse_run_config({**base, "virtual-clients": 30, "strategy": "qkt"})
    with pytest.raises(ConfigError, match="virtual-clients=30 needs data that flowerbed"):
        parse_run_config({**base, "virtual-clients": 30, "partitioner": "site"})
    with pytest.raises(ConfigError, match="virtual-clients"):
        parse_run_config({**base, "virtual-clients": -1})
    with pytest.raises(
        ConfigError, match="virtual-clients=5 is fewer than min-available-clients=8"
    ):
        parse_run_config({**base, "virtual-clients": 5, "min-available-clients": 8})


def test_federation_layout_starts_supernodes_for_the_sample_above_the_threshold():
    assert federation_layout({}, VIRTUAL_ABOVE) == (VIRTUAL_ABOVE, {})
    few = {"fraction-train": 0.001, "fraction-evaluate": 0.0}
    assert federation_layout(few, 100_000) == (100, {**few, "virtual-clients": 100_000})
    tenth = {"fraction-train": 0.1, "fraction-evaluate": 0.05}
    assert federation_layout(tenth, 500) == (50, {**tenth, "virtual-clients": 500})
    assert federation_layout({}, 1000) == (VIRTUAL_ABOVE, {"virtual-clients": 1000})  # waves
    assert federation_layout({"strategy": "qkt"}, 1000) == (1000, {"strategy": "qkt"})
    given = {"virtual-clients": 0}
    assert federation_layout(given, 1000) == (1000, given)
