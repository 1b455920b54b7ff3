"""Point-cloud classifiers: PointNet and PointNet++ SSG, with the FL + KD benchmark's compact
PointNet++ student (SEEDS.md 2.5).

* ``pointnet`` (Qi et al., "PointNet: Deep Learning on Point Sets for 3D Classification and
  Segmentation", CVPR 2017), without the T-Nets: a shared MLP 3 -> 64 -> 128 -> 1024 (1x1
  convolutions, batch norm, ReLU), max pool over the points, FC 512 (BN, ReLU), FC 256
  (dropout 0.4, BN, ReLU) -> head.
* ``pointnet2`` (Qi et al., "PointNet++", NeurIPS 2017, single-scale grouping): set
  abstractions (512 centroids, radius 0.2, 32 neighbours, MLP 64-64-128), (128, 0.4, 64,
  128-128-256), group-all (256-512-1024) -> 1024-d, FC 512 and FC 256 (BN, ReLU, dropout 0.4)
  -> head. The teacher of the FL + KD point-cloud benchmark (paper 002).
* ``pointnet2-small``: that paper's student, (256, 0.2, 16, 32-32-64), (64, 0.4, 32,
  64-64-128), group-all (128-256-512) -> 512-d, FC 256, FC 128 -> head.

Input: one cloud is ``(N, 3)``, points x coordinates (the layout of the data sets in
``flowerbed/data/pointclouds.py``; the reference code's ``(3, N)`` is not used: the shared
MLPs are ``nn.Linear`` layers on the last axis, same parameters as its 1x1 convolutions).
Grouped points enter a set abstraction as their coordinates relative to the centroid
concatenated with their features; the group-all layer reads absolute coordinates, as the
reference code does. Centroid counts are clamped to the cloud's size (``min(m, N)``): a cloud of
64 points gets 64 centroids in both set abstractions, a cloud of 1024 the paper's counts.
Sampling starts at point 0 (deterministic). ``features`` is everything up to and including the
last FC block (in training mode its output has passed the dropout); ``head`` is the final
``nn.Linear``. Batch norm after the FC layers makes a training batch of one cloud an error.

Sizes for 40 classes, parameters + buffers (``models.classifier.size_bytes`` / 2^20; the paper's
convention, SEEDS.md 2.5):

| model | parameters | buffers | MB | paper |
|---|---|---|---|---|
| ``pointnet2`` | 1,475,688 | 6,667 | 5.655 | 5.65 |
| ``pointnet2-small`` | 374,344 | 3,339 | 1.441 | 1.44 |
| ``pointnet`` | 811,048 | 3,973 | 3.109 | - |
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from torch import Tensor, nn

from .classifier import Classifier
from .point_ops import group_all, group_around_centroids

POINT_DIMENSIONS = 3


@dataclass(frozen=True)
class SetAbstractionSpec:
    """One set abstraction: ``centroids`` None = group all points into one group."""

    centroids: int | None
    radius: float
    neighbours: int
    widths: tuple[int, ...]


class SharedMLP(nn.Module):
    """Linear -> BatchNorm -> ReLU per width, the same for every point: ``(..., C)`` ->
    ``(..., widths[-1])``. The reference code's 1x1 convolutions, as ``nn.Linear`` on the
    flattened points: same parameters, and on CPU a plain matrix product (torch's 1x1 ``Conv2d``
    takes a slower non-GEMM path: the whole PointNet++ step was about 15 % slower with it)."""

    def __init__(self, in_width: int, widths: Sequence[int]) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        for width in widths:
            layers += [nn.Linear(in_width, width), nn.BatchNorm1d(width), nn.ReLU()]
            in_width = width
        self.layers = nn.Sequential(*layers)

    def forward(self, x: Tensor) -> Tensor:
        out = self.layers(x.reshape(-1, x.shape[-1]))
        return out.reshape(*x.shape[:-1], out.shape[-1])


class SetAbstraction(nn.Module):
    """Sample centroids, group their neighbours, shared MLP, max over each group.

    ``forward(xyz (B, N, 3), features (B, N, C) or None)`` -> centroids ``(B, m, 3)`` and their
    features ``(B, m, widths[-1])`` (group-all: m = 1).
    """

    def __init__(self, spec: SetAbstractionSpec, in_features: int) -> None:
        super().__init__()
        self.spec = spec
        self.mlp = SharedMLP(POINT_DIMENSIONS + in_features, spec.widths)

    def forward(self, xyz: Tensor, features: Tensor | None) -> tuple[Tensor, Tensor]:
        spec = self.spec
        if spec.centroids is None:
            centroids = xyz.new_zeros(xyz.shape[0], 1, POINT_DIMENSIONS)
            grouped = group_all(xyz, features)
        else:
            # clouds smaller than the paper's 1,024 points (tests, quick runs): at most N
            # centroids and N neighbours (more would only repeat points, as ball query pads)
            points = xyz.shape[1]
            centroids, grouped = group_around_centroids(
                xyz,
                features,
                min(spec.centroids, points),
                spec.radius,
                min(spec.neighbours, points),
            )
        return centroids, self.mlp(grouped).amax(dim=2)  # max over each group: (B, m, C')


def fc_block(in_width: int, width: int, dropout: float, dropout_first: bool = False):
    """Linear -> BatchNorm1d -> ReLU -> Dropout (PointNet++), or Linear -> Dropout ->
    BatchNorm1d -> ReLU (``dropout_first``: PointNet's second block)."""
    if dropout_first:
        return [nn.Linear(in_width, width), nn.Dropout(dropout), nn.BatchNorm1d(width), nn.ReLU()]
    return [nn.Linear(in_width, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Dropout(dropout)]


class PointNet2Features(nn.Module):
    """The set abstractions, then the FC blocks: ``(B, N, 3)`` -> ``(B, fc_widths[-1])``."""

    def __init__(
        self, specs: Sequence[SetAbstractionSpec], fc_widths: Sequence[int], dropout: float
    ) -> None:
        super().__init__()
        layers, in_features = [], 0
        for spec in specs:
            layers.append(SetAbstraction(spec, in_features))
            in_features = spec.widths[-1]
        self.set_abstractions = nn.ModuleList(layers)
        blocks: list[nn.Module] = []
        for width in fc_widths:
            blocks += fc_block(in_features, width, dropout)
            in_features = width
        self.fc = nn.Sequential(*blocks)

    def forward(self, x: Tensor) -> Tensor:
        xyz, features = x, None
        for layer in self.set_abstractions:
            xyz, features = layer(xyz, features)
        return self.fc(features.flatten(1))


class PointNetFeatures(nn.Module):
    """Shared MLP on every point, max pool, FC blocks: ``(B, N, 3)`` -> ``(B, 256)``."""

    def __init__(self, widths=(64, 128, 1024), fc_widths=(512, 256), dropout: float = 0.4):
        super().__init__()
        self.point_mlp = SharedMLP(POINT_DIMENSIONS, widths)
        first, second = fc_widths
        self.fc = nn.Sequential(
            nn.Linear(widths[-1], first),
            nn.BatchNorm1d(first),
            nn.ReLU(),
            *fc_block(first, second, dropout, dropout_first=True),
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.point_mlp(x).amax(dim=1))  # max over the points


def _check_points(input_shape: tuple[int, ...], name: str) -> None:
    if len(input_shape) != 2 or input_shape[1] != POINT_DIMENSIONS:
        raise ValueError(
            f"model {name!r} needs point clouds (N, 3), got input shape {input_shape};"
            " use a point-cloud data set (shapes, modelnet40, modelnet10)"
        )


POINTNET2_SSG = (
    SetAbstractionSpec(512, 0.2, 32, (64, 64, 128)),
    SetAbstractionSpec(128, 0.4, 64, (128, 128, 256)),
    SetAbstractionSpec(None, 0.0, 0, (256, 512, 1024)),
)
POINTNET2_SMALL = (
    SetAbstractionSpec(256, 0.2, 16, (32, 32, 64)),
    SetAbstractionSpec(64, 0.4, 32, (64, 64, 128)),
    SetAbstractionSpec(None, 0.0, 0, (128, 256, 512)),
)


def build_pointnet(input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    """PointNet without T-Nets (``pointnet``)."""
    _check_points(input_shape, "pointnet")
    return Classifier(PointNetFeatures(), nn.Linear(256, num_classes))


def build_pointnet2(input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    """PointNet++ SSG (``pointnet2``), the FL + KD benchmark's teacher."""
    _check_points(input_shape, "pointnet2")
    return Classifier(
        PointNet2Features(POINTNET2_SSG, (512, 256), 0.4), nn.Linear(256, num_classes)
    )


def build_pointnet2_small(input_shape: tuple[int, ...], num_classes: int) -> Classifier:
    """The compact PointNet++ student (``pointnet2-small``), about a quarter of ``pointnet2``."""
    _check_points(input_shape, "pointnet2-small")
    features = PointNet2Features(POINTNET2_SMALL, (256, 128), 0.4)
    return Classifier(features, nn.Linear(128, num_classes))


__all__ = [
    "build_pointnet",
    "build_pointnet2",
    "build_pointnet2_small",
]
