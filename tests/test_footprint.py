"""A model's memory read off the model itself on torch's meta device: the leaf outputs that
training keeps, counted by hand for small models; the most bytes alive at once in evaluation,
with views and in-place results free and PointNet++'s ball query seen; every registered model
passes on the meta device."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from torch import nn

from flowerbed.models import MODELS, footprint
from flowerbed.runtime import needs


def on_meta(build):
    with torch.device("meta"):
        return build()


def test_kept_values_are_every_leaf_modules_output():
    model = on_meta(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    assert footprint.activations(model, (4,)).kept == 8 + 8 + 2
    # cnn on digits: conv 32x8x8, ReLU, pool 32x4x4, conv 64x4x4, ReLU, adaptive pool 64x4x4,
    # flatten 1024, Linear 128, ReLU, head 10
    cnn = on_meta(lambda: MODELS["cnn"]((1, 8, 8), 10))
    kept = 2 * 32 * 64 + 32 * 16 + 3 * 64 * 16 + 1024 + 2 * 128 + 10
    assert footprint.activations(cnn, (1, 8, 8)).kept == kept == 8970
    assert cnn.training  # its mode is given back


def test_the_peak_is_the_most_bytes_alive_at_once():
    model = on_meta(lambda: nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2)))
    # the input (16 bytes), the first layer's output and the ReLU's (32 each) while it runs
    assert footprint.activations(model, (4,)).peak_bytes == 16 + 32 + 32
    cnn = on_meta(lambda: MODELS["cnn"]((1, 8, 8), 10))
    assert footprint.activations(cnn, (1, 8, 8)).peak_bytes == 256 + 2 * 32 * 64 * 4


class ViewsAndInPlace(nn.Module):
    def forward(self, x):
        return x.reshape(-1).mul_(2)


def test_views_and_in_place_results_are_no_new_memory():
    model = on_meta(lambda: nn.Sequential(ViewsAndInPlace(), nn.Linear(6, 1)))
    # one sample: the input (24 bytes) and the output (4): the reshape is a view, mul_ writes in place
    assert footprint.activations(model, (2, 3)).peak_bytes == 24 + 4


def test_pointnet2s_ball_query_counts_in_the_peak_not_in_what_training_keeps():
    points, centroids = 1024, 512
    model = on_meta(lambda: MODELS["pointnet2"]((points, 3), 40))
    sample = footprint.activations(model, (points, 3))
    # float32 distances, the bool mask, int64 cumsum and ranks of every (centroid, point) pair
    assert sample.peak_bytes >= (4 + 1 + 8 + 8) * centroids * points
    # what training keeps: every shared MLP's Linear, BatchNorm and ReLU on the grouped points
    widths = [(64 + 64 + 128) * 512 * 32, (128 + 128 + 256) * 128 * 64, (256 + 512 + 1024) * 128]
    assert sample.kept > 3 * sum(widths)
    assert sample.kept < 3 * sum(widths) + 10_000  # the FC blocks: a few thousand values


@pytest.mark.parametrize("name", [name for name in MODELS if name != "vqc"])
def test_every_registered_model_passes_on_the_meta_device(name):
    for shape in ((1, 8, 8), (30,), (64, 3)):
        try:
            model = on_meta(lambda: MODELS[name](shape, 10))  # noqa: B023 (called here)
        except ValueError:  # the builder refuses this input: another shape fits
            continue
        sample = footprint.activations(model, shape)
        assert sample.kept > 0 and sample.peak_bytes >= 4 * math.prod(shape)  # the input's
        assert footprint.parameter_count(model) > 0
        return
    pytest.fail(f"model {name!r} takes none of the shapes")


# --- kept between processes: the pre-flight's cache ---------------------------------------------
def test_a_footprint_is_made_once_per_machine_and_read_after(tmp_path, monkeypatch):
    made = []
    real = footprint.activations

    def counted(model, shape):
        made.append(shape)
        return real(model, shape)

    monkeypatch.setattr(footprint, "activations", counted)
    first = needs.model_activations.__wrapped__("cnn", (1, 8, 8), 10, tmp_path)
    again = needs.model_activations.__wrapped__("cnn", (1, 8, 8), 10, tmp_path)  # a new process
    assert first == again == footprint.Activations(kept=8970, peak_bytes=256 + 2 * 32 * 64 * 4)
    assert made == [(1, 8, 8)]  # the second read the file
    assert needs.footprint_path(tmp_path, "cnn", (1, 8, 8), 10).is_file()
    # another input, classes or model source is another file
    needs.model_activations.__wrapped__("cnn", (1, 8, 8), 3, tmp_path)
    monkeypatch.setattr(needs, "models_source_digest", lambda: "a changed model")
    needs.model_activations.__wrapped__("cnn", (1, 8, 8), 10, tmp_path)
    assert made == [(1, 8, 8)] * 3
    assert len(list(tmp_path.iterdir())) == 3


def test_an_unreadable_footprint_is_made_again_and_an_unwritable_cache_is_no_error(tmp_path):
    path = needs.footprint_path(tmp_path, "cnn", (1, 8, 8), 10)
    path.write_text("{not json")
    sample = needs.model_activations.__wrapped__("cnn", (1, 8, 8), 10, tmp_path)
    assert sample.kept == 8970 and json.loads(path.read_text())["kept"] == 8970
    blocked = tmp_path / "a file, not a folder"
    blocked.write_text("")
    assert needs.model_activations.__wrapped__("cnn", (1, 8, 8), 10, blocked).kept == 8970


def test_footprints_are_kept_in_the_users_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert needs.footprints_dir() == tmp_path / "flowerbed" / "footprints"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert needs.footprints_dir() == Path.home() / ".cache" / "flowerbed" / "footprints"
