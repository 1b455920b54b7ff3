"""torchvision's ResNet-18 with a stem for small images.

torchvision is imported when the model is built, not with this module: the model registry
imports every builder, and torchvision costs seconds of start-up in every Ray actor of a run
that does not use it.
"""

from __future__ import annotations

from torch import nn

from .classifier import Classifier


def build_resnet18(input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    """ResNet-18 (random init, no download), stem adapted to small images.

    The ImageNet stem (7x7 stride-2 conv + max-pool) would shrink a 32x32 image to 8x8 before
    the first block; as is usual for CIFAR-sized inputs it becomes a 3x3 stride-1 conv with no
    pooling, taking 1 or 3 input channels.
    """
    if len(input_shape) != 3:
        raise ValueError(f"model 'resnet18' needs images (C, H, W), got input shape {input_shape}")
    from torchvision.models import resnet18  # seconds to import: only when built

    net = resnet18(weights=None, num_classes=num_classes)
    net.conv1 = nn.Conv2d(input_shape[0], 64, kernel_size=3, stride=1, padding=1, bias=False)
    net.maxpool = nn.Identity()
    head = net.fc
    net.fc = nn.Identity()  # net(x) now returns the 512-d pooled features
    return Classifier(net, head)
