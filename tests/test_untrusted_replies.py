"""Every reply is untrusted input: a malformed or absurd training reply is dropped before any
strategy sees it, counted as a failed client with its partition and the exact reason, and the
global model is exactly the aggregate of the honest replies (the model of a run in which that
client raised instead). The same for evaluation replies that claim another partition, nodes
that join after the handshake, and malformed handshakes and data reports."""

import json

import numpy as np
import pytest
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, MessageType, MetricRecord, RecordDict

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.core.clipping import clip_update
from flowerbed.inprocess import InProcessGrid, resolve_run_config, run_in_process
from flowerbed.server_app import run_protocol
from flowerbed.trust.reply_checks import (
    DATA,
    NodeSizes,
    RejectedReply,
    ReplyRules,
    check_reply,
)

BAD = 1  # the partition whose reply is corrupted
COMMON = {"num-server-rounds": 1, "local-epochs": 1, "model": "mlp", "seed": 3}


def arrays_of(reply) -> dict[str, np.ndarray]:
    return {key: value.numpy() for key, value in reply.content["arrays"].items()}


def set_arrays(reply, arrays: dict) -> None:
    reply.content["arrays"] = ArrayRecord(
        {k: v if isinstance(v, Array) else Array(v) for k, v in arrays.items()}
    )


def vector_key(arrays: dict) -> str:
    return next(key for key, value in arrays.items() if value.ndim == 1)


def garbage(arrays):
    key = vector_key(arrays)
    shape = tuple(arrays[key].shape)
    bad = Array(dtype="float32", shape=shape, stype="numpy.ndarray", data=b"garbage")
    return {**arrays, key: bad}


CORRUPTIONS = {
    # name: (what it does to the reply, a piece of the reason in the history)
    "num-examples-1e30": (
        lambda r: r.content["metrics"].__setitem__("num-examples", 1e30),
        "exceeds",
    ),
    "num-examples-negative": (
        lambda r: r.content["metrics"].__setitem__("num-examples", -5),
        "num-examples=-5 is not a positive integer",
    ),
    "num-examples-zero": (
        lambda r: r.content["metrics"].__setitem__("num-examples", 0),
        "num-examples=0 is not a positive integer",
    ),
    "list-metric": (
        lambda r: r.content["metrics"].__setitem__("train-loss", [1.0, 2.0]),
        "metrics/train-loss is a list",
    ),
    "extra-key": (
        lambda r: set_arrays(r, {**arrays_of(r), "extra": np.zeros(3, np.float32)}),
        "unexpected ['extra']",
    ),
    "missing-key": (
        lambda r: set_arrays(r, dict(list(arrays_of(r).items())[1:])),
        "missing [",
    ),
    "bias-of-shape-1": (
        lambda r: set_arrays(r, {**arrays_of(r), vector_key(arrays_of(r)): np.ones(1, np.float32)}),
        "is (1,) float32, expected",
    ),
    "float16": (
        lambda r: set_arrays(r, {k: v.astype(np.float16) for k, v in arrays_of(r).items()}),
        "float16, expected",
    ),
    "undecodable": (lambda r: set_arrays(r, garbage(arrays_of(r))), "cannot be decoded"),
    "1e38": (
        lambda r: set_arrays(r, {k: np.full_like(v, 1e38) for k, v in arrays_of(r).items()}),
        "overflows float32",
    ),
    "extra-record": (
        lambda r: r.content.__setitem__("more", ArrayRecord({"w": Array(np.zeros(2))})),
        "array records ['arrays', 'more']",
    ),
}


def corrupting(corrupt, message_type=MessageType.TRAIN, partition=BAD):
    """The ClientApp, with ``corrupt`` applied to one partition's replies of one type."""

    def app(msg, context):
        reply = client_app(msg, context)
        if (
            msg.metadata.message_type == message_type
            and int(context.node_config["partition-id"]) == partition
            and not reply.has_error()
        ):
            corrupt(reply)
        return reply

    return app


