"""cached_arrays: named arrays built once into a cache folder and memory-mapped."""

from __future__ import annotations

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
