"""The interface every flowerbed model follows: a feature extractor and a classification head.

Knowledge-transfer strategies (QKT) restore, freeze and refine the head on its own, and MOON
needs the representation; so every model is ``head(features(x))`` with both parts reachable.
"""

from __future__ import annotations

from torch import Tensor, nn


class Classifier(nn.Module):
    """``forward(x) = head(features(x))``; ``features`` ends in a flat vector."""

    def __init__(self, features: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.features = features
        self.head = head

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))