@pytest.fixture(scope="module")
def honest_without_bad(tmp_path_factory):
    """The run in which partition BAD's training raises: the aggregate of the honest."""
    folder = tmp_path_factory.mktemp("reference")
    return run_in_process({**COMMON, "failing-partitions": str(BAD), "output-dir": str(folder)}, 4)


def model_of(run_dir) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "model.pt", weights_only=True)


def rows_of(run_dir) -> list[dict]:
    return json.loads((run_dir / "history.json").read_text())


@pytest.mark.parametrize("name", list(CORRUPTIONS))
def test_a_bad_training_reply_is_dropped_and_the_honest_ones_aggregated(
    name, honest_without_bad, tmp_path
):
    corrupt, reason = CORRUPTIONS[name]
    run_dir = run_in_process({**COMMON, "output-dir": str(tmp_path)}, 4, app=corrupting(corrupt))
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"
    row = rows_of(run_dir)[1]
    assert row["clients_trained"] == 3 and row["clients_failed"] == 1
    [failure] = row["failures"]
    assert failure.startswith(f"partition {BAD}: ") and reason in failure, failure
    assert failure.endswith("the reply was dropped")
    model, expected = model_of(run_dir), model_of(honest_without_bad)
    assert model.keys() == expected.keys()
    for key in model:
        assert model[key].dtype == expected[key].dtype
        assert torch.equal(model[key], expected[key]), key


def test_an_evaluation_reply_claiming_another_partition_is_dropped(tmp_path):
    clean = run_in_process({**COMMON, "output-dir": str(tmp_path / "clean")}, 4)
    spoofed = run_in_process(
        {**COMMON, "output-dir": str(tmp_path / "spoofed")},
        4,
        app=corrupting(
            lambda r: r.content["metrics"].__setitem__("partition-id", 0), MessageType.EVALUATE
        ),
    )
    clean_row, row = rows_of(clean)[1], rows_of(spoofed)[1]
    assert "claims partition 0, but the node answered the handshake as partition 1" in " ".join(
        row["failures"]
    )
    # partition 0's entry is partition 0's own accuracy, and partition 1 has none
    assert row["client_accuracies"] == {
        k: v for k, v in clean_row["client_accuracies"].items() if k != str(BAD)
    }


class LateJoiner(InProcessGrid):
    """A federation in which a fifth node, claiming partition 0, connects after the handshake;
    it records every message it is sent."""

    def __init__(self, run_config, num_nodes):
        super().__init__(client_app, run_config, num_nodes)
        self.late_messages = []

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        self.late_messages += [m for m in messages if m.metadata.dst_node_id == 2000]
        replies = super().send_and_receive(messages, timeout=timeout)
        if messages and messages[0].metadata.message_type == MessageType.QUERY:
            context = next(iter(self.contexts.values()))
            self.contexts[2000] = type(context)(
                run_id=1,
                node_id=2000,
                node_config={"partition-id": 0, "num-partitions": 4},
                state=RecordDict(),
                run_config=dict(context.run_config),
            )
        return replies


def test_a_node_joining_after_the_handshake_is_never_sampled(tmp_path):
    clean = run_in_process({**COMMON, "output-dir": str(tmp_path / "clean")}, 4)
    run_config = resolve_run_config({**COMMON, "output-dir": str(tmp_path / "late")})
    grid = LateJoiner(run_config, 4)
    run_dir = run_protocol(grid, parse_run_config(run_config))
    assert grid.late_messages == []
    assert rows_of(run_dir) == rows_of(clean)


