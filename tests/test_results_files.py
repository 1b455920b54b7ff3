"""Result files on disk: written atomically, with the mode a plain ``open`` would give."""

from __future__ import annotations

import os
import stat

import pytest

from flowerbed.core.results import atomic_write, write_json


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022():
    old = os.umask(0o022)
    yield
    os.umask(old)


def test_a_new_file_gets_the_mode_open_would_give(tmp_path, umask_022):
    with open(tmp_path / "plain.json", "w") as f:
        f.write("{}")
    write_json(tmp_path / "atomic.json", {"a": 1})
    assert mode(tmp_path / "atomic.json") == mode(tmp_path / "plain.json") == 0o644


def test_a_rewritten_file_keeps_its_mode_and_no_temporary_file_is_left(tmp_path):
    path = tmp_path / "history.json"
    write_json(path, {"round": 0})
    path.chmod(0o640)
    write_json(path, {"round": 1})
    assert mode(path) == 0o640
    assert path.read_text().count("1") == 1
    assert [p.name for p in tmp_path.iterdir()] == ["history.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_file(tmp_path):
    path = tmp_path / "history.json"
    write_json(path, {"round": 0})
    before = path.read_bytes()

    def fail(f):
        f.write("partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(path, fail)
    assert path.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["history.json"]
