"""A site's own data folder, read whole (never partitioned): in a deployment each SuperNode
trains on all of its local files and the server never sees a sample.

``detect_format(folder)`` says which layout a folder holds, ``load_site_data(folder)`` reads it.
Exactly one layout per folder:

* ``images``: ``train/<class>/<image files>``, optionally ``test/<class>/...``. Classes and
  files are listed as torchvision's ``ImageFolder`` lists them (class folders sorted, files of
  each class folder and its subfolders in sorted order; other extensions are skipped; an empty
  class folder still counts), except that the walk never follows a symbolic link: a link to a
  folder or an image is skipped, named in ``SiteData.skipped_links`` and in a WARNING of the
  node's log. A link inside a site's folder either loops (``train/0/again -> ..`` turned 6
  images into 246 samples, some under another class) or lists images twice; one pointing
  outside it reads files the site did not put into its folder. Pixels become float32 ``(N, C, H, W)`` in [0, 1]: 'L' (and '1', 'LA') 1 channel,
  'RGB' (and 'P', 'RGBA', 'CMYK', ...; transparency dropped) 3 channels, 16-bit grayscale
  ('I;16', or 'I' within 0..65535) divided by 65535 without passing through 8 bits; other modes
  ('F', ...) are refused. All images of a site must have the same channels, height and width.
* ``csv``: ``train.csv``, optionally ``test.csv`` (the same columns, in any order): a header row,
  the label in column ``label_column``, every other column a numeric feature; float32 ``(N, D)``,
  or ``(N, *input_shape)``. Read by ``numpy.loadtxt`` (4x faster than the ``csv`` module, which
  only looks for the row and column to name when loadtxt fails).
* ``npz``: ``data.npz`` with ``x_train``, ``y_train`` and optionally (both or neither)
  ``x_test``, ``y_test``, read with ``allow_pickle=False``; ``x`` keeps its shape ``(N, ...)``
  as float32, ``y`` is ``(N,)`` or ``(N, 1)``.

Labels are non-negative integers. Image class folders named by integers ("0", ..., "10") take
that integer ("10" is 10); other names their index in the sorted list of the site's class folders
(train and test), the same at every site only if every site has the same folders. csv and npz
labels must be integral numbers (``3`` or ``3.0``): text labels are refused, not mapped, since a
mapping would depend on which names each site holds. ``num_classes`` is ``max(label) + 1`` over
train and test (images: also at least the number of class folders, or the largest integer name
+ 1) unless given, and then every label must lie below it.

Normalisation: each site standardises its features with its own training split's statistics
(float64, over the float32 values), per entry of axis 1 (a column of ``(N, D)``, a channel of
``(N, C, ...)``: a csv read with ``input_shape=(C, H, W)`` is standardised per channel, like the
same images in an npz), and applies them to its test split; a constant entry (std 0) is only
centred. It is the only normalisation a site can do without sharing data.

Without a test part, a seeded permutation (``np.random.default_rng(seed)``) holds out
``round(test_fraction * N)`` samples (at least 1 when ``N > 1`` and ``test_fraction > 0``, at most
``N - 1``); ``test_fraction=0`` or an empty test part gives an empty test split. Samples otherwise
keep their file order (``ImageFolder``: class folder, then file name).

Unusable data, a missing folder included, raises ``SiteDataError`` (a ``ValueError``) naming the
file (absolute path) and the problem; arguments out of range raise a plain ``ValueError``.
"""

from __future__ import annotations

import csv
import json
import os
import re
import warnings
import zipfile
from dataclasses import dataclass
from logging import WARNING
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from flwr.common.logger import log

