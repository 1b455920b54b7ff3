"""A site's own data folder: every layout written here from scikit-learn's digits and read back,
checked against the source arrays and an independent numpy standardisation; every bad input is
refused with an error that names the file and the problem."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from sklearn.datasets import load_digits

from flowerbed.data import site_data, site_images
from flowerbed.data.site_data import (
    SITE_FORMATS,
    SiteData,
    SiteDataError,
    detect_format,
    load_site_data,
)

NUM_TRAIN, NUM_TEST = 90, 30


@pytest.fixture(scope="module")
def digits():
    """120 digits as uint8 (N, 8, 8) images (0..16 scaled to 0..255) and their labels."""
    bunch = load_digits()
    images = np.round(bunch.images[: NUM_TRAIN + NUM_TEST] * 255 / 16).astype(np.uint8)
    return images, bunch.target[: NUM_TRAIN + NUM_TEST].astype(np.int64)


# --- writers of the three layouts ---------------------------------------------------------------
def write_images(folder: Path, split: str, images: np.ndarray, labels, class_name=str) -> None:
    for index, (image, label) in enumerate(zip(images, labels)):
        path = folder / split / class_name(int(label)) / f"{index:04d}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(image).save(path)


def write_csv(path: Path, features: np.ndarray, labels, header=None) -> None:
    features = features.reshape(len(features), -1)
    header = header or [f"p{i}" for i in range(features.shape[1])] + ["label"]
    lines = [",".join(header)]
    lines += [",".join([*map(str, row), str(label)]) for row, label in zip(features, labels)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")


def write_npz(folder: Path, **arrays) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    np.savez(folder / "data.npz", **arrays)
    return folder / "data.npz"


def digits_npz(folder: Path, images, labels) -> Path:
    x = images[:, None].astype(np.float32) / np.float32(255)
    return write_npz(
        folder,
        x_train=x[:NUM_TRAIN],
        y_train=labels[:NUM_TRAIN],
        x_test=x[NUM_TRAIN:],
        y_test=labels[NUM_TRAIN:],
    )


def by_content(x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Samples in an order fixed by their content (rounded pixels, then label)."""
    flat = np.round(x.numpy().reshape(len(x), -1), 4)
    order = np.lexsort([y.numpy(), *flat.T[::-1]])
    return flat[order], y.numpy()[order]


def assert_standardised(x: torch.Tensor) -> None:
    """Mean 0 and std 1 per entry of axis 1 (std 0 where the entry is constant), by numpy."""
    values = x.numpy().astype(np.float64)
    axes = (0, *range(2, values.ndim))
    mean, std = values.mean(axis=axes), values.std(axis=axes)
    np.testing.assert_allclose(mean, 0, atol=1e-5)
    assert np.all((np.abs(std - 1) < 1e-4) | (std == 0)), std


# --- reading each layout ------------------------------------------------------------------------
def test_npz_keeps_its_shape_labels_and_is_standardised_with_training_statistics(
    tmp_path, digits, fl
):
    images, labels = digits
    file = digits_npz(tmp_path, images, labels)
    site = load_site_data(tmp_path)
    assert detect_format(tmp_path) == "npz" and site.format == "npz" and site.source == file
    assert site.x_train.shape == (NUM_TRAIN, 1, 8, 8) and site.x_test.shape == (NUM_TEST, 1, 8, 8)
    assert site.x_train.dtype == torch.float32 and site.y_train.dtype == torch.int64
    assert site.input_shape == (1, 8, 8) and site.num_classes == 10
    np.testing.assert_array_equal(site.y_train.numpy(), labels[:NUM_TRAIN])
    np.testing.assert_array_equal(site.y_test.numpy(), labels[NUM_TRAIN:])
    # the conftest reference: the same standardisation in float64 numpy
    x_train, x_test, _, _ = fl.whole_array_standardised(
        images[:NUM_TRAIN], images[NUM_TRAIN:], exact=True
    )
    np.testing.assert_allclose(site.x_train.numpy(), x_train, atol=1e-5)
    np.testing.assert_allclose(site.x_test.numpy(), x_test, atol=1e-5)
    assert_standardised(site.x_train)
    assert abs(float(site.x_test.mean())) > 1e-3  # test statistics were not used
    train_counts, test_counts = site.label_counts()
    assert train_counts == np.bincount(labels[:NUM_TRAIN], minlength=10).tolist()
    assert test_counts == np.bincount(labels[NUM_TRAIN:], minlength=10).tolist()


