"""Shared fixtures: small run configs for fast federations, and ``fl``, the helpers that build
clients and Flower messages for the tests of server rules and client steps."""

from __future__ import annotations

import os
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

from flowerbed.catalog import parse_run_config
from flowerbed.core.device import to_device_of
from flowerbed.data import DatasetSplits
from flowerbed.inprocess import resolve_run_config, use_server_identity
from flowerbed.models import build_model
from flowerbed.training.local_client import LocalClient
from flowerbed.training.loops import train_local

# The ServerApp writes report.html at the end of every run (about a second of plotting); the
# suite's hundreds of runs skip it. tests/test_report.py turns it on where it tests it.
os.environ.setdefault("FLOWERBED_REPORT", "0")


@pytest.fixture
def one_thread():
    """One torch thread (two busy cores: one thread is many times faster than two)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def fast_run(tmp_path):
    """Overrides for a short digits job writing into the test's temporary folder."""
    return {
        "num-server-rounds": 2,
        "local-epochs": 1,
        "output-dir": str(tmp_path / "runs"),
        "data-dir": str(tmp_path / "data"),
    }


def replies(clients: list[tuple[dict, dict]]) -> list[Message]:
    """Reply messages, one per (arrays, metrics) pair, as clients would send them."""
    use_server_identity()
    out = []
    for node, (arrays, metrics) in enumerate(clients):
        sent = Message(content=RecordDict(), message_type=MessageType.TRAIN, dst_node_id=10 + node)
        record = ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})
        out.append(
            Message(RecordDict({"arrays": record, "metrics": MetricRecord(metrics)}), reply_to=sent)
        )
    return out


def arrays_of(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


def configure(strategy, arrays: dict, num_nodes: int = 4) -> list[Message]:
    """Run ``configure_train`` against a fake grid of ``num_nodes`` nodes."""
    use_server_identity()

    class Grid:
        def get_node_ids(self):
            return list(range(100, 100 + num_nodes))

    record = ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})
    return list(strategy.configure_train(1, record, ConfigRecord(), Grid()))


def local_client(
    overrides: dict, partition_id: int = 0, num_partitions: int = 4, state=None
) -> LocalClient:
    """The client of partition ``partition_id`` for the run config ``overrides``."""
    run_config = resolve_run_config(overrides)
    context = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": partition_id, "num-partitions": num_partitions},
        state=state if state is not None else RecordDict(),
        run_config=run_config,
    )
    return LocalClient.from_context(context, parse_run_config(run_config))


def train_msg(client: LocalClient, server_round: int = 1, extra: dict | None = None) -> Message:
    """The training message a server would send: the client's fresh model as global model."""
    use_server_identity()
    torch.manual_seed(0)
    content = RecordDict(
        {
            "arrays": ArrayRecord(client.new_model().state_dict()),
            "config": ConfigRecord({"server-round": server_round}),
            **(extra or {}),
        }
    )
    return Message(content=content, message_type=MessageType.TRAIN, dst_node_id=1)


def tiny_client(
    model: str, x: torch.Tensor, y: torch.Tensor, num_classes: int, **overrides
) -> LocalClient:
    """A client whose local train and test split are ``(x, y)``; no data set is loaded."""
    run_config = resolve_run_config({"model": model, **overrides})
    data = DatasetSplits("tiny", x, y, x, y, num_classes)
    context = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": 0, "num-partitions": 1},
        state=RecordDict(),
        run_config=run_config,
    )
    return LocalClient(parse_run_config(run_config), context, 0, 1, data, x, y, x, y)


def train_message(state_dict: dict, server_round: int = 1) -> Message:
    """What the server sends for training: the global arrays and the round."""
    use_server_identity()
    content = RecordDict(
        {"arrays": ArrayRecord(state_dict), "config": ConfigRecord({"server-round": server_round})}
    )
    return Message(content, dst_node_id=1, message_type=MessageType.TRAIN)


def full_batch_gradient(model: torch.nn.Module, params: dict, x, y) -> dict:
    """The full-batch cross-entropy gradient at ``params``, on the host (computed on the
    model's device)."""
    model.load_state_dict(params, strict=False)
    model.zero_grad()
    x, y = to_device_of(model, x, y)
    torch.nn.functional.cross_entropy(model(x), y).backward()
    return {k: p.grad.detach().cpu() for k, p in model.named_parameters()}


def random_like(shapes: dict, scale: float, seed: int) -> dict:
    g = torch.Generator().manual_seed(seed)
    return {k: scale * torch.randn(v.shape, generator=g) for k, v in shapes.items()}


