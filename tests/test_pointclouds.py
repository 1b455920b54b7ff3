"""Point-cloud data: the generated shape set, the ModelNet loaders (on folders written here in
the downloads' formats), the FL + KD benchmark's training augmentation, and PointNet learning
the shapes."""

import json
import math

import numpy as np
import pytest
import torch

from flowerbed.data import DataNotFoundError, available_datasets, load_dataset
from flowerbed.data.pointclouds import (
    MAX_SHIFT,
    SCALE_RANGE,
    SHAPE_CLASSES,
    augment_point_batch,
    generate_shapes,
)
from flowerbed.models import build_model


def test_run_config_reads_the_shapes_as_1024_point_clouds():
    from flowerbed.catalog import parse_run_config
    from flowerbed.data.federation import load_splits

    config = parse_run_config({"dataset": "shapes", "model": "pointnet2"})
    data = load_splits(config)
    assert data.input_shape == (1024, 3) and data.num_classes == 6


def test_shape_generation_is_a_pure_function_of_the_seed():
    a, labels = generate_shapes(per_class=3, seed=5, num_points=64)
    b, _ = generate_shapes(per_class=3, seed=5, num_points=64)
    c, _ = generate_shapes(per_class=3, seed=6, num_points=64)
    assert a.shape == (3 * len(SHAPE_CLASSES), 64, 3) and a.dtype == np.float32
    assert np.array_equal(a, b) and not np.array_equal(a, c)
    assert labels.tolist() == [k for k in range(len(SHAPE_CLASSES)) for _ in range(3)]
    # centred on their mean, farthest point on the unit sphere
    assert np.allclose(a.mean(axis=1), 0, atol=1e-5)
    assert np.allclose(np.linalg.norm(a, axis=-1).max(axis=1), 1, atol=1e-5)


def test_shapes_is_a_fixed_balanced_set_whatever_the_run_seed():
    assert {"shapes", "modelnet40", "modelnet10"} <= set(available_datasets())
    one = load_dataset("shapes", seed=1, num_points=128)
    assert load_dataset("shapes", seed=2, num_points=128) is one  # the seed is not read
    assert one.input_shape == (128, 3) and one.num_classes == len(SHAPE_CLASSES) == 6
    assert not one.is_image and one.x_train.dtype == torch.float32
    assert torch.bincount(one.y_train).tolist() == [100] * 6
    assert torch.bincount(one.y_test).tolist() == [25] * 6
    assert not torch.equal(one.x_train[:25], one.x_test[:25])  # disjoint draws
    # not standardised: every cloud still in the unit sphere
    assert torch.allclose(one.x_test.norm(dim=-1).amax(-1), torch.ones(150), atol=1e-5)


def test_default_shape_set_has_1024_points():
    assert load_dataset("shapes").input_shape == (1024, 3)


def write_modelnet_text(root, num_lines=1030):
    """A resampled-format ModelNet10 folder: 2 classes, one training and one test shape each."""
    folder = root / "modelnet40_normal_resampled"
    rng = np.random.default_rng(0)
    classes = ("chair", "night_stand")
    (folder).mkdir(parents=True)
    (folder / "modelnet10_shape_names.txt").write_text("\n".join(classes) + "\n")
    (folder / "modelnet10_train.txt").write_text("chair_0001\nnight_stand_0001\n")
    (folder / "modelnet10_test.txt").write_text("chair_0002\nnight_stand_0002\n")
    written = {}
    for category in classes:
        (folder / category).mkdir()
        for number in ("0001", "0002"):
            rows = rng.normal(size=(num_lines, 6))
            path = folder / category / f"{category}_{number}.txt"
            path.write_text("\n".join(",".join(f"{v:.6f}" for v in row) for row in rows))
            written[f"{category}_{number}"] = rows
    return written


def test_modelnet_text_loader_reads_first_1024_xyz_and_normalises(tmp_path):
    written = write_modelnet_text(tmp_path)
    data = load_dataset("modelnet10", data_dir=tmp_path)
    assert data.input_shape == (1024, 3) and data.num_classes == 2
    assert data.y_train.tolist() == [0, 1] and data.y_test.tolist() == [0, 1]
    raw = written["night_stand_0002"][:1024, :3]
    centred = raw - raw.mean(axis=0)
    expected = centred / np.linalg.norm(centred, axis=1).max()
    assert np.allclose(data.x_test[1].numpy(), expected, atol=1e-5)


def test_missing_modelnet_names_the_folder_and_the_download(tmp_path):
    with pytest.raises(DataNotFoundError, match="modelnet40_normal_resampled") as error:
        load_dataset("modelnet40", data_dir=tmp_path)
    message = str(error.value)
    assert "modelnet40_normal_resampled.zip" in message and "ply_hdf5_2048" in message
    with pytest.raises(DataNotFoundError, match="modelnet10_shape_names.txt"):
        load_dataset("modelnet10", data_dir=tmp_path / "other")


def test_modelnet40_hdf5_reads_data_and_label_or_asks_for_h5py(tmp_path):
    folder = tmp_path / "modelnet40_ply_hdf5_2048"
    folder.mkdir()
    try:
        import h5py
    except ImportError:
        with pytest.raises(ImportError, match="pip install h5py"):
            load_dataset("modelnet40", data_dir=tmp_path)
        return
    rng = np.random.default_rng(0)
    for split, n in (("train", 3), ("test", 2)):
        with h5py.File(folder / f"ply_data_{split}0.h5", "w") as f:
            f["data"] = rng.normal(size=(n, 2048, 3)).astype(np.float32)
            f["label"] = np.arange(n).reshape(n, 1).astype(np.uint8)
    data = load_dataset("modelnet40", data_dir=tmp_path)
    assert data.input_shape == (1024, 3) and data.y_train.tolist() == [0, 1, 2]