def test_statistics_taken_over_many_chunks_equal_numpys(tmp_path, monkeypatch):
    monkeypatch.setattr(site_data, "_CHUNK_VALUES", 100)  # one row (3 x 4 x 5 values) a chunk
    rng = np.random.default_rng(0)
    scales = np.array([1, 10, 0.01])[None, :, None, None]
    x = (rng.normal(size=(41, 3, 4, 5)) * scales + 1e3).astype(np.float32)
    x[:, 1, 0, 0] = 7  # a constant pixel inside a varying channel
    write_npz(tmp_path, x_train=x[:31], y_train=np.zeros(31), x_test=x[31:], y_test=np.ones(10))
    site = load_site_data(tmp_path)
    train = x[:31].astype(np.float64)
    mean, std = train.mean(axis=(0, 2, 3), keepdims=True), train.std(axis=(0, 2, 3), keepdims=True)
    np.testing.assert_allclose(site.x_train.numpy(), (train - mean) / std, atol=1e-5)
    np.testing.assert_allclose(site.x_test.numpy(), (x[31:] - mean) / std, atol=1e-5)
    assert site.label_counts() == ([31, 0], [0, 10])


def test_csv_is_standardised_per_column_and_constant_columns_are_only_centred(tmp_path, digits):
    images, labels = digits
    write_csv(tmp_path / "train.csv", images[:NUM_TRAIN], labels[:NUM_TRAIN])
    write_csv(tmp_path / "test.csv", images[NUM_TRAIN:], labels[NUM_TRAIN:])
    site = load_site_data(tmp_path)
    assert site.format == "csv" and site.source == tmp_path.absolute()
    assert site.x_train.shape == (NUM_TRAIN, 64) and site.x_test.shape == (NUM_TEST, 64)
    np.testing.assert_array_equal(site.y_train.numpy(), labels[:NUM_TRAIN])
    np.testing.assert_array_equal(site.y_test.numpy(), labels[NUM_TRAIN:])
    raw = images.reshape(len(images), 64).astype(np.float64)
    mean, std = raw[:NUM_TRAIN].mean(axis=0), raw[:NUM_TRAIN].std(axis=0)
    assert (std == 0).any()  # digits has always-blank pixels: the floor is exercised
    std[std == 0] = 1
    np.testing.assert_allclose(site.x_train.numpy(), (raw[:NUM_TRAIN] - mean) / std, atol=1e-5)
    np.testing.assert_allclose(site.x_test.numpy(), (raw[NUM_TRAIN:] - mean) / std, atol=1e-5)
    assert np.isfinite(site.x_test.numpy()).all()
    assert_standardised(site.x_train)


def test_csv_with_an_input_shape_gives_the_npz_tensors(tmp_path, digits):
    images, labels = digits
    write_csv(tmp_path / "csv" / "train.csv", images[:NUM_TRAIN], labels[:NUM_TRAIN])
    write_csv(tmp_path / "csv" / "test.csv", images[NUM_TRAIN:], labels[NUM_TRAIN:])
    digits_npz(tmp_path / "npz", images, labels)
    from_csv = load_site_data(tmp_path / "csv", input_shape=(1, 8, 8))
    from_npz = load_site_data(tmp_path / "npz")
    assert from_csv.input_shape == from_npz.input_shape == (1, 8, 8)
    for name in ("x_train", "x_test"):
        np.testing.assert_allclose(getattr(from_csv, name), getattr(from_npz, name), atol=1e-5)
    assert torch.equal(from_csv.y_test, from_npz.y_test)


