"""The clinical reading of a classifier's predictions: counts, intervals, discrimination,
calibration, and each site's numbers with the rule that says when they cannot be estimated.

What a clinical reader holds a model to (TRIPOD+AI: discrimination, calibration and their
heterogeneity across sites, all with intervals; STARD: the confusion matrix and 95 % intervals):

* ``clinical_summary(probabilities, labels, names, positive)``: of the global model on the
  server's test set, n and the samples per class, the confusion matrix, accuracy and per-class
  recall (sensitivity and specificity when binary) with Wilson score intervals, balanced
  accuracy, AUROC and the Brier score with seeded percentile-bootstrap intervals
  (``BOOTSTRAP_RESAMPLES`` resamples of the test set drawn with ``BOOTSTRAP_SEED``; fewer
  above 100,000 samples, ``bootstrap_resamples``), the ROC
  curve (binary) with the operating point of the most probable class, and a reliability curve
  (``RELIABILITY_BINS`` equal-width bins: the positive class's probability when binary, the
  predicted class's probability otherwise). The bootstrap is written here rather than taken
  from ``scipy.stats.bootstrap``, which re-sorts every resample for an AUROC: each resample is a
  vector of multiplicities, and every statistic is a weighted sum over samples sorted once
  (``tests/test_clinical.py`` checks it against resampling by hand and against SciPy's).
* ``site_estimates(counts, correct, ...)``: one client's row of the per-site table, from the
  per-class counts its evaluation reply carries: n, accuracy (Wilson interval), balanced
  accuracy (Agresti-Coull per class, combined as independent: an approximation), AUROC
  (Hanley and McNeil's standard error, binary only) and, binary, sensitivity and specificity
  (Wilson). A value is *not estimable* (None, with the reason) when the test split has fewer
  than ``MIN_SITE_SAMPLES`` samples, or, for every metric but accuracy, lacks a class: a site
  with 9 test samples or without a single malignant case shows no 1.000.

Brier score: binary, (p_positive - 1[y = positive])^2 averaged; otherwise Brier's original
multi-class score, sum over classes of (p_c - 1[y = c])^2 averaged (0 is perfect; 2x the binary
form on a binary task, so the binary form is used there).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

# the evaluation reply's per-class counts of the local test split (lists, checked by
# trust.reply_checks) and its training split's size: what the per-site table is made of
TEST_CLASS_COUNTS, TEST_CLASS_CORRECT = "test-class-counts", "test-class-correct"
TRAIN_EXAMPLES = "train-examples"
CLASS_COUNT_METRICS = frozenset({TEST_CLASS_COUNTS, TEST_CLASS_CORRECT})
SITE_COUNTS = CLASS_COUNT_METRICS | {TRAIN_EXAMPLES}  # counts, not metrics to average

Z95 = 1.959963984540054  # the standard normal's 97.5 % quantile
BOOTSTRAP_RESAMPLES = 2000
BOOTSTRAP_SEED = 0
BOOTSTRAP_WORK = 2 * 10**8  # sample-resamples: all BOOTSTRAP_RESAMPLES up to 100,000 samples
MIN_BOOTSTRAP_RESAMPLES = 200
BOOTSTRAP_CHUNK_VALUES = 4 * 10**6  # values per (resamples x samples) array: 32 MB in float64
RELIABILITY_BINS = 10
MIN_SITE_SAMPLES = 20  # fewer test samples: a site's metrics are not estimable


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion (NaN, NaN for n = 0)."""
    if n <= 0:
        return math.nan, math.nan
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    low = 0.0 if successes == 0 else max(0.0, centre - half)  # exact at the bounds
    high = 1.0 if successes == n else min(1.0, centre + half)
    return low, high


# --- weighted statistics: one row of weights per bootstrap resample -----------------------------


