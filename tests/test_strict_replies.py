"""Strict replies in every phase: each message type a phase sends declares what its replies hold
(``Phase.reply_rules``), and a malformed reply is dropped with a one-line reason, like a
training reply of FL rounds (``trust.reply_checks``), while the run goes on with the others.

Unit tests feed forged replies through ``check_reply`` with each phase's own rules; two
in-process runs check the whole path for the QKT family (an upload without its model) and CTL
(a share claiming more samples than the node holds)."""

import json

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, MetricRecord, RecordDict

from flowerbed.catalog import PROTOCOLS, parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.inprocess import run_in_process
from flowerbed.methods.ctl import ROUND, SHARE
from flowerbed.methods.ctl.protocol import CTLRounds, CTLShare
from flowerbed.methods.fedsa import AMALGAMATE, PRETRAIN, SALIENCY
from flowerbed.methods.fedsa.phases import SelectiveAmalgamation, TeacherPretrain
from flowerbed.models import build_model
from flowerbed.protocols import exchange, kt_metrics, local_fit
from flowerbed.protocols.exchange import Exchange
from flowerbed.protocols.kt_metrics import KTMetrics
from flowerbed.protocols.local_fit import LocalFit, architecture_schemas
from flowerbed.runtime.outcome import RunFailed
from flowerbed.settings import ConfigError
from flowerbed.trust.reply_checks import NodeSizes, RejectedReply, check_reply

# --- every message type declares its schema ---------------------------------------------------

VARIANTS = (
    {},
    {"kt-metrics": True},
    {"distill-objective": "vanilla"},
    {"kt-client-models": "mlp,cnn"},
)


@pytest.mark.parametrize("name", list(PROTOCOLS))
def test_every_message_type_a_phase_sends_declares_its_schema(name):
    """``arrays`` declared (``no_arrays``: a reply of metrics only) for every message type of
    every phase, in every variant a protocol accepts."""
    for variant in VARIANTS:
        try:
            config = parse_run_config({"strategy": name, **variant})
        except ConfigError:  # a variant this protocol has not (distillation: FL rounds only)
            continue
        for phase in PROTOCOLS[name].phases(config):
            rules = phase.reply_rules(config)
            for message_type in phase.MESSAGE_TYPES:
                assert message_type in rules, (name, variant, type(phase).__name__, message_type)
                assert rules[message_type].arrays is not None, (name, message_type)


# --- forged replies through each phase's rules ------------------------------------------------

SHAPE, CLASSES, SIZES = (1, 8, 8), 10, NodeSizes(train=40, test=10)


def metrics(partition=1, **values) -> MetricRecord:
    return MetricRecord({"num-examples": 40, "partition-id": partition, **values})


NOTHING = RecordDict()  # what the server sent, where it sent no record


def passes(rules, reply: RecordDict, sent: RecordDict = NOTHING, partition=1) -> None:
    check_reply(reply, sent, rules, SIZES, partition)


def rejected(rules, reply: RecordDict, sent: RecordDict = NOTHING, partition=1) -> str:
    """The reason ``reply`` is dropped: one line."""
    with pytest.raises(RejectedReply) as error:
        check_reply(reply, sent, rules, SIZES, partition)
    assert "\n" not in str(error.value)
    return str(error.value)


def fitted(config_values: dict):
    config = parse_run_config({"strategy": "qkt", "model": "mlp", **config_values})
    phase = LocalFit(upload=True)
    phase.config, phase.schemas = config, architecture_schemas(config, SHAPE, CLASSES)
    return phase, phase.reply_rules(config)[local_fit.ACTION]


def upload(name="mlp", partition=1, **drop) -> RecordDict:
    values = {"train-loss": 0.5, "local-epochs": 2, "accuracy": 0.5, "test-accuracy": 0.4}
    content = RecordDict(
        {
            "metrics": metrics(partition, **values),
            "arrays": ArrayRecord(build_model(name, SHAPE, CLASSES).state_dict()),
            "model": ConfigRecord({"name": name}),
        }
    )
    for record in drop:
        del content[record]
    return content


def test_a_qkt_upload_holds_the_model_of_its_partitions_architecture():
    _, rules = fitted({})
    passes(rules, upload())
    assert "array records [] where ['arrays']" in rejected(rules, upload(arrays=True))
    assert "no config record 'model'" in rejected(rules, upload(model=True))
    assert "no metric record 'metrics'" in rejected(rules, upload(metrics=True))
    wrong = upload()
    wrong["model"] = ConfigRecord({"name": "cnn"})
    assert "model/name='cnn'" in rejected(rules, wrong)
    short = upload()
    short["metrics"] = MetricRecord({"num-examples": 40, "partition-id": 1})
    assert "metric metrics/accuracy is missing" in rejected(rules, short)
    # kt-client-models: partition 1 trains a cnn, partition 0 an mlp
    _, mixed = fitted({"kt-client-models": "mlp,cnn"})
    passes(mixed, upload("cnn"), partition=1)
    passes(mixed, upload("mlp", partition=0), partition=0)
    assert "expected" in rejected(mixed, upload("mlp"), partition=1)