SITE_FORMATS = ("images", "csv", "npz")
_MARKERS = {  # format -> the path that marks it, and what that path must be
    "images": ("train", Path.is_dir),
    "csv": ("train.csv", Path.is_file),
    "npz": ("data.npz", Path.is_file),
}
_EXPECTED = "train/<class>/<images> (images), train.csv (csv) or data.npz (npz)"
_NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
_NUMERIC_KINDS = "biuf"  # numpy dtype kinds accepted as features and labels
_GRAY_MODES = {"1", "LA", "La"}  # PIL modes converted to 'L'
_COLOUR_MODES = {"P", "PA", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB", "HSV"}  # to 'RGB'
_16BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I"}
_CSV_ENCODING = "utf-8-sig"  # also reads the byte-order mark that Excel writes
_LOADTXT = {"delimiter": ",", "skiprows": 1, "ndmin": 2, "comments": None, "quotechar": '"'}
_CHUNK_VALUES = 1 << 22  # values standardised at a time (bounds the float64 temporaries)
# torchvision's IMG_EXTENSIONS (``ImageFolder``'s), written out: no torchvision import
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")
MAX_NAMED_LINKS = 10  # links named in the log line (SiteData.skipped_links has them all)


class SiteDataError(ValueError):
    """A site's data cannot be used: the message names the file (absolute path) and what is wrong."""


@dataclass(frozen=True)
class SiteData:
    """One site's data, standardised with its own training statistics."""

    x_train: torch.Tensor  # float32, (N, C, H, W) for images, (N, D) for csv, as stored for npz
    y_train: torch.Tensor  # int64, (N,)
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    format: str  # one of SITE_FORMATS
    source: Path  # the folder or file that was read
    # images: the links the walk did not follow, ``<path in the folder> -> <link target>``
    skipped_links: tuple[str, ...] = ()
    # the site's manifest (``MANIFEST``): its class names and clinical positive class, if given
    class_names: tuple[str, ...] | None = None
    positive_class: int | None = None

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    def label_counts(self) -> tuple[list[int], list[int]]:
        """Train and test sample counts per class (each of length ``num_classes``)."""
        train, test = (
            np.bincount(y.numpy(), minlength=self.num_classes).tolist()
            for y in (self.y_train, self.y_test)
        )
        return train, test


class _Part(NamedTuple):
    """One split as read: float32 features, int64 labels, the file or folder they came from."""

    x: np.ndarray
    y: np.ndarray
    file: Path


def detect_format(folder: Path) -> str:
    """Which of ``SITE_FORMATS`` ``folder`` holds; ``SiteDataError`` unless exactly one."""
    folder = Path(folder).expanduser().absolute()
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise SiteDataError(f"site data folder {folder} {what}")
    found = [name for name, (marker, is_kind) in _MARKERS.items() if is_kind(folder / marker)]
    if len(found) == 1:
        return found[0]
    if found:
        holds = " and ".join(_MARKERS[name][0] for name in found)
        raise SiteDataError(f"site data folder {folder} holds {holds}: expected only one of them")
    present = sorted(path.name for path in folder.iterdir())[:10] or ["nothing"]
    raise SiteDataError(f"site data folder {folder} holds none of {_EXPECTED}; it holds {present}")


def load_site_data(
    folder: Path,
    *,
    label_column: str = "label",
    input_shape: tuple[int, ...] = (),
    num_classes: int = 0,
    test_fraction: float = 0.2,
    seed: int = 0,
) -> SiteData:
    """Read a site's folder (layouts, labels and normalisation: the module docstring).

    ``input_shape`` reshapes each csv row (``()``: flat); for images and npz it must be ``()`` or
    the stored shape. ``num_classes`` 0 takes it from the data. ``test_fraction`` and ``seed``
    split the training part when the folder has no test part."""
    if not 0.0 <= test_fraction < 1.0:
        raise ValueError(f"test_fraction={test_fraction} must be in [0, 1)")
    if num_classes < 0:
        raise ValueError(f"num_classes={num_classes} must be 0 (from the data) or positive")
    input_shape = tuple(input_shape)
    if any(size < 1 for size in input_shape):
        raise ValueError(f"input_shape={input_shape} must hold positive sizes")
    folder = Path(folder).expanduser().absolute()
    site_format = detect_format(folder)
    source, folder_classes, skipped = folder, 0, []
    if site_format == "images":
        train, test, folder_classes = _read_images(folder, skipped)
        if skipped:
            log(
                WARNING,
                "flowerbed: site data folder %s: %d symbolic link(s) not followed (a site's"
                " images are read inside its folder, each once): %s",
                folder,
                len(skipped),
                ", ".join(skipped[:MAX_NAMED_LINKS])
                + (
                    f", ... ({len(skipped) - MAX_NAMED_LINKS} more)"
                    * (len(skipped) > MAX_NAMED_LINKS)
                ),
            )
    elif site_format == "csv":
        train, test = _read_csv_files(folder, label_column, input_shape)
    else:
        source = folder / "data.npz"
        train, test = _read_npz(source)
    if train.x.size == 0:
        raise SiteDataError(f"{train.file} holds no samples or no features: {train.x.shape}")
    if input_shape and input_shape != train.x.shape[1:]:
        raise SiteDataError(
            f"{train.file}: samples have shape {train.x.shape[1:]}, input_shape is {input_shape}"
        )
    if test is None:
        train, test = _split(train, test_fraction, seed)
    for part in (train, test):
        if num_classes and len(part.y) and part.y.max() >= num_classes:
            raise SiteDataError(
                f"{part.file}: label {part.y.max()} is not below num_classes={num_classes}"
            )
    _standardise(train.x, test.x)
    found_classes = max(
        folder_classes, *(int(part.y.max(initial=-1)) + 1 for part in (train, test))
    )
    num_classes = num_classes or found_classes
    names, positive = read_manifest(folder, num_classes)
    return SiteData(
        x_train=torch.from_numpy(train.x),
        y_train=torch.from_numpy(train.y),
        x_test=torch.from_numpy(test.x),
        y_test=torch.from_numpy(test.y),
        num_classes=num_classes,
        format=site_format,
        source=source,
        skipped_links=tuple(skipped),
        class_names=names,
        positive_class=positive,
    )


MANIFEST = "classes.json"  # optional, beside a site's data: {"names": [...], "positive": ...}


def read_manifest(folder: Path, num_classes: int) -> tuple[tuple[str, ...] | None, int | None]:
    """A site's manifest (``<folder>/classes.json``, optional): the names of its classes by
    label and its clinical positive class (the disease; a name or a label), e.g.
    ``{"names": ["benign", "malignant"], "positive": "malignant"}``. (None, None) without one;
    ``SiteDataError`` naming the file for one that does not fit the data."""
    path = Path(folder) / MANIFEST
    if not path.is_file():
        return None, None
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError) as error:
        raise SiteDataError(f"{path} is not readable JSON ({error})") from None
    if not isinstance(manifest, dict) or set(manifest) - {"names", "positive"}:
        raise SiteDataError(f'{path} must be an object with the keys "names" and "positive"')
    names = manifest.get("names")
    if names is not None:
        if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names):
            raise SiteDataError(f'{path}: "names" must be a list of non-empty strings')
        if len(names) != num_classes or len(set(names)) != len(names):
            raise SiteDataError(
                f'{path}: "names" holds {len(names)} distinct names of {len(set(names))};'
                f" the data has {num_classes} classes, one name each"
            )
        names = tuple(names)
    positive = manifest.get("positive")
    if positive is None:
        return names, None
    if num_classes != 2:
        raise SiteDataError(
            f'{path}: "positive" applies to two classes; the data has {num_classes}'
        )
    if isinstance(positive, str) and names is not None and positive in names:
        return names, names.index(positive)
    if isinstance(positive, int) and not isinstance(positive, bool) and positive in (0, 1):
        return names, positive
    valid = ", ".join(repr(n) for n in names) + " or 0, 1" if names else "0 or 1"
    raise SiteDataError(f'{path}: "positive" is {positive!r}; valid: {valid}')