def test_csv_columns_are_found_by_name_in_any_order(tmp_path):
    (tmp_path / "train.csv").write_text("label,b,a\n0,1,10\n1,3,30\n")
    (tmp_path / "test.csv").write_text("a,label,b\n30,1,3\n")
    site = load_site_data(tmp_path)
    # features in train.csv's order (b, a): means (2, 20), stds (1, 10)
    np.testing.assert_allclose(site.x_train.numpy(), [[-1, -1], [1, 1]])
    np.testing.assert_allclose(site.x_test.numpy(), [[1, 1]])
    assert site.y_train.tolist() == [0, 1] and site.y_test.tolist() == [1]


def test_csv_as_spreadsheets_write_it(tmp_path):
    """A byte-order mark, quoted cells, spaces around names, an empty line, Windows line ends."""
    text = '\ufeff "x" ,label\r\n"1.5",0\r\n\r\n2.5,"1"\r\n'
    (tmp_path / "train.csv").write_bytes(text.encode("utf-8"))
    site = load_site_data(tmp_path, test_fraction=0)
    np.testing.assert_allclose(site.x_train.numpy(), [[-1.0], [1.0]])
    assert site.y_train.tolist() == [0, 1] and site.num_classes == 2


def test_images_match_the_npz_of_the_same_pixels(tmp_path, digits):
    images, labels = digits
    write_images(tmp_path / "img", "train", images[:NUM_TRAIN], labels[:NUM_TRAIN])
    write_images(tmp_path / "img", "test", images[NUM_TRAIN:], labels[NUM_TRAIN:])
    digits_npz(tmp_path / "npz", images, labels)
    site = load_site_data(tmp_path / "img")
    reference = load_site_data(tmp_path / "npz")
    assert site.format == "images" and site.num_classes == 10
    assert site.x_train.shape == (NUM_TRAIN, 1, 8, 8) and site.x_test.shape == (NUM_TEST, 1, 8, 8)
    for split in ("train", "test"):
        got = by_content(getattr(site, f"x_{split}"), getattr(site, f"y_{split}"))
        want = by_content(getattr(reference, f"x_{split}"), getattr(reference, f"y_{split}"))
        np.testing.assert_allclose(got[0], want[0], atol=1e-4)
        np.testing.assert_array_equal(got[1], want[1])
    assert_standardised(site.x_train)
    assert site.label_counts() == reference.label_counts()


def test_integer_class_folders_are_their_numbers_and_other_names_their_sorted_index(tmp_path):
    image = np.arange(16, dtype=np.uint8).reshape(4, 4)
    labels = list(range(11))
    write_images(tmp_path / "numbers", "train", [image * (i + 1) for i in labels], labels)
    site = load_site_data(tmp_path / "numbers", test_fraction=0)
    assert site.num_classes == 11 and sorted(site.y_train.tolist()) == labels
    brightest = int(site.x_train.mean(dim=(1, 2, 3)).argmax())  # the image written in "10"
    assert site.y_train[brightest] == 10
    names = {0: "malignant", 1: "benign", 2: "normal"}
    write_images(tmp_path / "names", "train", [image] * 3, [0, 1, 2], class_name=names.get)
    named = load_site_data(tmp_path / "names", test_fraction=0)
    assert sorted(named.y_train.tolist()) == [0, 1, 2] and named.num_classes == 3
    write_images(tmp_path / "gap", "train", [image] * 2, [0, 3])
    (tmp_path / "gap" / "train" / "5").mkdir()  # an empty class folder still counts
    assert load_site_data(tmp_path / "gap", test_fraction=0).num_classes == 6


