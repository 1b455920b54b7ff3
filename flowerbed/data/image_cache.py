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
which are stored as float32. (The former in-memory loader summed a float32 copy of the whole
set in float32: its std was 0.4 % off on 2,000 random 64 px images, and once a channel's sum
passes 2^24 it stops growing by pixel-sized steps: on 20,000 such images its mean was 0.20
instead of 0.50.)

Concurrency (N actors opening the same data set at once) and the build into a temporary folder
that is renamed into place: ``array_cache``.

Opening checks ``meta.json`` and that every array has the recorded shape and dtype (a truncated
file fails ``np.load``'s size check); the content is not hashed (13.5 GB at 224 px). A folder
that fails the check is rebuilt, with a warning in the log.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..settings import ConfigError
from .array_cache import (
    CorruptCacheError,
    build_progress,
    cached_folder,
    digest_of,
    reserve_space,
)

CACHE_FORMAT = 1  # bump when the layout or the statistics change: old folders are not read
SPLITS = ("train", "test")
_CHUNK_BYTES = 64 << 20  # what a build reads or writes at a time


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


class ImageWriter:
    """Writes ``x_<split>.npy``, uint8 ``shape`` = (N, C, H, W), rows appended in order by
    ``write``, with plain file writes: no map, so the builder's memory does not grow with the
    file. The disk space is allocated first: a full disk is a ``ConfigError`` at once, naming
    ``cache-dir``. ``close`` (or leaving the ``with`` block) checks that N rows came."""

    def __init__(self, folder: Path, split: str, shape: tuple[int, ...]) -> None:
        if len(shape) != 4:
            raise ValueError(f"cached images are (N, C, H, W), got shape {tuple(shape)}")
        self.path, self.shape, self.written = images_path(folder, split), tuple(shape), 0
        self._file = open(self.path, "wb")  # noqa: SIM115 (closed by close / __exit__)
        header = {"descr": "|u1", "fortran_order": False, "shape": self.shape}
        np.lib.format.write_array_header_1_0(self._file, header)
        self._file.flush()
        try:
            reserve_space(self._file, self._file.tell() + int(np.prod(self.shape)), self.path)
        except ConfigError:
            self._file.close()
            raise

    def write(self, rows: np.ndarray) -> None:
        if rows.dtype != np.uint8 or rows.shape[1:] != self.shape[1:]:
            raise ValueError(
                f"{self.path.name} takes uint8 rows of {self.shape[1:]}, got {rows.dtype}"
                f" {rows.shape}"
            )
        if self.written + len(rows) > self.shape[0]:
            raise ValueError(f"{self.path.name} holds {self.shape[0]} rows, got more")
        self._file.write(np.ascontiguousarray(rows).data)
        self.written += len(rows)
        build_progress(self.written, self.shape[0], f"{self.path.stem} rows")

    def close(self) -> None:
        self._file.close()
        if self.written != self.shape[0]:
            raise ValueError(f"{self.path.name}: {self.written} of {self.shape[0]} rows written")

    def __enter__(self):
        return self

    def __exit__(self, error_type, *_) -> None:
        if error_type is None:
            self.close()
        else:
            self._file.close()


def write_images(folder: Path, split: str, images: np.ndarray) -> None:
    """All of ``x_<split>.npy`` at once: uint8 ``images`` (N, C, H, W)."""
    with ImageWriter(folder, split, images.shape) as writer:
        writer.write(images)


def read_npy_header(stream) -> tuple[tuple[int, ...], bool, np.dtype]:
    """(shape, fortran_order, dtype) of the .npy file whose reading position is its start;
    afterwards the position is the first data byte (numpy's readers)."""
    version = np.lib.format.read_magic(stream)
    if version == (1, 0):
        return np.lib.format.read_array_header_1_0(stream)
    if version == (2, 0):
        return np.lib.format.read_array_header_2_0(stream)
    raise ValueError(f"npy format version {version}, expected 1.0 or 2.0")


def image_chunks(path: Path, chunk_bytes: int = _CHUNK_BYTES) -> Iterator[np.ndarray]:
    """The rows of a uint8 .npy file in chunks of about ``chunk_bytes``, read (not mapped)."""
    with open(path, "rb") as f:
        shape, _, _ = read_npy_header(f)
        row_shape = shape[1:]
        row_bytes = max(1, int(np.prod(row_shape)))
        rows = max(1, chunk_bytes // row_bytes)
        for start in range(0, shape[0], rows):
            count = min(rows, shape[0] - start)
            chunk = np.fromfile(f, dtype=np.uint8, count=count * row_bytes)
            if len(chunk) != count * row_bytes:
                raise ValueError(f"{path.name} ends after {start} of {shape[0]} rows")
            yield chunk.reshape(count, *row_shape)


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
    ``ImageWriter`` (or ``write_images``) and ``write_labels``; the statistics and
    ``meta.json`` are added here."""
    cache_dir = Path(cache_dir).expanduser().resolve()
    identity = fingerprint(sources)
    folder = cache_dir / f"{key}-{digest_of(identity)}"

    def build_and_finish(temporary: Path) -> None:
        build(temporary)
        _finish(temporary, identity)

    return cached_folder(
        folder,
        key,
        _open,
        build_and_finish,
        source=", ".join(path for path, _, _ in identity["files"]),
        after_build=lambda: _remove_previous_versions(cache_dir, key, identity, keep=folder),
    )


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
    mean, std = channel_statistics(image_chunks(images_path(folder, "train")))
    meta = {
        "fingerprint": identity,
        "shapes": shapes,
        "mean": [float(v) for v in mean],
        "std": [float(v) for v in std],
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1))


def channel_statistics(chunks: Iterable[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std (float32) of uint8 images (N, C, H, W), given in ``chunks``,
    scaled to [0, 1]; exact: from counts of the 256 values (no float copy of the set). A
    channel with std 0 gets std 1 (a constant channel is only centred)."""
    counts = None
    for chunk in chunks:
        if counts is None:
            counts = np.zeros((chunk.shape[1], 256), dtype=np.int64)
        for channel in range(chunk.shape[1]):
            counts[channel] += np.bincount(chunk[:, channel].reshape(-1), minlength=256)
    if counts is None or counts.sum() == 0:
        raise ValueError("no training images to take statistics from")
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


def nchw(images: np.ndarray) -> np.ndarray:
    """(N, H, W) or (N, H, W, C) -> (N, C, H, W) (a view; the dtype is kept)."""
    if images.ndim == 3:
        return images[:, None, :, :]
    return images.transpose(0, 3, 1, 2)
