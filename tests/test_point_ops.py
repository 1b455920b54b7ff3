"""Farthest-point sampling, ball query and grouping against brute-force Python references."""

import pytest
import torch

from flowerbed.models.point_ops import (
    ball_query,
    farthest_point_sample,
    gather_points,
    group_all,
    group_around_centroids,
)


def clouds(batch=2, num_points=37, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(batch, num_points, 3, generator=generator, dtype=torch.float64) * 2 - 1


def fps_reference(points, m, start=0):
    """One cloud, plain Python: each next point the farthest from those chosen."""
    chosen = [start]
    for _ in range(m - 1):
        best, best_distance = None, -1.0
        for i, p in enumerate(points.tolist()):
            d = min(sum((a - b) ** 2 for a, b in zip(p, points[j].tolist())) for j in chosen)
            if d > best_distance:
                best, best_distance = i, d
        chosen.append(best)
    return chosen


def ball_reference(points, centroid, radius, k):
    """One centroid: the first k points (index order) within radius, padded with the first."""
    inside = [
        i
        for i, p in enumerate(points.tolist())
        if sum((a - b) ** 2 for a, b in zip(p, centroid.tolist())) <= radius**2
    ][:k]
    return inside + [inside[0]] * (k - len(inside))


@pytest.mark.parametrize("num_points, m", [(20, 5), (37, 12), (50, 50)])
def test_farthest_point_sample_matches_brute_force(num_points, m):
    xyz = clouds(num_points=num_points, seed=num_points)
    index = farthest_point_sample(xyz, m)
    assert index.shape == (2, m) and index.dtype == torch.long
    for b in range(2):
        assert index[b].tolist() == fps_reference(xyz[b], m)
    if m == num_points:  # every point once
        assert sorted(index[0].tolist()) == list(range(num_points))


def test_farthest_point_sample_start_is_fixed_or_seeded():
    xyz = clouds(num_points=30)
    assert torch.equal(farthest_point_sample(xyz, 6), farthest_point_sample(xyz, 6))
    assert (farthest_point_sample(xyz, 6)[:, 0] == 0).all()
    assert farthest_point_sample(xyz, 6, start_index=4)[0].tolist() == fps_reference(xyz[0], 6, 4)
    seeded = [
        farthest_point_sample(xyz, 6, generator=torch.Generator().manual_seed(3)) for _ in "ab"
    ]
    assert torch.equal(*seeded)
    with pytest.raises(ValueError, match="cannot sample 31 of 30"):
        farthest_point_sample(xyz, 31)


@pytest.mark.parametrize("radius, k", [(0.3, 4), (0.6, 8), (1.0, 16), (5.0, 60)])
def test_ball_query_matches_brute_force(radius, k):
    xyz = clouds(num_points=43, seed=1)
    centroids = gather_points(xyz, farthest_point_sample(xyz, 9))
    index = ball_query(xyz, centroids, radius, k)
    assert index.shape == (2, 9, k)
    for b in range(2):
        for c in range(9):
            assert index[b, c].tolist() == ball_reference(xyz[b], centroids[b, c], radius, k)


def test_ball_query_with_no_point_in_reach_takes_the_nearest():
    xyz = clouds(num_points=20)
    far = torch.full((2, 1, 3), 10.0, dtype=xyz.dtype)
    index = ball_query(xyz, far, 0.1, 3)
    nearest = ((xyz - far) ** 2).sum(-1).argmin(-1)
    assert (index == nearest[:, None, None]).all()


def test_grouping_gives_relative_coordinates_then_features():
    xyz = clouds(num_points=25)
    features = torch.randn(2, 25, 4, dtype=xyz.dtype)
    centroids, grouped = group_around_centroids(xyz, features, 6, 0.8, 5)
    assert centroids.shape == (2, 6, 3) and grouped.shape == (2, 6, 5, 7)
    index = ball_query(xyz, centroids, 0.8, 5)
    b, c, j = 1, 3, 2
    point = index[b, c, j]
    assert torch.allclose(grouped[b, c, j, :3], xyz[b, point] - centroids[b, c])
    assert torch.allclose(grouped[b, c, j, 3:], features[b, point])
    assert (grouped[..., :3].norm(dim=-1) <= 0.8 + 1e-9).all()
    assert torch.equal(group_all(xyz, features), torch.cat([xyz, features], -1)[:, None])
    assert torch.equal(group_all(xyz, None), xyz[:, None])