def clusters(classes, per_class=40, dim=6, seed=0):
    """Gaussian blobs, class c centred at 3 * e_c (standardised-looking inputs)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.cat(
        [
            torch.randn(per_class, dim, generator=g) * 0.7 + 3 * F.one_hot(torch.tensor(c), dim)
            for c in classes
        ]
    )
    y = torch.tensor([c for c in classes for _ in range(per_class)])
    return x, y


def trained_mlp(classes, num_classes=4, epochs=30, seed=0):
    torch.manual_seed(seed)
    model = build_model("mlp", (6,), num_classes)
    x, y = clusters(classes, seed=seed)
    train_local(
        model,
        x,
        y,
        epochs=epochs,
        batch_size=16,
        optimizer=torch.optim.Adam(model.parameters(), lr=0.01),
        generator=torch.Generator().manual_seed(seed),
    )
    return model.eval()


def write_medmnist_npz(path, n_train=12, n_test=6, shape=(28, 28, 3), classes=8, seed=0):
    """A MedMNIST file as the ``medmnist`` package ships it: an npz of uint8 ``<split>_images``
    (N, H, W[, C]) and ``<split>_labels`` (N, 1) for train, val and test. Returns the arrays."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, n in (("train", n_train), ("val", 4), ("test", n_test)):
        arrays[f"{split}_images"] = rng.integers(0, 256, (n, *shape), dtype=np.uint8)
        arrays[f"{split}_labels"] = (np.arange(n) % classes).reshape(n, 1).astype(np.uint8)
    np.savez_compressed(path, **arrays)
    return arrays


def whole_array_standardised(train_images: np.ndarray, test_images: np.ndarray, exact=False):
    """The former in-memory loader, as reference: uint8 (N, H, W[, C]) -> float32 NCHW in
    [0, 1], standardised per channel with float32 statistics of the whole training array.
    ``exact``: the same in float64 (the statistics the former float32 reductions approximate).
    Returns (x_train, x_test, mean, std) as numpy arrays."""
    dtype = np.float64 if exact else np.float32

    def nchw(images):
        images = (images.astype(np.float32) / 255.0).astype(dtype)
        return images[:, None] if images.ndim == 3 else images.transpose(0, 3, 1, 2)

    x_train, x_test = nchw(train_images), nchw(test_images)
    mean = x_train.mean(axis=(0, 2, 3), keepdims=True)
    std = x_train.std(axis=(0, 2, 3), keepdims=True)
    std[std == 0] = 1.0
    return (
        ((x_train - mean) / std).astype(dtype),
        ((x_test - mean) / std).astype(dtype),
        mean.reshape(-1),
        std.reshape(-1),
    )


SITE_FORMATS_IN_ORDER = ("images", "csv", "npz")


def write_digit_sites(root, samples_per_site: int = 300, test_share: float = 0.25) -> list:
    """Three hospitals' own folders (``flowerbed.data.site_data``) holding disjoint slices of
    scikit-learn's digits as 8x8 grayscale pixels (0..16 scaled to 0..255): site 0 as image
    files by class, site 1 as ``train.csv``/``test.csv`` (64 pixel columns and ``label``; read
    with ``input-shape='1,8,8'``), site 2 as ``data.npz``; each with its own test part.
    Returns the three folders (absolute)."""
    from pathlib import Path

    from PIL import Image
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.round(bunch.images * 255 / 16).astype(np.uint8)
    labels = bunch.target.astype(np.int64)
    num_test = int(samples_per_site * test_share)
    folders = []
    for site, kind in enumerate(SITE_FORMATS_IN_ORDER):
        folder = Path(root).resolve() / f"site-{site}-{kind}"
        folder.mkdir(parents=True)
        part = slice(site * samples_per_site, (site + 1) * samples_per_site)
        x, y = images[part], labels[part]
        splits = {"train": (x[num_test:], y[num_test:]), "test": (x[:num_test], y[:num_test])}
        for split, (xs, ys) in splits.items():
            if kind == "images":
                for index, (image, label) in enumerate(zip(xs, ys)):
                    path = folder / split / str(int(label)) / f"{index:04d}.png"
                    path.parent.mkdir(parents=True, exist_ok=True)
                    Image.fromarray(image).save(path)
            elif kind == "csv":
                header = ",".join([f"pixel{i}" for i in range(64)] + ["label"])
                rows = [
                    ",".join([*map(str, row), str(int(label))])
                    for row, label in zip(xs.reshape(len(xs), -1), ys)
                ]
                (folder / f"{split}.csv").write_text("\n".join([header, *rows]) + "\n")
        if kind == "npz":
            (xtr, ytr), (xte, yte) = splits["train"], splits["test"]
            np.savez(
                folder / "data.npz",
                x_train=xtr[:, None],
                y_train=ytr,
                x_test=xte[:, None],
                y_test=yte,
            )
        folders.append(folder)
    return folders


@pytest.fixture
def federation(tmp_path):
    """Processes of a federation on loopback (``test_deployment.Federation``), each stopped by
    its PID after the test."""
    from test_deployment import Federation

    fed = Federation(tmp_path)
    try:
        yield fed
    finally:
        fed.stop()


@pytest.fixture
def fl():
    """The helpers above, for tests of server rules and client steps."""
    use_server_identity()
    return SimpleNamespace(
        replies=replies,
        arrays_of=arrays_of,
        configure=configure,
        local_client=local_client,
        train_msg=train_msg,
        tiny_client=tiny_client,
        train_message=train_message,
        full_batch_gradient=full_batch_gradient,
        random_like=random_like,
        clusters=clusters,
        trained_mlp=trained_mlp,
        write_medmnist_npz=write_medmnist_npz,
        whole_array_standardised=whole_array_standardised,
        write_digit_sites=write_digit_sites,
    )
