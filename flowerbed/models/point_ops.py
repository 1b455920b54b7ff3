"""Point-cloud sampling and grouping of PointNet++ (Qi et al., "PointNet++: Deep Hierarchical
Feature Learning on Point Sets in a Metric Space", NeurIPS 2017), vectorised over the batch.

* ``farthest_point_sample``: m centroids by iterative farthest-point sampling (FPS);
* ``ball_query``: for every centroid the first k points (in index order) within a radius,
  padded with the first one found (the reference implementation's convention);
* ``gather_points``, ``group_around_centroids``, ``group_all``: the set-abstraction inputs,
  grouped coordinates relative to their centroid concatenated with the points' features.

Written by hand: torch has no farthest-point sampling or ball query, and the reference CUDA
kernels are not used (public PyTorch only, CPU friendly). Clouds are ``(B, N, 3)`` tensors.
"""

from __future__ import annotations

import torch
from torch import Tensor


def squared_distances(a: Tensor, b: Tensor) -> Tensor:
    """``(B, M, 3)``, ``(B, N, 3)`` -> ``(B, M, N)`` squared Euclidean distances."""
    distances = -2.0 * a @ b.transpose(1, 2)
    distances += (a**2).sum(-1, keepdim=True)
    distances += (b**2).sum(-1).unsqueeze(1)
    return distances.clamp_min_(0.0)


def farthest_point_sample(
    xyz: Tensor,
    num_samples: int,
    *,
    start_index: int = 0,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Indices ``(B, num_samples)`` of farthest-point samples of every cloud ``(B, N, 3)``.

    The first sample is point ``start_index`` of every cloud (deterministic; the reference code
    with a fixed start), or a random point per cloud drawn from ``generator`` when one is given.
    Each next sample is the point farthest from those already chosen (ties: the lowest index).
    """
    batch, num_points, _ = xyz.shape
    if not 1 <= num_samples <= num_points:
        raise ValueError(f"cannot sample {num_samples} of {num_points} points")
    rows = torch.arange(batch, device=xyz.device)
    chosen = torch.empty(batch, num_samples, dtype=torch.long, device=xyz.device)
    if generator is None:
        farthest = torch.full((batch,), start_index, dtype=torch.long, device=xyz.device)
    else:
        farthest = torch.randint(num_points, (batch,), generator=generator).to(xyz.device)
    nearest = torch.full((batch, num_points), float("inf"), dtype=xyz.dtype, device=xyz.device)
    for i in range(num_samples):
        chosen[:, i] = farthest
        centroid = xyz[rows, farthest].unsqueeze(1)  # (B, 1, 3)
        nearest = torch.minimum(nearest, ((xyz - centroid) ** 2).sum(-1))
        farthest = nearest.argmax(-1)
    return chosen


def ball_query(xyz: Tensor, centroids: Tensor, radius: float, k: int) -> Tensor:
    """Indices ``(B, m, k)``: for every centroid ``(B, m, 3)`` the first ``k`` points of
    ``xyz`` ``(B, N, 3)`` (in index order) at distance <= ``radius``; fewer than ``k`` found are
    padded with the first found. A centroid that is one of the points finds at least itself; a
    centroid with no point in reach gets its nearest point (never an out-of-range index)."""
    num_points = xyz.shape[1]
    distances = squared_distances(centroids, xyz)  # (B, m, N)
    inside = distances <= radius**2
    rank = inside.long().cumsum(-1) - 1  # slot of each point inside the ball, in index order
    slot = torch.where(inside & (rank < k), rank, torch.full_like(rank, k))  # k = discarded
    found = torch.zeros(*inside.shape[:2], k + 1, dtype=torch.long, device=xyz.device)
    index = torch.arange(num_points, device=xyz.device).expand_as(slot)
    found.scatter_(-1, slot, index)
    found = found[..., :k]
    count = inside.sum(-1, keepdim=True)  # (B, m, 1)
    first = torch.where(count > 0, found[..., :1], distances.argmin(-1, keepdim=True))
    padding = torch.arange(k, device=xyz.device) >= count
    return torch.where(padding, first, found)


def gather_points(points: Tensor, index: Tensor) -> Tensor:
    """``points`` ``(B, N, C)`` at ``index`` ``(B, ...)`` -> ``(B, ..., C)``."""
    batch = points.shape[0]
    flat = index.reshape(batch, -1)
    gathered = torch.gather(points, 1, flat.unsqueeze(-1).expand(-1, -1, points.shape[-1]))
    return gathered.reshape(*index.shape, points.shape[-1])


def group_around_centroids(
    xyz: Tensor,
    features: Tensor | None,
    num_centroids: int,
    radius: float,
    k: int,
) -> tuple[Tensor, Tensor]:
    """PointNet++'s sample-and-group: ``num_centroids`` FPS centroids ``(B, m, 3)`` and their
    groups ``(B, m, k, 3 + C)``: coordinates relative to the centroid, then the features
    ``(B, N, C)`` of the grouped points (none when ``features`` is None)."""
    centroids = gather_points(xyz, farthest_point_sample(xyz, num_centroids))
    neighbours = ball_query(xyz, centroids, radius, k)
    grouped = gather_points(xyz, neighbours) - centroids.unsqueeze(2)
    if features is not None:
        grouped = torch.cat([grouped, gather_points(features, neighbours)], dim=-1)
    return centroids, grouped


def group_all(xyz: Tensor, features: Tensor | None) -> Tensor:
    """The group-all set abstraction's input: one group of every point ``(B, 1, N, 3 + C)``,
    absolute coordinates then features (the reference code's convention)."""
    grouped = xyz if features is None else torch.cat([xyz, features], dim=-1)
    return grouped.unsqueeze(1)
