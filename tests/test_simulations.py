"""The CTL paper's generated data sets (breast-cancer-shifted, ctl-gaussian), their run-config
keys, and the run's data functions that serve them: partitions of the held-out test split and
``node_split`` (a node's local data)."""

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import truncnorm
from sklearn.datasets import load_breast_cancer
from sklearn.linear_model import LogisticRegression

from flowerbed.catalog import parse_run_config
from flowerbed.core.seeding import seed_for
from flowerbed.data import federation, load_dataset
from flowerbed.data.partition import split_train_test
from flowerbed.data.simulations import (
    breast_cancer_shifted,
    ctl_gaussian,
    gaussian_nodes,
    shifted_copies,
)
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.settings import ConfigError

BREAST_X, BREAST_Y = load_breast_cancer(return_X_y=True)  # (569, 30)
SIGMA = BREAST_X.std(axis=0)


def config(**overrides):
    return parse_run_config(
        resolve_run_config({k.replace("_", "-"): v for k, v in overrides.items()})
    )


def row_index(rows: np.ndarray) -> dict[bytes, int]:
    return {row.tobytes(): i for i, row in enumerate(rows)}


# --- breast-cancer-shifted (Simulation 1) -----------------------------------------------------
def test_same_seed_same_arrays_other_seed_other_arrays():
    a, b, c = breast_cancer_shifted(3, 4), breast_cancer_shifted(3, 4), breast_cancer_shifted(4, 4)
    for name in ("x_train", "y_train", "x_test", "y_test"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.x_train, c.x_train) and not np.array_equal(a.y_test, c.y_test)


def test_shapes_types_and_random_80_20_split():
    data = breast_cancer_shifted(0, 5)  # 5 x 569 = 2845 rows, 569 of them held out
    assert data.x_train.shape == (2276, 30) and data.x_test.shape == (569, 30)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int64
    assert set(data.y_train.tolist()) == {0, 1} and set(data.y_test.tolist()) == {0, 1}
    assert data.train_nodes is None and data.test_nodes is None
    # train and test are the copies, split without overlap
    copies = shifted_copies(np.random.default_rng(0), 5)
    where = row_index(copies.x.astype(np.float32))
    train = [where[row.tobytes()] for row in data.x_train]
    test = [where[row.tobytes()] for row in data.x_test]
    assert sorted(train + test) == list(range(2845))
    assert np.array_equal(copies.y[train], data.y_train)
    assert np.array_equal(copies.y[test], data.y_test)
    copy_of_test_row = np.array(test) // 569  # random, not by copy: every copy is in the test
    assert set(copy_of_test_row.tolist()) == set(range(5))


def test_each_copy_is_shifted_by_c_sigma_plus_small_noise():
    copies = shifted_copies(np.random.default_rng(7), 20)
    x = copies.x.reshape(20, 569, 30)
    c = copies.shifts
    assert c.shape == (20, 30) and np.abs(c).max() <= 5.0
    # the mean shift of copy s, feature j, in units of sigma_j is c_sj (noise mean: sd 0.004)
    measured = (x - BREAST_X).mean(axis=1) / SIGMA
    assert np.abs(measured - c).max() < 0.03
    # the noise left over is N(0, 0.01) sigma_j per element
    noise = (x - BREAST_X - c[:, None, :] * SIGMA) / SIGMA
    assert abs(noise.std() - 0.1) < 0.002 and abs(noise.mean()) < 0.002
    # the shifts are TruncNormal(0, 2, [-5, 5]): 600 draws; its sd is 1.909
    assert abs(c.std() - truncnorm.std(-2.5, 2.5, scale=2.0)) < 0.15
    assert abs(c.mean()) < 0.25