def weighted_auroc(
    scores: np.ndarray, positive: np.ndarray, weights: np.ndarray, order: np.ndarray | None = None
) -> np.ndarray:
    """The AUROC of ``scores`` for the boolean ``positive`` under each row of ``weights``
    (B, N) (sample i counted ``weights[b, i]`` times; ties count one half): the Mann-Whitney
    statistic sum_i w_i [i positive] (W-(< s_i) + W-(= s_i) / 2) / (W+ W-). NaN where a row
    weighs no positive or no negative. ``order``: ``scores``' stable sort, if already made."""
    order = np.argsort(scores, kind="mergesort") if order is None else order
    sorted_scores = scores[order]
    new_group = np.r_[True, sorted_scores[1:] != sorted_scores[:-1]]
    first = np.maximum.accumulate(np.where(new_group, np.arange(len(scores)), 0))
    last = np.r_[np.flatnonzero(new_group)[1:], len(scores)][np.cumsum(new_group) - 1] - 1
    pos = positive[order]
    w = weights[:, order]
    w_neg = np.where(pos, 0.0, w)
    cum_neg = np.cumsum(w_neg, axis=1)
    # negatives strictly below each positive's score, and those tied with it
    below = np.where(first > 0, cum_neg[:, np.maximum(first - 1, 0)], 0.0)[:, pos]
    tied = cum_neg[:, last[pos]] - below
    w_pos = w[:, pos]
    total_pos, total_neg = w_pos.sum(axis=1), cum_neg[:, -1]
    with np.errstate(invalid="ignore", divide="ignore"):
        area = (w_pos * (below + 0.5 * tied)).sum(axis=1) / (total_pos * total_neg)
    return np.where((total_pos > 0) & (total_neg > 0), area, np.nan)


def brier_terms(probabilities: np.ndarray, labels: np.ndarray, positive: int | None) -> np.ndarray:
    """Each sample's Brier term (module docstring)."""
    onehot = np.eye(probabilities.shape[1])[labels]
    if probabilities.shape[1] == 2 and positive is not None:
        return (probabilities[:, positive] - onehot[:, positive]) ** 2
    return ((probabilities - onehot) ** 2).sum(axis=1)


def score_orders(probabilities: np.ndarray) -> list[np.ndarray]:
    """Each class's probability column in stable sorted order (what every AUROC sorts)."""
    return [
        np.argsort(probabilities[:, c], kind="mergesort") for c in range(probabilities.shape[1])
    ]


