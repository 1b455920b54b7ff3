"""The image cache folder: built once, reused, rebuilt when its source changes or it is damaged,
and built exactly once when several processes ask for it together."""

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from flowerbed.data import image_cache
from flowerbed.data.array_cache import build_folder
from flowerbed.data.image_cache import ImageWriter, cached_images, write_images, write_labels
from flowerbed.settings import ConfigError


def source_file(path: Path, n_train=10, seed=0) -> Path:
    """A source: uint8 NHWC images in an npy file (what a builder reads is up to it)."""
    rng = np.random.default_rng(seed)
    np.save(path, rng.integers(0, 256, (n_train + 4, 5, 5, 3), dtype=np.uint8))
    return path


class Builder:
    """Builds the cache from ``source_file``'s array (first n-4 rows train, last 4 test) and
    counts its calls."""

    def __init__(self, source: Path) -> None:
        self.source, self.calls = source, 0

    def __call__(self, folder: Path) -> None:
        self.calls += 1
        images = np.load(self.source).transpose(0, 3, 1, 2)
        for split, rows in (("train", images[:-4]), ("test", images[-4:])):
            write_images(folder, split, rows)
            write_labels(folder, split, np.arange(len(rows)) % 3)


def test_built_once_then_mapped_from_disk(tmp_path):
    source = source_file(tmp_path / "source.npy")
    build = Builder(source)
    first = cached_images(tmp_path / "cache", "toy", [source], build)
    expected = np.load(source).transpose(0, 3, 1, 2)
    assert isinstance(first.x_train, np.memmap) and first.x_train.dtype == np.uint8
    assert np.array_equal(first.x_train, expected[:-4]) and np.array_equal(
        first.x_test, expected[-4:]
    )
    assert first.y_train.tolist() == [0, 1, 2, 0, 1, 2, 0, 1, 2, 0]
    meta = json.loads((first.folder / "meta.json").read_text())
    assert meta["shapes"] == {"train": [10, 3, 5, 5], "test": [4, 3, 5, 5]}
    assert meta["fingerprint"]["files"][0][0] == str(source.resolve())
    np.testing.assert_allclose(first.mean, (expected[:-4] / 255).mean(axis=(0, 2, 3)), rtol=1e-6)
    mtimes = {p.name: p.stat().st_mtime_ns for p in first.folder.iterdir()}
    second = cached_images(tmp_path / "cache", "toy", [source], build)
    assert build.calls == 1 and second.folder == first.folder
    assert {p.name: p.stat().st_mtime_ns for p in second.folder.iterdir()} == mtimes
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [first.folder.name, "toy.lock"]


def test_a_changed_source_is_rebuilt_and_the_stale_folder_removed(tmp_path):
    source = source_file(tmp_path / "source.npy", seed=0)
    build = Builder(source)
    old = cached_images(tmp_path / "cache", "toy", [source], build)
    source_file(source, seed=1)  # new content, same size
    os.utime(source, ns=(1, 1))  # a different mtime even on a coarse clock
    new = cached_images(tmp_path / "cache", "toy", [source], build)
    assert build.calls == 2 and new.folder != old.folder
    assert np.array_equal(new.x_train, np.load(source).transpose(0, 3, 1, 2)[:-4])
    assert not old.folder.exists()


def test_a_damaged_folder_is_rebuilt_with_a_warning(tmp_path, capsys):
    source = source_file(tmp_path / "source.npy")
    build = Builder(source)
    folder = cached_images(tmp_path / "cache", "toy", [source], build).folder
    expected = np.load(source).transpose(0, 3, 1, 2)[:-4]
    with open(folder / "x_train.npy", "r+b") as f:  # truncated: half the images gone
        f.truncate(os.path.getsize(folder / "x_train.npy") - 5 * 75)
    rebuilt = cached_images(tmp_path / "cache", "toy", [source], build)
    assert build.calls == 2 and np.array_equal(rebuilt.x_train, expected)
    (folder / "meta.json").write_text("{not json")
    assert np.array_equal(
        cached_images(tmp_path / "cache", "toy", [source], build).x_train, expected
    )
    assert build.calls == 3
    np.save(folder / "y_test.npy", np.zeros(3, dtype=np.int64))  # wrong length
    cached_images(tmp_path / "cache", "toy", [source], build)
    assert build.calls == 4


def test_a_failed_build_leaves_no_folder(tmp_path):
    source = source_file(tmp_path / "source.npy")

    def failing(folder):
        with ImageWriter(folder, "train", (2, 1, 3, 3)) as writer:
            writer.write(np.zeros((1, 1, 3, 3), dtype=np.uint8))
            raise ValueError("source unreadable")

    with pytest.raises(ValueError, match="source unreadable"):
        cached_images(tmp_path / "cache", "toy", [source], failing)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["toy.lock"]

    def labels_missing(folder):
        for split in ("train", "test"):
            write_images(folder, split, np.zeros((2, 1, 3, 3), dtype=np.uint8))
            write_labels(folder, split, [0])  # one label for two images

    with pytest.raises(ValueError, match="do not match"):
        cached_images(tmp_path / "cache", "toy", [source], labels_missing)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == ["toy.lock"]


