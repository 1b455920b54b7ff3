"""Per-class accuracy, the clinical metrics of a classifier, and the knowledge-transfer metrics
of the QKT paper (Appendix A.2).

Clinical metrics (``clinical_metrics``, from the predicted class probabilities, numpy only):
balanced accuracy (the mean over classes of their recall) and macro AUROC (one-vs-rest, the
mean over classes of the area under the ROC curve of that class's probability); for a binary
task with a positive class (``data.classes.positive_class``: the disease where the data set is
medical, so class 0 *malignant* for breast cancer) also the sensitivity (recall of the positive
class), the specificity (recall of the other) and the AUROC of the positive class's probability.
``CLINICAL`` and ``BINARY`` name them. Their intervals and the summaries a report shows:
``clinical_summary``.

For one client with local (training) classes Y_S, query classes Y_Q and per-class accuracies
acc_pre(j) (its model before the transfer) and acc_post(j) (after), all measured on the
held-out test set:

* Average Accuracy  acc = sum_{j in Y_S u Y_Q} w_j acc_post(j) / sum_j w_j, with w_j the share
  of class j in the client's training data for local classes and w_j = 1 for query classes;
* Query Acc. Gain   (1/|Y_Q|) sum_{q in Y_Q} (acc_post(q) - acc_pre(q));
* Forgetting        (1/|Y_S|) sum_{j in Y_S} min(0, acc_post(j) - acc_pre(j));
* Uniform Accuracy  the mean of acc_post(j) over Y_S u Y_Q (every weight 1).

Y_S holds the classes with at least one local training sample that are not queried (a query
class the client holds a few samples of counts as a query class only). Uniform Accuracy is
taken over Y_S u Y_Q, not over all C classes: the paper's text says "weight 1 for all classes",
but its numbers only fit Y_S u Y_Q (FT-FedAvg, CIFAR-10 Path, single query: Acc 46.20 with
query accuracy 0 means local accuracy ~0.92, and Uniform 67.95 = 3 x 0.906 / 4).

Every strategy reports through ``client_kt_metrics`` (one client) and ``summarize`` (the mean
over clients, the paper's reported numbers); ``write_kt_metrics`` writes ``kt_metrics.json`` and
``kt_metrics.csv`` into a run folder. ``test_accuracies`` / ``local_test_accuracy`` measure a
predictor (a model in eval mode, ``eval_scores``, or an ensemble) on the held-out test set or a
client's local test split.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from ..core.device import to_device_of
from ..core.results import write_csv, write_json

METRIC_NAMES = ("acc", "query_gain", "forgetting", "uniform_acc")
CLINICAL = ("balanced_accuracy", "auroc")  # every classification task
BINARY = ("sensitivity", "specificity", "auroc_positive")  # two classes and a positive class


def confusion_matrix(labels, predictions, num_classes: int) -> np.ndarray:
    """(C, C) counts: entry [i, j] = samples of true class i predicted as j; samples whose
    label or prediction is outside [0, C) are not counted. scikit-learn's
    ``confusion_matrix(labels, predictions, labels=range(C))`` in one ``bincount`` (importing
    scikit-learn costs seconds in every Ray actor)."""
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    predictions = np.asarray(predictions, dtype=np.int64).reshape(-1)
    if len(labels) != len(predictions):
        raise ValueError(f"{len(labels)} labels but {len(predictions)} predictions")
    known = (labels >= 0) & (labels < num_classes) & (predictions >= 0)
    known &= predictions < num_classes
    cells = labels[known] * num_classes + predictions[known]
    return np.bincount(cells, minlength=num_classes**2).reshape(num_classes, num_classes)


def per_class_accuracy(predictions, labels, num_classes: int) -> np.ndarray:
    """acc(j) = correct predictions of class j / samples of class j; NaN where class j is absent.

    Read off the confusion matrix (rows: true class): diagonal over row sums.
    """
    matrix = confusion_matrix(labels, predictions, num_classes)
    support = matrix.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(support > 0, np.diag(matrix) / np.maximum(support, 1), np.nan)


def auroc(scores, positive) -> float:
    """Area under the ROC curve of ``scores`` for the boolean ``positive``: the probability
    that a random positive scores above a random negative, ties counted as one half. Computed
    by the rank (Mann-Whitney U) formula, tied scores sharing their mean rank:
    AUC = (R+ - n+(n+ + 1)/2) / (n+ n-), R+ the sum of the positives' ranks. NaN when either
    class is empty (the curve is not defined)."""
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    positive = np.asarray(positive, dtype=bool).reshape(-1)
    n_pos = int(positive.sum())
    n_neg = len(positive) - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    order = np.argsort(scores, kind="mergesort")
    ordered = scores[order]
    # mean rank (1-based) of each run of equal scores
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    ends = np.r_[starts[1:], len(ordered)]
    ranks = np.empty(len(scores))
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    u = ranks[positive].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def clinical_metrics(
    probabilities, labels, num_classes: int, positive: int | None
) -> dict[str, float]:
    """The clinical metrics of predictions (``probabilities``: (N, C) class probabilities, the
    model's softmax; ``labels``: (N,) true classes); the prediction is the most probable class.

    * ``balanced_accuracy``: the mean of the per-class recall over the classes present in
      ``labels`` (scikit-learn's ``balanced_accuracy_score``);
    * ``auroc``: macro one-vs-rest AUROC, the mean over the classes present in ``labels`` of
      ``auroc(probabilities[:, c], labels == c)``; a class absent from the evaluated labels
      has no positive and is skipped (so a client's test split missing a class is scored
      on the others); NaN when fewer than two classes are present;
    * two classes and a ``positive`` class (``data.classes.positive_class``; None leaves them
      out): ``sensitivity`` (recall of class ``positive``), ``specificity`` (recall of the
      other) and ``auroc_positive`` (the AUROC of the positive class's probability; equal to
      ``auroc``, since p0 = 1 - p1), each NaN when a class it needs is absent.

    NaN everywhere for no sample.
    """
    probabilities = np.asarray(probabilities, dtype=np.float64).reshape(-1, num_classes)
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    recall = per_class_accuracy(probabilities.argmax(axis=1), labels, num_classes)
    present = np.flatnonzero(~np.isnan(recall))
    areas = [auroc(probabilities[:, c], labels == c) for c in present]
    areas = [a for a in areas if not math.isnan(a)]
    metrics = {
        "balanced_accuracy": float(recall[present].mean()) if len(present) else math.nan,
        "auroc": float(np.mean(areas)) if areas else math.nan,
    }
    if num_classes == 2 and positive is not None:
        if positive not in (0, 1):
            raise ValueError(f"positive class {positive} of a binary task must be 0 or 1")
        metrics.update(
            sensitivity=float(recall[positive]),
            specificity=float(recall[1 - positive]),
            auroc_positive=auroc(probabilities[:, positive], labels == positive),
        )
    return metrics


@torch.no_grad()
def predicted_classes(
    scores: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor, batch_size: int = 512
) -> np.ndarray:
    """argmax of ``scores(x)`` (a model's logits, or an ensemble's probabilities)."""
    if len(x) == 0:
        return np.zeros(0, dtype=np.int64)
    return torch.cat(
        [scores(x[i : i + batch_size]).argmax(dim=1) for i in range(0, len(x), batch_size)]
    ).numpy()


Scores = Callable[[torch.Tensor], torch.Tensor]


def eval_scores(model: torch.nn.Module) -> Scores:
    """The model in eval mode, as a predictor of host tensors: each batch runs on the model's
    device and its scores come back to the host."""
    model.eval()
    return lambda x: model(to_device_of(model, x)).cpu()


def test_accuracies(scores: Scores, data) -> tuple[np.ndarray, float]:
    """Per-class accuracy and accuracy of ``scores`` on the held-out test set."""
    predictions = predicted_classes(scores, data.x_test)
    labels = data.y_test.numpy()
    return per_class_accuracy(predictions, labels, data.num_classes), float(
        (predictions == labels).mean()
    )


def local_test_accuracy(scores: Scores, client) -> float:
    """Accuracy on the client's local test (validation) split; NaN when it is empty."""
    if len(client.y_test) == 0:
        return math.nan
    return float((predicted_classes(scores, client.x_test) == client.y_test.numpy()).mean())


def client_kt_metrics(
    pre: Sequence[float],
    post: Sequence[float],
    train_counts: Sequence[int],
    query_classes: Sequence[int],
) -> dict:
    """The four metrics of Appendix A.2 for one client (see the module docstring).

    ``pre``/``post``: per-class accuracy (length C) of the client's model before and after the
    transfer; ``train_counts``: its training samples per class; ``query_classes``: its query.
    ``acc_pre`` (the Average Accuracy of the model before the transfer, the paper's "Local"
    row) is returned too. A metric over an empty set of classes is NaN.
    """
    pre, post = np.asarray(pre, dtype=float), np.asarray(post, dtype=float)
    counts = np.asarray(train_counts, dtype=float)
    if not (len(pre) == len(post) == len(counts)):
        raise ValueError(
            f"pre ({len(pre)}), post ({len(post)}) and train_counts ({len(counts)}) "
            "must all have one entry per class"
        )
    query = sorted({int(q) for q in query_classes})
    if any(not 0 <= q < len(counts) for q in query):
        raise ValueError(f"query classes {query} must be in [0, {len(counts)})")
    local = [j for j in np.flatnonzero(counts > 0) if j not in query]
    weights = np.zeros(len(counts))
    weights[local] = counts[local] / counts.sum()
    weights[query] = 1.0
    scored = local + query

    def average(acc: np.ndarray) -> float:
        return (
            float(np.dot(weights[scored], acc[scored]) / weights[scored].sum())
            if scored
            else math.nan
        )

    return {
        "acc": average(post),
        "acc_pre": average(pre),
        "query_gain": float(np.mean(post[query] - pre[query])) if query else math.nan,
        "forgetting": float(np.mean(np.minimum(0.0, post[local] - pre[local])))
        if local
        else math.nan,
        "uniform_acc": float(np.mean(post[scored])) if scored else math.nan,
        "query_acc_pre": float(np.mean(pre[query])) if query else math.nan,
        "query_acc_post": float(np.mean(post[query])) if query else math.nan,
    }


def summarize(rows: Sequence[dict]) -> dict:
    """Mean over clients of every metric (NaN entries, e.g. a client without a query, skipped)."""
    summary = {}
    for key in KT_METRICS:
        values = [row[key] for row in rows if key in row and not math.isnan(row[key])]
        summary[key] = float(np.mean(values)) if values else math.nan
    summary["clients"] = len(rows)
    return summary


# a client's knowledge-transfer metrics, averaged over clients by ``summarize``
KT_METRICS = (
    "acc",
    "acc_pre",
    "query_gain",
    "forgetting",
    "uniform_acc",
    "query_acc_pre",
    "query_acc_post",
)
KT_CSV_COLUMNS = ("partition_id", "query", *KT_METRICS, "teachers_kept")


def write_kt_metrics(run_dir: Path, rows: list[dict], **info) -> dict:
    """Write ``kt_metrics.json`` (summary, info, per-client rows with per-class vectors) and
    ``kt_metrics.csv`` (one row per client); returns the summary."""
    summary = summarize(rows)
    write_json(run_dir / "kt_metrics.json", {**info, "summary": summary, "clients": rows})
    flat = [{**row, "query": " ".join(str(q) for q in row.get("query", []))} for row in rows]
    write_csv(run_dir / "kt_metrics.csv", flat, KT_CSV_COLUMNS)
    return summary
