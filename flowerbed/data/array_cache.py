"""Folders of arrays built once on disk and memory-mapped by every process that reads them.

A simulation runs the ServerApp and several Ray actors on one machine; each used to hold its
own copy of the data set. Here a data set is written once into ``<cache-dir>/<key>-<digest>/``
as ``.npy`` files and every process maps them: the operating system keeps one copy of the pages,
shared by all the processes that read them, and reads only the pages a process touches.
``image_cache`` builds image sets (uint8, with their statistics) on this machinery;
``cached_arrays`` below holds any named arrays (the generated FedProx sets).

Concurrency: N actors may open the same data set at once. A builder holds an exclusive
``flock`` on ``<cache-dir>/<key>.lock``, builds into a temporary folder and renames it into
place; the rename is atomic, so a reader sees either no folder or a complete one. The others
wait on the lock, then open the finished folder. Should ``flock`` not work (some network file
systems), two builders both build and the second rename fails because the folder exists: the
loser removes its copy and opens the winner's, so there is still exactly one. A builder that
was killed leaves ``.<key>.<host>.<pid>.tmp``; the next builder on that host removes it once
that process is gone. A build logs a progress line every 10 seconds (what builders report
through ``build_progress``, the time so far and left) and the time it took.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from logging import INFO, WARNING
from pathlib import Path
from typing import TypeVar

import numpy as np
from flwr.common.logger import log

from ..core.progress import duration, time_left
from ..settings import ConfigError

Opened = TypeVar("Opened")
ARRAYS_FORMAT = 1  # bump when the layout of ``cached_arrays`` changes: old folders are not read


class CorruptCacheError(ValueError):
    """A cache folder is there but does not hold what its ``meta.json`` says."""


def digest_of(identity: dict) -> str:
    """The folder suffix of a cache entry: 16 hex digits of the hash of its identity."""
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:16]


def cached_folder(
    folder: Path,
    key: str,
    open_folder: Callable[[Path], Opened | None],
    build: Callable[[Path], None],
    source: str,
    after_build: Callable[[], None] = lambda: None,
) -> Opened:
    """``open_folder(folder)``, after building the folder with ``build(temporary)`` if it is
    missing or corrupt (``folder`` is ``<cache-dir>/<key>-<digest>``; ``open_folder`` returns None for a missing folder and raises
    ``CorruptCacheError`` for a damaged one). ``source`` names what is built, for the log;
    ``after_build`` runs once a new folder is in place, under the lock."""
    try:
        opened = open_folder(folder)
    except CorruptCacheError:
        opened = None  # rebuilt below, under the lock
    if opened is not None:
        return opened
    cache_dir = folder.parent
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(
            f"cache-dir={str(cache_dir)!r} cannot be created ({error.strerror}); set cache-dir"
            " to a writable folder"
        ) from None
    with _exclusive(cache_dir / f"{key}.lock", key):
        try:
            opened = open_folder(folder)
        except CorruptCacheError as error:
            log(WARNING, "flowerbed: rebuilding the data cache %s: %s", folder, error)
            shutil.rmtree(folder, ignore_errors=True)
            opened = None
        if opened is None:
            build_folder(folder, key, build, source)
            after_build()
            opened = open_folder(folder)
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


def build_folder(folder: Path, key: str, build: Callable[[Path], None], source: str) -> None:
    """Build into a temporary folder beside ``folder``, then rename it into place (the module
    docstring says what happens when another builder got there first)."""
    cache_dir = folder.parent
    _remove_dead_builders(cache_dir, key)
    temporary = cache_dir / f".{key}.{socket.gethostname()}.{os.getpid()}.tmp"
    shutil.rmtree(temporary, ignore_errors=True)
    temporary.mkdir()
    log(INFO, "flowerbed: building the data cache %s from %s (once)", folder, source)
    try:
        with _progress_lines(key):
            build(temporary)
        for path in temporary.iterdir():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        try:
            os.rename(temporary, folder)
        except OSError:  # another builder won (no working flock): use its folder
            if not folder.is_dir():
                raise
            shutil.rmtree(temporary, ignore_errors=True)
    except BaseException:
        shutil.rmtree(temporary, ignore_errors=True)
        raise


# --- progress of a build: a line at least every PROGRESS_SECONDS ----------------------------

PROGRESS_SECONDS = 10.0


@dataclass
class BuildProgress:
    """What the build running in this process has done: ``done`` of ``total`` ``unit``."""

    done: float = 0
    total: float = 0
    unit: str = ""
    since: float = 0.0  # when work on this unit began: the end of the previous unit's
    last: float = 0.0  # when the last report came (time.monotonic)

    def line(self, key: str, elapsed: float, now: float) -> str:
        text = f"flowerbed: building the data cache of {key}: {duration(elapsed)} so far"
        if self.total > 0 and self.done > 0:
            share = min(self.done / self.total, 1.0)
            left = (now - self.since) * (1 - share) / share  # at this unit's pace
            text += (
                f", {self.done:,.0f} of {self.total:,.0f} {self.unit} ({100 * share:.0f} %),"
                f" {time_left(left)} for them"
            )
        return text


_building: BuildProgress | None = None


def build_progress(done: float, total: float, unit: str) -> None:
    """A builder reports how far it is (``done`` of ``total`` ``unit``); the build's progress
    lines show it. Outside a build, nothing happens."""
    if _building is not None:
        now = time.monotonic()
        if unit != _building.unit:
            _building.since = _building.last
        _building.done, _building.total, _building.unit, _building.last = done, total, unit, now


@contextmanager
def _progress_lines(key: str, every: float = PROGRESS_SECONDS) -> Iterator[BuildProgress]:
    """Log the build's progress every ``every`` seconds from a daemon thread while the block
    runs (a data set can take minutes to convert), and the time it took at its end."""
    global _building
    stop, started = threading.Event(), time.monotonic()
    progress = BuildProgress(since=started, last=started)
    _building = progress

    def beat() -> None:
        while not stop.wait(every):
            now = time.monotonic()
            log(INFO, "%s", progress.line(key, now - started, now))

    thread = threading.Thread(target=beat, name=f"cache-progress-{key}", daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join()
        _building = None
    log(
        INFO,
        "flowerbed: built the data cache of %s in %s",
        key,
        duration(time.monotonic() - started),
    )


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


# --- any named arrays -----------------------------------------------------------------------

Allocate = Callable[[str, tuple[int, ...], type], np.ndarray]


def arrays_folder(cache_dir: Path, key: str, identity: dict) -> Path:
    """Where ``cached_arrays`` keeps the arrays of ``key`` made from ``identity``."""
    identity = {"format": ARRAYS_FORMAT, **identity}
    return Path(cache_dir).expanduser().resolve() / f"{key}-{digest_of(identity)}"


def cached_arrays(
    cache_dir: Path, key: str, identity: dict, build: Callable[[Allocate], None]
) -> dict[str, np.ndarray]:
    """The arrays of ``key`` made from ``identity`` (everything that determines their content),
    memory-mapped copy-on-write (a process that writes into one gets its own page, the file
    never changes). Missing, they are built once: ``build(allocate)`` asks
    ``allocate(name, shape, dtype)`` for each array and fills it; ``allocate`` gives a mapped
    ``.npy`` file of the temporary folder. ``meta.json`` records the identity, shapes and
    dtypes; opening checks them (a truncated file fails ``np.load``'s size check)."""
    folder = arrays_folder(cache_dir, key, identity)
    identity = {"format": ARRAYS_FORMAT, **identity}

    def build_into(temporary: Path) -> None:
        made: dict[str, np.ndarray] = {}

        def allocate(name: str, shape: tuple[int, ...], dtype: type) -> np.ndarray:
            made[name] = reserved_npy(temporary / f"{name}.npy", shape, dtype)
            return made[name]

        build(allocate)
        arrays = {}
        for name, array in made.items():
            array.flush()
            arrays[name] = [list(array.shape), array.dtype.str]
        made.clear()  # unmap before the folder is synced and renamed
        meta = {"identity": identity, "arrays": arrays}
        (temporary / "meta.json").write_text(json.dumps(meta, indent=1))

    source = ", ".join(f"{name}={value}" for name, value in identity.items())
    return cached_folder(folder, key, _open_arrays, build_into, source)


def reserve_space(file, size: int, path: Path) -> None:
    """Allocate ``size`` bytes of the open ``file`` (``path``, in a temporary folder of
    ``cache-dir``) on disk now: a memory-mapped file with holes would be filled page by page,
    and on a full disk the process writing it would die by SIGBUS with no message. No room is
    a ``ConfigError`` naming ``cache-dir`` and the bytes."""
    try:
        os.posix_fallocate(file.fileno(), 0, size)
    except OSError as error:
        raise ConfigError(
            f"cache-dir={str(path.parent.parent)!r} has no room for {path.name} ({size:,}"
            f" bytes: {error.strerror or error}); free space there or set cache-dir to another"
            " disk"
        ) from None


def reserved_npy(path: Path, shape: tuple[int, ...], dtype: type) -> np.ndarray:
    """A new ``.npy`` file of ``shape`` and ``dtype``, its space reserved on disk
    (``reserve_space``), memory-mapped for writing."""
    dtype = np.dtype(dtype)
    header = {
        "descr": np.lib.format.dtype_to_descr(dtype),
        "fortran_order": False,
        "shape": tuple(int(size) for size in shape),
    }
    with open(path, "wb") as file:
        np.lib.format.write_array_header_1_0(file, header)
        file.flush()
        reserve_space(file, file.tell() + dtype.itemsize * math.prod(header["shape"]), path)
    return np.lib.format.open_memmap(path, mode="r+")


def _open_arrays(folder: Path) -> dict[str, np.ndarray] | None:
    if not folder.is_dir():
        return None
    try:
        meta = json.loads((folder / "meta.json").read_text())
        arrays = {}
        for name, (shape, dtype) in meta["arrays"].items():
            array = np.load(folder / f"{name}.npy", mmap_mode="c")
            if array.shape != tuple(shape) or array.dtype.str != dtype:
                raise CorruptCacheError(
                    f"{name}.npy is {array.dtype.str} {array.shape}, meta.json says"
                    f" {dtype} {tuple(shape)}"
                )
            arrays[name] = array
    except CorruptCacheError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as error:  # json errors are ValueErrors
        raise CorruptCacheError(f"{type(error).__name__}: {error}") from error
    return arrays
