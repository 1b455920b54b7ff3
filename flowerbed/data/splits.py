"""What every loader returns: a data set as a training pool and a held-out test split
(``DatasetSplits``), the two errors a loader raises for its files, and the steps every
loader shares (raw arrays as standardised tensors, the image cache's maps as a data set)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from .image_cache import CachedImages
from .mapped_images import MappedImages, take

# `download=true` fetches the MedMNIST and torchvision sets (the others are bundled, generated,
# a site's own, or ModelNet, which has no download)
DOWNLOAD_HINT = 'or run with --run-config "download=true" on a machine with internet'
TEST_SAMPLE_SEED = 0  # one sample of a test set for every run: runs compare on the same samples


class DataNotFoundError(FileNotFoundError):
    """A data file is missing and downloading is off: the message says where to put it."""


class DataFileError(ValueError):
    """A data file is there but cannot be read: the message names the file."""


@dataclass(frozen=True)
class DatasetSplits:
    """A data set as tensors: training pool (to be partitioned) and held-out test split.

    ``x_train``/``x_test``: float32 tensors, or ``MappedImages`` for the cached image sets
    (indexing one gives float32 tensors; ``mapped_images.take`` selects rows of either kind
    without copying mapped images). ``train_nodes``/``test_nodes``: for data sets with their own nodes (``ctl-gaussian``), the
    node (0 to ``num_nodes`` - 1) of every training and test sample; None for the others.
    ``augment``: applied by local training (``training.loops.train_local``) to every training
    mini-batch, never to evaluation.
    """

    name: str
    x_train: torch.Tensor | MappedImages
    y_train: torch.Tensor
    x_test: torch.Tensor | MappedImages
    y_test: torch.Tensor
    num_classes: int
    train_nodes: torch.Tensor | None = None
    test_nodes: torch.Tensor | None = None
    # a transform of training batches only, (batch, generator) -> batch: point clouds get the
    # FL + KD benchmark's augmentation (``pointclouds.augment_point_batch``); None = none
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None
    # what the data declares of its classes (a site's manifest); None: the registry's
    class_names: tuple[str, ...] | None = None
    positive_class: int | None = None

    @property
    def num_nodes(self) -> int | None:
        """The number of the data set's own nodes; None for a data set without nodes."""
        if self.train_nodes is None or self.test_nodes is None:
            return None
        return int(max(self.train_nodes.max(), self.test_nodes.max())) + 1

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def is_image(self) -> bool:
        return self.x_train.ndim == 4


def mapped_splits(name: str, cached: CachedImages) -> DatasetSplits:
    """The cache folder's maps as a data set (labels as int64 tensors)."""
    return DatasetSplits(
        name=name,
        x_train=MappedImages(cached.x_train, cached.mean, cached.std),
        y_train=torch.from_numpy(cached.y_train),
        x_test=MappedImages(cached.x_test, cached.mean, cached.std),
        y_test=torch.from_numpy(cached.y_test),
        num_classes=int(max(cached.y_train.max(), cached.y_test.max())) + 1,
    )


def as_splits(
    name, x_train, y_train, x_test, y_test, standardise: bool = True, **nodes
) -> DatasetSplits:
    """Tensors of raw arrays, standardised with training statistics unless told not to."""
    if standardise:
        x_train, x_test = standardised(x_train, x_test)
    num_classes = int(max(y_train.max(), y_test.max())) + 1
    return DatasetSplits(
        name=name,
        x_train=torch.from_numpy(x_train),
        y_train=torch.from_numpy(y_train.astype(np.int64)),
        x_test=torch.from_numpy(x_test),
        y_test=torch.from_numpy(y_test.astype(np.int64)),
        num_classes=num_classes,
        **nodes,
    )


def standardised(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zero mean, unit variance per feature (tabular) or per channel (images), train stats only."""
    axes = (0, 2, 3) if x_train.ndim == 4 else (0,)
    mean = x_train.mean(axis=axes, keepdims=True)
    std = x_train.std(axis=axes, keepdims=True)
    std[std == 0] = 1.0
    return (
        ((x_train - mean) / std).astype(np.float32),
        ((x_test - mean) / std).astype(np.float32),
    )


def sampled_test_split(
    data: DatasetSplits, most: int
) -> tuple[torch.Tensor | MappedImages, torch.Tensor]:
    """The test split's inputs and labels, or, when it has more than ``most`` samples
    (``most`` > 0), a uniform sample of ``most`` of them without replacement, kept in the split's
    order. The sample is drawn with ``TEST_SAMPLE_SEED``, not the run's seed, so that every run
    of a data set is evaluated on the same samples and two runs compare pair by pair."""
    if most <= 0 or len(data.y_test) <= most:
        return data.x_test, data.y_test
    chosen = np.random.default_rng(TEST_SAMPLE_SEED).choice(len(data.y_test), most, replace=False)
    rows = torch.from_numpy(np.sort(chosen))
    return take(data.x_test, rows), data.y_test[rows]
