"""The clinical reading (``flowerbed.evaluation.clinical``, ``flowerbed.data.classes``): the
positive class is the disease, intervals against hand values and independent computations, the
per-site estimability rule, the reply check of the per-class counts, and a breast-cancer run's
files."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
from sklearn.datasets import load_breast_cancer
from sklearn.metrics import brier_score_loss, confusion_matrix, recall_score, roc_auc_score
from sklearn.metrics import roc_curve as sklearn_roc_curve

from flowerbed.catalog import parse_run_config
from flowerbed.data.classes import class_names, positive_class, run_classes
from flowerbed.data.registry import DATASETS
from flowerbed.data.splits import DatasetSplits, sampled_test_split
from flowerbed.evaluation import clinical as clinical_module
from flowerbed.evaluation.clinical import (
    bootstrap_intervals,
    clinical_summary,
    hanley_mcneil,
    roc_curve,
    site_estimates,
    weighted_auroc,
    wilson,
)
from flowerbed.evaluation.metrics import auroc, clinical_metrics
from flowerbed.inprocess import run_in_process
from flowerbed.runtime.history import CLIENT_TABLE_FILE, append_client_table, read_client_tables
from flowerbed.settings import ConfigError
from flowerbed.trust.reply_checks import LENIENT, RejectedReply, check_reply


def breast_cancer_predictions(seed: int = 0):
    """scikit-learn's breast-cancer labels (0 malignant) and fixed, imperfect probabilities."""
    labels = load_breast_cancer().target
    rng = np.random.default_rng(seed)
    p_benign = np.clip(0.45 + 0.3 * labels + rng.normal(0, 0.25, len(labels)), 0.01, 0.99)
    return labels, np.stack([1 - p_benign, p_benign], axis=1)


# --- the positive class -----------------------------------------------------------------------


def test_breast_cancer_classes_are_scikit_learns_and_malignant_is_positive():
    assert DATASETS["breast-cancer"].class_names == tuple(load_breast_cancer().target_names)
    config = parse_run_config({"dataset": "breast-cancer", "model": "mlp"})
    assert positive_class(config, 2) == 0
    assert run_classes(config, 2)["positive_name"] == "malignant"


def test_sensitivity_on_fixed_breast_cancer_predictions_is_the_recall_of_malignant():
    labels, probabilities = breast_cancer_predictions()
    config = parse_run_config({"dataset": "breast-cancer", "model": "mlp"})
    metrics = clinical_metrics(probabilities, labels, 2, positive_class(config, 2))
    predictions = probabilities.argmax(axis=1)
    malignant = labels == 0
    assert metrics["sensitivity"] == pytest.approx((predictions[malignant] == 0).mean(), abs=1e-12)
    assert metrics["sensitivity"] == pytest.approx(
        recall_score(labels, predictions, pos_label=0), abs=1e-12
    )
    assert metrics["specificity"] == pytest.approx(
        recall_score(labels, predictions, pos_label=1), abs=1e-12
    )
    assert metrics["auroc_positive"] == pytest.approx(
        roc_auc_score(malignant, probabilities[:, 0]), abs=1e-12
    )
    # the two readings differ on these predictions: the old rule (class 1) would mislead
    assert abs(metrics["sensitivity"] - metrics["specificity"]) > 0.05


def test_the_medmnist_names_are_medmnists_and_the_diseases_positive():
    import medmnist

    for flag in ("pathmnist", "breastmnist", "pneumoniamnist", "bloodmnist", "organsmnist"):
        info = medmnist.INFO[flag]["label"]
        assert DATASETS[flag].class_names == tuple(info[str(k)] for k in range(len(info)))
    assert class_names("breastmnist", 2)[positive_class(_config("breastmnist"), 2)] == "malignant"
    assert class_names("pneumoniamnist", 2)[positive_class(_config("pneumoniamnist"), 2)] == (
        "pneumonia"
    )


def _config(dataset: str, **more):
    extra = {"partitioner": "site"} if dataset == "site" else {}
    return parse_run_config({"dataset": dataset, "model": "cnn", **extra, **more})


