"""The one-shot protocol of QKT and its baselines (``flowerbed.methods.one_shot``: the local-fit
and exchange phases) through the real ServerApp/ClientApp handlers, in process; and the
knowledge-transfer metrics phase appended to a multi-round strategy."""

import json

import pytest
from flwr.app import ArrayRecord

from flowerbed.inprocess import run_in_process
from flowerbed.models import build_model
from flowerbed.settings import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture
def kt_run(tmp_path):
    return {
        "output-dir": str(tmp_path / "runs"),
        "partitioner": "pathological",
        "optimizer": "adam",
        "learning-rate": 0.003,
        "kt-local-max-epochs": 4,
        "kt-local-patience": 2,
        "kt-epochs": 1,
        "kt-light-head-epochs": 1,
        "kt-query-threshold": 10,
    }


def kt_metrics(run_dir):
    return json.loads((run_dir / "kt_metrics.json").read_text())


def test_one_shot_protocol_messages_bytes_and_shared_queries(kt_run):
    results = {
        s: run_in_process({**kt_run, "strategy": s}, num_clients=4)
        for s in ("local", "qkt", "qkt-light", "kd", "ensemble", "fedavg1")
    }
    local, qkt = kt_metrics(results["local"]), kt_metrics(results["qkt"])
    assert local["communication_rounds"] == 0 and qkt["communication_rounds"] == 1
    history = {s: json.loads((d / "history.json").read_text()) for s, d in results.items()}
    for s, rows in history.items():
        assert [r["round"] for r in rows] == [1, 2] and all(
            r["clients_trained"] == 4 for r in rows
        ), s
    model_bytes = ArrayRecord(build_model("cnn", (1, 8, 8), 10).state_dict()).count_bytes()
    small = 4 * 1000  # configs and metrics, per round
    assert (
        4 * model_bytes <= history["qkt"][0]["bytes_received"] < 4 * model_bytes + small
    )  # uploads
    assert history["local"][0]["bytes_received"] < small  # local only uploads nothing
    assert (
        12 * model_bytes <= history["qkt"][1]["bytes_sent"] < 12 * model_bytes + small
    )  # 3 teachers each
    assert (
        4 * model_bytes <= history["fedavg1"][1]["bytes_sent"] < 4 * model_bytes + small
    )  # the average
    for s in results:  # same partitions, local models and queries in every strategy
        rows = kt_metrics(results[s])["clients"]
        assert [r["query"] for r in rows] == [r["query"] for r in local["clients"]], s
        assert [r["pre_per_class"] for r in rows] == [
            r["pre_per_class"] for r in local["clients"]
        ], s
        assert all(len(r["query"]) == 1 for r in rows)
    assert all(r["query_gain"] == 0 and r["forgetting"] == 0 for r in local["clients"])
    assert all(0 <= r["teachers_kept"] <= 3 for r in qkt["clients"])
    assert (results["qkt"] / "kt_metrics.csv").exists() and (
        results["qkt"] / "accuracy.png"
    ).exists()


def test_multi_class_queries_heterogeneous_teachers_and_fedavg_reference(kt_run):
    run = run_in_process(
        {**kt_run, "strategy": "qkt", "kt-query": "multi", "kt-client-models": "cnn,mlp"},
        num_clients=3,
    )
    rows = kt_metrics(run)["clients"]
    assert all(len(r["query"]) >= 2 for r in rows) and kt_metrics(run)["query_mode"] == "multi"
    # a multi-round strategy gets the same metrics; its "pre" is the same local model
    fedavg = run_in_process(
        {
            **kt_run,
            "strategy": "fedavg",
            "kt-metrics": True,
            "kt-query": "multi",
            "kt-client-models": "cnn,mlp",
            "num-server-rounds": 1,
            "local-epochs": 1,
        },
        num_clients=3,
    )
    reference = kt_metrics(fedavg)
    assert reference["communication_rounds"] == 1
    assert [r["query"] for r in reference["clients"]] == [r["query"] for r in rows]
    assert [r["pre_per_class"] for r in reference["clients"]] == [r["pre_per_class"] for r in rows]


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"strategy": "qkt", "kt-query": "some"}, "kt-query 'some'; valid choices: single, multi"),
        ({"strategy": "qkt", "qkt-tau": 2.0}, "qkt-tau must be in"),
        ({"strategy": "kd", "kt-client-models": "cnn,lstm"}, "unknown model 'lstm'"),
        ({"strategy": "fedavg1", "kt-client-models": "cnn,mlp"}, "needs one architecture"),
        (
            {"strategy": "fedavg", "kt-metrics": True, "kt-query": "x"},
            "kt-query 'x'; valid choices",
        ),
    ],
)
def test_bad_settings_stop_before_training(kt_run, overrides, message):
    with pytest.raises(ConfigError, match=message):
        run_in_process({**kt_run, **overrides}, num_clients=2)