def test_labels_are_bernoulli_draws_of_the_fitted_logistic_regression():
    seed, shifts = 4, 20
    copies = shifted_copies(np.random.default_rng(seed), shifts)
    # the labelling model, fitted here, and its probability by hand
    mean = BREAST_X.mean(axis=0)
    model = LogisticRegression().fit((BREAST_X - mean) / SIGMA, BREAST_Y)
    logit = ((copies.x - mean) / SIGMA) @ model.coef_[0] + model.intercept_[0]
    probability = 1.0 / (1.0 + np.exp(-logit))
    # calibration: in every decile of the probability the label rate matches it
    order = np.argsort(probability)
    for chunk in np.array_split(order, 10):
        p, y = probability[chunk], copies.y[chunk]
        tolerance = 4 * np.sqrt(max(p.mean() * (1 - p.mean()), 1e-4) / len(chunk)) + 0.005
        assert abs(y.mean() - p.mean()) < tolerance
    # exactly: replay the generator (shifts, noise, then one uniform per row), y = [u < p]
    rng = np.random.default_rng(seed)
    truncnorm.rvs(-2.5, 2.5, loc=0.0, scale=2.0, size=(shifts, 30), random_state=rng)
    rng.normal(0.0, 0.1, size=(shifts, 569, 30))
    uniforms = rng.random(shifts * 569)
    assert np.array_equal(copies.y, (uniforms < probability).astype(np.int64))


def test_the_full_simulation_has_170700_rows():
    data = breast_cancer_shifted(1)  # 300 shifts: vectorised, well under a second
    assert len(data.y_train) + len(data.y_test) == 170_700
    assert len(data.y_test) == 34_140


# --- ctl-gaussian (Simulation 2) --------------------------------------------------------------
def test_ctl_gaussian_nodes_hold_400_training_and_100_test_samples():
    data = ctl_gaussian(5)
    assert data.x_train.shape == (4000, 30) and data.x_test.shape == (1000, 30)
    assert data.x_train.dtype == np.float32 and data.y_train.dtype == np.int64
    assert np.bincount(data.train_nodes).tolist() == [400] * 10
    assert np.bincount(data.test_nodes).tolist() == [100] * 10
    assert set(data.y_train.tolist()) == {0, 1}
    again, other = ctl_gaussian(5), ctl_gaussian(6)
    assert np.array_equal(data.x_test, again.x_test) and np.array_equal(data.y_train, again.y_train)
    assert not np.array_equal(data.x_train, other.x_train)


def test_ctl_gaussian_rows_are_the_nodes_draws_split_within_each_node():
    data = ctl_gaussian(2, num_nodes=3, samples_per_node=50)
    nodes = gaussian_nodes(np.random.default_rng(2), 3, 3.0, 0.5, 50)
    for k in range(3):
        where = row_index(nodes.x[k].astype(np.float32))
        train = [where[row.tobytes()] for row in data.x_train[data.train_nodes == k]]
        test = [where[row.tobytes()] for row in data.x_test[data.test_nodes == k]]
        assert sorted(train + test) == list(range(50)) and len(test) == 10
        assert np.array_equal(nodes.y[k][train], data.y_train[data.train_nodes == k])


def test_ctl_gaussian_parameters_means_and_covariance():
    nodes = gaussian_nodes(np.random.default_rng(0), 3, 3.0, 0.5, 20_000)
    assert np.isclose(np.linalg.norm(nodes.theta), 3.0)
    ratio = np.abs(nodes.theta).max() / np.abs(nodes.theta).min()
    assert ratio <= 2.0 and (nodes.theta > 0).any() and (nodes.theta < 0).any()
    assert np.abs(nodes.means).max() <= 3.0 and nodes.means.std() > 1.0  # U(-1, 1) x 3
    for k in range(3):
        assert np.abs(nodes.x[k].mean(axis=0) - nodes.means[k]).max() < 0.02  # sd 0.0035
    expected = 0.25 * (np.full((30, 30), 0.5) + 0.5 * np.eye(30))  # dispersion^2 S
    assert np.abs(np.cov(nodes.x[0], rowvar=False) - expected).max() < 0.02
    # the node label models: theta + |theta| N(0, 1) dispersion / 10
    deviation = (nodes.node_theta - nodes.theta) / (np.abs(nodes.theta) * 0.05)
    assert abs(deviation.std() - 1.0) < 0.2


