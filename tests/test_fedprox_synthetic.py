"""The FedProx paper's synthetic data sets (``synthetic``, ``synthetic-iid``) against their
definition: sizes, Sigma, the heterogeneity parameters, labels from each client's own model;
the loader and ``dataset-nodes``; bad keys."""

from pathlib import Path

import numpy as np
import pytest
import torch
from scipy.stats import norm

from flowerbed.catalog import parse_run_config
from flowerbed.data import federation, load_dataset
from flowerbed.data.fedprox_synthetic import (
    MIN_SAMPLES,
    client_sizes,
    feature_variances,
    generate_synthetic,
)
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.settings import ConfigError


def config(**overrides):
    return parse_run_config(
        resolve_run_config({k.replace("_", "-"): v for k, v in overrides.items()})
    )


def test_shapes_types_and_a_90_10_split_per_client():
    data = generate_synthetic(3, 12)
    assert data.x_train.dtype == np.float32 and data.x_train.shape[1] == 60
    assert data.y_train.dtype == np.int64 and set(np.unique(data.y_train)) <= set(range(10))
    train_counts = np.bincount(data.train_nodes, minlength=12)
    test_counts = np.bincount(data.test_nodes, minlength=12)
    assert (data.sizes >= MIN_SAMPLES).all()
    assert train_counts.tolist() == [int(0.9 * n) for n in data.sizes]  # the code's int(0.9 n)
    assert (train_counts + test_counts).tolist() == data.sizes.tolist()
    # rows are in client order, each client's rows contiguous
    assert (np.diff(data.train_nodes) >= 0).all() and (np.diff(data.test_nodes) >= 0).all()
    assert data.sizes.tolist() == client_sizes(3, 12).tolist()


def test_same_seed_same_arrays_other_seed_other_arrays_and_clients_differ():
    a, b, c = generate_synthetic(5, 6), generate_synthetic(5, 6), generate_synthetic(6, 6)
    for name in ("x_train", "y_train", "x_test", "y_test", "train_nodes"):
        assert np.array_equal(getattr(a, name), getattr(b, name))
    assert not np.array_equal(a.sizes, c.sizes) or not np.array_equal(a.x_test, c.x_test)
    # different clients: different models, feature means and data
    assert len({w.tobytes() for w in a.weights}) == 6
    assert len({v.tobytes() for v in a.means}) == 6
    first = [a.x_train[a.train_nodes == k][:45] for k in range(6)]
    assert len({x.tobytes() for x in first}) == 6


def test_a_client_s_data_do_not_depend_on_the_number_of_clients():
    small, large = generate_synthetic(9, 3), generate_synthetic(9, 40)
    for k in range(3):
        assert np.array_equal(
            small.x_train[small.train_nodes == k], large.x_train[large.train_nodes == k]
        )
        assert np.array_equal(
            small.y_test[small.test_nodes == k], large.y_test[large.test_nodes == k]
        )
    assert np.array_equal(small.weights, large.weights[:3])


def test_labels_are_the_argmax_of_each_client_s_own_model():
    data = generate_synthetic(1, 20, alpha=1.0, beta=1.0)
    for x, y, nodes in (
        (data.x_train, data.y_train, data.train_nodes),
        (data.x_test, data.y_test, data.test_nodes),
    ):
        logits = np.einsum("nd,ndc->nc", x.astype(np.float64), data.weights[nodes])
        logits += data.biases[nodes]
        assert np.array_equal(y, logits.argmax(axis=1))
        # and not those of another client's model (models differ: most labels would change)
        other = (nodes + 1) % 20
        wrong = np.einsum("nd,ndc->nc", x.astype(np.float64), data.weights[other])
        assert (y != (wrong + data.biases[other]).argmax(axis=1)).mean() > 0.5