def test_a_malformed_handshake_leaves_that_node_out(tmp_path):
    def app(msg, context):
        reply = client_app(msg, context)
        if (
            msg.metadata.message_type == MessageType.QUERY
            and context.node_config["partition-id"] == 2
        ):
            reply.content["info"] = MetricRecord({"partition-id": 2})  # no num-partitions
        return reply

    run_dir = run_in_process({**COMMON, "output-dir": str(tmp_path)}, 4, app=app)
    row = rows_of(run_dir)[1]
    assert row["clients_trained"] == 3 and row["clients_failed"] == 0


def test_two_nodes_claiming_one_partition_are_both_left_out(tmp_path):
    configs = [{}, {"partition-id": 0}, {}, {}]  # node 1001 claims partition 0 too
    run_dir = run_in_process({**COMMON, "output-dir": str(tmp_path)}, 4, node_configs=configs)
    row = rows_of(run_dir)[1]
    assert row["clients_trained"] == 2  # partitions 2 and 3
    assert set(row["client_accuracies"]) == {"2", "3"}


def test_a_malformed_data_report_leaves_that_node_out(tmp_path):
    def app(msg, context):
        reply = client_app(msg, context)
        if (
            msg.metadata.message_type == MessageType.QUERY
            and context.node_config["partition-id"] == 3
        ):
            report = reply.content["data"]
            report["label-counts"] = [1, 2]  # two counts for ten classes
        return reply

    run_dir = run_in_process(
        {**COMMON, "server-data": "none", "output-dir": str(tmp_path)}, 4, app=app
    )
    row = rows_of(run_dir)[1]
    assert row["clients_trained"] == 3
    assert "3" not in row["client_accuracies"]


# --- the checks and the clipping on hand-built records -------------------------------------


def record(**arrays) -> RecordDict:
    return RecordDict({"arrays": ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})})


def test_an_update_is_judged_in_its_dtype_and_against_what_was_sent():
    sent = record(w=np.zeros(4, np.float32))
    big = record(w=np.full(4, 3e18, np.float32))  # squares to 9e36 each: 3.6e37 fits float32
    check_reply(big, sent, ReplyRules(), None, None)
    bigger = record(w=np.full(4, 2e19, np.float32))  # each square is 4e38 > float32's 3.4e38
    with pytest.raises(RejectedReply, match="overflows float32"):
        check_reply(bigger, sent, ReplyRules(), None, None)
    # the same values as float64 are a finite update of a float64 model
    check_reply(record(w=np.full(4, 2e19)), record(w=np.zeros(4)), ReplyRules(), None, None)
    # close to a huge model, a small update: judged as the difference
    near = record(w=np.full(4, 3e19, np.float32))
    check_reply(near, record(w=np.full(4, 3e19, np.float32)), ReplyRules(), None, None)


def test_num_examples_is_bounded_by_the_split_the_rules_name():
    sent = RecordDict()
    sizes = NodeSizes(train=40, test=10)
    reply = RecordDict({"metrics": MetricRecord({"num-examples": 45})})
    check_reply(reply, sent, ReplyRules(examples=DATA), sizes, None)  # 45 <= 50
    with pytest.raises(RejectedReply, match="exceeds the 40 samples of the node's training"):
        check_reply(reply, sent, ReplyRules(examples="train"), sizes, None)
    check_reply(reply, sent, ReplyRules(examples="train"), None, None)  # size unknown: no bound
    with pytest.raises(RejectedReply, match="not a positive integer"):
        check_reply(
            RecordDict({"metrics": MetricRecord({"num-examples": 2.5})}),
            sent,
            ReplyRules(),
            sizes,
            None,
        )


def test_lists_of_numbers_only_where_declared():
    reply = RecordDict({"metrics": MetricRecord({"query": [1, 2], "num-examples": 1})})
    check_reply(reply, RecordDict(), ReplyRules(), None, None)  # lenient: any list
    check_reply(reply, RecordDict(), ReplyRules(list_metrics=frozenset({"query"})), None, None)
    with pytest.raises(RejectedReply, match="metrics/query is a list"):
        check_reply(reply, RecordDict(), ReplyRules(list_metrics=frozenset()), None, None)


