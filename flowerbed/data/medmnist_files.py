"""The 2D single-label MedMNIST flags: what each holds (``MEDMNIST``) and how its file is found,
downloaded and copied into the image cache.

A flag is read through the ``medmnist`` package's files: ``<data-dir>/<flag>.npz``
(``<flag>_<size>.npz`` for image sizes other than 28), downloaded when ``download=True``. Its
images are written once, as uint8, into the image cache under ``cache_dir`` (``image_cache.py``),
streamed from the npz in chunks, so no process ever holds a whole split, not even as uint8.

The flags (3D volumes and multi-label ChestMNIST excluded) are in ``medmnist.INFO``'s order, with
their train and test sizes (the val split is not used), channels and class names
(``medmnist.INFO[flag]["label"]``), written out: importing medmnist (it imports scikit-learn)
costs seconds, and the ``dataset`` key's choices are read whenever a run config is checked.
tests/test_startup_imports.py derives the flags from ``medmnist.INFO`` and tests/test_clinical.py
checks the names against it, so an upgrade that changes them fails there.
"""

from __future__ import annotations

import zipfile
import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..settings import ConfigError
from .image_cache import (
    CachedImages,
    ImageWriter,
    cached_images,
    nchw,
    read_npy_header,
    write_labels,
)
from .splits import DOWNLOAD_HINT, DataFileError, DataNotFoundError

MEDMNIST_IMAGE_SIZES = (28, 64, 128, 224)
MEDMNIST_URL = "https://zenodo.org/records/10519652"
_STREAM_CHUNK_BYTES = 64 << 20  # MedMNIST images are copied into the cache this much at a time


class MedMNISTFlag(NamedTuple):
    """What one flag holds: its splits' sizes, channels, class names and clinical positive."""

    train_size: int
    test_size: int
    channels: int
    class_names: tuple[str, ...]
    positive_class: int | None = None  # the disease, for a binary medical task


ORGAN_CLASSES = (
    "bladder",
    "femur-left",
    "femur-right",
    "heart",
    "kidney-left",
    "kidney-right",
    "liver",
    "lung-left",
    "lung-right",
    "pancreas",
    "spleen",
)
MEDMNIST = {
    "pathmnist": MedMNISTFlag(
        89_996,
        7_180,
        3,
        (
            "adipose",
            "background",
            "debris",
            "lymphocytes",
            "mucus",
            "smooth muscle",
            "normal colon mucosa",
            "cancer-associated stroma",
            "colorectal adenocarcinoma epithelium",
        ),
    ),
    "dermamnist": MedMNISTFlag(
        7_007,
        2_005,
        3,
        (
            "actinic keratoses and intraepithelial carcinoma",
            "basal cell carcinoma",
            "benign keratosis-like lesions",
            "dermatofibroma",
            "melanoma",
            "melanocytic nevi",
            "vascular lesions",
        ),
    ),
    "octmnist": MedMNISTFlag(
        97_477,
        1_000,
        1,
        (
            "choroidal neovascularization",
            "diabetic macular edema",
            "drusen",
            "normal",
        ),
    ),
    "pneumoniamnist": MedMNISTFlag(
        4_708,
        624,
        1,
        (
            "normal",
            "pneumonia",
        ),
        positive_class=1,
    ),
    "retinamnist": MedMNISTFlag(
        1_080,
        400,
        3,
        (
            "0",
            "1",
            "2",
            "3",
            "4",
        ),
    ),
    "breastmnist": MedMNISTFlag(
        546,
        156,
        1,
        (
            "malignant",
            "normal, benign",
        ),
        positive_class=0,
    ),
    "bloodmnist": MedMNISTFlag(
        11_959,
        3_421,
        3,
        (
            "basophil",
            "eosinophil",
            "erythroblast",
            "immature granulocytes(myelocytes, metamyelocytes and promyelocytes)",
            "lymphocyte",
            "monocyte",
            "neutrophil",
            "platelet",
        ),
    ),
    "tissuemnist": MedMNISTFlag(
        165_466,
        47_280,
        1,
        (
            "Collecting Duct, Connecting Tubule",
            "Distal Convoluted Tubule",
            "Glomerular endothelial cells",
            "Interstitial endothelial cells",
            "Leukocytes",
            "Podocytes",
            "Proximal Tubule Segments",
            "Thick Ascending Limb",
        ),
    ),
    "organamnist": MedMNISTFlag(34_561, 17_778, 1, ORGAN_CLASSES),
    "organcmnist": MedMNISTFlag(12_975, 8_216, 1, ORGAN_CLASSES),
    "organsmnist": MedMNISTFlag(13_932, 8_827, 1, ORGAN_CLASSES),
}
MEDMNIST_FLAGS = tuple(MEDMNIST)


