"""Small convolutional network for images from 8x8 to 32x32 pixels, 1 or 3 channels."""

from __future__ import annotations

from torch import nn

from .classifier import Classifier


def build_cnn(input_shape: tuple[int, ...], num_classes: int, embedding: int = 128) -> Classifier:
    """Conv32 -> ReLU -> MaxPool2 -> Conv64 -> ReLU -> AdaptiveAvgPool(4) -> FC(embedding).

    The adaptive pool makes the same network fit 8x8 digits and 32x32 CIFAR-10 images.
    """
    if len(input_shape) != 3:
        raise ValueError(
            f"model 'cnn' needs images (C, H, W), got input shape {input_shape}; use 'mlp'"
        )
    channels, height, width = input_shape
    if min(height, width) < 8:
        raise ValueError(f"model 'cnn' needs images of at least 8x8 pixels, got {height}x{width}")
    features = nn.Sequential(
        nn.Conv2d(channels, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, embedding),
        nn.ReLU(),
    )
    return Classifier(features, nn.Linear(embedding, num_classes))
