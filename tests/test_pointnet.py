"""PointNet, PointNet++ SSG and the compact PointNet++ student: shapes, the feature/head split,
learning on a tiny batch, and the sizes the FL + KD benchmark reports (SEEDS.md 2.5)."""

import pytest
import torch

from flowerbed.models import MODELS, Classifier, build_model
from flowerbed.models.classifier import feature_width, size_bytes

POINT_MODELS = ("pointnet", "pointnet2", "pointnet2-small")


def unit_clouds(batch, num_points, seed=0):
    generator = torch.Generator().manual_seed(seed)
    x = torch.rand(batch, num_points, 3, generator=generator) * 2 - 1
    return x / x.norm(dim=-1).amax(-1)[:, None, None]


@pytest.mark.parametrize("name", POINT_MODELS)
def test_point_models_give_logits_flat_features_and_a_linear_head(name):
    assert name in MODELS
    torch.manual_seed(0)
    model = build_model(name, (64, 3), num_classes=5)
    assert isinstance(model, Classifier) and isinstance(model.head, torch.nn.Linear)
    x = unit_clouds(2, 64)  # fewer points than the 512 / 256 centroids: counts are clamped
    model.eval()
    logits = model(x)
    assert logits.shape == (2, 5)
    taps = model.taps(x)
    assert taps["features"].shape == (2, model.head.in_features)
    assert torch.allclose(taps["logits"], logits, atol=1e-5)
    assert feature_width(model, (64, 3)) == model.head.in_features


def test_pointnet_ignores_the_order_of_the_points():
    model = build_model("pointnet", (64, 3), num_classes=5).eval()
    x = unit_clouds(2, 64)
    assert torch.allclose(model(x[:, torch.randperm(64)]), model(x), atol=1e-5)


@pytest.mark.parametrize("name", POINT_MODELS)
def test_point_models_learn_a_tiny_batch(name):
    torch.manual_seed(0)
    model = build_model(name, (64, 3), num_classes=3)
    x, y = unit_clouds(6, 64, seed=1), torch.tensor([0, 1, 2, 0, 1, 2])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for _ in range(8):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert all(p.grad is not None for p in model.parameters())
    assert losses[-1] < 0.7 * losses[0]


@pytest.mark.parametrize(
    "name, classes, paper_megabytes",
    [("pointnet2", 40, 5.65), ("pointnet2-small", 40, 1.44), ("pointnet2", 4, 5.62)],
)
def test_sizes_match_the_paper(name, classes, paper_megabytes):
    """Parameters + buffers at fp32: 5.655 / 1.441 MB for 40 classes (paper 5.65 / 1.44)."""
    model = build_model(name, (1024, 3), classes)
    assert size_bytes(model) / 2**20 == pytest.approx(paper_megabytes, rel=0.05)


def test_exact_parameter_counts_for_40_classes():
    count = lambda name: sum(p.numel() for p in build_model(name, (1024, 3), 40).parameters())
    assert count("pointnet2") == 1_475_688
    assert count("pointnet2-small") == 374_344
    assert count("pointnet") == 811_048
    # the student is about a quarter of the teacher (paper: 74.5 % smaller)
    assert 0.72 < 1 - count("pointnet2-small") / count("pointnet2") < 0.77


@pytest.mark.parametrize("name", POINT_MODELS)
def test_point_models_reject_other_inputs(name):
    with pytest.raises(ValueError, match="needs point clouds"):
        build_model(name, (1, 8, 8), 10)
