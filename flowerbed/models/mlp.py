"""Multi-layer perceptron for tabular data (or flattened images)."""

from __future__ import annotations

import math

from torch import nn

from .classifier import Classifier


def build_mlp(input_shape: tuple[int, ...], num_classes: int, hidden: int = 64) -> Classifier:
    """Flatten -> Linear(d, h) -> ReLU -> Linear(h, h) -> ReLU | head Linear(h, classes)."""
    features = nn.Sequential(
        nn.Flatten(),
        nn.Linear(math.prod(input_shape), hidden),
        nn.ReLU(),
        nn.Linear(hidden, hidden),
        nn.ReLU(),
    )
    return Classifier(features, nn.Linear(hidden, num_classes))
