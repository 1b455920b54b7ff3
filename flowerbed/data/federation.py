"""The run's data: which data set, how its training pool is partitioned, a client's local split.

Every function here is a pure function of the run config (and a partition id), so the
ServerApp and every ClientApp compute the same partition without exchanging any data. Data
sets and partitions are cached per process: a Ray actor reads its files once.
"""

from __future__ import annotations

import functools

import numpy as np

from ..settings import RunConfig, Setting
from .datasets import MEDMNIST_SIZES, DatasetSplits, available_datasets, load_dataset
from .partition import PARTITIONERS, partition_indices

SETTINGS = (
    Setting(
        "dataset",
        "digits",
        "`digits`, `breast-cancer` (bundled), any 2D MedMNIST flag (`bloodmnist`, `pathmnist`,"
        " ...), `cifar10`, `mnist`",
        choices=available_datasets,
    ),
    Setting(
        "data-dir",
        "~/.flowerbed/data",
        "where MedMNIST `.npz` files and torchvision folders are read (and downloaded)",
    ),
    Setting(
        "download", False, "let medmnist / torchvision download missing files (needs internet)"
    ),
    Setting(
        "image-size",
        28,
        "MedMNIST image size: " + ", ".join(str(size) for size in MEDMNIST_SIZES),
        check=lambda value, config: (
            None
            if value in MEDMNIST_SIZES
            else f"image-size must be one of {', '.join(map(str, MEDMNIST_SIZES))}, got {value}"
        ),
    ),
    Setting(
        "partitioner", "dirichlet", "`" + "`, `".join(PARTITIONERS) + "`", choices=PARTITIONERS
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
        "local-test-fraction",
        0.2,
        "share of each client's partition kept as its local test split",
        low=0,
        high=1,
        high_open=True,
    ),
)


def load_splits(config: RunConfig) -> DatasetSplits:
    """The run's data set (training pool and held-out test split)."""
    return load_dataset(config.dataset, config.data_path, config.download, config.image_size)


def partition_for(config: RunConfig, num_partitions: int) -> list[np.ndarray]:
    """The partition of the training pool; identical in the ServerApp and every ClientApp."""
    return _partition_cached(
        config.dataset,
        str(config.data_path),
        config.download,
        config.image_size,
        num_partitions,
        config.partitioner,
        config.seed,
        config.dirichlet_alpha,
        config.min_partition_size,
        config.classes_per_client,
    )


@functools.lru_cache(maxsize=4)
def _partition_cached(
    dataset,
    data_dir,
    download,
    image_size,
    num_partitions,
    scheme,
    seed,
    alpha,
    min_partition_size,
    classes_per_client,
) -> list[np.ndarray]:
    splits = load_dataset(dataset, data_dir, download, image_size)
    return partition_indices(
        splits.y_train.numpy(),
        num_partitions,
        scheme,
        seed=seed,
        alpha=alpha,
        min_partition_size=min_partition_size,
        classes_per_client=classes_per_client,
    )
