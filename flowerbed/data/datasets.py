"""Dataset loaders: every data set becomes in-memory tensors with a fixed train/test split.

Supported names (see ``DATASETS``):

* ``digits``, ``breast-cancer``: scikit-learn's bundled data (offline). The held-out test split
  is a stratified 20 % drawn with a fixed seed, identical in every run and every process.
* every 2D MedMNIST flag (``bloodmnist``, ``pathmnist``, ...): through the ``medmnist`` package,
  which downloads when ``download=True`` and otherwise reads ``<data-dir>/<flag>.npz``
  (``<flag>_<size>.npz`` for sizes other than 28).
* ``cifar10``, ``mnist``: through torchvision, from ``<data-dir>`` (downloaded when asked).
* ``breast-cancer-shifted``, ``ctl-gaussian``: generated from the run's seed and the ``sim-*``
  keys (``simulations.py``, the CTL paper's two simulations); ``ctl-gaussian`` records the node
  of every sample (``DatasetSplits.train_nodes``/``test_nodes``); so do ``synthetic`` and
  ``synthetic-iid`` (the FedProx paper's, ``fedprox_synthetic.py``; not standardised).
* ``shapes`` (generated offline, fixed whatever the seed), ``modelnet40``, ``modelnet10`` (from
  ``<data-dir>``): point clouds (``pointclouds.py``).

Images are returned as float32 ``(N, C, H, W)``, tabular data as ``(N, D)``; features are
standardised with statistics of the training split only. Point clouds are ``(N, points, 3)``,
each cloud centred and scaled into the unit sphere, not standardised.
"""

from __future__ import annotations

import dataclasses
import functools
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .pointclouds import NUM_POINTS, POINT_CLOUD_DATASETS, augment_point_batch, load_point_clouds
from .simulations import GENERATED_DATASETS, SimulationOptions, generate

SKLEARN_DATASETS = ("digits", "breast-cancer")
TORCHVISION_DATASETS = ("cifar10", "mnist")
MEDMNIST_SIZES = (28, 64, 128, 224)
_TEST_SPLIT_SEED = 0  # fixed: the held-out test set must not change with the run's seed


def medmnist_flags() -> tuple[str, ...]:
    """The 2D single-label MedMNIST flags (3D volumes and multi-label ChestMNIST excluded)."""
    from medmnist import INFO

    return tuple(
        flag
        for flag, info in INFO.items()
        if not flag.endswith("3d") and not info["task"].startswith("multi-label")
    )


def available_datasets() -> tuple[str, ...]:
    return (
        SKLEARN_DATASETS
        + GENERATED_DATASETS
        + POINT_CLOUD_DATASETS
        + medmnist_flags()
        + TORCHVISION_DATASETS
    )


class DataNotFoundError(FileNotFoundError):
    """A data file is missing and downloading is off: the message says where to put it."""


class DataFileError(ValueError):
    """A data file is there but cannot be read: the message names the file."""


@dataclass(frozen=True)
class DatasetSplits:
    """A data set as tensors: training pool (to be partitioned) and held-out test split.

    ``train_nodes``/``test_nodes``: for data sets with their own nodes (``ctl-gaussian``), the
    node (0 to ``num_nodes`` - 1) of every training and test sample; None for the others.
    ``augment``: applied by local training (``training.loops.train_local``) to every training
    mini-batch, never to evaluation.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    train_nodes: torch.Tensor | None = None
    test_nodes: torch.Tensor | None = None
    # a transform of training batches only, (batch, generator) -> batch: point clouds get the
    # FL + KD benchmark's augmentation (``pointclouds.augment_point_batch``); None = none
    augment: Callable[[torch.Tensor, torch.Generator], torch.Tensor] | None = None

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


def load_dataset(
    name: str,
    data_dir: str | Path = "",
    download: bool = False,
    image_size: int = 28,
    *,
    seed: int = 0,
    simulation: SimulationOptions | None = None,
    num_points: int = NUM_POINTS,
) -> DatasetSplits:
    """Load ``name``; cached per process so every Ray actor reads its files once.

    ``seed`` and ``simulation`` (the ``sim-*`` keys) are read by generated data sets only; the
    others ignore them and are loaded once per process whatever the seed. ``num_points``:
    points per shape of the point-cloud sets.
    """
    if name in GENERATED_DATASETS:
        options = (simulation or SimulationOptions()).for_dataset(name)
        return _generate_cached(name, int(seed), options)
    if name in POINT_CLOUD_DATASETS:
        return _load_point_clouds_cached(name, str(data_dir), int(num_points))
    return _load_cached(name, str(data_dir), bool(download), int(image_size))


@functools.lru_cache(maxsize=4)
def _load_point_clouds_cached(name: str, data_dir: str, num_points: int) -> DatasetSplits:
    try:
        x_train, y_train, x_test, y_test = load_point_clouds(name, Path(data_dir), num_points)
    except FileNotFoundError as error:
        raise DataNotFoundError(str(error)) from error
    splits = _as_splits(name, x_train, y_train, x_test, y_test, standardise=False)
    return dataclasses.replace(splits, augment=augment_point_batch)


@functools.lru_cache(maxsize=4)
def _generate_cached(name: str, seed: int, options: SimulationOptions) -> DatasetSplits:
    data = generate(name, seed, options)
    nodes = (
        {}
        if data.train_nodes is None
        else {
            "train_nodes": torch.from_numpy(data.train_nodes.astype(np.int64)),
            "test_nodes": torch.from_numpy(data.test_nodes.astype(np.int64)),
        }
    )
    return _as_splits(
        name, data.x_train, data.y_train, data.x_test, data.y_test, data.standardise, **nodes
    )


@functools.lru_cache(maxsize=4)
def _load_cached(name: str, data_dir: str, download: bool, image_size: int) -> DatasetSplits:
    if name in SKLEARN_DATASETS:
        x_train, y_train, x_test, y_test = _load_sklearn(name)
    elif name in TORCHVISION_DATASETS:
        x_train, y_train, x_test, y_test = _load_torchvision(name, Path(data_dir), download)
    elif name in medmnist_flags():
        x_train, y_train, x_test, y_test = _load_medmnist(
            name, Path(data_dir), download, image_size
        )
    else:
        raise ValueError(
            f"unknown dataset {name!r}; valid choices: {', '.join(available_datasets())}"
        )
    return _as_splits(name, x_train, y_train, x_test, y_test)


def _as_splits(
    name, x_train, y_train, x_test, y_test, standardise: bool = True, **nodes
) -> DatasetSplits:
    """Tensors of raw arrays, standardised with training statistics unless told not to."""
    if standardise:
        x_train, x_test = _standardise(x_train, x_test)
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


def _standardise(x_train: np.ndarray, x_test: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Zero mean, unit variance per feature (tabular) or per channel (images), train stats only."""
    axes = (0, 2, 3) if x_train.ndim == 4 else (0,)
    mean = x_train.mean(axis=axes, keepdims=True)
    std = x_train.std(axis=axes, keepdims=True)
    std[std == 0] = 1.0
    return (
        ((x_train - mean) / std).astype(np.float32),
        ((x_test - mean) / std).astype(np.float32),
    )