def test_ctl_gaussian_labels_follow_the_node_label_model():
    nodes = gaussian_nodes(np.random.default_rng(1), 2, 0.5, 3.0, 20_000)  # dispersion 3
    for k in range(2):
        x, y = nodes.x[k], nodes.y[k]
        probability = 1.0 / (1.0 + np.exp(-(x @ nodes.node_theta[k])))
        order = np.argsort(probability)
        for chunk in np.array_split(order, 10):
            p = probability[chunk].mean()
            assert abs(y[chunk].mean() - p) < 4 * np.sqrt(max(p * (1 - p), 1e-4) / len(chunk))
        # a logistic fit without intercept recovers theta_k (which differs from theta here)
        fitted = LogisticRegression(fit_intercept=False, C=1e6).fit(x, y).coef_[0]
        assert np.corrcoef(fitted, nodes.node_theta[k])[0, 1] > 0.98
        assert (np.sign(fitted) == np.sign(nodes.node_theta[k])).mean() >= 0.9
        # ... and not the common theta: the fit is far closer to theta_k
        error = np.linalg.norm(fitted - nodes.node_theta[k])
        assert error < 0.4 * np.linalg.norm(fitted - nodes.theta)


# --- the loader, the keys ----------------------------------------------------------------------
def test_generated_sets_load_standardised_with_their_nodes():
    data = load_dataset("ctl-gaussian", seed=3)
    assert data.input_shape == (30,) and data.num_classes == 2 and data.num_nodes == 10
    assert data.train_nodes.tolist() == ctl_gaussian(3).train_nodes.tolist()
    assert torch.allclose(data.x_train.mean(0), torch.zeros(30), atol=1e-5)
    assert torch.allclose(data.x_train.std(0, unbiased=False), torch.ones(30), atol=1e-4)
    shifted = load_dataset("breast-cancer-shifted", seed=3)
    assert shifted.num_nodes is None and shifted.train_nodes is None
    assert load_dataset("breast-cancer", seed=3).train_nodes is None


def test_only_generated_sets_read_the_seed_and_the_sim_keys():
    assert federation.load_splits(config(seed=1)) is federation.load_splits(config(seed=2))
    one = federation.load_splits(config(dataset="ctl-gaussian", seed=1))
    two = federation.load_splits(config(dataset="ctl-gaussian", seed=2))
    assert not torch.equal(one.x_train, two.x_train)
    small = {"dataset": "breast-cancer-shifted", "sim_shifts": 3}
    data = federation.load_splits(config(**small))
    assert len(data.y_train) + len(data.y_test) == 3 * 569
    assert federation.load_splits(config(**small, sim_spread=0.5)) is data  # not read by it
    wide = federation.load_splits(config(dataset="ctl-gaussian", seed=1, sim_dispersion=3.0))
    assert not torch.equal(one.x_train, wide.x_train)
    nodes = federation.load_splits(config(dataset="ctl-gaussian", sim_nodes=4))
    assert nodes.num_nodes == 4 and len(nodes.y_train) == 1600


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"sim-shifts": 0}, r"sim-shifts must be in \[1, 3000\], got 0"),
        ({"sim-nodes": 0}, r"sim-nodes must be in \[1, 100000\], got 0"),
        ({"sim-spread": -1.0}, "sim-spread must be >= 0, got -1.0"),
        ({"sim-dispersion": -0.5}, "sim-dispersion must be >= 0, got -0.5"),
        ({"sim-samples-per-node": 4}, "sim-samples-per-node must be at least 5, got 4"),
        (
            {"dataset": "ctl-gaussian", "sim-nodes": 1000, "sim-samples-per-node": 5000},
            (
                "sim-samples-per-node=5000 x sim-nodes=1000 = 5000000 samples; ctl-gaussian"
                " allows at most 2000000"
            ),
        ),
        (
            {"partitioner": "dataset-nodes"},
            (
                r"partitioner='dataset-nodes' needs a data set with its own nodes"
                r" \(ctl-gaussian, synthetic, synthetic-iid\); dataset='digits' has none"
            ),
        ),
    ],
)
def test_bad_simulation_keys_are_refused_when_parsed(overrides, message):
    with pytest.raises(ConfigError, match=message):
        parse_run_config(resolve_run_config(overrides))


# --- partitions of the held-out test split, node_split ----------------------------------------
def old_local_client_split(cfg, num_partitions: int, partition_id: int):
    """What LocalClient.from_context computed before node_split existed."""
    data = federation.load_splits(cfg)
    indices = federation.partition_for(cfg, num_partitions)[partition_id]
    train, test = split_train_test(
        indices, cfg.local_test_fraction, seed_for(cfg.seed, partition_id)
    )
    train, test = torch.from_numpy(train), torch.from_numpy(test)
    return data.x_train[train], data.y_train[train], data.x_train[test], data.y_train[test]


