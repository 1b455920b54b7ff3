"""The bundled sets read with numpy are scikit-learn's loaders' arrays, byte for byte."""

import importlib.util

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits

from flowerbed.data import bundled
from flowerbed.data.bundled import load_bundled


@pytest.mark.parametrize(
    "name, loader, features",
    [("digits", load_digits, "images"), ("breast-cancer", load_breast_cancer, "data")],
)
def test_equals_scikit_learns_loader_byte_for_byte(name, loader, features):
    x, y = load_bundled(name)
    bunch = loader()
    expected_x, expected_y = getattr(bunch, features), bunch.target.astype(np.int64)
    assert x.dtype == expected_x.dtype and x.shape == expected_x.shape
    assert x.tobytes() == expected_x.tobytes()
    assert y.dtype == np.int64 and y.tobytes() == expected_y.tobytes()


def test_without_scikit_learn_the_error_says_what_to_install(monkeypatch):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        bundled.importlib.util,
        "find_spec",
        lambda name, *args: None if name == "sklearn" else real_find_spec(name, *args),
    )
    with pytest.raises(FileNotFoundError, match="dataset='digits'.*pip install scikit-learn"):
        load_bundled("digits")
