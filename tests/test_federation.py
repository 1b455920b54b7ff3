"""The run's data from mapped images: a client's share, the server's split and the partitions
equal those computed from in-memory tensors, and a whole run works on them."""

import dataclasses
import json

import numpy as np
import torch

from flowerbed.catalog import parse_run_config
from flowerbed.data import federation
from flowerbed.data.mapped_images import MappedImages
from flowerbed.inprocess import resolve_run_config, run_in_process


def bloodmnist_config(fl, data_dir, **overrides):
    fl.write_medmnist_npz(data_dir / "bloodmnist.npz", n_train=80, n_test=20, classes=4)
    overrides = {"dataset": "bloodmnist", "data-dir": str(data_dir), **overrides}
    return parse_run_config(resolve_run_config(overrides))


def test_client_and_server_splits_from_mapped_data_equal_those_from_tensors(
    tmp_path, fl, monkeypatch
):
    config = bloodmnist_config(fl, tmp_path, partitioner="iid", **{"server-fraction": 0.25})
    mapped = federation.load_splits(config)
    assert isinstance(mapped.x_train, MappedImages)
    clients = [federation.node_split(config, 3, pid) for pid in range(3)]
    server = federation.server_split(config)
    # views on the one map, nothing copied
    for x in (clients[0][0], clients[0][2], server[0]):
        assert isinstance(x, MappedImages) and x.images is mapped.x_train.images
    # the same run with the data set as in-memory tensors (what the loader used to give)
    tensors = dataclasses.replace(mapped, x_train=mapped.x_train[:], x_test=mapped.x_test[:])
    monkeypatch.setattr(federation, "_load", lambda key: tensors)
    for pid, ours in enumerate(clients):
        theirs = federation.node_split(config, 3, pid)
        assert all(isinstance(t, torch.Tensor) for t in theirs)
        for a, b in zip(ours, theirs):
            assert torch.equal(a[:], b)
    x, y = federation.server_split(config)
    assert len(y) == 20 and torch.equal(server[0][:], x) and torch.equal(server[1], y)


def test_kmeans_pca_clusters_mapped_images_as_it_clusters_tensors(tmp_path, fl, monkeypatch):
    config = bloodmnist_config(fl, tmp_path, partitioner="kmeans-pca")
    mapped = federation.load_splits(config)
    ours = federation.test_partition_for(config, 2), federation.partition_for(config, 2)
    tensors = dataclasses.replace(mapped, x_train=mapped.x_train[:], x_test=mapped.x_test[:])
    monkeypatch.setattr(federation, "_load", lambda key: tensors)
    federation._partition_cached.cache_clear()
    theirs = federation.test_partition_for(config, 2), federation.partition_for(config, 2)
    for a, b in zip(ours, theirs):
        assert [part.tolist() for part in a] == [part.tolist() for part in b]
    assert sum(len(part) for part in ours[0]) == 20  # every test image has a client


def test_a_run_on_mapped_medmnist_builds_the_cache_in_cache_dir(tmp_path, fl, fast_run):
    data_dir, cache = tmp_path / "data", tmp_path / "elsewhere"
    data_dir.mkdir()
    fl.write_medmnist_npz(data_dir / "bloodmnist.npz", n_train=80, n_test=20, classes=4)
    overrides = {**fast_run, "dataset": "bloodmnist", "cache-dir": str(cache)}
    run_dir = run_in_process({**overrides, "partitioner": "iid"}, num_clients=2)
    history = json.loads((run_dir / "history.json").read_text())
    assert len(history) == 3 and all(0 <= row["central_accuracy"] <= 1 for row in history)
    assert [p.name.split("-")[0] for p in cache.iterdir() if p.is_dir()] == ["bloodmnist"]
    assert not (data_dir / "flowerbed-cache").exists()
    folder = next(p for p in cache.iterdir() if p.is_dir())
    assert np.load(folder / "x_train.npy", mmap_mode="r").dtype == np.uint8