def kt_reply(**changes) -> RecordDict:
    values = {
        "pre-per-class": [0.5] * CLASSES,
        "post-per-class": [0.6] * (CLASSES - 1) + [float("nan")],
        "train-counts": [4] * CLASSES,
        "query": [2, 7],
        "accuracy": 0.5,
        "test-accuracy": 0.5,
        **changes,
    }
    return RecordDict({"metrics": metrics(**values)})


@pytest.mark.parametrize("phase", [Exchange("teachers", None), KTMetrics(None)])
def test_knowledge_transfer_replies_hold_one_value_per_class(phase):
    phase.num_classes = CLASSES
    rules = phase.reply_rules(parse_run_config({"strategy": "qkt"}))[phase.MESSAGE_TYPES[0]]
    passes(rules, kt_reply())
    assert "10 were expected" in rejected(rules, kt_reply(**{"pre-per-class": [0.5] * 3}))
    assert "outside [0, 9]" in rejected(rules, kt_reply(query=[12]))
    assert "names a class twice" in rejected(rules, kt_reply(query=[2, 2]))
    assert "sum to 50" in rejected(rules, kt_reply(**{"train-counts": [5] * CLASSES}))
    assert "outside [0, 1]" in rejected(rules, kt_reply(**{"post-per-class": [2.0] * CLASSES}))
    missing = kt_reply()
    del missing["metrics"]["query"]
    assert "metrics/query is missing" in rejected(rules, missing)
    with_arrays = kt_reply()
    with_arrays["arrays"] = ArrayRecord({"w": Array(np.zeros(2))})
    assert "where [] were expected" in rejected(rules, with_arrays)
    assert (
        exchange.ACTION in Exchange.MESSAGE_TYPES and kt_metrics.ACTION in KTMetrics.MESSAGE_TYPES
    )


def share(counts, centroids=None, d=3) -> RecordDict:
    counts = np.asarray(counts, dtype=np.float64)
    centroids = np.ones((2, d)) if centroids is None else centroids
    moments = np.ones((2, 4, d))
    moments[counts == 0] = 0
    return RecordDict(
        {
            "share": ArrayRecord(
                {"centroids": Array(centroids), "counts": Array(counts), "moments": Array(moments)}
            )
        }
    )


def test_ctl_class_counts_are_bounded_by_the_nodes_training_split():
    phase = CTLShare()
    phase.features = 3
    rules = phase.reply_rules(parse_run_config({"strategy": "ctl"}))[SHARE]
    passes(rules, share([25, 15]))
    passes(rules, share([40, 0], centroids=np.array([[1.0, 2, 3], [0, 0, 0]])))
    assert "above the 40" in rejected(rules, share([1e6, 15]))
    assert "whole numbers >= 0" in rejected(rules, share([-5, 15]))
    assert "whole numbers >= 0" in rejected(rules, share([2.5, 15]))
    assert "no training sample at all" in rejected(rules, share([0, 0], np.zeros((2, 3))))
    assert "no sample of class 1, but its centroid" in rejected(rules, share([20, 0]))
    assert "is (2, 4) float64, expected (2, 3) float64" in rejected(rules, share([20, 5], d=4))
    check_reply(share([1e6, 15]), NOTHING, rules, None, None)  # size unknown: no bound


def test_ctl_round_replies_are_probabilities_shaped_by_the_board():
    phase = CTLRounds()
    phase.num_nodes = 4
    rules = phase.reply_rules(parse_run_config({"strategy": "ctl", "ctl-tasks": 1}))[ROUND]
    board = {"representatives": np.zeros((8, 3)), "moments": np.zeros((4, 2, 4, 3))}
    sent = RecordDict({"board": ArrayRecord({k: Array(v) for k, v in board.items()})})

    def reply(predictions=None, guests=(0, 2), **changes):
        predictions = np.full(8, 0.5) if predictions is None else predictions
        values = {
            "train-loss": float("nan"),
            "accuracy": 0.9,
            "nonlocal-accuracy": 0.8,
            "task-accuracies": [0.9, 0.8],
            "guests": list(guests),
            "lambdas": [0.1] * len(guests),
            "clipped": 0,
            **changes,
        }
        arrays = {"predictions": Array(predictions), "coefficients": Array(np.zeros(4))}
        return RecordDict({"shared": ArrayRecord(arrays), "metrics": metrics(**values)})

    passes(rules, reply(), sent)
    assert "outside [0, 1]" in rejected(rules, reply(np.full(8, 1.5)), sent)
    assert "is (7,) float64, expected (8,)" in rejected(rules, reply(np.full(7, 0.5)), sent)
    assert "name the node itself" in rejected(rules, reply(guests=(1, 2)), sent)
    assert "outside [0, 3]" in rejected(rules, reply(guests=(0, 9)), sent)
    assert "2 values for 1 guests" in rejected(rules, reply(guests=(0,), lambdas=[1.0, 2.0]), sent)
    assert "2 were expected" in rejected(rules, reply(**{"task-accuracies": [0.9]}), sent)