# --- images -----------------------------------------------------------------------------------
class _ImageList(NamedTuple):
    """A split folder as ``ImageFolder`` lists it: its class folders and (file, class index)."""

    root: str
    classes: list[str]
    samples: list[tuple[str, int]]


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def _list_images(split_folder: Path, site: Path, skipped: list[str]) -> _ImageList:
    """``ImageFolder``'s classes and samples of ``split_folder`` (same order), walked without
    following a link: each link met that would have given a class folder, a subfolder or an
    image is added to ``skipped`` as ``<path relative to site> -> <target>``."""

    def skip(path: str) -> None:
        skipped.append(f"{Path(path).relative_to(site)} -> {os.readlink(path)}")

    try:
        entries = sorted(os.scandir(split_folder), key=lambda entry: entry.name)
    except OSError as error:
        raise SiteDataError(f"{split_folder}: {error}") from error
    classes = []
    for entry in entries:
        if entry.is_symlink():
            if entry.is_dir() or _is_image(entry.name) or not entry.is_file():
                skip(entry.path)
        elif entry.is_dir():
            classes.append(entry.name)
    if not classes:
        raise SiteDataError(f"{split_folder}: Couldn't find any class folder in {split_folder}.")
    samples = []
    for index, name in enumerate(classes):
        for root, folders, files in sorted(os.walk(split_folder / name, followlinks=False)):
            for sub in sorted(folders):
                if os.path.islink(os.path.join(root, sub)):
                    skip(os.path.join(root, sub))
            for file in sorted(files):
                path = os.path.join(root, file)
                if not _is_image(file):
                    continue
                if os.path.islink(path):
                    skip(path)
                else:
                    samples.append((path, index))
    return _ImageList(str(split_folder), classes, samples)