def _load_sklearn(name: str):
    from sklearn.datasets import load_breast_cancer, load_digits
    from sklearn.model_selection import train_test_split

    if name == "digits":
        bunch = load_digits()
        x = bunch.images.astype(np.float32)[:, None, :, :] / 16.0  # (N, 1, 8, 8)
    else:
        bunch = load_breast_cancer()
        x = bunch.data.astype(np.float32)  # (N, 30)
    y = bunch.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=_TEST_SPLIT_SEED
    )
    return x_train, y_train, x_test, y_test


def _images_to_nchw(images: np.ndarray) -> np.ndarray:
    """uint8 (N, H, W) or (N, H, W, C) -> float32 (N, C, H, W) in [0, 1]."""
    images = images.astype(np.float32) / 255.0
    if images.ndim == 3:
        return images[:, None, :, :]
    return images.transpose(0, 3, 1, 2)


def medmnist_file(flag: str, data_dir: Path, image_size: int = 28) -> Path:
    """Where ``medmnist`` looks for a flag's npz file."""
    suffix = "" if image_size == 28 else f"_{image_size}"
    return data_dir / f"{flag}{suffix}.npz"


def _load_medmnist(flag: str, data_dir: Path, download: bool, image_size: int):
    import medmnist
    from medmnist import INFO

    if image_size not in MEDMNIST_SIZES:
        raise ValueError(
            f"image-size {image_size} is not a MedMNIST size; valid choices: {MEDMNIST_SIZES}"
        )
    path = medmnist_file(flag, data_dir, image_size)
    if not download and not path.is_file():
        raise DataNotFoundError(
            f"MedMNIST file {path} not found. Put {path.name} (from https://zenodo.org/records/10519652)"
            f' into {data_dir}, or run with --run-config "download=true" on a machine with internet.'
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    dataset_class = getattr(medmnist, INFO[flag]["python_class"])
    size = None if image_size == 28 else image_size  # medmnist wants size=None for 28
    splits = {}
    for split in ("train", "test"):
        # medmnist reads the npz with np.load's default allow_pickle=False.
        try:
            ds = dataset_class(split=split, root=str(data_dir), download=download, size=size)
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as error:
            raise DataFileError(
                f"{path} is not a readable MedMNIST file ({type(error).__name__}: {error});"
                " replace it with the one from https://zenodo.org/records/10519652"
            ) from error
        splits[split] = (_images_to_nchw(ds.imgs), ds.labels.reshape(-1).astype(np.int64))
    return (*splits["train"], *splits["test"])


def _load_torchvision(name: str, data_dir: Path, download: bool):
    from torchvision import datasets

    dataset_class = {"cifar10": datasets.CIFAR10, "mnist": datasets.MNIST}[name]
    splits = {}
    for train in (True, False):
        try:
            ds = dataset_class(root=str(data_dir), train=train, download=download)
        except RuntimeError as error:  # torchvision: "Dataset not found or corrupted"
            expected = "cifar-10-batches-py/" if name == "cifar10" else "MNIST/raw/"
            raise DataNotFoundError(
                f"{name} not found under {data_dir} (torchvision expects {data_dir / expected}). "
                f'Run once with --run-config "download=true" on a machine with internet, or copy '
                f"that folder there. torchvision said: {error}"
            ) from error
        images = np.asarray(ds.data)
        splits[train] = (_images_to_nchw(images), np.asarray(ds.targets, dtype=np.int64))
    return (*splits[True], *splits[False])