def medmnist_file(flag: str, data_dir: Path, image_size: int = 28) -> Path:
    """Where ``medmnist`` looks for a flag's npz file."""
    suffix = "" if image_size == 28 else f"_{image_size}"
    return data_dir / f"{flag}{suffix}.npz"


def missing_medmnist(flag: str, data_dir: Path, image_size: int = 28) -> str | None:
    """Where the flag's file should be, when it is not there; None when it is."""
    path = medmnist_file(flag, data_dir, image_size)
    if path.is_file():
        return None
    return f"MedMNIST file {path} not found: put {path.name} (from {MEDMNIST_URL}) into {data_dir}"


def load_medmnist(
    flag: str, data_dir: Path, download: bool, image_size: int, cache_dir: Path
) -> CachedImages:
    """The flag's images in the image cache ``cache_dir``, copied there on first use (its file
    downloaded first when ``download``)."""
    from medmnist import INFO

    if image_size not in MEDMNIST_IMAGE_SIZES:
        raise ValueError(
            f"image-size {image_size} is not a MedMNIST size; valid choices: {MEDMNIST_IMAGE_SIZES}"
        )
    path = medmnist_file(flag, data_dir, image_size)
    if download:
        _download_medmnist(INFO[flag], path, image_size)
    if (missing := missing_medmnist(flag, data_dir, image_size)) is not None:
        raise DataNotFoundError(f"{missing}, {DOWNLOAD_HINT}")
    return cached_images(
        cache_dir,
        path.stem,
        [path],
        lambda folder: _unpack_medmnist(path, image_size, folder),
    )


def _download_medmnist(info: dict, path: Path, image_size: int) -> None:
    """What ``medmnist``'s ``download()`` does (torchvision's ``download_url``: fetch unless the
    file is there with the right MD5), without its loading the whole file into memory."""
    from torchvision.datasets.utils import download_url

    suffix = "" if image_size == 28 else f"_{image_size}"
    path.parent.mkdir(parents=True, exist_ok=True)
    url = info[f"url{suffix}"]
    try:
        download_url(url, root=str(path.parent), filename=path.name, md5=info[f"MD5{suffix}"])
    except (OSError, RuntimeError) as error:
        raise DataNotFoundError(
            f"downloading {url} into {path} failed ({error}); fetch it on a machine with"
            f" internet and put it there"
        ) from error


def _unpack_medmnist(path: Path, image_size: int, folder: Path) -> None:
    """Copy the train and test splits of a MedMNIST npz into the cache folder: images streamed
    out of the zip member in chunks (``np.load`` of an npz member would decompress the whole
    split into memory: 13.5 GB for PathMNIST at 224 px), labels read whole."""
    try:
        with zipfile.ZipFile(path) as archive:
            for split in ("train", "test"):
                with archive.open(f"{split}_images.npy") as member:
                    _stream_images(member, path, image_size, folder, split)
                with archive.open(f"{split}_labels.npy") as member:
                    write_labels(folder, split, np.lib.format.read_array(member).reshape(-1))
    except ConfigError:  # the cache folder's problem (cache-dir), not the file's
        raise
    except (OSError, ValueError, KeyError, EOFError, zlib.error, zipfile.BadZipFile) as error:
        raise DataFileError(
            f"{path} is not a readable MedMNIST file ({type(error).__name__}: {error});"
            f" replace it with the one from {MEDMNIST_URL}"
        ) from error


def _stream_images(member, path: Path, image_size: int, folder: Path, split: str) -> None:
    """One ``<split>_images.npy`` member, uint8 (N, H, W[, C]), into the cache as (N, C, H, W).
    numpy reads the header; the rows are copied by hand (numpy has no chunked reader)."""
    shape, fortran_order, dtype = read_npy_header(member)
    if dtype != np.uint8 or fortran_order or len(shape) not in (3, 4):
        raise ValueError(
            f"{split}_images.npy is {dtype} {shape}{' (Fortran order)' * fortran_order},"
            " expected uint8 (N, H, W) or (N, H, W, C)"
        )
    if shape[1:3] != (image_size, image_size):
        raise ValueError(
            f"{split}_images.npy holds {shape[1]}x{shape[2]} images, not image-size={image_size}"
        )
    count, row_shape = shape[0], shape[1:]
    row_bytes = int(np.prod(row_shape))
    channels = 1 if len(shape) == 3 else shape[3]
    rows = max(1, _STREAM_CHUNK_BYTES // row_bytes)
    with ImageWriter(folder, split, (count, channels, image_size, image_size)) as writer:
        for start in range(0, count, rows):
            size = min(rows, count - start) * row_bytes
            data = member.read(size)
            if len(data) != size:
                raise ValueError(f"{split}_images.npy ends after {start} of {count} images")
            writer.write(nchw(np.frombuffer(data, np.uint8).reshape(-1, *row_shape)))