def test_an_unusable_cache_dir_names_the_key(tmp_path):
    source = source_file(tmp_path / "source.npy")
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"cache-dir='.*file/cache' cannot be created"):
        cached_images(tmp_path / "file" / "cache", "toy", [source], Builder(source))


def test_when_another_builder_won_the_rename_its_folder_is_used(tmp_path):
    """Without a working lock two builders both build; the second rename fails and that
    builder keeps the first one's folder."""
    source = source_file(tmp_path / "source.npy")
    build = Builder(source)
    first = cached_images(tmp_path / "cache", "toy", [source], build)
    identity = image_cache.fingerprint([source])

    def build_and_finish(temporary):
        build(temporary)
        image_cache._finish(temporary, identity)

    build_folder(first.folder, "toy", build_and_finish, str(source))  # a late second builder
    assert build.calls == 2
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [first.folder.name, "toy.lock"]
    assert np.array_equal(image_cache._open(first.folder).x_train, first.x_train)


def test_a_dead_builders_leftover_is_removed(tmp_path):
    source = source_file(tmp_path / "source.npy")
    finished = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    leftover = tmp_path / "cache" / f".toy.{socket.gethostname()}.{int(finished.stdout)}.tmp"
    leftover.mkdir(parents=True)
    (leftover / "x_train.npy").write_bytes(b"half")
    cached_images(tmp_path / "cache", "toy", [source], Builder(source))
    assert not leftover.exists()


BUILD_IN_A_PROCESS = textwrap.dedent(
    """
    import os, sys, time
    from pathlib import Path
    import numpy as np
    from flowerbed.data.image_cache import cached_images, write_images, write_labels

    cache, source, log, meeting = map(Path, sys.argv[1:5])

    def build(folder):
        with open(log, "a") as f:
            f.write("built\\n")
        time.sleep(1.0)  # long enough for the other process to arrive and wait
        images = np.load(source).transpose(0, 3, 1, 2)
        for split, rows in (("train", images[:-4]), ("test", images[-4:])):
            write_images(folder, split, rows)
            write_labels(folder, split, np.arange(len(rows)) % 3)

    (meeting / f"ready-{os.getpid()}").touch()  # imports done: start together
    while not (meeting / "go").exists():
        time.sleep(0.01)
    opened = cached_images(cache, "toy", [source], build)
    print(opened.folder, int(opened.x_train.sum()))
    """
)


def test_concurrent_builders_give_one_valid_folder(tmp_path):
    source = source_file(tmp_path / "source.npy")
    log, meeting = tmp_path / "builds.log", tmp_path / "meeting"
    meeting.mkdir()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [
        sys.executable,
        "-c",
        BUILD_IN_A_PROCESS,
        *map(str, (tmp_path / "cache", source, log, meeting)),
    ]
    processes = [
        subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        for _ in range(2)
    ]
    while len(list(meeting.glob("ready-*"))) < 2 and all(p.poll() is None for p in processes):
        time.sleep(0.05)
    (meeting / "go").touch()
    outputs = [process.communicate(timeout=120) for process in processes]
    assert all(process.returncode == 0 for process in processes), outputs
    assert log.read_text() == "built\n"  # exactly one process built it
    assert any("waiting for another process" in err for _, err in outputs)  # the others waited
    total = int(np.load(source)[:-4].astype(np.int64).sum())
    folder = outputs[0][0].split()[0]
    assert {tuple(out.split()) for out, _ in outputs} == {(folder, str(total))}
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [Path(folder).name, "toy.lock"]


def test_the_image_writer_takes_exactly_the_rows_it_announced(tmp_path):
    rows = np.arange(2 * 3 * 4 * 4, dtype=np.uint8).reshape(2, 3, 4, 4)
    with ImageWriter(tmp_path, "train", (2, 3, 4, 4)) as writer:
        writer.write(rows[:1])
        writer.write(rows[1:])
    assert np.array_equal(np.load(tmp_path / "x_train.npy"), rows)
    writer = ImageWriter(tmp_path, "test", (2, 3, 4, 4))
    with pytest.raises(
        ValueError, match=r"takes uint8 rows of \(3, 4, 4\), got uint8 \(1, 3, 4, 5\)"
    ):
        writer.write(np.zeros((1, 3, 4, 5), np.uint8))
    with pytest.raises(ValueError, match="holds 2 rows, got more"):
        writer.write(np.zeros((3, 3, 4, 4), np.uint8))
    writer.write(rows[:1])
    with pytest.raises(ValueError, match="1 of 2 rows written"):
        writer.close()