def _read_images(folder: Path, skipped: list[str]) -> tuple[_Part, _Part | None, int]:
    """The train part, the test part (None without ``test/``) and the number of classes;
    ``skipped`` receives the links not followed (``_list_images``)."""
    found = {}
    for split in ("train", "test"):
        path = folder / split
        if path.is_symlink():
            skipped.append(f"{split} -> {os.readlink(path)}")
            if split == "train":
                raise SiteDataError(
                    f"{path} is a symbolic link ({os.readlink(path)}): a site's images must lie"
                    " inside its folder; copy them there"
                )
        elif path.exists():
            found[split] = _list_images(path, folder, skipped)
    names = sorted(set().union(*(dataset.classes for dataset in found.values())))
    if all(re.fullmatch(r"[0-9]+", name) for name in names):
        label_of = {name: int(name) for name in names}
        if len(set(label_of.values())) < len(names):
            raise SiteDataError(f"{folder}: class folders {names} name one integer twice")
        num_classes = max(label_of.values()) + 1
    else:
        label_of = {name: index for index, name in enumerate(names)}
        num_classes = len(names)
    train = _read_image_part(found["train"], label_of, reference=None)
    test = None
    if "test" in found:
        first = Path(found["train"].samples[0][0]).absolute()
        test = _read_image_part(found["test"], label_of, reference=(first, train.x.shape[1:]))
    return train, test, num_classes


def _read_image_part(dataset, label_of: dict[str, int], reference) -> _Part:
    """An ``ImageFolder``'s images as float32 (N, C, H, W); every image must have the shape of
    ``reference`` ((where, shape)), or of the first image when it is None."""
    root, paths = Path(dataset.root).absolute(), [Path(p).absolute() for p, _ in dataset.samples]
    if reference is None and not paths:
        raise SiteDataError(f"{root} holds no image files in its class folders")
    labels = [label_of[dataset.classes[index]] for _, index in dataset.samples]
    reference = reference or (paths[0], _pixels(paths[0]).shape)
    x = np.empty((len(paths), *reference[1]), dtype=np.float32)
    for row, path in enumerate(paths):
        pixels = _pixels(path)
        if pixels.shape != reference[1]:
            raise SiteDataError(
                f"{path} has (channels, height, width) {pixels.shape}, but the first image"
                f" ({reference[0]}) {reference[1]}"
            )
        x[row] = pixels
    return _Part(x, np.array(labels, dtype=np.int64), root)


def _pixels(path: Path) -> np.ndarray:
    """One image as float32 (C, H, W) in [0, 1]."""
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            image.load()
            mode = image.mode
            if mode in _GRAY_MODES:
                image, mode = image.convert("L"), "L"
            elif mode in _COLOUR_MODES:
                image, mode = image.convert("RGB"), "RGB"
            values = np.asarray(image)
    except (UnidentifiedImageError, OSError) as error:
        raise SiteDataError(f"{path}: cannot read the image ({error})") from error
    if mode in ("L", "RGB"):
        scale = 255.0
    elif mode in _16BIT_MODES and values.min() >= 0 and values.max() <= 65535:
        scale = 65535.0
    else:
        raise SiteDataError(
            f"{path}: image mode {mode!r} is not supported: save it as 8-bit grayscale ('L'),"
            " RGB, or 16-bit grayscale"
        )
    values = values.astype(np.float32) / np.float32(scale)
    return values[None] if values.ndim == 2 else values.transpose(2, 0, 1)