def test_positive_class_overrides_by_name_or_index_and_refuses_what_is_not_there():
    assert positive_class(_config("breast-cancer", **{"positive-class": "benign"}), 2) == 1
    assert positive_class(_config("breast-cancer", **{"positive-class": "1"}), 2) == 1
    with pytest.raises(ConfigError, match=r"positive-class='cancer'.*'malignant', 'benign'"):
        _config("breast-cancer", **{"positive-class": "cancer"})
    with pytest.raises(ConfigError, match="positive-class='3'.*10 classes.*binary tasks only"):
        _config("digits", **{"positive-class": "3"})
    assert positive_class(_config("digits"), 10) is None


def test_site_data_has_no_positive_class_until_one_is_named():
    assert positive_class(_config("site"), 2) is None
    assert positive_class(_config("site", **{"positive-class": "1"}), 2) == 1
    with pytest.raises(ConfigError, match="positive-class='tumour' is not a class"):
        run_classes(_config("site", **{"positive-class": "tumour"}), 2)


# --- intervals --------------------------------------------------------------------------------


def test_wilson_interval_matches_hand_values():
    # 8 of 10: centre (0.8 + 1.92/10) / 1.384, half 1.96 sqrt(0.016 + 0.0096) / 1.384
    low, high = wilson(8, 10)
    assert (low, high) == pytest.approx((0.4901624, 0.9433178), abs=1e-6)
    assert wilson(0, 10)[0] == 0.0 and wilson(10, 10)[1] == 1.0
    assert all(math.isnan(v) for v in wilson(0, 0))


def test_hanley_mcneil_matches_hand_values():
    # A 0.8, 50 + 50: Q1 = 2/3, Q2 = 1.28/1.8; SE^2 = (0.16 + 49(Q1 - .64) + 49(Q2 - .64))/2500
    q1, q2 = 0.8 / 1.2, 1.28 / 1.8
    se = math.sqrt((0.16 + 49 * (q1 - 0.64) + 49 * (q2 - 0.64)) / 2500)
    assert se == pytest.approx(0.044502, abs=1e-6)
    assert hanley_mcneil(0.8, 50, 50) == pytest.approx(
        (0.8 - 1.959964 * se, 0.8 + 1.959964 * se), abs=1e-6
    )


def test_weighted_auroc_is_the_auroc_of_the_resampled_data():
    labels, probabilities = breast_cancer_predictions(1)
    scores = np.round(probabilities[:, 0], 2)  # ties
    rng = np.random.default_rng(0)
    weights = rng.multinomial(len(labels), np.full(len(labels), 1 / len(labels)), size=5)
    areas = weighted_auroc(scores, labels == 0, weights.astype(float))
    for row, area in zip(weights, areas, strict=True):
        resampled = np.repeat(np.arange(len(labels)), row)
        assert area == pytest.approx(auroc(scores[resampled], labels[resampled] == 0), abs=1e-12)


def test_bootstrap_intervals_agree_with_scipys_bootstrap():
    from scipy.stats import bootstrap

    labels, probabilities = breast_cancer_predictions(2)
    ours = bootstrap_intervals(probabilities, labels, positive=0, resamples=4000, seed=1)

    def area(index, axis=-1):
        index = np.atleast_2d(index)
        return np.array([auroc(probabilities[i, 0], labels[i] == 0) for i in index])

    theirs = bootstrap(
        (np.arange(len(labels)),),
        area,
        n_resamples=4000,
        method="percentile",
        vectorized=True,
        random_state=np.random.default_rng(2),
    ).confidence_interval
    assert ours["auroc_positive"] == pytest.approx((theirs.low, theirs.high), abs=0.006)
    point = auroc(probabilities[:, 0], labels == 0)
    assert ours["auroc_positive"][0] < point < ours["auroc_positive"][1]
    assert ours["auroc"] == pytest.approx(ours["auroc_positive"], abs=1e-12)  # binary


def test_summary_counts_curves_and_brier_match_scikit_learn():
    labels, probabilities = breast_cancer_predictions(3)
    summary = clinical_summary(probabilities, labels, ["malignant", "benign"], 0, resamples=200)
    predictions = probabilities.argmax(axis=1)
    assert summary["confusion_matrix"] == confusion_matrix(labels, predictions).tolist()
    assert summary["n"] == 569 and summary["class_counts"] == [212, 357]
    metrics = summary["metrics"]
    assert metrics["sensitivity"]["n"] == 212
    assert metrics["sensitivity"]["definition"] == "recall of malignant"
    assert metrics["brier"]["value"] == pytest.approx(
        brier_score_loss(labels == 0, probabilities[:, 0]), abs=1e-12
    )
    fpr, tpr, _ = sklearn_roc_curve(labels == 0, probabilities[:, 0], drop_intermediate=False)
    ours = roc_curve(probabilities[:, 0], labels == 0)
    assert np.allclose(ours[0][1:], fpr[1:]) and np.allclose(ours[1][1:], tpr[1:])
    operating = summary["roc"]["operating_point"]
    assert operating == pytest.approx(
        [1 - metrics["specificity"]["value"], metrics["sensitivity"]["value"]]
    )
    bins = summary["reliability"]["bins"]
    assert sum(b["n"] for b in bins) == 569


