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

import json
from dataclasses import dataclass
from logging import WARNING
from pathlib import Path

import numpy as np
import torch
from flwr.common.logger import log

from .site_images import read_images
from .site_parts import Part, SiteDataError
from .site_tables import read_csv_files, read_npz

SITE_FORMATS = ("images", "csv", "npz")
_MARKERS = {  # format -> the path that marks it, and what that path must be
    "images": ("train", Path.is_dir),
    "csv": ("train.csv", Path.is_file),
    "npz": ("data.npz", Path.is_file),
}
_EXPECTED = "train/<class>/<images> (images), train.csv (csv) or data.npz (npz)"
_CHUNK_VALUES = 1 << 22  # values standardised at a time (bounds the float64 temporaries)
# torchvision's IMG_EXTENSIONS (``ImageFolder``'s), written out: no torchvision import
MAX_NAMED_LINKS = 10  # links named in the log line (SiteData.skipped_links has them all)


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
        train, test, folder_classes = read_images(folder, skipped)
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
        train, test = read_csv_files(folder, label_column, input_shape)
    else:
        source = folder / "data.npz"
        train, test = read_npz(source)
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


# --- shared steps -----------------------------------------------------------------------------
def _split(train: Part, test_fraction: float, seed: int) -> tuple[Part, Part]:
    """A seeded random ``test_fraction`` of ``train`` held out as the test part."""
    count = len(train.y)
    num_test = round(test_fraction * count)
    if test_fraction > 0 and count > 1:
        num_test = min(max(num_test, 1), count - 1)
    order = np.random.default_rng(seed).permutation(count)
    held_out, kept = order[:num_test], order[num_test:]
    return (
        Part(train.x[kept], train.y[kept], train.file),
        Part(train.x[held_out], train.y[held_out], train.file),
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
