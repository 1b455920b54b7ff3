"""Model registry: run-config name -> builder(input_shape, num_classes) -> Classifier."""

from __future__ import annotations

from typing import Callable

from .classifier import Classifier
from .cnn import build_cnn
from .mlp import build_mlp
from .resnet import build_resnet18

MODELS: dict[str, Callable[..., Classifier]] = {
    "mlp": build_mlp,
    "cnn": build_cnn,
    "resnet18": build_resnet18,
}


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    if name not in MODELS:
        raise ValueError(f"unknown model {name!r}; valid choices: {', '.join(MODELS)}")
    return MODELS[name](tuple(input_shape), num_classes)


__all__ = ["Classifier", "MODELS", "build_model"]