def test_augmentation_drops_scales_and_shifts_within_the_papers_bounds():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 200, 3)
    out = augment_point_batch(x, generator)
    assert out.shape == x.shape and not torch.equal(out, x)
    low, high = SCALE_RANGE
    dropped_fractions = []
    for cloud, original in zip(out, x):
        # a kept point p becomes s p + t; the first point too, so dropped points equal it
        moved = (cloud - cloud[0]).norm(dim=-1)
        dropped = moved < 1e-6
        kept = ~dropped
        kept[0] = False
        dropped_fractions.append(float(dropped[1:].float().mean()))
        base = original[kept] - original[0]
        scale = (cloud[kept] - cloud[0]).norm(dim=-1) / base.norm(dim=-1)
        assert torch.allclose(scale, scale[0].expand_as(scale), atol=1e-4)  # isotropic
        assert low - 1e-5 <= float(scale[0]) <= high + 1e-5
        shift = cloud[0] - scale[0] * original[0]
        assert (shift.abs() <= MAX_SHIFT + 1e-5).all()
    assert max(dropped_fractions) <= 0.875 + 0.1 and min(dropped_fractions) < 0.2
    again = augment_point_batch(x, torch.Generator().manual_seed(0))
    assert torch.equal(again, out)  # seeded


def test_pointnet_learns_the_shapes_centrally():
    """PointNet, 64 points, 3 augmented epochs of Adam (about 10 s): clearly above chance (1/6)
    on the test split (0.67 when written)."""
    torch.manual_seed(0)
    data = load_dataset("shapes", num_points=64)
    model = build_model("pointnet", data.input_shape, data.num_classes)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        model.train()
        order = torch.randperm(len(data.y_train), generator=generator)
        for batch in order.split(24):
            optimizer.zero_grad()
            x = augment_point_batch(data.x_train[batch], generator)
            torch.nn.functional.cross_entropy(model(x), data.y_train[batch]).backward()
            optimizer.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(data.x_test).argmax(1) == data.y_test).float().mean()
    assert accuracy > 0.45


def test_fedavg_pointnet_on_shapes_in_process_with_augmented_training_batches(
    fast_run, one_thread, monkeypatch
):
    """Two rounds of in-process FedAvg, 2 clients, 3 local epochs, 128 points per shape: the
    global model learns (chance 1/6), every training batch goes through the augmentation and
    no evaluation batch does."""
    from flowerbed.catalog import parse_run_config
    from flowerbed.data import datasets, loaders, pointclouds
    from flowerbed.data.federation import load_splits, node_split
    from flowerbed.inprocess import resolve_run_config, run_in_process

    overrides = {
        **fast_run,
        "dataset": "shapes",
        "model": "pointnet",
        "num-points": 128,
        "local-epochs": 3,
        "partitioner": "iid",
        "optimizer": "adam",
        "learning-rate": 1e-3,
        "batch-size": 24,
    }
    augmented = []

    def counting(x, generator):
        augmented.append(len(x))
        return pointclouds.augment_point_batch(x, generator)

    # the loaded (cached) data set holds the counting augmentation; the cache is cleared after
    monkeypatch.setattr(loaders, "augment_point_batch", counting)
    monkeypatch.setattr(datasets, "_load_cached", datasets._load_cached.__wrapped__)
    config = parse_run_config(resolve_run_config(overrides))
    assert load_splits(config).input_shape == (128, 3)
    assert load_splits(config).augment is counting
    augmented.clear()
    run = run_in_process(overrides, num_clients=2)
    history = json.loads((run / "history.json").read_text())
    assert history[-1]["central_accuracy"] > 0.28
    assert not math.isnan(history[-1]["central_loss"])
    # every training sample of every epoch (3) of every round (2) of both clients
    local = sum(len(node_split(config, 2, pid)[0]) for pid in range(2))
    assert sum(augmented) == local * 3 * 2


def test_fedavg_then_distill_pointnet2_into_its_compact_student(fast_run, one_thread):
    """The federated-then-distilled pipeline on point clouds: the PointNet++ teacher after one
    FedAvg round, distilled without labels into the compact PointNet++ student (16 points per
    shape to keep it short)."""
    from flowerbed.inprocess import run_in_process

    run = run_in_process(
        {
            **fast_run,
            "dataset": "shapes",
            "model": "pointnet2",
            "num-points": 16,
            "num-server-rounds": 1,
            "partitioner": "iid",
            "optimizer": "adam",
            "learning-rate": 1e-3,
            "distill-objective": "feature",
            "distill-mode": "unlabeled",
            "distill-epochs": 1,
        },
        num_clients=2,
    )
    summary = json.loads((run / "distill.json").read_text())
    assert summary["student"]["model"] == "pointnet2-small"
    assert summary["student"]["parameters"] < summary["teacher"]["parameters"] / 3
    assert summary["label_free"] is True
    assert 0.0 <= summary["student"]["final_test_accuracy"] <= 1.0