def test_image_modes_become_one_or_three_channels_on_one_scale(tmp_path):
    gray = np.array([[0, 255], [128, 64]], dtype=np.uint8)
    colour = np.stack([gray, 255 - gray, gray // 2], axis=-1)
    sites = {
        "L": Image.fromarray(gray),
        "I;16": Image.fromarray(gray.astype(np.uint16) * 257),  # the same values on 16 bits
        "RGB": Image.fromarray(colour),
        "RGBA": Image.fromarray(np.dstack([colour, np.full_like(gray, 7)])),
        "P": Image.fromarray(colour).quantize(colors=4),
    }
    loaded = {}
    for mode, image in sites.items():
        assert image.mode == mode
        for index in range(2):
            path = tmp_path / mode / "train" / "0" / f"{index}.png"
            path.parent.mkdir(parents=True, exist_ok=True)
            (image if index == 0 else image.transpose(Image.Transpose.ROTATE_90)).save(path)
        loaded[mode] = load_site_data(tmp_path / mode, test_fraction=0).x_train
    assert loaded["L"].shape == (2, 1, 2, 2) and loaded["RGB"].shape == (2, 3, 2, 2)
    np.testing.assert_allclose(loaded["I;16"], loaded["L"], atol=1e-5)
    np.testing.assert_allclose(loaded["RGBA"], loaded["RGB"], atol=1e-5)
    assert loaded["P"].shape == (2, 3, 2, 2)  # a palette image becomes RGB
    # 8-bit and 16-bit images of one site are on one scale: the same picture, the same values
    _png(tmp_path / "mixed" / "train" / "0" / "a.png", sites["L"])
    _png(tmp_path / "mixed" / "train" / "0" / "b.png", sites["I;16"])
    mixed = load_site_data(tmp_path / "mixed", test_fraction=0).x_train
    assert float(mixed.std()) > 0.5
    np.testing.assert_allclose(mixed[0], mixed[1], atol=1e-6)


# --- the split of a folder without a test part --------------------------------------------------
def test_a_folder_without_a_test_part_is_split_by_a_seeded_permutation(tmp_path):
    count = 50
    write_npz(tmp_path, x_train=np.arange(count)[:, None], y_train=np.arange(count) % 3)
    site = load_site_data(tmp_path, test_fraction=0.3, seed=4)
    assert len(site.x_test) == 15 and len(site.x_train) == 35  # round(0.3 * 50)
    order = np.random.default_rng(4).permutation(count)
    train_ids, test_ids = order[15:], order[:15]
    # the ids come back through the training statistics, in the permutation's order
    mean, std = train_ids.mean(), train_ids.std()
    np.testing.assert_array_equal(np.round(site.x_train[:, 0].numpy() * std + mean), train_ids)
    np.testing.assert_array_equal(np.round(site.x_test[:, 0].numpy() * std + mean), test_ids)
    assert not set(train_ids) & set(test_ids) and len(set(train_ids) | set(test_ids)) == count
    np.testing.assert_array_equal(site.y_test.numpy(), test_ids % 3)
    assert_standardised(site.x_train)
    again = load_site_data(tmp_path, test_fraction=0.3, seed=4)
    assert torch.equal(again.x_test, site.x_test) and torch.equal(again.y_train, site.y_train)
    other = load_site_data(tmp_path, test_fraction=0.3, seed=5)
    assert not torch.equal(other.y_test, site.y_test)


@pytest.mark.parametrize(
    ("count", "fraction", "num_test"),
    [(50, 0.0, 0), (2, 0.1, 1), (1, 0.5, 0), (3, 0.9, 2), (10, 0.25, 2)],  # round(2.5) == 2
)
def test_split_sizes_at_the_edges(tmp_path, count, fraction, num_test):
    write_npz(tmp_path, x_train=np.arange(count * 2).reshape(count, 2), y_train=np.zeros(count))
    site = load_site_data(tmp_path, test_fraction=fraction)
    assert len(site.y_test) == num_test and len(site.y_train) == count - num_test
    assert site.x_test.shape == (num_test, 2)
    assert site.label_counts() == ([count - num_test], [num_test])


def test_an_empty_test_part_is_an_empty_test_split(tmp_path):
    write_csv(tmp_path / "train.csv", np.array([[1.0], [2.0], [4.0]]), [0, 1, 1])
    (tmp_path / "test.csv").write_text("p0,label\n")
    site = load_site_data(tmp_path)
    assert len(site.y_train) == 3 and site.x_test.shape == (0, 1) and site.num_classes == 2


# --- bad input: every error names the file and the problem --------------------------------------
def _png(path: Path, image: Image.Image) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path)


def _gray(size=(8, 8)) -> Image.Image:
    return Image.fromarray(np.zeros(size[::-1], dtype=np.uint8))


def _csv(folder: Path, text: str, name="train.csv") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


def _images_of_two_sizes(folder):
    _png(folder / "train" / "0" / "a.png", _gray((8, 8)))
    _png(folder / "train" / "1" / "b.png", _gray((9, 7)))


def _images_of_two_channel_counts(folder):
    _png(folder / "train" / "0" / "a.png", _gray())
    _png(folder / "test" / "0" / "c.png", Image.new("RGB", (8, 8)))


def _float_image(folder):
    _png(folder / "train" / "0" / "a.tiff", Image.fromarray(np.ones((8, 8), dtype=np.float32)))


def _corrupt_image(folder):
    _png(folder / "train" / "0" / "a.png", _gray())
    (folder / "train" / "0" / "broken.png").write_bytes(b"\x89PNG not really")


def _no_images(folder):
    (folder / "train" / "0").mkdir(parents=True)
    (folder / "train" / "0" / "notes.txt").write_text("no images here")


def _bad_npz(folder, **arrays):
    base = {"x_train": np.zeros((4, 3)), "y_train": np.zeros(4), "x_test": np.zeros((2, 3))}
    base["y_test"] = np.zeros(2)
    base.update(arrays)
    write_npz(folder, **{key: value for key, value in base.items() if value is not None})


def _truncated_npz(folder):
    _bad_npz(folder)
    whole = (folder / "data.npz").read_bytes()
    (folder / "data.npz").write_bytes(whole[: len(whole) // 2])


BAD_SITES = {  # name -> (writer, the file the message names, what it must say)
    "two sizes": (
        _images_of_two_sizes,
        "b.png",
        ["(channels, height, width) (1, 7, 9)", "a.png", "(1, 8, 8)"],
    ),
    "two channel counts": (
        _images_of_two_channel_counts,
        "c.png",
        ["(3, 8, 8)", "a.png", "(1, 8, 8)"],
    ),
    "float image": (_float_image, "a.tiff", ["mode 'F'", "not supported"]),
    "corrupt image": (_corrupt_image, "broken.png", ["cannot read the image"]),
    "no images": (_no_images, "train", ["holds no image files"]),
    "no label column": (
        lambda f: _csv(f, "a,b,y\n1,2,0\n"),
        "train.csv",
        ["label column 'label'", "['a', 'b', 'y']"],
    ),
    "two label columns": (
        lambda f: _csv(f, "label,a,label\n1,2,0\n"),
        "train.csv",
        ["more than one label column"],
    ),
    "empty csv": (lambda f: _csv(f, ""), "train.csv", ["empty", "header"]),
    "no rows": (lambda f: _csv(f, "a,label\n"), "train.csv", ["no samples", "(0, 1)"]),
    "no features": (lambda f: _csv(f, "label\n1\n"), "train.csv", ["no features", "(1, 0)"]),
    "text feature": (
        lambda f: _csv(f, "a,b,label\n1,2,0\n\n3,x7,1\n"),
        "train.csv",
        ["row 2 (line 4)", "column 'b'", "'x7' is not a number"],
    ),
    "ragged row": (lambda f: _csv(f, "a,b,label\n1,2,0\n3,1\n"), "train.csv", ["row 2", "2 cells"]),
    "text label": (
        lambda f: _csv(f, "a,label\n1,0\n2,cat\n"),
        "train.csv",
        ["row 2", "label 'cat' is not an integer"],
    ),
    "fractional label": (
        lambda f: _csv(f, "a,label\n1,0\n2,1.0\n3,2.5\n"),
        "train.csv",
        ["row 3", "label 2.5 is not a non-negative integer"],
    ),
    "negative label": (
        lambda f: _csv(f, "a,label\n1,-1\n"),
        "train.csv",
        ["row 1", "label -1.0 is not a non-negative integer"],
    ),
    "nan feature": (
        lambda f: _csv(f, "a,b,label\n1,2,0\n1,nan,0\n"),
        "train.csv",
        ["row 2", "column 'b'", "must be finite"],
    ),
    "test csv columns": (
        lambda f: (_csv(f, "a,label\n1,0\n"), _csv(f, "b,label\n1,0\n", "test.csv")),
        "test.csv",
        ["columns ['b', 'label'] differ", "['a', 'label']"],
    ),
    "object array": (
        lambda f: _bad_npz(f, x_train=np.array([[1], ["a"]], dtype=object)),
        "data.npz",
        ["'x_train'", "Python objects"],
    ),
    "missing key": (
        lambda f: _bad_npz(f, y_test=None),
        "data.npz",
        ["no array 'y_test'", "['x_train', 'y_train', 'x_test']"],
    ),
    "length mismatch": (
        lambda f: _bad_npz(f, y_train=np.zeros(5)),
        "data.npz",
        ["x_train has 4 samples, y_train 5"],
    ),
    "text x": (
        lambda f: _bad_npz(f, x_test=np.array([["a"], ["b"]])),
        "data.npz",
        ["'x_test'", "must be numeric"],
    ),
    "flat x": (lambda f: _bad_npz(f, x_train=np.zeros(4)), "data.npz", ["x_train has shape (4,)"]),
    "test shape": (
        lambda f: _bad_npz(f, x_test=np.zeros((2, 4))),
        "data.npz",
        ["x_test samples have shape (4,)", "(3,)"],
    ),
    "nan x": (
        lambda f: _bad_npz(f, x_train=np.full((4, 3), np.nan)),
        "data.npz",
        ["x_train holds NaN"],
    ),
    "npz label": (
        lambda f: _bad_npz(f, y_test=np.array([0, -2])),
        "data.npz",
        ["y_test[1]", "label -2"],
    ),
    "not an npz": (
        lambda f: (f.mkdir(), (f / "data.npz").write_text("hello")),
        "data.npz",
        ["not a readable .npz"],
    ),
    "empty npz": (
        lambda f: (f.mkdir(), (f / "data.npz").write_bytes(b"")),
        "data.npz",
        ["not a readable .npz"],
    ),
    "truncated npz": (_truncated_npz, "data.npz", ["not a readable .npz"]),
}


@pytest.mark.parametrize("case", sorted(BAD_SITES))
def test_bad_site_data_is_refused_naming_the_file_and_the_problem(tmp_path, case):
    write, file_name, problems = BAD_SITES[case]
    folder = tmp_path / "site"
    write(folder)
    with pytest.raises(SiteDataError) as raised:
        load_site_data(folder)
    message = str(raised.value)
    assert str(folder.absolute()) in message and file_name in message, message
    for problem in problems:
        assert problem in message, message


def test_arguments_checked_against_the_data(tmp_path, digits):
    images, labels = digits
    write_csv(tmp_path / "train.csv", images[:NUM_TRAIN], labels[:NUM_TRAIN])
    with pytest.raises(
        SiteDataError,
        match=r"train.csv: input_shape \(1, 7, 8\) holds 56 values,"
        r" the file has 64 feature columns",
    ):
        load_site_data(tmp_path, input_shape=(1, 7, 8))
    with pytest.raises(SiteDataError, match=r"train.csv: label 9 is not below num_classes=9"):
        load_site_data(tmp_path, num_classes=9)
    assert load_site_data(tmp_path, num_classes=12).num_classes == 12
    assert len(load_site_data(tmp_path, num_classes=12).label_counts()[0]) == 12
    with pytest.raises(SiteDataError, match=r"label column 'target'"):
        load_site_data(tmp_path, label_column="target")
    digits_npz(tmp_path / "npz", images, labels)
    with pytest.raises(SiteDataError, match=r"data.npz: samples have shape \(1, 8, 8\), input_sh"):
        load_site_data(tmp_path / "npz", input_shape=(64,))
    assert load_site_data(tmp_path / "npz", input_shape=(1, 8, 8)).input_shape == (1, 8, 8)
    for arguments, key in [
        ({"test_fraction": 1.0}, "test_fraction=1.0"),
        ({"test_fraction": -0.1}, "test_fraction=-0.1"),
        ({"num_classes": -1}, "num_classes=-1"),
        ({"input_shape": (0, 8)}, "input_shape=(0, 8)"),
    ]:
        with pytest.raises(ValueError, match=re.escape(key)):
            load_site_data(tmp_path, **arguments)


def test_a_folder_must_hold_exactly_one_layout(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(SiteDataError, match=f"{missing} does not exist"):
        detect_format(missing)
    (tmp_path / "file").write_text("")
    with pytest.raises(SiteDataError, match="is not a folder"):
        load_site_data(tmp_path / "file")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "readme.txt").write_text("")
    with pytest.raises(SiteDataError) as raised:
        detect_format(empty)
    for part in (str(empty), "train/<class>/<images>", "train.csv", "data.npz", "readme.txt"):
        assert part in str(raised.value)
    (empty / "train.csv").write_text("a,label\n1,0\n")
    assert detect_format(empty) == "csv"
    (empty / "data.npz").write_bytes(b"")
    with pytest.raises(SiteDataError, match="holds train.csv and data.npz: expected only one"):
        detect_format(empty)
    assert set(SITE_FORMATS) == {"images", "csv", "npz"}


def test_site_data_is_frozen(tmp_path):
    write_npz(tmp_path, x_train=np.ones((3, 2)), y_train=np.array([0, 1, 1]))
    site = load_site_data(tmp_path, test_fraction=0)
    assert isinstance(site, SiteData)
    with pytest.raises(AttributeError):
        site.num_classes = 3
    np.testing.assert_array_equal(site.x_train.numpy(), np.zeros((3, 2)))  # constant: centred


# --- links: the walk stays inside the site's folder ---------------------------------------------
def test_links_are_not_followed_and_are_named(tmp_path, caplog):
    images = [np.full((4, 4), 40 * i, dtype=np.uint8) for i in range(6)]
    site = tmp_path / "site"
    write_images(site, "train", images, [0, 0, 0, 1, 1, 1])
    outside = tmp_path / "elsewhere"
    write_images(outside, "x", images[:2], [5, 5])
    (site / "train" / "0" / "again").symlink_to("..")  # a loop: train/0/again/0/again/...
    (site / "train" / "1" / "theirs").symlink_to(outside / "x" / "5")  # a folder outside
    (site / "train" / "1" / "one.png").symlink_to(outside / "x" / "5" / "0000.png")
    (site / "train" / "7").symlink_to(outside / "x" / "5")  # a class folder outside
    flwr_logger = logging.getLogger("flwr")
    flwr_logger.addHandler(caplog.handler)
    try:
        data = load_site_data(site, test_fraction=0)
    finally:
        flwr_logger.removeHandler(caplog.handler)
    assert sorted(data.y_train.tolist()) == [0, 0, 0, 1, 1, 1] and data.num_classes == 2
    assert set(data.skipped_links) == {
        "train/0/again -> ..",
        f"train/1/one.png -> {outside}/x/5/0000.png",
        f"train/1/theirs -> {outside}/x/5",
        f"train/7 -> {outside}/x/5",
    }
    warnings = {r.getMessage() for r in caplog.records if r.levelno == logging.WARNING}
    (warning,) = [message for message in warnings if "symbolic link" in message]
    assert f"site data folder {site}: 4 symbolic link(s) not followed" in warning
    assert "train/0/again -> .." in warning and f"train/7 -> {outside}/x/5" in warning


def test_without_links_the_images_are_listed_as_torchvisions_image_folder_lists_them(tmp_path):
    from torchvision.datasets import ImageFolder

    image = np.zeros((2, 2), dtype=np.uint8)
    for path in ("b/2.png", "b/sub/1.PNG", "b/10.jpg", "a/z/y.png", "a/x.png", "a/notes.txt"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        if path.endswith("txt"):
            (tmp_path / path).write_text("")
        else:
            Image.fromarray(image).save(tmp_path / path, format="PNG")
    (tmp_path / "empty").mkdir()
    listed = site_images.list_images(tmp_path, tmp_path, skipped := [])
    reference = ImageFolder(str(tmp_path), allow_empty=True)
    assert (listed.classes, listed.samples, skipped) == (reference.classes, reference.samples, [])


def test_a_linked_train_folder_is_refused(tmp_path):
    write_images(tmp_path / "real", "train", [np.zeros((2, 2), np.uint8)], [0])
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "train").symlink_to(tmp_path / "real" / "train")
    with pytest.raises(SiteDataError, match="train is a symbolic link .*inside its folder"):
        load_site_data(tmp_path / "site")