@pytest.mark.parametrize(
    "overrides",
    [
        {},
        {"partitioner": "iid", "seed": 3},
        {"partitioner": "pathological", "local-test-fraction": 0.3},
        {"partitioner": "label-sorted", "dataset": "breast-cancer"},
    ],
)
def test_node_split_equals_the_old_local_split_for_label_partitioners(overrides):
    cfg = parse_run_config(resolve_run_config(overrides))
    assert federation.test_partition_for(cfg, 4) is None
    for pid in range(4):
        ours, old = federation.node_split(cfg, 4, pid), old_local_client_split(cfg, 4, pid)
        assert all(torch.equal(a, b) for a, b in zip(ours, old))


def test_local_client_takes_its_data_from_node_split(fl):
    overrides = {"dataset": "breast-cancer", "partitioner": "kmeans-pca", "seed": 1}
    client = fl.local_client(overrides, partition_id=2, num_partitions=3)
    expected = federation.node_split(config(**overrides), 3, 2)
    got = (client.x_train, client.y_train, client.x_test, client.y_test)
    assert all(torch.equal(a, b) for a, b in zip(got, expected))


def test_kmeans_pca_splits_the_held_out_test_split_and_node_split_uses_it():
    cfg = config(dataset="breast-cancer", partitioner="kmeans-pca", seed=1)
    data = federation.load_splits(cfg)
    train_parts = federation.partition_for(cfg, 3)
    test_parts = federation.test_partition_for(cfg, 3)
    assert sorted(np.concatenate(test_parts).tolist()) == list(range(len(data.y_test)))
    assert sorted(np.concatenate(train_parts).tolist()) == list(range(len(data.y_train)))
    for pid in range(3):
        x_train, y_train, x_test, y_test = federation.node_split(cfg, 3, pid)
        assert torch.equal(x_train, data.x_train[train_parts[pid]])  # all of its training part
        assert torch.equal(y_train, data.y_train[train_parts[pid]])
        assert torch.equal(x_test, data.x_test[test_parts[pid]])
        assert torch.equal(y_test, data.y_test[test_parts[pid]])


def test_dataset_nodes_gives_each_client_the_generated_node():
    cfg = config(dataset="ctl-gaussian", partitioner="dataset-nodes", seed=2)
    data = federation.load_splits(cfg)
    for pid in (0, 7):
        x_train, y_train, x_test, y_test = federation.node_split(cfg, 10, pid)
        assert torch.equal(x_train, data.x_train[data.train_nodes == pid])
        assert torch.equal(y_train, data.y_train[data.train_nodes == pid])
        assert torch.equal(y_test, data.y_test[data.test_nodes == pid])
        assert len(x_train) == 400 and len(x_test) == 100


def test_dataset_nodes_misuse_is_named():
    cfg = config(dataset="ctl-gaussian", partitioner="dataset-nodes")
    with pytest.raises(
        ValueError,
        match=r"dataset='ctl-gaussian' has 10 nodes \(sim-nodes=10\) but the federation has 4"
        r" clients; run with 10 SuperNodes \(num-supernodes\) or set sim-nodes=4",
    ):
        federation.partition_for(cfg, 4)
    no_nodes = config().replace(partitioner="dataset-nodes")  # past the parse-time check
    with pytest.raises(ValueError, match="dataset='digits' has none"):
        federation.node_split(no_nodes, 4, 0)
    with pytest.raises(ValueError, match=r"partition id 4 is not in \[0, 4\)"):
        federation.node_split(config(), 4, 4)


def test_an_empty_test_cluster_stops_the_run_in_one_line(fast_run):
    overrides = {"dataset": "breast-cancer", "model": "mlp", "partitioner": "kmeans-pca"}
    with pytest.raises(ValueError, match="kmeans-pca leaves client 8 without held-out test"):
        federation.partition_for(config(**overrides), 10)
    with pytest.raises(
        ConfigError,
        match="partitioner='kmeans-pca': kmeans-pca leaves client 8 without held-out test"
        r" samples \(no held-out test sample is in cluster 8\); try another seed or fewer",
    ) as caught:
        run_in_process({**fast_run, **overrides}, num_clients=10)
    assert "\n" not in str(caught.value)
    assert not list(Path(fast_run["output-dir"]).glob("*/history.json"))