# --- csv --------------------------------------------------------------------------------------
def _read_csv_files(folder: Path, label_column: str, input_shape: tuple[int, ...]):
    """The parts of train.csv and test.csv (None when absent)."""
    train_file = folder / "train.csv"
    header = _header(train_file, label_column)
    features = [name for name in header if name != label_column]
    if input_shape and int(np.prod(input_shape)) != len(features):
        raise SiteDataError(
            f"{train_file}: input_shape {input_shape} holds {int(np.prod(input_shape))} values,"
            f" the file has {len(features)} feature columns"
        )
    parts = []
    for file in (train_file, folder / "test.csv"):
        if not file.is_file():
            parts.append(None)
            continue
        columns = _header(file, label_column)
        if sorted(columns) != sorted(header):
            raise SiteDataError(f"{file}: columns {columns} differ from {train_file}'s {header}")
        values = _numbers(file, columns, label_column)
        x = values[:, [columns.index(name) for name in features]].astype(np.float32)
        labels = _labels(values[:, columns.index(label_column)], f"{file}: row {{}}", first=1)
        parts.append(_Part(x.reshape(len(x), *input_shape) if input_shape else x, labels, file))
    return parts


def _header(file: Path, label_column: str) -> list[str]:
    with file.open(newline="", encoding=_CSV_ENCODING) as stream:
        header = [name.strip() for name in next(csv.reader(stream), [])]
    if not header:
        raise SiteDataError(f"{file} is empty: expected a header row")
    if header.count(label_column) != 1:
        problem = "no" if label_column not in header else "more than one"
        raise SiteDataError(
            f"{file} has {problem} label column {label_column!r}; its columns are {header}"
        )
    return header


