"""A site's ``images`` layout: ``train/<class>/<image files>`` (optionally ``test/...``), listed
as torchvision's ``ImageFolder`` lists it without following a symbolic link, and each image's
pixels as float32 in [0, 1] (``site_data``'s docstring has the rules)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .site_parts import Part, SiteDataError

_GRAY_MODES = {"1", "LA", "La"}  # PIL modes converted to 'L'
_COLOUR_MODES = {"P", "PA", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB", "HSV"}  # to 'RGB'
_16BIT_MODES = {"I;16", "I;16L", "I;16B", "I;16N", "I"}
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp")


class ImageList(NamedTuple):
    """A split folder as ``ImageFolder`` lists it: its class folders and (file, class index)."""

    root: str
    classes: list[str]
    samples: list[tuple[str, int]]


def _is_image(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def list_images(split_folder: Path, site: Path, skipped: list[str]) -> ImageList:
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
    return ImageList(str(split_folder), classes, samples)


def read_images(folder: Path, skipped: list[str]) -> tuple[Part, Part | None, int]:
    """The train part, the test part (None without ``test/``) and the number of classes;
    ``skipped`` receives the links not followed (``list_images``)."""
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
            found[split] = list_images(path, folder, skipped)
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


def _read_image_part(dataset, label_of: dict[str, int], reference) -> Part:
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
    return Part(x, np.array(labels, dtype=np.int64), root)


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
