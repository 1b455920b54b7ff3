"""A site's table layouts: ``csv`` (``train.csv``, optionally ``test.csv``: a header row, a label
column, numeric features) and ``npz`` (``data.npz`` with ``x_train``, ``y_train`` and optionally
``x_test``, ``y_test``), read as float32 features and int64 labels (``site_data``'s docstring
has the rules)."""

from __future__ import annotations

import csv
import warnings
import zipfile
from pathlib import Path

import numpy as np

from .site_parts import Part, SiteDataError, integer_labels

_NPZ_KEYS = ("x_train", "y_train", "x_test", "y_test")
_NUMERIC_KINDS = "biuf"  # numpy dtype kinds accepted as features and labels
_CSV_ENCODING = "utf-8-sig"  # also reads the byte-order mark that Excel writes
_LOADTXT = {"delimiter": ",", "skiprows": 1, "ndmin": 2, "comments": None, "quotechar": '"'}


# --- csv --------------------------------------------------------------------------------------
def read_csv_files(folder: Path, label_column: str, input_shape: tuple[int, ...]):
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
        labels = integer_labels(
            values[:, columns.index(label_column)], f"{file}: row {{}}", first=1
        )
        parts.append(Part(x.reshape(len(x), *input_shape) if input_shape else x, labels, file))
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
def read_npz(file: Path) -> tuple[Part, Part | None]:
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


def _npz_part(x: np.ndarray, y: np.ndarray, split: str, file: Path) -> Part:
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
    return Part(x, integer_labels(y.reshape(-1), f"{file}: y_{split}[{{}}]", first=0), file)