def _numbers(file: Path, columns: list[str], label_column: str) -> np.ndarray:
    """The data rows as float64 (rows, columns); a cell loadtxt cannot read is named by a second
    pass (``_name_bad_cell``)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # "input contained no data"
            values = np.loadtxt(file, encoding=_CSV_ENCODING, **_LOADTXT)
    except ValueError as error:
        _name_bad_cell(file, columns, label_column)
        raise SiteDataError(f"{file}: {error}") from error
    values = values.reshape(-1, len(columns)) if values.size == 0 else values
    bad = ~np.isfinite(values)
    if bad.any():
        row, column = np.argwhere(bad)[0]
        raise SiteDataError(
            f"{file}: row {row + 1}, column {columns[column]!r} is {values[row, column]}:"
            " values must be finite"
        )
    return values


def _name_bad_cell(file: Path, columns: list[str], label_column: str) -> None:
    """Raise the error that names the first row or cell ``numpy.loadtxt`` could not read."""
    with file.open(newline="", encoding=_CSV_ENCODING) as stream:
        reader = csv.reader(stream)
        next(reader)
        rows = (row for row in reader if row)  # loadtxt skips empty lines, and only those
        for number, row in enumerate(rows, start=1):
            place = f"{file}: row {number} (line {reader.line_num})"
            if len(row) != len(columns):
                raise SiteDataError(f"{place} has {len(row)} cells, the header {len(columns)}")
            for name, cell in zip(columns, row):
                try:
                    float(cell)
                except ValueError:
                    if name == label_column:
                        raise SiteDataError(
                            f"{place}: label {cell!r} is not an integer (text labels are not"
                            " mapped to classes: write class indices 0, 1, ...)"
                        ) from None
                    raise SiteDataError(
                        f"{place}, column {name!r}: {cell!r} is not a number"
                    ) from None


# --- npz --------------------------------------------------------------------------------------
def _read_npz(file: Path) -> tuple[_Part, _Part | None]:
    """The training arrays and the test arrays (None when the archive has neither)."""
    try:
        with np.load(file, allow_pickle=False) as archive:
            present = list(archive.files)
            arrays = {key: _npz_array(archive, key, file) for key in present if key in _NPZ_KEYS}
    except SiteDataError:
        raise
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as error:
        raise SiteDataError(f"{file} is not a readable .npz archive ({error})") from error
    has_test = "x_test" in arrays or "y_test" in arrays
    for key in ("x_train", "y_train", *(("x_test", "y_test") if has_test else ())):
        if key not in arrays:
            raise SiteDataError(f"{file} has no array {key!r}; it has {present}")
    train = _npz_part(arrays["x_train"], arrays["y_train"], "train", file)
    if not has_test:
        return train, None
    test = _npz_part(arrays["x_test"], arrays["y_test"], "test", file)
    if test.x.shape[1:] != train.x.shape[1:]:
        raise SiteDataError(
            f"{file}: x_test samples have shape {test.x.shape[1:]}, x_train's {train.x.shape[1:]}"
        )
    return train, test


def _npz_array(archive, key: str, file: Path) -> np.ndarray:
    try:
        array = archive[key]
    except ValueError as error:  # an object array: numpy refuses it without pickle
        raise SiteDataError(f"{file}: array {key!r} holds Python objects ({error})") from error
    if array.dtype.kind not in _NUMERIC_KINDS:
        raise SiteDataError(f"{file}: array {key!r} has dtype {array.dtype}: it must be numeric")
    return array


def _npz_part(x: np.ndarray, y: np.ndarray, split: str, file: Path) -> _Part:
    if x.ndim < 2 or not (y.ndim == 1 or y.shape[1:] == (1,)):
        raise SiteDataError(
            f"{file}: x_{split} has shape {x.shape} and y_{split} {y.shape}: expected x (N, ...)"
            " with at least one feature axis and y (N,) or (N, 1)"
        )
    if len(x) != len(y):
        raise SiteDataError(f"{file}: x_{split} has {len(x)} samples, y_{split} {len(y)}")
    x = x.astype(np.float32, copy=False)
    if not np.isfinite(x).all():
        raise SiteDataError(f"{file}: x_{split} holds NaN or infinite values")
    return _Part(x, _labels(y.reshape(-1), f"{file}: y_{split}[{{}}]", first=0), file)


# --- shared steps -----------------------------------------------------------------------------
def _labels(values: np.ndarray, where: str, first: int) -> np.ndarray:
    """Labels as int64; ``where.format(index + first)`` names the place of a bad one."""
    good = np.isfinite(values) & (values == np.round(values)) & (values >= 0)
    if not good.all():
        index = int(np.argmin(good))
        raise SiteDataError(
            f"{where.format(index + first)}: label {values[index]} is not a non-negative integer"
        )
    return values.astype(np.int64)


def _split(train: _Part, test_fraction: float, seed: int) -> tuple[_Part, _Part]:
    """A seeded random ``test_fraction`` of ``train`` held out as the test part."""
    count = len(train.y)
    num_test = round(test_fraction * count)
    if test_fraction > 0 and count > 1:
        num_test = min(max(num_test, 1), count - 1)
    order = np.random.default_rng(seed).permutation(count)
    held_out, kept = order[:num_test], order[num_test:]
    return (
        _Part(train.x[kept], train.y[kept], train.file),
        _Part(train.x[held_out], train.y[held_out], train.file),
    )


def _standardise(x_train: np.ndarray, x_test: np.ndarray) -> None:
    """In place: zero mean and unit std per entry of axis 1 with statistics of ``x_train`` only,
    in float64 over chunks of rows (a float32 mean would shift a narrow channel around a large
    value by a visible fraction of its std); a std of 0 is taken as 1."""
    axes = (0, *range(2, x_train.ndim))
    rows = max(1, _CHUNK_VALUES // x_train[0].size)

    def chunks(x: np.ndarray):
        return (x[start : start + rows] for start in range(0, len(x), rows))

    count = x_train.size // x_train.shape[1]
    mean = sum(c.sum(axis=axes, keepdims=True, dtype=np.float64) for c in chunks(x_train)) / count
    variance = sum(((c - mean) ** 2).sum(axis=axes, keepdims=True) for c in chunks(x_train)) / count
    std = np.sqrt(variance)
    std[std == 0] = 1.0
    for x in (x_train, x_test):
        for chunk in chunks(x):
            chunk[...] = (chunk - mean) / std
