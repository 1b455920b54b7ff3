"""Loaders read files written here in exactly the libraries' on-disk formats (no network)."""

import hashlib
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from torchvision import datasets as tv_datasets

from flowerbed.data import DataNotFoundError, available_datasets, load_dataset, medmnist_files
from flowerbed.data.mapped_images import MappedImages
from flowerbed.data.medmnist_files import medmnist_file
from flowerbed.data.splits import DataFileError, as_splits


def test_bundled_sklearn_sets_have_fixed_stratified_test_splits():
    digits = load_dataset("digits")
    assert digits.x_train.shape[1:] == (1, 8, 8) and digits.num_classes == 10
    assert len(digits.x_train) + len(digits.x_test) == 1797
    assert len(digits.x_test) == 360
    assert digits.x_train.dtype == torch.float32 and digits.y_train.dtype == torch.int64
    # standardised with training statistics
    assert abs(float(digits.x_train.mean())) < 1e-4
    cancer = load_dataset("breast-cancer")
    assert cancer.input_shape == (30,) and cancer.num_classes == 2
    assert len(cancer.x_train) + len(cancer.x_test) == 569
    # stratified: class shares in train and test agree within 2 points
    share = lambda y: float((y == 1).float().mean())
    assert abs(share(cancer.y_train) - share(cancer.y_test)) < 0.02


def scikit_learn_splits(name):
    """The bundled sets as flowerbed loaded them through scikit-learn before it stopped
    importing it: its loader, then its stratified ``train_test_split``."""
    from sklearn.datasets import load_breast_cancer, load_digits
    from sklearn.model_selection import train_test_split

    if name == "digits":
        bunch = load_digits()
        x = bunch.images.astype(np.float32)[:, None, :, :] / 16.0
    else:
        bunch = load_breast_cancer()
        x = bunch.data.astype(np.float32)
    y = bunch.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, stratify=y, random_state=0
    )
    return as_splits(name, x_train, y_train, x_test, y_test)


@pytest.mark.parametrize("name", ["digits", "breast-cancer"])
def test_bundled_sets_are_byte_identical_to_scikit_learns_path(name):
    ours, theirs = load_dataset(name), scikit_learn_splits(name)
    for field in ("x_train", "y_train", "x_test", "y_test"):
        mine, expected = getattr(ours, field), getattr(theirs, field)
        assert mine.dtype == expected.dtype and mine.shape == expected.shape, field
        assert mine.numpy().tobytes() == expected.numpy().tobytes(), field
    assert ours.num_classes == theirs.num_classes


def test_dataset_list_has_2d_medmnist_but_not_3d_or_multilabel():
    names = available_datasets()
    assert {"bloodmnist", "pathmnist", "dermamnist", "cifar10", "mnist"} <= set(names)
    assert "organmnist3d" not in names and "chestmnist" not in names


def test_generated_sets_are_listed_and_only_they_read_the_seed():
    assert {"breast-cancer-shifted", "ctl-gaussian"} <= set(available_datasets())
    digits = load_dataset("digits", seed=1)
    assert load_dataset("digits", seed=2) is digits  # loaded once, whatever the seed
    assert digits.train_nodes is None and digits.test_nodes is None and digits.num_nodes is None
    one, two = load_dataset("ctl-gaussian", seed=1), load_dataset("ctl-gaussian", seed=2)
    assert load_dataset("ctl-gaussian", seed=1) is one and not torch.equal(one.x_test, two.x_test)
    assert one.test_nodes.tolist() == sorted(one.test_nodes.tolist())  # rows ordered by node


@pytest.mark.parametrize("size", [28, 64, 128, 224])
def test_medmnist_reads_the_npz_file_medmnist_would_download(tmp_path, size, fl):
    arrays = fl.write_medmnist_npz(
        medmnist_file("bloodmnist", tmp_path, size), shape=(size, size, 3)
    )
    data = load_dataset("bloodmnist", tmp_path, download=False, image_size=size)
    assert data.x_train.shape == (12, 3, size, size) and data.x_test.shape == (6, 3, size, size)
    assert data.y_train.tolist() == arrays["train_labels"].reshape(-1).tolist()
    # pixel order survives the HWC -> CHW transpose (standardisation is affine per channel)
    raw = arrays["train_images"][:, :, :, 0].astype(np.float64).reshape(-1)
    ours = data.x_train[:, 0].double().reshape(-1).numpy()
    assert np.corrcoef(raw, ours)[0, 1] > 0.9999


def test_medmnist_is_streamed_into_the_cache_and_read_as_the_whole_array_loader(
    tmp_path, fl, monkeypatch
):
    # chunks of 5 images: the npz member is copied in several pieces, the last one partial
    monkeypatch.setattr(medmnist_files, "_STREAM_CHUNK_BYTES", 5 * 64 * 64 * 3)
    path = medmnist_file("pathmnist", tmp_path, 64)
    arrays = fl.write_medmnist_npz(path, n_train=23, n_test=7, shape=(64, 64, 3), classes=9)
    data = load_dataset("pathmnist", tmp_path, image_size=64)
    assert isinstance(data.x_train, MappedImages) and isinstance(data.x_test, MappedImages)
    stored = data.x_train.images  # uint8 on disk, mapped, in the models' NCHW layout
    assert isinstance(stored, np.memmap) and stored.dtype == np.uint8
    assert Path(stored.filename).parent.parent == tmp_path / "flowerbed-cache"
    assert Path(stored.filename).parent.name.startswith("pathmnist_64-")
    assert np.array_equal(stored, arrays["train_images"].transpose(0, 3, 1, 2))
    assert data.y_test.tolist() == arrays["test_labels"].reshape(-1).tolist()
    assert data.num_classes == 9 and data.input_shape == (3, 64, 64) and data.is_image
    # per channel with training statistics; exact ones (the former loader's float32 sums
    # drift from them as the set grows: 4e-5 here; tests/test_mapped_images.py has the rest)
    exact_train, exact_test, _, _ = fl.whole_array_standardised(
        arrays["train_images"], arrays["test_images"], exact=True
    )
    np.testing.assert_allclose(data.x_train[:].numpy(), exact_train, atol=1e-6, rtol=0)
    np.testing.assert_allclose(data.x_test[:].numpy(), exact_test, atol=1e-6, rtol=0)


