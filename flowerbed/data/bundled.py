"""scikit-learn's bundled data sets (``digits``, ``breast-cancer``), read with numpy.

scikit-learn ships the files inside its package (``sklearn/datasets/data/digits.csv.gz``,
``breast_cancer.csv``). They are found here through the import system without importing
scikit-learn (``importlib.util.find_spec`` reads no module) and parsed with ``np.loadtxt``:
``load_digits`` and ``load_breast_cancer`` would import scikit-learn and SciPy first, about
2.3 CPU seconds in every Ray actor of a default run, for files that take 0.02 s to parse.
The arrays are those the two loaders return, byte for byte (``tests/test_bundled.py``).
"""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

BUNDLED_FILES = {"digits": "digits.csv.gz", "breast-cancer": "breast_cancer.csv"}


def bundled_file(name: str) -> Path:
    """The path of a bundled data set's file inside the installed scikit-learn package."""
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            f"dataset={name!r} is read from scikit-learn's package, which is not installed;"
            " pip install scikit-learn"
        )
    return Path(spec.submodule_search_locations[0]) / "datasets" / "data" / BUNDLED_FILES[name]


def load_bundled(name: str) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of ``digits`` (x: float64 (1797, 8, 8) pixel values 0 to 16, scikit-learn's
    ``images``) or ``breast-cancer`` (x: float64 (569, 30)); y: int64 labels."""
    path = bundled_file(name)
    if name == "digits":  # 64 pixel columns, then the label; no header
        with gzip.open(path, "rt", encoding="utf-8") as f:
            table = np.loadtxt(f, delimiter=",")
        return table[:, :-1].reshape(-1, 8, 8), table[:, -1].astype(np.int64)
    # a header "samples,features,class names...", then 30 feature columns and the label
    table = np.loadtxt(path, delimiter=",", skiprows=1, encoding="utf-8")
    return table[:, :-1], table[:, -1].astype(np.int64)