def test_features_are_the_client_mean_plus_noise_with_diagonal_sigma_j_to_the_minus_1_2():
    data = generate_synthetic(2, 300)
    x = np.concatenate([data.x_train, data.x_test]).astype(np.float64)
    nodes = np.concatenate([data.train_nodes, data.test_nodes])
    residual = x - data.means[nodes]  # x - v_k ~ N(0, Sigma)
    assert len(residual) > 50_000
    variance = residual.var(axis=0)
    assert np.allclose(variance, np.arange(1, 61) ** -1.2, rtol=0.04)  # sd of the ratio ~ 0.6 %
    assert np.allclose(feature_variances(), np.arange(1, 61) ** -1.2)
    correlation = np.corrcoef(residual, rowvar=False)
    assert np.abs(correlation - np.eye(60)).max() < 0.03  # sd ~ 0.004: Sigma is diagonal
    assert np.abs(residual.mean(axis=0)).max() < 0.02


@pytest.mark.parametrize("alpha, beta", [(0.0, 0.0), (1.0, 1.0), (0.5, 2.0)])
def test_alpha_spreads_the_models_and_beta_the_feature_means(alpha, beta):
    data = generate_synthetic(4, 400, alpha=alpha, beta=beta)
    # u_k ~ N(0, alpha^2), B_k ~ N(0, beta^2) (standard deviations, as the reference code)
    assert abs(data.u.std() - alpha) < 0.12 * alpha + 1e-12
    assert abs(data.B.std() - beta) < 0.12 * beta + 1e-12
    # W_k, b_k ~ N(u_k, 1) and v_k ~ N(B_k, 1) element-wise around each client's own mean
    entries = np.concatenate([data.weights.reshape(400, -1), data.biases], axis=1)
    assert abs((entries - data.u[:, None]).std() - 1.0) < 0.01
    assert abs((data.means - data.B[:, None]).std() - 1.0) < 0.02
    # seen through the clients: the per-client mean of v_k has sd sqrt(beta^2 + 1/60)
    assert abs(data.means.mean(axis=1).std() - np.sqrt(beta**2 + 1 / 60)) < 0.12 * np.sqrt(
        beta**2 + 1 / 60
    )
    assert abs(entries.mean(axis=1).std() - np.sqrt(alpha**2 + 1 / 610)) < 0.12 * np.sqrt(
        alpha**2 + 1 / 610
    )


def test_alpha_moves_the_models_but_no_label():
    """u_k is added to every entry of W_k and b_k: every logit grows by u_k (sum_j x_j + 1),
    the same for all ten classes, so the argmax and the data set do not change with alpha
    (same seed). The models' spread is what alpha changes; the labels' heterogeneity comes
    from each client's own draws around u_k."""
    one, zero, five = (generate_synthetic(6, 30, alpha=a, beta=1.0) for a in (1.0, 0.0, 5.0))
    assert not np.allclose(one.weights, zero.weights)
    for other in (zero, five):
        assert np.array_equal(other.x_train, one.x_train)
        assert np.array_equal(other.y_train, one.y_train)
        assert np.array_equal(other.y_test, one.y_test)
        shift = (other.weights - one.weights).reshape(30, -1)
        assert np.allclose(shift, shift[:, :1])  # one constant per client
    # beta moves the feature means along the all-ones direction: that does move labels
    other_beta = generate_synthetic(6, 30, alpha=1.0, beta=3.0)
    assert (other_beta.y_train != one.y_train).mean() > 0.1


def test_with_alpha_beta_zero_every_client_draws_its_features_from_one_distribution():
    data = generate_synthetic(8, 200, alpha=0.0, beta=0.0)
    assert (data.u == 0).all() and (data.B == 0).all()
    # all v_k come from N(0, 1): the feature means of different clients are exchangeable
    assert abs(data.means.mean()) < 0.02 and abs(data.means.std() - 1.0) < 0.02
    # each client's sample mean is its v_k (the samples follow the drawn parameters)
    big = np.argmax(data.sizes)
    rows = data.x_train[data.train_nodes == big].astype(np.float64)
    standard_error = np.sqrt(feature_variances() / len(rows))
    assert (np.abs(rows.mean(axis=0) - data.means[big]) < 5 * standard_error).all()


