"""The clinical metrics (``evaluation.metrics.clinical_metrics``,
``training.loops.evaluate_clinical``) against scikit-learn on fixed predictions, and their
federated columns (sample-weighted over the clients where defined). A real run's columns and
``best-model-metric``: test_report.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from sklearn.metrics import balanced_accuracy_score, recall_score, roc_auc_score

from flowerbed.evaluation.metrics import auroc, clinical_metrics
from flowerbed.inprocess import run_in_process
from flowerbed.runtime.history import round_row
from flowerbed.settings import ConfigError
from flowerbed.strategies.common import aggregate_with_spread
from flowerbed.training.loops import evaluate, evaluate_clinical


def fixed_predictions(n: int, num_classes: int, seed: int, ties: bool = True):
    """Labels and softmax-like probabilities, with tied scores (rounded) when ``ties``."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, num_classes, n)
    logits = rng.normal(size=(n, num_classes)) + 1.5 * np.eye(num_classes)[labels]
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    if ties:
        probabilities = np.round(probabilities, 1)  # many equal scores: the ties' mean rank
    return labels, probabilities


def sklearn_macro_auroc(labels, probabilities, num_classes):
    """One-vs-rest AUROC averaged over the classes present in ``labels``."""
    present = sorted(set(labels.tolist()))
    return np.mean([roc_auc_score(labels == c, probabilities[:, c]) for c in present])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_auroc_matches_scikit_learn_with_ties(seed):
    labels, probabilities = fixed_predictions(200, 2, seed)
    assert auroc(probabilities[:, 1], labels == 1) == pytest.approx(
        roc_auc_score(labels, probabilities[:, 1]), abs=1e-12
    )
    assert math.isnan(auroc([0.1, 0.9], [True, True]))  # no negative: undefined


def test_multiclass_metrics_match_scikit_learn():
    labels, probabilities = fixed_predictions(300, 4, seed=3)
    metrics = clinical_metrics(probabilities, labels, 4, None)
    predictions = probabilities.argmax(axis=1)
    assert set(metrics) == {"balanced_accuracy", "auroc"}
    assert metrics["balanced_accuracy"] == pytest.approx(
        balanced_accuracy_score(labels, predictions), abs=1e-12
    )
    # every class present: scikit-learn's own macro one-vs-rest on normalised probabilities
    normalised = probabilities / probabilities.sum(axis=1, keepdims=True)
    assert clinical_metrics(normalised, labels, 4, None)["auroc"] == pytest.approx(
        roc_auc_score(labels, normalised, multi_class="ovr", average="macro"), abs=1e-12
    )


def test_a_class_absent_from_the_labels_is_skipped():
    labels, probabilities = fixed_predictions(300, 4, seed=4)
    keep = labels != 2  # a client's test split without class 2
    labels, probabilities = labels[keep], probabilities[keep]
    metrics = clinical_metrics(probabilities, labels, 4, None)
    predictions = probabilities.argmax(axis=1)
    with pytest.warns(UserWarning):  # scikit-learn: y_pred holds a class absent from y_true
        expected = balanced_accuracy_score(labels, predictions)
    assert metrics["balanced_accuracy"] == pytest.approx(expected, abs=1e-12)
    assert metrics["auroc"] == pytest.approx(
        sklearn_macro_auroc(labels, probabilities, 4), abs=1e-12
    )
    assert math.isfinite(metrics["auroc"])
    only_one = clinical_metrics(probabilities[labels == 1], labels[labels == 1], 4, None)
    assert math.isnan(only_one["auroc"]) and only_one["balanced_accuracy"] >= 0


def test_without_a_positive_class_a_binary_task_has_no_sensitivity():
    labels, probabilities = fixed_predictions(50, 2, seed=6)
    assert set(clinical_metrics(probabilities, labels, 2, None)) == {"balanced_accuracy", "auroc"}