def test_a_medmnist_file_of_another_size_is_named(tmp_path, fl):
    fl.write_medmnist_npz(medmnist_file("bloodmnist", tmp_path, 64), shape=(28, 28, 3))
    with pytest.raises(DataFileError, match="holds 28x28 images, not image-size=64"):
        load_dataset("bloodmnist", tmp_path, image_size=64)
    assert not list((tmp_path / "flowerbed-cache").glob("bloodmnist_64-*"))  # nothing half-built


def test_grayscale_medmnist_gets_one_channel(tmp_path, fl):
    fl.write_medmnist_npz(tmp_path / "pneumoniamnist.npz", shape=(28, 28), classes=2)
    data = load_dataset("pneumoniamnist", tmp_path)
    assert data.input_shape == (1, 28, 28) and data.num_classes == 2


def test_missing_medmnist_file_names_the_path_and_the_fix(tmp_path):
    with pytest.raises(DataNotFoundError) as info:
        load_dataset("pathmnist", tmp_path / "nowhere")
    assert str(tmp_path / "nowhere" / "pathmnist.npz") in str(info.value)
    assert "download=true" in str(info.value)


def test_bad_medmnist_size_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="image-size 32 is not a MedMNIST size"):
        load_dataset("bloodmnist", tmp_path, image_size=32)


def write_cifar10(root, n_per_batch=4):
    """The python-pickle layout of cifar-10-python.tar.gz, with torchvision's checksums patched."""
    folder = root / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    rng = np.random.default_rng(1)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for i, name in enumerate(names):
        batch = {
            "data": rng.integers(0, 256, (n_per_batch, 3072), dtype=np.uint8),
            "labels": [(i + j) % 10 for j in range(n_per_batch)],
        }
        (folder / name).write_bytes(pickle.dumps(batch))
    (folder / "batches.meta").write_bytes(
        pickle.dumps({"label_names": [f"c{i}" for i in range(10)]})
    )
    md5 = lambda name: hashlib.md5((folder / name).read_bytes()).hexdigest()
    return {name: md5(name) for name in [*names, "batches.meta"]}


def test_cifar10_reads_the_torchvision_folder(tmp_path, monkeypatch):
    sums = write_cifar10(tmp_path)
    # torchvision checks each file's MD5 against the real data set's; point it at ours.
    monkeypatch.setattr(
        tv_datasets.CIFAR10,
        "train_list",
        [[f"data_batch_{i}", sums[f"data_batch_{i}"]] for i in range(1, 6)],
    )
    monkeypatch.setattr(tv_datasets.CIFAR10, "test_list", [["test_batch", sums["test_batch"]]])
    monkeypatch.setattr(
        tv_datasets.CIFAR10,
        "meta",
        {"filename": "batches.meta", "key": "label_names", "md5": sums["batches.meta"]},
    )
    data = load_dataset("cifar10", tmp_path)
    assert data.x_train.shape == (20, 3, 32, 32) and data.x_test.shape == (4, 3, 32, 32)
    assert data.y_train[:4].tolist() == [0, 1, 2, 3]


def write_idx(path, array):
    """MNIST's IDX format: magic (0, 0, dtype 0x08, ndim), big-endian dims, raw bytes."""
    header = struct.pack(">BBBB", 0, 0, 0x08, array.ndim) + struct.pack(
        f">{array.ndim}I", *array.shape
    )
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def test_mnist_reads_the_torchvision_raw_idx_files(tmp_path, fl):
    raw = tmp_path / "MNIST" / "raw"
    raw.mkdir(parents=True)
    rng = np.random.default_rng(2)
    for prefix, n in (("train", 10), ("t10k", 5)):
        write_idx(raw / f"{prefix}-images-idx3-ubyte", rng.integers(0, 256, (n, 28, 28)))
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", np.arange(n) % 10)
    data = load_dataset("mnist", tmp_path)
    assert data.x_train.shape == (10, 1, 28, 28) and data.x_test.shape == (5, 1, 28, 28)
    assert data.y_train.tolist() == list(range(10))
    # mapped from the cache, standardised as the former whole-array loader did
    rng = np.random.default_rng(2)
    train, test = rng.integers(0, 256, (10, 28, 28)), rng.integers(0, 256, (5, 28, 28))
    old_train, old_test, _, _ = fl.whole_array_standardised(train, test)
    assert isinstance(data.x_train, MappedImages)
    np.testing.assert_allclose(data.x_train[:].numpy(), old_train, atol=1e-5, rtol=0)
    np.testing.assert_allclose(data.x_test[:].numpy(), old_test, atol=1e-5, rtol=0)


@pytest.mark.parametrize(
    "name, expected", [("cifar10", "cifar-10-batches-py"), ("mnist", "MNIST/raw")]
)
def test_missing_torchvision_data_names_the_folder(tmp_path, name, expected):
    with pytest.raises(DataNotFoundError, match=expected):
        load_dataset(name, tmp_path)


def test_unknown_dataset_lists_choices():
    with pytest.raises(
        ValueError, match="unknown dataset 'svhn'; valid choices: digits, breast-cancer"
    ):
        load_dataset("svhn")
