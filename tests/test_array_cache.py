"""cached_arrays: named arrays built once into a cache folder and memory-mapped."""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest

from flowerbed.data.array_cache import cached_arrays
from flowerbed.settings import ConfigError


class Builder:
    """Fills ``a`` with 0..n-1 and ``b`` with ones; counts its calls."""

    def __init__(self, n: int = 5) -> None:
        self.n, self.calls = n, 0

    def __call__(self, allocate) -> None:
        self.calls += 1
        allocate("a", (self.n,), np.int64)[:] = np.arange(self.n)
        allocate("b", (2, 3), np.float32)[:] = 1.0


def test_built_once_then_opened_copy_on_write(tmp_path):
    build = Builder()
    arrays = cached_arrays(tmp_path, "toy", {"n": 5}, build)
    assert arrays["a"].tolist() == [0, 1, 2, 3, 4] and arrays["b"].shape == (2, 3)
    again = cached_arrays(tmp_path, "toy", {"n": 5}, build)
    assert build.calls == 1 and np.array_equal(again["b"], np.ones((2, 3)))
    again["a"][0] = 99  # copy-on-write: the process's page changes, the file does not
    assert cached_arrays(tmp_path, "toy", {"n": 5}, build)["a"][0] == 0
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert folder.name.startswith("toy-")


def test_another_identity_is_another_folder(tmp_path):
    build = Builder()
    cached_arrays(tmp_path, "toy", {"n": 5}, build)
    cached_arrays(tmp_path, "toy", {"n": 6}, Builder(6))
    assert len([p for p in tmp_path.iterdir() if p.is_dir()]) == 2


def test_a_damaged_folder_is_rebuilt(tmp_path):
    build = Builder()
    cached_arrays(tmp_path, "toy", {"n": 5}, build)
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    np.save(folder / "a.npy", np.arange(3))  # a different shape than meta.json records
    assert cached_arrays(tmp_path, "toy", {"n": 5}, build)["a"].tolist() == [0, 1, 2, 3, 4]
    assert build.calls == 2


def test_a_failed_build_leaves_nothing(tmp_path):
    def failing(allocate):
        allocate("a", (4,), np.int64)[:] = 1
        raise RuntimeError("the generator failed")

    with pytest.raises(RuntimeError, match="the generator failed"):
        cached_arrays(tmp_path, "toy", {"n": 4}, failing)
    assert [p.name for p in tmp_path.iterdir()] == ["toy.lock"]


def test_an_unwritable_cache_dir_is_named(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ConfigError, match=r"cache-dir='.*file/cache' cannot be created"):
        cached_arrays(tmp_path / "file" / "cache", "toy", {"n": 5}, Builder())


def test_a_full_disk_is_a_clear_error_naming_the_folder_before_any_row_is_written(
    tmp_path, monkeypatch
):
    reserved = []

    def full_disk(fd, offset, size):
        reserved.append(size)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "posix_fallocate", full_disk)
    build = Builder(1000)
    with pytest.raises(ConfigError) as caught:
        cached_arrays(tmp_path, "toy", {"n": 1000}, build)
    assert str(caught.value) == (
        f"cache-dir={str(tmp_path)!r} has no room for a.npy ({reserved[0]:,} bytes: No space left"
        " on device); free space there or set cache-dir to another disk"
    )
    assert reserved[0] == 128 + 1000 * 8  # the .npy header, then 1,000 int64 values
    assert [p for p in tmp_path.iterdir() if p.is_dir()] == []  # no folder, no leftover


def test_a_synthetic_set_reserves_each_file_whole_before_writing_it(tmp_path, monkeypatch):
    from flowerbed.data.simulations import SimulationOptions, generate

    reserved, fallocate = {}, os.posix_fallocate

    def spy(fd, offset, size):
        reserved[os.readlink(f"/proc/self/fd/{fd}").rsplit("/", 1)[1]] = (offset, size)
        fallocate(fd, offset, size)

    monkeypatch.setattr(os, "posix_fallocate", spy)
    generate("synthetic", 3, SimulationOptions(nodes=4), cache_dir=tmp_path)
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    files = {file.name: (0, file.stat().st_size) for file in folder.glob("*.npy")}
    assert len(files) == 6 and reserved == files
