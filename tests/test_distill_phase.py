"""Federated then distilled: the distillation phase after a multi-round strategy, through the
real ServerApp and ClientApp handlers in this process. The run folder gets the student, its
per-epoch history with every loss term, and the teacher/student summary; the teacher is the
final or the best round's global model; the proxy is the training split or the server's own;
bad settings stop the run before the first round."""

import json
from pathlib import Path

import pytest
import torch

from flowerbed.catalog import parse_run_config
from flowerbed.data.federation import load_splits, server_split
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.models import build_model
from flowerbed.settings import ConfigError
from flowerbed.training.loops import evaluate


def distill_run(fast_run, **overrides) -> Path:
    return run_in_process(
        {
            **fast_run,
            "model": "mlp",
            "distill-epochs": 2,
            **{key.replace("_", "-"): value for key, value in overrides.items()},
        },
        num_clients=3,
    )


def read(run_dir: Path, name: str):
    return json.loads((run_dir / name).read_text())


def test_fedavg_then_label_free_feature_distillation(fast_run, one_thread):
    run_dir = distill_run(fast_run, distill_objective="feature", distill_mode="unlabeled")
    summary = read(run_dir, "distill.json")
    history = read(run_dir, "history.json")
    rows = read(run_dir, "distill_history.json")

    assert (summary["objective"], summary["mode"]) == ("feature", "unlabeled")
    assert summary["label_free"] is True and summary["ce_weight"] == 0.0
    # the teacher is the final global model: its accuracy is the last round's
    assert summary["teacher"]["round"] == 2
    assert summary["teacher"]["test_accuracy"] == pytest.approx(history[-1]["central_accuracy"])
    # one row per epoch, every weighted term traced, no cross-entropy without labels
    assert [row["epoch"] for row in rows] == [1, 2]
    assert {k for k in rows[0] if k.startswith("term_")} == {"term_kl", "term_feature"}
    assert all(row["term_kl"] > 0 and row["term_feature"] > 0 for row in rows)

    # student.pt is the mlp-small student whose accuracy the summary reports
    data = load_splits(parse_run_config(resolve_run_config({"model": "mlp"})))
    student = build_model("mlp-small", data.input_shape, data.num_classes)
    student.load_state_dict(torch.load(run_dir / "student.pt", weights_only=True))
    _, accuracy = evaluate(student, data.x_test, data.y_test)
    assert summary["student"]["final_test_accuracy"] == pytest.approx(accuracy)
    assert summary["student"]["model"] == "mlp-small"
    assert summary["student"]["parameters"] == sum(p.numel() for p in student.parameters())
    assert summary["student"]["size_bytes"] < summary["teacher"]["size_bytes"] / 3
    assert summary["student"]["cpu_latency_ms"] > 0


def test_the_best_teacher_is_the_best_round_and_self_distillation_has_two_generations(
    fast_run, one_thread
):
    run_dir = distill_run(
        fast_run, distill_objective="self", distill_teacher="best", num_server_rounds=3
    )
    summary = read(run_dir, "distill.json")
    best = read(run_dir, "model_best.json")
    history = read(run_dir, "history.json")
    assert summary["teacher"]["round"] == best["round"]
    assert summary["teacher"]["test_accuracy"] == pytest.approx(best["central_accuracy"])
    assert best["central_accuracy"] == max(row["central_accuracy"] for row in history)
    rows = read(run_dir, "distill_history.json")
    assert [(row["generation"], row["epoch"]) for row in rows] == [(1, 1), (1, 2), (2, 1), (2, 2)]
    assert summary["student"]["final_test_accuracy"] == rows[-1]["test_accuracy"]
    assert summary["ce_weight"] == 0.5 and summary["label_free"] is False
    assert {k for k in rows[0] if k.startswith("term_")} == {"term_ce", "term_kl"}


def test_the_server_proxy_is_the_server_split(fast_run, one_thread):
    run_dir = distill_run(
        fast_run,
        distill_objective="dkd",
        distill_mode="no-ce",
        distill_proxy="server",
        server_fraction=0.2,
    )
    summary = read(run_dir, "distill.json")
    config = parse_run_config(resolve_run_config({"server-fraction": 0.2}))
    assert summary["proxy"] == {"split": "server", "samples": len(server_split(config)[0])}
    # DKD without its cross-entropy still splits the classes by the label
    assert summary["label_free"] is False and summary["ce_weight"] == 0.0
    rows = read(run_dir, "distill_history.json")
    assert {k for k in rows[0] if k.startswith("term_")} == {"term_tckd", "term_nckd"}


AT_PARSE = [
    ({"distill-objective": "fitnets"}, "unknown distill-objective 'fitnets'; valid choices: none"),
    ({"distill-mode": "soft"}, "unknown distill-mode 'soft'; valid choices: labeled, no-ce"),
    ({"distill-teacher": "last"}, "unknown distill-teacher 'last'; valid choices: final, best"),
    ({"distill-student": "vit"}, "unknown distill-student 'vit'; valid choices: , mlp"),
    ({"distill-temperature": 0.0}, "distill-temperature must be > 0, got 0.0"),
    (
        {"distill-objective": "feature", "distill-alpha": 0.7, "distill-beta": 0.5},
        "distill-alpha \\+ distill-beta must be at most 1 for distill-objective='feature'",
    ),
    (
        {"strategy": "qkt", "distill-objective": "vanilla"},
        (
            "distill-objective='vanilla' distils the global model of a multi-round strategy;"
            " strategy='qkt' is not one"
        ),
    ),
]


@pytest.mark.parametrize("overrides, message", AT_PARSE)
def test_bad_settings_are_refused_when_parsed(overrides, message):
    with pytest.raises(ConfigError, match=message) as caught:
        parse_run_config(resolve_run_config(overrides))
    assert "\n" not in str(caught.value)


AT_START = [
    (
        {"model": "mlp-small", "distill-student": "mlp"},
        (
            "distill-student='mlp' has 8970 parameters, more than the teacher"
            " \\(model='mlp-small', 2410\\)"
        ),
    ),
    (
        {"model": "resnet18"},
        "model='resnet18' has no smaller variant; set distill-student",
    ),
    ({"distill-proxy": "server"}, "distill-proxy='server' needs the server's split"),
    (
        {"server-fraction": 0.99, "partitioner": "iid", "distill-proxy": "server"},
        (
            "20 clients but only 14 training samples.*after server-fraction=0.99 took the server's"
            " share of the 1437 training samples"
        ),
    ),
]


@pytest.mark.parametrize("overrides, message", AT_START)
def test_bad_settings_stop_the_run_before_the_first_round(overrides, message, fast_run):
    with pytest.raises(ConfigError, match=message) as caught:
        run_in_process(
            {**fast_run, "model": "mlp", "distill-objective": "vanilla", **overrides},
            num_clients=20 if "server-fraction" in overrides else 3,
        )
    assert "\n" not in str(caught.value)
    assert not list(Path(fast_run["output-dir"]).glob("*/history.json"))  # no round ran