def test_binary_metrics_match_scikit_learn():
    labels, probabilities = fixed_predictions(250, 2, seed=5)
    metrics = clinical_metrics(probabilities, labels, 2, positive=1)
    predictions = probabilities.argmax(axis=1)
    assert metrics["sensitivity"] == pytest.approx(recall_score(labels, predictions), abs=1e-12)
    assert metrics["specificity"] == pytest.approx(
        recall_score(labels, predictions, pos_label=0), abs=1e-12
    )
    assert metrics["auroc_positive"] == pytest.approx(
        roc_auc_score(labels, probabilities[:, 1]), abs=1e-12
    )
    assert metrics["balanced_accuracy"] == pytest.approx(
        balanced_accuracy_score(labels, predictions), abs=1e-12
    )
    no_positive = clinical_metrics(probabilities[labels == 0], labels[labels == 0], 2, 1)
    assert math.isnan(no_positive["sensitivity"]) and math.isnan(no_positive["auroc_positive"])
    assert no_positive["specificity"] == pytest.approx(
        recall_score(labels[labels == 0], predictions[labels == 0], pos_label=0), abs=1e-12
    )


def test_one_evaluation_pass_gives_evaluates_numbers_and_the_metrics():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 3))
    x, y = torch.randn(64, 5), torch.randint(0, 3, (64,))
    result = evaluate_clinical(model, x, y, 3, None)
    assert (result.loss, result.accuracy) == evaluate(model, x, y)  # the very same numbers
    with torch.no_grad():
        probabilities = torch.softmax(model(x).double(), dim=1).numpy()
    assert result.clinical["auroc"] == pytest.approx(
        sklearn_macro_auroc(y.numpy(), probabilities, 3), abs=1e-12
    )
    assert result.columns("central") == {
        "central_balanced_accuracy": result.clinical["balanced_accuracy"],
        "central_auroc": result.clinical["auroc"],
    }


class FakeGrid:
    def __init__(self, evaluate):
        from types import SimpleNamespace

        self.traffic = SimpleNamespace(
            evaluate=evaluate,
            train=[],
            clients_trained=2,
            clients_failed=0,
            clients_clipped=None,
            bytes_sent=0,
            bytes_received=0,
            seconds=1.0,
            failures=[],
        )

    def end_round(self):
        return self.traffic


def test_federated_columns_are_sample_weighted_over_clients_where_defined():
    replies = [
        {"num-examples": 30, "partition-id": 0, "accuracy": 0.5, "auroc": 0.8, "sensitivity": 0.6},
        {"num-examples": 10, "partition-id": 1, "accuracy": 0.9, "auroc": 0.6, "sensitivity": 1.0},
        {"num-examples": 20, "partition-id": 2, "accuracy": 0.7, "auroc": 0.9},
        {"num-examples": 50, "partition-id": 3, "accuracy": 0.1, "auroc": math.nan},
    ]
    row = round_row(1, FakeGrid(replies), central_accuracy=0.5, central_loss=1.0)
    assert row["federated_auroc"] == pytest.approx((30 * 0.8 + 10 * 0.6 + 20 * 0.9) / 60)
    assert row["federated_sensitivity"] == pytest.approx((30 * 0.6 + 10 * 1.0) / 40)
    assert "client_auroc_mean" not in row and "federated_accuracy" not in row
    from flwr.app import MetricRecord, RecordDict

    records = [RecordDict({"metrics": MetricRecord(m)}) for m in replies]
    aggregated = aggregate_with_spread(records, "num-examples")
    assert aggregated["auroc"] == pytest.approx(row["federated_auroc"])  # no NaN from one client


def test_a_binary_metric_cannot_pick_the_best_model_of_a_ten_class_task(fast_run):
    with pytest.raises(ConfigError, match="best-model-metric='sensitivity' needs two classes"):
        run_in_process({**fast_run, "best-model-metric": "sensitivity"}, 2)
