"""A data set's declaration (``DatasetSpec``): every fact flowerbed keeps about one data set,
written once, in ``registry.DATASETS``. The loaders, the ``dataset`` key's choices, the class
names and clinical positive class, the model that fits, the pre-flight's sizes (``DataSize``,
what its ``sizing`` returns) and the missing-files message are all read from it."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .options import DataOptions
from .splits import DatasetSplits

IMAGE_SIZE = "image-size"  # sized_by: a (C, H, W) image whose side is the run's image-size
NUM_POINTS = "num-points"  # sized_by: a (num-points, 3) point cloud


@dataclass(frozen=True)
class DataSize:
    """A data set's size as the run config fixes it, and what it takes of one process's memory
    and of the data cache (the pre-flight's estimate, ``runtime.needs``)."""

    train: int
    test: int
    shape: tuple[int, ...]  # one sample
    num_classes: int
    keys: tuple[str, ...]  # the run-config keys that size it
    mapped: bool = False  # rows memory-mapped from cache-dir, not held by the process
    nodes: bool = False  # the node of every sample is kept too (int64)
    load_bytes: int = 0  # transient while loading or generating it
    cache_bytes: int = 0  # written into cache-dir once
    cached: bool = True  # already in cache-dir (nothing to write)

    @property
    def values(self) -> int:
        return (self.train + self.test) * math.prod(self.shape)


@dataclass(frozen=True)
class DatasetSpec:
    """One data set: its name, how it loads, its shape, sizes and classes, and its files.

    ``loader(spec, options)`` returns its ``DatasetSplits``; ``reads`` names the
    ``DataOptions`` fields the loader reads (the cache key: the others are reset). ``shape``:
    one sample's at the default options, ``sized_by`` the run-config key that changes it
    (``input_shape``); None where only the data knows (a site's own). ``train_size``,
    ``test_size``, ``num_classes``: where fixed (None: set by the run config, or the data's).
    ``class_names`` by label (``()``: none declared); ``positive_class``: the clinical positive
    class (the disease) of a binary medical set. ``model``: the model that fits it (None: known
    only once the nodes report their data). ``downloadable``: whether ``download=true`` fetches
    it. ``missing(spec, data_dir, image_size)``: what it lacks under ``data_dir`` and where to
    put it, None when its files are there (no such function: it reads no files of the run's).
    ``family``: which reader loads it (``medmnist``, ``torchvision``, ``sklearn``, ...).
    ``sizing(spec, options)``: its ``DataSize`` under ``options``, for the pre-flight (one of
    ``sizing.py``'s); None where only the nodes know (a site's own).
    """

    name: str
    family: str
    loader: Callable[[DatasetSpec, DataOptions], DatasetSplits]
    reads: tuple[str, ...] = ()
    shape: tuple[int, ...] | None = None
    sized_by: str = ""
    train_size: int | None = None
    test_size: int | None = None
    num_classes: int | None = None
    class_names: tuple[str, ...] = ()
    positive_class: int | None = None
    model: str | None = "cnn"
    downloadable: bool = False
    missing: Callable[[DatasetSpec, Path, int], str | None] | None = None
    sizing: Callable[[DatasetSpec, DataOptions], DataSize] | None = None

    def input_shape(self, options: DataOptions) -> tuple[int, ...] | None:
        """One sample's shape under ``options`` (``image-size``, ``num-points``)."""
        if self.shape is None:
            return None
        if self.sized_by == IMAGE_SIZE:
            return (self.shape[0], options.image_size, options.image_size)
        if self.sized_by == NUM_POINTS:
            return (options.num_points, *self.shape[1:])
        return self.shape

    def missing_files(self, data_dir: Path, image_size: int = 28) -> str | None:
        """What it lacks under ``data_dir`` and where to put it; None when nothing."""
        return None if self.missing is None else self.missing(self, data_dir, image_size)
