"""The image cache: uint8 arrays on disk, built once per data set and memory-mapped by every process.

Why: a simulation runs the ServerApp and several Ray actors on one machine, and each used to
hold its own float32 copy of the whole data set (PathMNIST at 224 px: about 54 GB per
process). Here the images are written once, as uint8 in the models' (N, C, H, W) layout, and
every process maps the same files (``np.load(mmap_mode="r")``): the operating system keeps
one copy of the pages, shared by all the processes that read them, and reads only the pages
a process touches. ``mapped_images.MappedImages`` turns the uint8 rows into standardised
float32 batches when they are read.

Layout of ``<cache-dir>/<key>-<digest>/`` (``key`` names the data set and size, e.g.
``pathmnist_64``):

* ``x_train.npy``, ``x_test.npy``: uint8 ``(N, C, H, W)``;
* ``y_train.npy``, ``y_test.npy``: int64 ``(N,)``;
* ``meta.json``: the format version, the fingerprint of the source, the array shapes and the
  per-channel mean and std of the training images scaled to [0, 1] (float32 values).

``<digest>`` hashes the fingerprint: the cache format and the path, size and modification time
(ns) of every source file. A changed source therefore gets a new folder, built afresh; the
folder of the previous version of the same source is then removed (a process that still maps
it keeps its pages: a removed file lives until its last map is closed).

Statistics are exact: counts of the 256 uint8 values per channel, taken over the training
split in chunks, give the mean and variance of the float32 pixel values ``u / 255`` in float64,
which are stored as float32. (The former in-memory loader reduced a float32 copy of the whole
set in float32; its statistics differ from these by that rounding error, about 1e-7 relative on
small sets, more on large ones.)

Concurrency: N actors may open the same data set at once. A builder holds an exclusive
``flock`` on ``<cache-dir>/<key>.lock``, builds into a temporary folder and renames it into
place; the rename is atomic, so a reader sees either no folder or a complete one. The others
wait on the lock, then open the finished folder. Should ``flock`` not work (some network file
systems), two builders both build and the second rename fails because the folder exists: the
loser removes its copy and opens the winner's, so there is still exactly one. A builder that
was killed leaves ``.<key>.<host>.<pid>.tmp``; the next builder on that host removes it once
that process is gone.

Opening checks ``meta.json`` and that every array has the recorded shape and dtype (a truncated
file fails ``np.load``'s size check); the content is not hashed (13.5 GB at 224 px). A folder
that fails the check is rebuilt, with a warning in the log.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from logging import INFO, WARNING
from pathlib import Path

import numpy as np
from flwr.common.logger import log

from ..settings import ConfigError

CACHE_FORMAT = 1  # bump when the layout or the statistics change: old folders are not read
SPLITS = ("train", "test")
_STATISTICS_CHUNK_BYTES = 64 << 20


class CorruptCacheError(ValueError):
    """A cache folder is there but does not hold what its ``meta.json`` says."""


@dataclass(frozen=True)
class CachedImages:
    """An opened cache folder: images memory-mapped, labels in memory."""

    folder: Path
    x_train: np.ndarray  # uint8 (N, C, H, W), np.memmap
    y_train: np.ndarray  # int64 (N,)
    x_test: np.ndarray
    y_test: np.ndarray
    mean: np.ndarray  # float32 (C,): per-channel statistics of x_train / 255
    std: np.ndarray


def images_path(folder: Path, split: str) -> Path:
    return folder / f"x_{split}.npy"


def labels_path(folder: Path, split: str) -> Path:
    return folder / f"y_{split}.npy"


def write_images(folder: Path, split: str, shape: tuple[int, ...]) -> np.memmap:
    """A writable map of ``x_<split>.npy`` (uint8, ``shape`` = (N, C, H, W)) for a builder to
    fill, whole or chunk by chunk. Its disk space is allocated first, so a full disk is a
    ``ConfigError`` here, not a SIGBUS when a page of the map is written."""
    if len(shape) != 4:
        raise ValueError(f"cached images are (N, C, H, W), got shape {shape}")
    path = images_path(folder, split)
    images = np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=tuple(shape))
    with open(path, "r+b") as f:
        size = os.fstat(f.fileno()).st_size
        try:
            os.posix_fallocate(f.fileno(), 0, size)
        except OSError as error:
            raise ConfigError(
                f"cache-dir={str(folder.parent)!r} has no room for {path.name} ({size:,} bytes:"
                f" {error.strerror}); free space there or set cache-dir to another disk"
            ) from None
    return images


def write_labels(folder: Path, split: str, labels: np.ndarray) -> None:
    np.save(labels_path(folder, split), np.asarray(labels, dtype=np.int64).reshape(-1))


def fingerprint(sources: Sequence[Path]) -> dict:
    """What identifies a source: the cache format and (path, size, mtime in ns) of each file."""
    files = []
    for path in sorted(Path(p).resolve() for p in sources):
        stat = path.stat()
        files.append([str(path), stat.st_size, stat.st_mtime_ns])
    return {"format": CACHE_FORMAT, "files": files}


def cached_images(
    cache_dir: Path, key: str, sources: Sequence[Path], build: Callable[[Path], None]
) -> CachedImages:
    """The cache folder of ``key`` for the current ``sources``, built by ``build(folder)`` if it
    is missing, stale or corrupt (module docstring). ``build`` writes both splits with
    ``write_images`` and ``write_labels``; the statistics and ``meta.json`` are added here."""
    cache_dir = Path(cache_dir).expanduser().resolve()
    identity = fingerprint(sources)
    digest = hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]
    folder = cache_dir / f"{key}-{digest}"
    try:
        opened = _open(folder)
    except CorruptCacheError:
        opened = None  # rebuilt below, under the lock
    if opened is not None:
        return opened
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"cache-dir={str(cache_dir)!r} cannot be created ({error.strerror}); set cache-dir"
            " to a writable folder"
        ) from None
    with _exclusive(cache_dir / f"{key}.lock", key):
        try:
            opened = _open(folder)
        except CorruptCacheError as error:
            log(WARNING, "flowerbed: rebuilding the data cache %s: %s", folder, error)
            shutil.rmtree(folder, ignore_errors=True)
            opened = None
        if opened is None:
            _build(folder, key, identity, build)
            _remove_previous_versions(cache_dir, key, identity, keep=folder)
            opened = _open(folder)
    return opened


@contextmanager
def _exclusive(lock_path: Path, key: str) -> Iterator[None]:
    try:
        descriptor = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o666)
    except OSError as error:
        raise ConfigError(
            f"cache-dir={str(lock_path.parent)!r} is not writable ({error.strerror}); set"
            " cache-dir to a writable folder"
        ) from None
    with open(descriptor, "r+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(INFO, "flowerbed: waiting for another process to build the data cache of %s", key)
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build(folder: Path, key: str, identity: dict, build: Callable[[Path], None]) -> None:
    cache_dir = folder.parent
    _remove_dead_builders(cache_dir, key)
    temporary = cache_dir / f".{key}.{socket.gethostname()}.{os.getpid()}.tmp"
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    sources = ", ".join(path for path, _, _ in identity["files"])
    log(INFO, "flowerbed: building the data cache %s from %s (once)", folder, sources)
    try:
        build(temporary)
        _finish(temporary, identity)
        try:
            os.rename(temporary, folder)
        except OSError:  # another builder won (no working flock): use its folder
            if not folder.is_dir():
                raise
            shutil.rmtree(temporary, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


def _finish(folder: Path, identity: dict) -> None:
    """Check what ``build`` wrote, add the statistics and ``meta.json``, sync to disk."""
    shapes = {}
    for split in SPLITS:
        images = np.load(images_path(folder, split), mmap_mode="r")
        labels = np.load(labels_path(folder, split), mmap_mode="r")
        if images.dtype != np.uint8 or images.ndim != 4 or labels.shape != (len(images),):
            raise ValueError(
                f"cache build of {split}: images {images.dtype} {images.shape} and labels"
                f" {labels.shape} do not match"
            )
        shapes[split] = list(images.shape)
        del images, labels
    mean, std = channel_statistics(np.load(images_path(folder, "train"), mmap_mode="r"))
    meta = {
        "fingerprint": identity,
        "shapes": shapes,
        "mean": [float(v) for v in mean],
        "std": [float(v) for v in std],
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))
    for path in folder.iterdir():
        with open(path, "rb") as f:
            os.fsync(f.fileno())


def channel_statistics(images: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std (float32) of uint8 ``images`` (N, C, H, W) scaled to [0, 1],
    exact: from counts of the 256 values, read in chunks (no float copy of the set). A channel
    with std 0 gets std 1 (a constant channel is only centred)."""
    num_channels = images.shape[1]
    counts = np.zeros((num_channels, 256), dtype=np.int64)
    rows = max(1, _STATISTICS_CHUNK_BYTES // max(1, images[0].nbytes))
    for start in range(0, len(images), rows):
        chunk = np.asarray(images[start : start + rows])
        for channel in range(num_channels):
            counts[channel] += np.bincount(chunk[:, channel].reshape(-1), minlength=256)
    # the float32 pixel values the models see: float32(u) / 255 in float32
    values = (np.arange(256, dtype=np.float32) / np.float32(255.0)).astype(np.float64)
    total = counts.sum(axis=1)
    mean = counts @ values / total
    variance = (counts * (values[None, :] - mean[:, None]) ** 2).sum(axis=1) / total
    std = np.sqrt(variance).astype(np.float32)
    std[std == 0] = 1.0
    return mean.astype(np.float32), std


def _open(folder: Path) -> CachedImages | None:
    """The opened folder; None if it does not exist; ``CorruptCacheError`` if it is damaged."""
    if not folder.is_dir():
        return None
    try:
        meta = json.loads((folder / "meta.json").read_text())
        arrays = {}
        for split in SPLITS:
            shape = tuple(meta["shapes"][split])
            images = np.load(images_path(folder, split), mmap_mode="r")
            labels = np.load(labels_path(folder, split))
            if images.dtype != np.uint8 or images.shape != shape:
                raise CorruptCacheError(
                    f"{images_path(folder, split).name} is {images.dtype} {images.shape},"
                    f" meta.json says uint8 {shape}"
                )
            if labels.dtype != np.int64 or labels.shape != shape[:1]:
                raise CorruptCacheError(
                    f"{labels_path(folder, split).name} is {labels.dtype} {labels.shape},"
                    f" meta.json says int64 {shape[:1]}"
                )
            arrays[split] = (images, labels)
        mean = np.asarray(meta["mean"], dtype=np.float32)
        std = np.asarray(meta["std"], dtype=np.float32)
        channels = arrays["train"][0].shape[1]
        if mean.shape != (channels,) or std.shape != (channels,) or not np.all(std > 0):
            raise CorruptCacheError(f"meta.json has bad statistics: mean {mean}, std {std}")
    except CorruptCacheError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as error:  # json errors are ValueErrors
        raise CorruptCacheError(f"{type(error).__name__}: {error}") from error
    return CachedImages(folder, *arrays["train"], *arrays["test"], mean, std)


def _remove_previous_versions(cache_dir: Path, key: str, identity: dict, keep: Path) -> None:
    """Remove the folders of ``key`` built from earlier versions of the same source files."""
    paths = [path for path, _, _ in identity["files"]]
    pattern = re.compile(re.escape(key) + r"-[0-9a-f]{16}")
    for folder in cache_dir.iterdir():
        if folder == keep or not pattern.fullmatch(folder.name):
            continue
        try:
            previous = json.loads((folder / "meta.json").read_text())["fingerprint"]["files"]
        except (OSError, ValueError, KeyError, TypeError):
            continue  # not ours to judge
        if [path for path, _, _ in previous] == paths:
            shutil.rmtree(folder, ignore_errors=True)


def _remove_dead_builders(cache_dir: Path, key: str) -> None:
    """Remove temporary folders of ``key`` left on this host by builders that are gone."""
    host = socket.gethostname()
    pattern = re.compile(re.escape(f".{key}.{host}.") + r"(\d+)\.tmp")
    for folder in cache_dir.iterdir():
        match = pattern.fullmatch(folder.name)
        if match is None or int(match.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(match.group(1)), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # alive, another user's