def test_a_multiclass_summary_has_per_class_recall_with_names():
    rng = np.random.default_rng(4)
    labels = rng.integers(0, 3, 300)
    logits = rng.normal(size=(300, 3)) + 2 * np.eye(3)[labels]
    probabilities = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    summary = clinical_summary(probabilities, labels, ["a", "b", "c"], None, resamples=100)
    assert [r["class"] for r in summary["recall"]] == ["a", "b", "c"]
    assert "sensitivity" not in summary["metrics"] and "roc" not in summary
    assert summary["metrics"]["brier"]["value"] == pytest.approx(
        ((probabilities - np.eye(3)[labels]) ** 2).sum(axis=1).mean()
    )


# --- each site ----------------------------------------------------------------------------------


def test_a_small_site_or_one_without_the_disease_is_not_estimable():
    small = site_estimates([4, 5], [4, 5], 1.0, positive=0)
    assert small["accuracy"] is None and small["sensitivity"] is None
    assert small["not_estimable"] == "9 test samples (< 20)"
    healthy = site_estimates([0, 139], [0, 139], math.nan, positive=0, names=["malignant", "b"])
    assert healthy["accuracy"] == 1.0  # accuracy needs only enough samples
    assert healthy["sensitivity"] is None and healthy["balanced_accuracy"] is None
    assert "no test sample of malignant" in healthy["not_estimable"]
    fine = site_estimates([30, 70], [24, 63], 0.9, positive=0)
    assert fine["sensitivity"] == pytest.approx(0.8)
    assert fine["sensitivity_interval"] == pytest.approx(list(wilson(24, 30)))
    assert fine["specificity"] == pytest.approx(0.9) and fine["not_estimable"] == ""
    assert fine["auroc_interval"] == pytest.approx(list(hanley_mcneil(0.9, 30, 70)))


def test_an_evaluation_reply_with_inconsistent_class_counts_is_rejected():
    from flwr.app import MetricRecord, RecordDict

    def reply(**metrics):
        base = {"num-examples": 10, "accuracy": 0.5}
        return RecordDict({"metrics": MetricRecord({**base, **metrics})})

    check_reply(reply(**{"test-class-counts": [4, 6], "test-class-correct": [2, 3]}),
                RecordDict(), LENIENT, None, None)  # fmt: skip
    with pytest.raises(RejectedReply, match="sum to 11, but num-examples is 10"):
        check_reply(reply(**{"test-class-counts": [5, 6]}), RecordDict(), LENIENT, None, None)
    with pytest.raises(RejectedReply, match="at most the class's samples"):
        check_reply(
            reply(**{"test-class-counts": [4, 6], "test-class-correct": [5, 3]}),
            RecordDict(),
            LENIENT,
            None,
            None,
        )


# --- a run ------------------------------------------------------------------------------------


def test_a_breast_cancer_run_reads_malignant_as_positive_with_counts_and_intervals(tmp_path):
    run_dir = run_in_process(
        {
            "dataset": "breast-cancer",
            "model": "mlp",
            "num-server-rounds": 2,
            "local-epochs": 1,
            "output-dir": str(tmp_path / "runs"),
        },
        4,
    )
    classes = json.loads((run_dir / "classes.json").read_text())
    assert classes["names"] == ["malignant", "benign"] and classes["positive"] == 0
    clinical = json.loads((run_dir / "clinical.json").read_text())
    last = clinical["last"]
    assert last["n"] == 114 and last["class_counts"] == [42, 72]
    matrix = np.asarray(last["confusion_matrix"])
    sensitivity = last["metrics"]["sensitivity"]
    assert sensitivity["value"] == pytest.approx(matrix[0, 0] / 42)
    low, high = sensitivity["interval"]
    assert low <= sensitivity["value"] <= high
    history = json.loads((run_dir / "history.json").read_text())
    assert history[-1]["central_sensitivity"] == pytest.approx(sensitivity["value"])
    row = history[-1]
    assert "client_table" not in row  # one line a round in its own file, not in history.json
    tables = read_client_tables(run_dir / CLIENT_TABLE_FILE)
    assert sorted(tables) == [1, 2]
    table = tables[2]
    assert len(table) == 4
    replies = [(t["n_test"], sum(t["test_correct"]) / t["n_test"]) for t in table.values()]
    weighted = sum(n * a for n, a in replies) / sum(n for n, _ in replies)
    assert row["client_accuracy"] == pytest.approx(weighted)  # Flower's convention
    assert row["client_accuracy_unweighted_mean"] == pytest.approx(np.mean([a for _, a in replies]))


