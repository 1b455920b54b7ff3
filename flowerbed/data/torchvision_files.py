"""CIFAR-10 and MNIST through torchvision: where their files lie under ``data-dir``, and how both
splits are copied once, as uint8, into the image cache (``image_cache.py``) that every process
memory-maps (torchvision holds a split in memory while it is copied)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .image_cache import CachedImages, cached_images, nchw, write_images, write_labels
from .splits import DOWNLOAD_HINT, DataNotFoundError

CIFAR10_CLASSES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)


def torchvision_folder(name: str, data_dir: Path) -> Path:
    """The folder torchvision reads ``cifar10`` or ``mnist`` from."""
    return data_dir / ("cifar-10-batches-py" if name == "cifar10" else "MNIST/raw")


def missing_torchvision(name: str, data_dir: Path) -> str | None:
    """Where torchvision expects ``name``'s files, when they are not there; None when they are."""
    folder = torchvision_folder(name, data_dir)
    if folder.is_dir() and any(p.is_file() for p in folder.rglob("*")):
        return None
    return f"{name} not found under {data_dir} (torchvision expects {folder}/)"


def load_torchvision(name: str, data_dir: Path, download: bool, cache_dir: Path) -> CachedImages:
    """``name``'s images in the image cache ``cache_dir``, copied there on first use (its files
    downloaded first when ``download`` and its folder is missing)."""
    folder = torchvision_folder(name, data_dir)
    if download and not folder.is_dir():
        _torchvision_splits(name, data_dir, download=True)  # fetches the files
    sources = sorted(p for p in folder.rglob("*") if p.is_file()) if folder.is_dir() else []
    if not sources:  # raises DataNotFoundError naming the folder torchvision expects
        _torchvision_splits(name, data_dir, download=False)
    return cached_images(
        cache_dir,
        name,
        sources,
        lambda cache_folder: _unpack_torchvision(name, data_dir, cache_folder),
    )


def _unpack_torchvision(name: str, data_dir: Path, folder: Path) -> None:
    """Both splits into the cache folder (torchvision holds them in memory as uint8: 150 MB
    for CIFAR-10, 55 MB for MNIST)."""
    for split, (images, labels) in _torchvision_splits(name, data_dir, download=False).items():
        write_images(folder, split, nchw(images))
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
