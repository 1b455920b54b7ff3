"""Small convolutional network for images from 8x8 to 32x32 pixels, 1 or 3 channels."""

from __future__ import annotations

from torch import nn

from .classifier import Classifier


def build_cnn(
    input_shape: tuple[int, ...],
    num_classes: int,
    embedding: int = 128,
    channels: tuple[int, int] = (32, 64),
    name: str = "cnn",
    batch_norm: bool = False,
) -> Classifier:
    """Conv(c1) -> ReLU -> MaxPool2 -> Conv(c2) -> ReLU -> AdaptiveAvgPool(4) -> FC(embedding).

    The adaptive pool makes the same network fit 8x8 digits and 32x32 CIFAR-10 images.
    ``batch_norm``: a ``BatchNorm2d`` after each convolution and a ``BatchNorm1d`` after the
    embedding layer, each before its ReLU (``cnn-bn``).
    """
    if len(input_shape) != 3:
        raise ValueError(f"model {name!r} needs images (C, H, W), got input shape {input_shape}")
    _, height, width = input_shape
    if min(height, width) < 8:
        raise ValueError(
            f"model {name!r} needs images of at least 8x8 pixels, got {height}x{width}"
        )
    first, second = channels

    def norm(layer: type[nn.Module], width: int) -> list[nn.Module]:
        return [layer(width)] if batch_norm else []

    features = nn.Sequential(
        nn.Conv2d(input_shape[0], first, kernel_size=3, padding=1),
        *norm(nn.BatchNorm2d, first),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(first, second, kernel_size=3, padding=1),
        *norm(nn.BatchNorm2d, second),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(second * 4 * 4, embedding),
        *norm(nn.BatchNorm1d, embedding),
        nn.ReLU(),
    )
    return Classifier(features, nn.Linear(embedding, num_classes))


def build_cnn_small(input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    """``cnn`` at half the width (16/32 channels, embedding 64): about a quarter of its
    parameters (38k against 151k on digits), a distillation student."""
    return build_cnn(input_shape, num_classes, embedding=64, channels=(16, 32), name="cnn-small")


def build_cnn_bn(input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    """``cnn`` with batch norm after each convolution and after the embedding layer: a model
    with running statistics, for the ``server-optimizer-buffers`` diagnostic. (In training a
    mini-batch of one sample is an error for ``BatchNorm1d``; choose ``batch-size`` so that no
    client's last batch has one sample.)"""
    return build_cnn(input_shape, num_classes, name="cnn-bn", batch_norm=True)
