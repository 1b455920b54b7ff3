"""What every reader of a site's folder (``site_images``, ``site_tables``) returns and raises:
one split as read (``Part``), the error naming the bad file, and labels checked as integers."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np


class SiteDataError(ValueError):
    """A site's data cannot be used: the message names the file (absolute path) and what is wrong."""


class Part(NamedTuple):
    """One split as read: float32 features, int64 labels, the file or folder they came from."""

    x: np.ndarray
    y: np.ndarray
    file: Path


def integer_labels(values: np.ndarray, where: str, first: int) -> np.ndarray:
    """Labels as int64; ``where.format(index + first)`` names the place of a bad one."""
    good = np.isfinite(values) & (values == np.round(values)) & (values >= 0)
    if not good.all():
        index = int(np.argmin(good))
        raise SiteDataError(
            f"{where.format(index + first)}: label {values[index]} is not a non-negative integer"
        )
    return values.astype(np.int64)