def test_the_per_site_table_file_keeps_a_repeated_rounds_last_line_and_skips_a_torn_one(tmp_path):
    path = tmp_path / CLIENT_TABLE_FILE
    append_client_table(path, 1, {"0": {"n_test": 5}})
    append_client_table(path, 2, {"0": {"n_test": 6}})
    append_client_table(path, 2, {"0": {"n_test": 7}})  # a resumed run repeats round 2
    with open(path, "a") as f:
        f.write('{"round": 3, "clients": {"0": {"n_te')  # killed mid-line
    assert read_client_tables(path) == {1: {"0": {"n_test": 5}}, 2: {"0": {"n_test": 7}}}
    assert read_client_tables(tmp_path / "none.jsonl") == {}


SITES_RUN = {  # each site trains on its own files; the server holds none
    "dataset": "site",
    "partitioner": "site",
    "model": "mlp",
    "num-server-rounds": 1,
    "min-available-clients": 3,
}


def binary_sites(folder, sites: int = 3):
    """Sites of their own binary tabular data (npz), class 1 shifted from class 0."""
    rng = np.random.default_rng(7)
    folders = []
    for site in range(sites):
        y = rng.integers(0, 2, 200)
        x = (rng.normal(size=(200, 4)) + 1.5 * y[:, None]).astype(np.float32)
        path = folder / f"site{site}"
        path.mkdir(parents=True)
        np.savez(path / "data.npz", x_train=x, y_train=y)
        folders.append(path)
    return folders


def test_a_sites_own_binary_data_has_a_positive_class_only_once_named(tmp_path):
    folders = binary_sites(tmp_path / "sites")
    config = {**SITES_RUN, "output-dir": str(tmp_path / "runs")}
    nodes = [{"data-dir": str(folder)} for folder in folders]
    with pytest.raises(ConfigError, match="'sensitivity' needs a positive class.*positive-class"):
        run_in_process({**config, "best-model-metric": "sensitivity"}, 3, node_configs=nodes)
    unnamed = run_in_process({**config, "run-name": "unnamed"}, 3, node_configs=nodes)
    assert json.loads((unnamed / "classes.json").read_text())["positive"] is None
    (table,) = read_client_tables(unnamed / CLIENT_TABLE_FILE).values()
    assert all("sensitivity" not in site for site in table.values())
    named = run_in_process(
        {**config, "run-name": "named", "positive-class": "1"}, 3, node_configs=nodes
    )
    assert json.loads((named / "classes.json").read_text())["positive_name"] == "class 1"
    (table,) = read_client_tables(named / CLIENT_TABLE_FILE).values()
    assert all(site["sensitivity"] is not None for site in table.values())  # 40 test samples
    for site in table.values():
        counts, correct = site["test_counts"], site["test_correct"]
        assert site["sensitivity"] == pytest.approx(correct[1] / counts[1])
        assert site["specificity"] == pytest.approx(correct[0] / counts[0])