def test_fedsa_replies():
    config = parse_run_config({"strategy": "fedsa"})
    pretrain = TeacherPretrain().reply_rules(config)[PRETRAIN]
    values = {"train-loss": 0.3, "local-epochs": 2, "accuracy": 0.7}
    passes(pretrain, RecordDict({"metrics": metrics(**values)}))
    assert "metrics/accuracy is missing" in rejected(
        pretrain, RecordDict({"metrics": metrics(**{"train-loss": 0.3, "local-epochs": 2})})
    )
    rules = SelectiveAmalgamation().reply_rules(config)
    probes = np.zeros((5, 1, 8, 8), np.float32)
    sent = RecordDict({"probes": ArrayRecord({"inputs": Array(probes)})})

    def saliency(maps, count=5):
        return RecordDict(
            {
                "saliency": ArrayRecord({"maps": Array(maps)}),
                "metrics": MetricRecord({"num-examples": count, "partition-id": 1}),
            }
        )

    passes(rules[SALIENCY], saliency(np.ones_like(probes)), sent)
    assert "expected (5, 1, 8, 8)" in rejected(rules[SALIENCY], saliency(np.ones((5, 8, 8))), sent)
    assert "negative" in rejected(rules[SALIENCY], saliency(-np.ones_like(probes)), sent)
    assert "5 probes were sent" in rejected(rules[SALIENCY], saliency(probes, 3), sent)
    model = {"w": Array(np.zeros(3, np.float32))}
    sent = RecordDict({"arrays": ArrayRecord(model)})
    reply = RecordDict({"arrays": ArrayRecord(model), "metrics": metrics(**{"train-loss": 1.0})})
    passes(rules[AMALGAMATE], reply, sent)
    reply["arrays"] = ArrayRecord({"w": Array(np.zeros(4, np.float32))})
    assert "expected (3,) float32" in rejected(rules[AMALGAMATE], reply, sent)


# --- the whole path -----------------------------------------------------------------------------

BAD = 1
KT = {
    "partitioner": "pathological",
    "kt-local-max-epochs": 2,
    "kt-local-patience": 1,
    "kt-epochs": 1,
    "kt-query-threshold": 10,
    "model": "mlp",
    "seed": 3,
}


def corrupting(corrupt, message_type):
    def app(msg, context):
        reply = client_app(msg, context)
        bad = int(context.node_config["partition-id"]) == BAD
        if msg.metadata.message_type == message_type and bad and not reply.has_error():
            corrupt(reply.content)
        return reply

    return app


def strip_model(content: RecordDict) -> None:
    del content["arrays"]
    del content["model"]


def test_a_qkt_upload_without_its_model_is_dropped_and_the_run_goes_on(tmp_path, one_thread):
    app = corrupting(strip_model, local_fit.ACTION)
    run_dir = run_in_process({"strategy": "qkt", **KT, "output-dir": str(tmp_path)}, 4, app=app)
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"
    history = json.loads((run_dir / "history.json").read_text())
    [failure] = history[0]["failures"]
    assert failure.startswith(f"partition {BAD}: array records [] where ['arrays']"), failure
    clients = json.loads((run_dir / "kt_metrics.json").read_text())["clients"]
    assert sorted(c["partition_id"] for c in clients) == [0, 2, 3]  # BAD is nobody's teacher


def test_a_ctl_share_claiming_millions_is_dropped_with_its_reason(tmp_path, one_thread, caplog):
    def inflate(content: RecordDict) -> None:
        share = content["share"]
        share["counts"] = Array(share["counts"].numpy() * 1e6)

    app = corrupting(inflate, SHARE)
    with pytest.raises(RunFailed, match=r"partitions \[1\] did not share their representatives"):
        run_in_process({"strategy": "ctl", "output-dir": str(tmp_path)}, 4, app=app)
    dropped = [r.getMessage() for r in caplog.records if "reply was dropped" in r.getMessage()]
    assert any("partition 1" in m and "training split" in m for m in dropped), dropped
