"""The knowledge-transfer metrics of the QKT paper (Appendix A.2) against values computed by
hand."""

import json
import math

import numpy as np
import pytest

from flowerbed.evaluation.metrics import (
    client_kt_metrics,
    confusion_matrix,
    per_class_accuracy,
    summarize,
    write_kt_metrics,
)

# A test set of 4 classes (class 3 has 2 samples) and two models' predictions on it.
LABELS = [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3]
PRE = [0, 0, 0, 1, 1, 1, 1, 1, 0, 1, 0, 1, 1, 0]  # never predicts 2 or 3
POST = [0, 0, 2, 2, 1, 1, 1, 0, 2, 2, 2, 1, 3, 0]
# Confusion matrices by hand (rows: true class, columns: predicted class):
#   pre                      post
#   0: [3, 1, 0, 0]          0: [2, 0, 2, 0]
#   1: [0, 4, 0, 0]          1: [1, 3, 0, 0]
#   2: [2, 2, 0, 0]          2: [0, 1, 3, 0]
#   3: [1, 1, 0, 0]          3: [1, 0, 0, 1]
PRE_ACC = [3 / 4, 4 / 4, 0 / 4, 0 / 2]
POST_ACC = [2 / 4, 3 / 4, 3 / 4, 1 / 2]


def test_confusion_matrices_are_the_hand_computed_ones():
    pre = [[3, 1, 0, 0], [0, 4, 0, 0], [2, 2, 0, 0], [1, 1, 0, 0]]
    post = [[2, 0, 2, 0], [1, 3, 0, 0], [0, 1, 3, 0], [1, 0, 0, 1]]
    assert confusion_matrix(LABELS, PRE, 4).tolist() == pre
    assert confusion_matrix(LABELS, POST, 4).tolist() == post
    # a label or prediction outside [0, C) is not counted (scikit-learn's labels=range(C))
    assert confusion_matrix([0, 5, 1, 1], [0, 1, -1, 1], 2).tolist() == [[1, 0], [0, 1]]
    with pytest.raises(ValueError, match="3 labels but 2 predictions"):
        confusion_matrix([0, 1, 1], [0, 1], 2)


def test_confusion_matrix_equals_scikit_learns():
    from sklearn.metrics import confusion_matrix as sklearn_confusion_matrix

    rng = np.random.default_rng(0)
    for num_classes in (2, 3, 10):
        labels = rng.integers(0, num_classes + 1, size=500)  # some labels outside [0, C)
        predictions = rng.integers(0, num_classes, size=500)
        expected = sklearn_confusion_matrix(labels, predictions, labels=np.arange(num_classes))
        assert np.array_equal(confusion_matrix(labels, predictions, num_classes), expected)


def test_per_class_accuracy_is_the_confusion_matrix_diagonal_over_row_sums():
    assert per_class_accuracy(PRE, LABELS, 4) == pytest.approx(PRE_ACC)
    assert per_class_accuracy(POST, LABELS, 4) == pytest.approx(POST_ACC)
    # a class absent from the test set has no accuracy
    acc = per_class_accuracy([0, 1], [0, 1], 3)
    assert acc[:2].tolist() == [1.0, 1.0] and math.isnan(acc[2])


def test_kt_metrics_from_hand_computed_confusion_matrices():
    # The client trained on 30 samples of class 0 and 10 of class 1; it queries class 2.
    counts, query = [30, 10, 0, 0], [2]
    m = client_kt_metrics(
        per_class_accuracy(PRE, LABELS, 4), per_class_accuracy(POST, LABELS, 4), counts, query
    )
    # Average Accuracy: local weights 30/40 and 10/40, query weight 1, normalised by their sum.
    assert m["acc"] == pytest.approx((0.75 * 0.5 + 0.25 * 0.75 + 1 * 0.75) / 2.0)
    assert m["acc_pre"] == pytest.approx((0.75 * 0.75 + 0.25 * 1.0 + 1 * 0.0) / 2.0)
    assert m["query_gain"] == pytest.approx(0.75 - 0.0)
    # Forgetting: mean over local classes of min(0, post - pre) = (min(0, -1/4) + min(0, -1/4)) / 2
    assert m["forgetting"] == pytest.approx(-0.25)
    # Uniform Accuracy: every class of Y_S u Y_Q with weight 1 (class 3 is neither)
    assert m["uniform_acc"] == pytest.approx((0.5 + 0.75 + 0.75) / 3)
    assert m["query_acc_pre"] == 0.0 and m["query_acc_post"] == pytest.approx(0.75)


def test_multi_class_query_and_a_query_class_held_locally():
    pre, post = [0.9, 0.8, 0.1, 0.0], [0.7, 0.9, 0.6, 0.5]
    # class 2 has 2 local samples but is queried: it counts as a query class only
    m = client_kt_metrics(pre, post, [30, 8, 2, 0], [2, 3])
    w0, w1 = 30 / 40, 8 / 40
    assert m["acc"] == pytest.approx((w0 * 0.7 + w1 * 0.9 + 0.6 + 0.5) / (w0 + w1 + 2))
    assert m["query_gain"] == pytest.approx(((0.6 - 0.1) + (0.5 - 0.0)) / 2)
    assert m["forgetting"] == pytest.approx((-0.2 + 0.0) / 2)  # improvements do not offset
    assert m["uniform_acc"] == pytest.approx((0.7 + 0.9 + 0.6 + 0.5) / 4)


def test_no_change_means_no_gain_and_no_forgetting_and_bad_input_is_rejected():
    m = client_kt_metrics(PRE_ACC, PRE_ACC, [5, 5, 0, 0], [3])
    assert m["query_gain"] == 0.0 and m["forgetting"] == 0.0 and m["acc"] == m["acc_pre"]
    empty = client_kt_metrics(PRE_ACC, POST_ACC, [5, 5, 0, 0], [])
    assert math.isnan(empty["query_gain"])
    with pytest.raises(ValueError, match="one entry per class"):
        client_kt_metrics([0.1, 0.2], [0.1], [1, 1], [0])
    with pytest.raises(ValueError, match="query classes"):
        client_kt_metrics([0.1, 0.2], [0.1, 0.2], [1, 1], [5])


def test_summary_is_the_mean_over_clients_and_files_are_written(tmp_path):
    rows = [
        {
            "partition_id": 0,
            "query": [2],
            **client_kt_metrics(PRE_ACC, POST_ACC, [30, 10, 0, 0], [2]),
        },
        {"partition_id": 1, "query": [], **client_kt_metrics(PRE_ACC, POST_ACC, [5, 5, 5, 5], [])},
    ]
    summary = write_kt_metrics(tmp_path, rows, strategy="x", communication_rounds=1)
    assert summary["acc"] == pytest.approx((rows[0]["acc"] + rows[1]["acc"]) / 2)
    assert summary["query_gain"] == pytest.approx(rows[0]["query_gain"])  # NaN skipped
    saved = json.loads((tmp_path / "kt_metrics.json").read_text())
    assert saved["communication_rounds"] == 1 and saved["summary"]["clients"] == 2
    assert (tmp_path / "kt_metrics.csv").read_text().splitlines()[1].startswith("0,2,")
    assert summarize([])["clients"] == 0