def test_the_iid_set_has_one_model_and_zero_feature_means():
    data = generate_synthetic(3, 50, iid=True)
    assert (data.weights == data.weights[0]).all() and (data.biases == data.biases[0]).all()
    assert (data.means == 0).all()
    assert abs(data.weights[0].std() - 1.0) < 0.15  # W, b ~ N(0, 1): 600 entries
    x = np.concatenate([data.x_train, data.x_test]).astype(np.float64)
    assert (np.abs(x.mean(axis=0)) < 5 * np.sqrt(feature_variances() / len(x))).all()
    labels = np.concatenate([data.y_train, data.y_test])
    expected = (x @ data.weights[0] + data.biases[0]).argmax(axis=1)
    assert np.array_equal(labels, expected)
    # alpha and beta are ignored
    assert np.array_equal(generate_synthetic(3, 50, 2.0, 0.0, iid=True).x_train, data.x_train)


def test_sizes_are_50_plus_the_floor_of_lognormal_4_2():
    sizes = client_sizes(0, 4000)
    assert sizes.min() >= MIN_SAMPLES
    # P(n - 50 <= m) = P(lognormal < m + 1) = Phi((ln(m + 1) - 4) / 2)
    for m in (5, 30, 54, 150, 1000, 20_000):
        expected = norm.cdf((np.log(m + 1) - 4.0) / 2.0)
        assert abs((sizes - MIN_SAMPLES <= m).mean() - expected) < 0.03  # sd < 0.008
    # a heavy tail: the largest client holds more than 10 % of all samples' median x 100
    assert sizes.max() > 100 * np.median(sizes)


def test_the_rows_can_be_written_into_files_that_other_processes_map(tmp_path):
    def to_file(name, shape, dtype):
        return np.lib.format.open_memmap(tmp_path / f"{name}.npy", "w+", dtype, shape)

    in_memory = generate_synthetic(7, 9)
    on_disk = generate_synthetic(7, 9, allocate=to_file)
    for name in ("x_train", "y_train", "x_test", "y_test", "train_nodes", "test_nodes"):
        assert isinstance(getattr(on_disk, name), np.memmap)
        getattr(on_disk, name).flush()
        mapped = np.load(tmp_path / f"{name}.npy", mmap_mode="r")  # as another process would
        assert np.array_equal(mapped, getattr(in_memory, name))


def test_generation_refuses_no_clients_and_negative_heterogeneity():
    with pytest.raises(ValueError, match="at least one client, got 0"):
        generate_synthetic(0, 0)
    with pytest.raises(ValueError, match="alpha=-1.0, beta=0.0"):
        generate_synthetic(0, 3, alpha=-1.0, beta=0.0)


# --- the loader, dataset-nodes, the keys -------------------------------------------------------
def test_the_loader_keeps_raw_features_and_every_sample_s_client():
    data = load_dataset("synthetic", seed=4, simulation=None)  # sim-nodes default: 10 clients
    generated = generate_synthetic(4, 10, 1.0, 1.0)
    assert data.input_shape == (60,) and data.num_classes == 10 and data.num_nodes == 10
    assert torch.equal(data.x_train, torch.from_numpy(generated.x_train))  # not standardised
    assert torch.equal(data.y_test, torch.from_numpy(generated.y_test))
    assert data.train_nodes.tolist() == generated.train_nodes.tolist()


def test_dataset_nodes_gives_every_client_its_natural_partition():
    cfg = config(dataset="synthetic", partitioner="dataset-nodes", sim_nodes=7, seed=2)
    generated = generate_synthetic(2, 7)
    assert [len(p) for p in federation.partition_for(cfg, 7)] == [
        int(0.9 * n) for n in generated.sizes
    ]
    for pid in (0, 6):
        x_train, y_train, x_test, y_test = federation.node_split(cfg, 7, pid)
        assert torch.equal(
            x_train, torch.from_numpy(generated.x_train[generated.train_nodes == pid])
        )
        assert torch.equal(
            y_train, torch.from_numpy(generated.y_train[generated.train_nodes == pid])
        )
        assert torch.equal(x_test, torch.from_numpy(generated.x_test[generated.test_nodes == pid]))
        assert torch.equal(y_test, torch.from_numpy(generated.y_test[generated.test_nodes == pid]))
    with pytest.raises(ValueError, match=r"has 7 nodes \(sim-nodes=7\) but the federation has 5"):
        federation.partition_for(cfg, 5)