def weighted_statistics(
    probabilities: np.ndarray,
    labels: np.ndarray,
    positive: int | None,
    weights: np.ndarray,
    orders: list[np.ndarray] | None = None,
    brier: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Balanced accuracy, macro AUROC, the positive class's AUROC (binary) and the Brier score
    under each row of ``weights`` (B, N); the point estimates for a row of ones. ``orders``
    (``score_orders``) and ``brier`` (``brier_terms``): if already made (the bootstrap makes
    them once for all its resamples)."""
    num_classes = probabilities.shape[1]
    orders = score_orders(probabilities) if orders is None else orders
    brier = brier_terms(probabilities, labels, positive) if brier is None else brier
    correct = probabilities.argmax(axis=1) == labels
    recalls, areas = [], []
    for c in range(num_classes):
        of_class = labels == c
        if not of_class.any():
            continue  # absent from the test set: in no resample either
        support = weights[:, of_class].sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            recalls.append(weights[:, of_class & correct].sum(axis=1) / support)
        if not of_class.all():
            areas.append(weighted_auroc(probabilities[:, c], of_class, weights, orders[c]))
    stats = {
        "balanced_accuracy": _nanmean_rows(recalls),
        "auroc": _nanmean_rows(areas),
        "brier": weights @ brier / weights.sum(axis=1),
    }
    if num_classes == 2 and positive is not None:
        stats["auroc_positive"] = weighted_auroc(
            probabilities[:, positive], labels == positive, weights, orders[positive]
        )
    return stats


def _nanmean_rows(columns: list[np.ndarray]) -> np.ndarray:
    if not columns:
        return np.full(1, np.nan)
    stacked = np.stack(columns, axis=1)
    counted = (~np.isnan(stacked)).sum(axis=1)
    total = np.where(np.isnan(stacked), 0.0, stacked).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counted > 0, total / np.maximum(counted, 1), np.nan)


def bootstrap_resamples(n: int) -> int:
    """The resamples of a test set of ``n`` samples: ``BOOTSTRAP_RESAMPLES`` up to
    ``BOOTSTRAP_WORK`` sample-resamples (n = 100,000), fewer above, never under
    ``MIN_BOOTSTRAP_RESAMPLES``: a test set of millions (a simulated federation's) would
    otherwise take hours, and its intervals are then narrow next to their Monte Carlo error.
    ``clinical.json`` names the number used."""
    return max(MIN_BOOTSTRAP_RESAMPLES, min(BOOTSTRAP_RESAMPLES, BOOTSTRAP_WORK // max(n, 1)))


def bootstrap_intervals(
    probabilities: np.ndarray,
    labels: np.ndarray,
    positive: int | None,
    resamples: int | None = None,
    seed: int = BOOTSTRAP_SEED,
    chunk: int = 100,
) -> dict[str, tuple[float, float]]:
    """95 % percentile-bootstrap intervals of ``weighted_statistics`` over ``resamples``
    resamples of the N samples (default ``bootstrap_resamples(N)``; N indices drawn with
    replacement, counted into multiplicities, ``chunk`` resamples at a time but at most
    ``BOOTSTRAP_CHUNK_VALUES`` values, so that memory stays at chunk x N and below a few tens of
    megabytes per array however large N is); resamples where a statistic is undefined are
    left out."""
    n = len(labels)
    if n == 0:
        return {}
    resamples = bootstrap_resamples(n) if resamples is None else resamples
    chunk = max(1, min(chunk, BOOTSTRAP_CHUNK_VALUES // n))
    orders, brier = score_orders(probabilities), brier_terms(probabilities, labels, positive)
    rng = np.random.default_rng(seed)
    draws: dict[str, list[np.ndarray]] = {}
    for start in range(0, resamples, chunk):
        size = min(chunk, resamples - start)
        draws_of_rows = rng.integers(0, n, size=(size, n)) + n * np.arange(size)[:, None]
        weights = np.bincount(draws_of_rows.ravel(), minlength=size * n).reshape(size, n)
        weights = weights.astype(np.float64)  # each resample's multiplicities
        stats = weighted_statistics(probabilities, labels, positive, weights, orders, brier)
        for name, values in stats.items():
            draws.setdefault(name, []).append(values)
    intervals = {}
    for name, chunks in draws.items():
        values = np.concatenate(chunks)
        values = values[np.isfinite(values)]
        if len(values):
            low, high = np.percentile(values, [2.5, 97.5])
            intervals[name] = (float(low), float(high))
        else:
            intervals[name] = (math.nan, math.nan)
    return intervals


# --- curves --------------------------------------------------------------------------------------


def roc_curve(scores: np.ndarray, positive: np.ndarray) -> tuple[list[float], list[float]]:
    """(false-positive rates, true-positive rates) of every threshold, from (0, 0) to (1, 1):
    one point per distinct score, highest first (scikit-learn's ``roc_curve`` with
    ``drop_intermediate=False``, plus the origin)."""
    order = np.argsort(-scores, kind="mergesort")
    sorted_scores, hits = scores[order], positive[order]
    last_of_group = np.r_[sorted_scores[1:] != sorted_scores[:-1], True]
    tp = np.cumsum(hits)[last_of_group]
    fp = np.cumsum(~hits)[last_of_group]
    n_pos, n_neg = max(int(hits.sum()), 1), max(int((~hits).sum()), 1)
    return [0.0, *(fp / n_neg).tolist()], [0.0, *(tp / n_pos).tolist()]


def reliability_curve(
    confidence: np.ndarray, hit: np.ndarray, bins: int = RELIABILITY_BINS
) -> list[dict]:
    """Equal-width bins of ``confidence`` (a predicted probability) in [0, 1]: each non-empty
    bin's count, mean predicted probability and observed frequency of ``hit``, with the
    frequency's Wilson interval."""
    index = np.minimum((confidence * bins).astype(int), bins - 1)
    rows = []
    for b in range(bins):
        members = index == b
        count = int(members.sum())
        if count == 0:
            continue
        hits = int(hit[members].sum())
        low, high = wilson(hits, count)
        rows.append(
            {
                "bin": [b / bins, (b + 1) / bins],
                "n": count,
                "predicted": float(confidence[members].mean()),
                "observed": hits / count,
                "observed_interval": [low, high],
            }
        )
    return rows


# --- the summaries ---------------------------------------------------------------------------------


def clinical_summary(
    probabilities, labels, names: Sequence[str], positive: int | None, **bootstrap
) -> dict:
    """The global model's clinical reading on one test set (module docstring), as plain data
    for ``clinical.json`` and the report; ``bootstrap``: ``bootstrap_intervals``' options."""
    probabilities = np.asarray(probabilities, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int64).reshape(-1)
    num_classes = probabilities.shape[1]
    predictions = probabilities.argmax(axis=1)
    n = len(labels)
    matrix = np.zeros((num_classes, num_classes), dtype=np.int64)
    np.add.at(matrix, (labels, predictions), 1)
    support, hits = matrix.sum(axis=1), np.diag(matrix)
    metrics: dict[str, dict] = {}

    def proportion(name: str, k: int, m: int, definition: str) -> None:
        metrics[name] = {
            "value": k / m if m else None,
            "interval": list(wilson(k, m)) if m else None,
            "n": int(m),
            "method": "Wilson score",
            "definition": definition,
        }

    proportion("accuracy", int(hits.sum()), n, "share of test samples classified right")
    if n == 0:
        return {"n": 0, "names": list(names), "positive": positive, "metrics": metrics}
    point = weighted_statistics(probabilities, labels, positive, np.ones((1, n)))
    intervals = bootstrap_intervals(probabilities, labels, positive, **bootstrap)
    resamples = bootstrap.get("resamples") or bootstrap_resamples(n)
    seed = bootstrap.get("seed", BOOTSTRAP_SEED)
    definitions = {
        "balanced_accuracy": "mean recall over the classes present",
        "auroc": "macro one-vs-rest AUROC over the classes present",
        "auroc_positive": f"AUROC of P({names[positive]})" if positive is not None else "",
        "brier": "Brier score (lower is better)",
    }
    for name, values in point.items():
        value = float(values[0])
        metrics[name] = {
            "value": value if math.isfinite(value) else None,
            "interval": list(intervals[name]) if math.isfinite(value) else None,
            "n": n,
            "method": f"percentile bootstrap, {resamples} resamples, seed {seed}",
            "definition": definitions[name],
        }
    if num_classes == 2 and positive is not None:
        negative = 1 - positive
        proportion(
            "sensitivity",
            int(hits[positive]),
            int(support[positive]),
            f"recall of {names[positive]}",
        )
        proportion(
            "specificity",
            int(hits[negative]),
            int(support[negative]),
            f"recall of {names[negative]}",
        )
    recall = []
    for c in range(num_classes):
        low, high = wilson(int(hits[c]), int(support[c]))
        recall.append(
            {
                "class": names[c],
                "n": int(support[c]),
                "recall": float(hits[c] / support[c]) if support[c] else None,
                "interval": [low, high] if support[c] else None,
            }
        )
    summary = {
        "n": n,
        "names": list(names),
        "positive": positive,
        "class_counts": support.tolist(),
        "confusion_matrix": matrix.tolist(),
        "metrics": metrics,
        "recall": recall,
    }
    if num_classes == 2 and positive is not None:
        fpr, tpr = roc_curve(probabilities[:, positive], labels == positive)
        summary["roc"] = {
            "fpr": fpr,
            "tpr": tpr,
            "operating_point": _operating_point(metrics),
        }
        summary["reliability"] = {
            "of": f"P({names[positive]})",
            "bins": reliability_curve(probabilities[:, positive], labels == positive),
        }
    else:
        summary["reliability"] = {
            "of": "the predicted class's probability",
            "bins": reliability_curve(probabilities.max(axis=1), predictions == labels),
        }
    return summary


def _operating_point(metrics: dict) -> list[float] | None:
    sensitivity, specificity = metrics["sensitivity"]["value"], metrics["specificity"]["value"]
    if sensitivity is None or specificity is None:
        return None
    return [1.0 - specificity, sensitivity]


def hanley_mcneil(area: float, n_pos: int, n_neg: int) -> tuple[float, float]:
    """95 % interval of an AUROC from Hanley and McNeil's standard error (Radiology, 1982):
    SE^2 = [A(1-A) + (n+ - 1)(Q1 - A^2) + (n- - 1)(Q2 - A^2)] / (n+ n-), Q1 = A/(2-A),
    Q2 = 2A^2/(1+A); clipped to [0, 1]. NaN at A = 0 or 1, where that standard error is 0
    (perfect separation in a small sample is not certainty)."""
    if not 0.0 < area < 1.0 or n_pos < 1 or n_neg < 1:
        return math.nan, math.nan
    q1, q2 = area / (2 - area), 2 * area * area / (1 + area)
    variance = (
        area * (1 - area) + (n_pos - 1) * (q1 - area * area) + (n_neg - 1) * (q2 - area * area)
    ) / (n_pos * n_neg)
    half = Z95 * math.sqrt(max(variance, 0.0))
    return max(0.0, area - half), min(1.0, area + half)


def site_estimates(
    counts: Sequence[int],
    correct: Sequence[int],
    area: float,
    positive: int | None,
    names: Sequence[str] | None = None,
) -> dict:
    """One site's row of the per-site table from its evaluation reply's per-class counts
    (module docstring): each metric a value and a 95 % interval, or None with
    ``not_estimable`` saying why."""
    counts = [int(c) for c in counts]
    correct = [int(c) for c in correct] if len(correct) == len(counts) else [0] * len(counts)
    n = sum(counts)
    names = list(names) if names is not None else [f"class {c}" for c in range(len(counts))]
    row: dict = {"n_test": n, "test_counts": counts, "test_correct": correct}
    absent = [c for c, k in enumerate(counts) if k == 0]
    row["missing_classes"] = absent
    missing = [names[c] for c in absent]
    reasons = []
    if n < MIN_SITE_SAMPLES:
        reasons.append(f"{n} test samples (< {MIN_SITE_SAMPLES})")
    if missing:
        more = "..." if len(missing) > 3 else ""
        reasons.append("no test sample of " + ", ".join(missing[:3]) + more)
    row["not_estimable"] = "; ".join(reasons)

    def put(name: str, value: float, interval: tuple[float, float], estimable: bool) -> None:
        ok = estimable and value is not None and math.isfinite(value)
        row[name] = value if ok else None
        bounded = ok and all(math.isfinite(v) for v in interval)
        row[f"{name}_interval"] = list(interval) if bounded else None

    enough = n >= MIN_SITE_SAMPLES
    put("accuracy", sum(correct) / n if n else math.nan, wilson(sum(correct), n), enough)
    every_class = enough and not missing
    recalls = [(k / m if m else math.nan) for k, m in zip(correct, counts, strict=True)]
    balanced = float(np.mean(recalls)) if every_class else math.nan
    put("balanced_accuracy", balanced, _balanced_interval(correct, counts), every_class)
    if len(counts) == 2 and positive is not None:
        neg = 1 - positive
        put("auroc", area, hanley_mcneil(area, counts[positive], counts[neg]), every_class)
        sensitivity = wilson(correct[positive], counts[positive])
        put("sensitivity", recalls[positive], sensitivity, every_class)
        put("specificity", recalls[neg], wilson(correct[neg], counts[neg]), every_class)
    else:
        put("auroc", area, (math.nan, math.nan), every_class)
        row["auroc_interval"] = None  # Hanley-McNeil: a binary task with a positive class
    return row


def _balanced_interval(correct: Sequence[int], counts: Sequence[int]) -> tuple[float, float]:
    """Balanced accuracy's approximate 95 % interval: each class's recall with its
    Agresti-Coull variance p~(1-p~)/(n+4), p~ = (k+2)/(n+4), the classes independent."""
    if not counts or min(counts) == 0:
        return math.nan, math.nan
    mean = float(np.mean([k / m for k, m in zip(correct, counts, strict=True)]))
    variance = (
        sum(
            ((k + 2) / (m + 4)) * (1 - (k + 2) / (m + 4)) / (m + 4)
            for k, m in zip(correct, counts, strict=True)
        )
        / len(counts) ** 2
    )
    half = Z95 * math.sqrt(variance)
    return max(0.0, mean - half), min(1.0, mean + half)