def test_a_site_manifest_names_the_classes_and_the_disease(tmp_path):
    folders = binary_sites(tmp_path / "sites", sites=4)
    manifest = {"names": ["healthy", "tumour"], "positive": "tumour"}
    for folder in folders[:3]:
        (folder / "classes.json").write_text(json.dumps(manifest))
    (folders[3] / "classes.json").write_text(json.dumps({**manifest, "positive": "healthy"}))
    run_dir = run_in_process(
        {
            **SITES_RUN,
            "output-dir": str(tmp_path / "runs"),
            "best-model-metric": "sensitivity",  # the manifest's positive class allows it
        },
        4,
        node_configs=[{"data-dir": str(folder)} for folder in folders],
    )
    classes = json.loads((run_dir / "classes.json").read_text())
    assert classes["names"] == ["healthy", "tumour"] and classes["positive_name"] == "tumour"
    assert classes["chosen_by"] == "site manifest" and classes["clinical"]
    (table,) = read_client_tables(run_dir / CLIENT_TABLE_FILE).values()
    assert sorted(table) == ["0", "1", "2"]  # the site calling 'healthy' the disease is left out
    for site in table.values():
        assert site["sensitivity"] == pytest.approx(
            site["test_correct"][1] / site["test_counts"][1]
        )


@pytest.mark.parametrize(
    ("manifest", "message"),
    [
        ("{", "is not readable JSON"),
        ('{"names": ["a"]}', "holds 1 distinct names of 1; the data has 2 classes"),
        ('{"positive": "tumour"}', "\"positive\" is 'tumour'; valid: 0 or 1"),
        ('{"names": ["a", "b"], "positive": 2}', "valid: 'a', 'b' or 0, 1"),
        ('{"labels": []}', 'must be an object with the keys "names" and "positive"'),
    ],
)
def test_a_bad_site_manifest_is_refused_naming_its_file(tmp_path, manifest, message):
    from flowerbed.data.site_data import SiteDataError, load_site_data

    (folder,) = binary_sites(tmp_path / "sites", sites=1)
    (folder / "classes.json").write_text(manifest)
    with pytest.raises(SiteDataError, match=re.escape(message)) as error:
        load_site_data(folder)
    assert str(folder / "classes.json") in str(error.value)


def test_the_bootstrap_of_a_huge_test_set_is_bounded_and_its_chunks_change_nothing(monkeypatch):
    assert clinical_module.bootstrap_resamples(1_000) == 2_000
    assert clinical_module.bootstrap_resamples(100_000) == 2_000
    assert clinical_module.bootstrap_resamples(400_000) == 500  # 2e8 sample-resamples
    assert clinical_module.bootstrap_resamples(4_500_000) == 200  # never fewer
    rng = np.random.default_rng(3)
    probabilities = rng.dirichlet(np.ones(3), size=2_000)
    labels = rng.integers(0, 3, 2_000)
    whole = bootstrap_intervals(probabilities, labels, None, resamples=300, chunk=100)
    monkeypatch.setattr(clinical_module, "BOOTSTRAP_CHUNK_VALUES", 2_000 * 7)  # 7 resamples a chunk
    assert bootstrap_intervals(probabilities, labels, None, resamples=300, chunk=100) == whole


def test_a_test_set_above_central_test_samples_is_evaluated_on_one_seeded_sample(tmp_path):
    x = torch.arange(1000, dtype=torch.float32)[:, None]  # each row says which sample it is
    data = DatasetSplits("rows", x, torch.zeros(1000, dtype=torch.int64), x, torch.arange(1000), 2)
    x_sample, y_sample = sampled_test_split(data, 100)
    rows = y_sample.numpy()
    assert len(rows) == 100 and np.all(np.diff(rows) > 0)  # distinct, in the split's order
    assert np.array_equal(x_sample[:, 0].numpy(), rows)  # inputs and labels stay paired
    assert rows[-1] > 500  # drawn from the whole split, not its first rows
    assert np.array_equal(sampled_test_split(data, 100)[1].numpy(), rows)  # the same every time
    for most in (0, 1000, 5000):  # 0 = all; a split within the limit is kept whole
        assert sampled_test_split(data, most)[1] is data.y_test

    def run(seed: int):
        config = {
            "dataset": "breast-cancer",
            "model": "mlp",
            "num-server-rounds": 1,
            "local-epochs": 1,
            "central-test-samples": 50,
            "seed": seed,
            "output-dir": str(tmp_path / f"runs-{seed}"),
        }
        return run_in_process(config, 2)

    labels = []
    for seed in (1, 2):  # another seed, the same test samples
        run_dir = run(seed)
        last = json.loads((run_dir / "clinical.json").read_text())["last"]
        assert last["n"] == 50 and sum(last["class_counts"]) == 50
        labels.append(np.load(run_dir / "predictions_best.npz")["labels"])
    assert np.array_equal(labels[0], labels[1]) and len(labels[0]) == 50