def test_clip_update_scales_the_whole_update_to_the_bound():
    sent = record(w=np.array([1.0, 1.0], np.float32), b=np.array([0.0], np.float32))
    sent["arrays"]["n"] = Array(np.array([7], np.int64))
    reply = record(w=np.array([4.0, 1.0], np.float32), b=np.array([4.0], np.float32))
    reply["arrays"]["n"] = Array(np.array([9], np.int64))
    # update (3, 0, 4): norm 5; clipped to 1: (0.6, 0, 0.8)
    assert clip_update(reply, sent, 1.0)
    clipped = {k: v.numpy() for k, v in reply["arrays"].items()}
    np.testing.assert_allclose(clipped["w"], [1.6, 1.0], rtol=1e-6)
    np.testing.assert_allclose(clipped["b"], [0.8], rtol=1e-6)
    assert clipped["w"].dtype == np.float32 and clipped["n"].tolist() == [9]  # counters as sent
    assert not clip_update(reply, sent, 1.0 + 1e-5)  # within the bound now: unchanged


def test_max_update_norm_bounds_each_clients_update_in_a_run(tmp_path):
    bound = 0.5
    sent = []

    def app(msg, context):  # keeps the global model the server sent
        if msg.metadata.message_type == MessageType.TRAIN:
            sent.append({k: torch.from_numpy(v.numpy()) for k, v in msg.content["arrays"].items()})
        return client_app(msg, context)

    run_dir = run_in_process(
        {**COMMON, "max-update-norm": bound, "output-dir": str(tmp_path / "clip")}, 4, app=app
    )
    free = run_in_process({**COMMON, "output-dir": str(tmp_path / "free")}, 4)
    assert rows_of(run_dir)[1]["clients_clipped"] == 4  # one round of an MLP moves it more
    assert "clients_clipped" not in rows_of(free)[1]
    initial, final, unclipped = sent[0], model_of(run_dir), model_of(free)
    distance = lambda model: sum(float(((model[k] - initial[k]) ** 2).sum()) for k in initial)
    # FedAvg of updates of norm <= 0.5 moves the global model by at most 0.5
    assert distance(final) ** 0.5 <= bound * (1 + 1e-5)
    assert distance(unclipped) ** 0.5 > bound


def test_max_update_norm_is_refused_where_replies_are_not_models():
    with pytest.raises(Exception, match="max-update-norm=0.5 acts on a reply that is the client"):
        parse_run_config(resolve_run_config({"strategy": "scaffold", "max-update-norm": 0.5}))
    with pytest.raises(Exception, match="max-update-norm=0.5 acts on a client's reply to the"):
        parse_run_config(resolve_run_config({"strategy": "qkt", "max-update-norm": 0.5}))


def test_bookkeeping_config_records_are_never_checked_as_arrays():
    """A ConfigRecord beside the arrays is not an array record."""
    sent = record(w=np.zeros(2, np.float32))
    reply = record(w=np.ones(2, np.float32))
    reply["cfg"] = ConfigRecord({"x": 1})
    check_reply(reply, sent, ReplyRules(), None, None)


def test_a_robust_aggregate_keeps_the_global_models_dtypes(tmp_path):
    """Flower's Krum returns every entry as float64, batch-norm counters included; the global
    model keeps its dtypes, so the next round's replies (int64 counters) still pass."""
    run_dir = run_in_process(
        {
            **COMMON,
            "strategy": "krum",
            "model": "cnn-bn",
            "num-server-rounds": 2,
            "output-dir": str(tmp_path),
        },
        4,
    )
    assert all(row.get("clients_failed", 0) == 0 for row in rows_of(run_dir))
    counters = [v for k, v in model_of(run_dir).items() if k.endswith("num_batches_tracked")]
    assert counters and all(v.dtype == torch.int64 for v in counters)
