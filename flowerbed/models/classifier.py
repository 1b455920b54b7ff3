"""The interface every flowerbed model follows: a feature extractor and a classification head.

Knowledge-transfer methods (QKT) restore, freeze and refine the head on its own, MOON needs
the representation, and feature-based distillation objectives compare intermediate outputs;
so every model is ``head(features(x))`` with both parts reachable, and ``taps(x)`` returns its
named intermediate outputs in one forward pass.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


class Classifier(nn.Module):
    """``forward(x) = head(features(x))``; ``features`` ends in a flat vector."""

    def __init__(self, features: nn.Module, head: nn.Module) -> None:
        super().__init__()
        self.features = features
        self.head = head

    def forward(self, x: Tensor) -> Tensor:
        return self.head(self.features(x))

    def taps(self, x: Tensor) -> dict[str, Tensor]:
        """Named outputs of one forward pass: ``features`` (the representation the head
        reads) and ``logits``. A model with more taps (a backbone's stages) adds entries."""
        features = self.features(x)
        return {"features": features, "logits": self.head(features)}


def feature_width(model: Classifier, input_shape: tuple[int, ...]) -> int:
    """Width of ``model.features(x)``: the head's input width, or one probe in eval mode."""
    if isinstance(model.head, nn.Linear):
        return model.head.in_features
    was_training = model.training
    model.eval()
    with torch.no_grad():
        probe = torch.zeros(1, *input_shape, device=next(model.parameters()).device)
        width = model.features(probe).shape[-1]
    model.train(was_training)
    return int(width)


def parameter_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def size_bytes(model: nn.Module) -> int:
    """Parameters and buffers at their stored precision: the model size the point-cloud FL + KD
    benchmark reports (its code's ``nelement() * element_size()``)."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors)