def test_the_keys_that_shape_the_data_and_only_those_regenerate_it():
    base = {"dataset": "synthetic", "sim_nodes": 5, "seed": 1}
    data = federation.load_splits(config(**base))
    assert federation.load_splits(config(**base, sim_spread=9.0)) is data  # a ctl-gaussian key
    # alpha is part of the cache key (it moves the drawn models; see the next test)
    assert federation.load_splits(config(**base, synthetic_alpha=0.0)) is not data
    # beta moves the feature means
    other_means = federation.load_splits(config(**base, synthetic_beta=0.0))
    assert not torch.equal(other_means.x_train, data.x_train)
    iid = federation.load_splits(config(**{**base, "dataset": "synthetic-iid"}))
    assert (
        federation.load_splits(config(**{**base, "dataset": "synthetic-iid"}, synthetic_beta=3.0))
        is iid
    )


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"synthetic-alpha": -0.5}, "synthetic-alpha must be >= 0, got -0.5"),
        ({"synthetic-beta": float("nan")}, "synthetic-beta must be a finite number >= 0, got nan"),
        ({"sim-nodes": 100_001}, r"sim-nodes must be in \[1, 100000\], got 100001"),
        ({"dataset": "synthetic", "sim-nodes": 0}, r"sim-nodes must be in \[1, 100000\], got 0"),
    ],
)
def test_bad_synthetic_keys_are_refused_when_parsed(overrides, message):
    with pytest.raises(ConfigError, match=message):
        parse_run_config(resolve_run_config(overrides))


def test_many_nodes_are_fine_for_synthetic_but_ctl_gaussian_keeps_its_row_limit():
    parse_run_config(resolve_run_config({"dataset": "synthetic", "sim-nodes": 10_000}))
    with pytest.raises(ConfigError, match="ctl-gaussian allows at most 2000000"):
        parse_run_config(resolve_run_config({"dataset": "ctl-gaussian", "sim-nodes": 10_000}))


def test_a_federation_on_synthetic_trains_logistic_regression(fast_run):
    overrides = {
        **fast_run,
        "dataset": "synthetic",
        "partitioner": "dataset-nodes",
        "sim-nodes": 4,
        "model": "logreg",
        "momentum": 0.0,
        "learning-rate": 0.01,
        "batch-size": 10,
    }
    run_dir = run_in_process(overrides, num_clients=4)
    history = (run_dir / "history.json").read_text()
    assert '"clients_trained": 4' in history


# --- one shared copy in the cache --------------------------------------------------------------
def test_a_run_maps_one_shared_copy_of_the_generated_set(tmp_path):
    """Through the run config the rows are written once under cache-dir and mapped: the same
    values as the in-memory generator, and a second process's load opens the same files."""
    cfg = config(dataset="synthetic", sim_nodes=6, seed=5, cache_dir=str(tmp_path / "cache"))
    data = federation.load_splits(cfg)
    generated = generate_synthetic(5, 6)
    for split in ("x_train", "y_train", "x_test", "y_test", "train_nodes", "test_nodes"):
        assert np.array_equal(getattr(data, split).numpy(), getattr(generated, split)), split
    (folder,) = [p for p in (tmp_path / "cache").iterdir() if p.is_dir()]
    assert folder.name.startswith("synthetic-6-")
    mapped = np.load(folder / "x_train.npy", mmap_mode="r")
    assert np.array_equal(mapped, generated.x_train)
    # the tensor's memory is the mapping of the file, not a copy in this process
    assert _mapping_of(data.x_train.data_ptr()) == str(folder / "x_train.npy")
    # another seed is another folder; the first is kept (a sweep over seeds reuses both)
    federation.load_splits(
        config(dataset="synthetic", sim_nodes=6, seed=6, cache_dir=cfg.cache_dir)
    )
    assert len([p for p in (tmp_path / "cache").iterdir() if p.is_dir()]) == 2


def _mapping_of(address: int) -> str:
    """The file that this process has mapped at ``address`` ("" if none)."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        fields = line.split()
        start, end = (int(value, 16) for value in fields[0].split("-"))
        if start <= address < end:
            return fields[5] if len(fields) > 5 else ""
    return ""
