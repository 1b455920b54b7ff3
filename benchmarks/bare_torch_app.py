"""A bare Flower + PyTorch app that does flowerbed's default job: the floor flowerbed is held to.

``write_bare_torch_app(folder, config, num_clients)`` writes a Flower app of about 200 lines
(its own ``pyproject.toml``, a ServerApp running Flower's own ``FedAvg`` strategy, a ClientApp
with a plain PyTorch training loop) and the data it trains on: flowerbed's partition of the run
config's data set (each client's training and local test split, and the central test set) in
one ``data.npz``, so that both apps train the same clients on the same samples. The network is
flowerbed's ``cnn`` written out in ``torch.nn`` (``check_same_network`` compares the two), the
optimiser the run config's SGD, the batches shuffled each epoch; the server evaluates the
aggregated model on the central test set after every round, as flowerbed does.

Its run config (``[tool.flwr.app.config]``) also turns on what a user commonly adds:
``fraction-evaluate`` (the clients evaluate the global model on their test split),
``checkpoint`` (``torch.save`` of the global model after each round) and ``tracker`` (the loss
and accuracy of each round to TensorBoard with ``torch.utils.tensorboard``), each the way a
hand-written app would.

The ServerApp writes each round's seconds, from the round's first training message to the end
of its central evaluation, as flowerbed's ``round`` stage does, and the ClientApp each reply's
``client step`` with its ``client training`` or ``client evaluation`` within it, to the file
that ``FLOWERBED_STAGE_TIMES`` names (the same JSON lines as ``flowerbed.core.stages``), so
that ``round_stages.py`` reads both apps' rounds and stages alike.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from flowerbed.data.federation import load_splits, node_split
from flowerbed.models import build_model
from flowerbed.settings import RunConfig

PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "baretorchapp"
version = "0.1.0"
description = "A bare Flower + PyTorch app: the floor flowerbed is compared with"
license = "Apache-2.0"
dependencies = ["flwr[simulation]==1.42.0", "numpy", "torch"]

[tool.hatch.build.targets.wheel]
packages = ["baretorchapp"]

[tool.flwr.app]
publisher = "flowerbed"

[tool.flwr.app.components]
serverapp = "baretorchapp.server_app:app"
clientapp = "baretorchapp.client_app:app"

[tool.flwr.app.config]
num-server-rounds = 4
local-epochs = 20
batch-size = 32
learning-rate = 0.05
momentum = 0.9
fraction-evaluate = 0.0
checkpoint = false
tracker = false
data = "data.npz"
output-dir = "bare-runs"
"""

TASK = '''\
"""The network, the data, the training loop and the stage timer, shared by the ServerApp and the
ClientApp."""

import json
import os

import numpy as np
import torch
from torch import nn


def record_stage(stage, seconds, server_round, side="server", within=None) -> None:
    """One stage line, as flowerbed.core.stages writes it, where FLOWERBED_STAGE_TIMES says."""
    path = os.environ.get("FLOWERBED_STAGE_TIMES")
    if path:
        line = {"stage": stage, "seconds": seconds, "round": server_round, "pid": os.getpid(),
                "side": side, "within": within}
        with open(path, "a") as f:
            f.write(json.dumps(line) + "\\n")


def build_network(channels: int, num_classes: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(channels, 32, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(32, 64, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(64 * 4 * 4, 128),
        nn.ReLU(),
        nn.Linear(128, num_classes),
    )


_data = {}


def load(path: str) -> dict:
    if not _data:
        _data.update({k: torch.from_numpy(v) for k, v in np.load(path).items()})
    return _data


def network_for(data: dict) -> nn.Module:
    return build_network(data["x_test"].shape[1], int(data["num_classes"]))


def train(model, x, y, epochs, batch_size, lr, momentum) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x))
        for start in range(0, len(x), batch_size):
            idx = order[start : start + batch_size]
            optimizer.zero_grad()
            loss = nn.functional.cross_entropy(model(x[idx]), y[idx])
            loss.backward()
            optimizer.step()
    return loss.item()


@torch.no_grad()
def evaluate(model, x, y) -> tuple[float, float]:
    model.eval()
    logits = model(x)
    loss = nn.functional.cross_entropy(logits, y).item()
    return loss, (logits.argmax(1) == y).float().mean().item()
'''

CLIENT_APP = '''\
"""Train and evaluate one client's partition with plain PyTorch; each reply's seconds (its
training or evaluation within them) go where FLOWERBED_STAGE_TIMES says."""

import time

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from .task import evaluate as evaluate_model
from .task import load, network_for, record_stage
from .task import train as train_model

torch.set_num_threads(1)
app = ClientApp()


def model_and_data(msg: Message, context: Context):
    data = load(context.run_config["data"])
    model = network_for(data)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    return model, data, context.node_config["partition-id"]


def record_step(msg: Message, started: float, work: str, seconds: float) -> None:
    """The reply's ``client step`` since ``started``, and its ``work`` within it."""
    server_round = int(msg.content["config"]["server-round"])
    record_stage(work, seconds, server_round, "client", "client step")
    record_stage("client step", time.perf_counter() - started, server_round, "client")


@app.train()
def train(msg: Message, context: Context) -> Message:
    started = time.perf_counter()
    model, data, pid = model_and_data(msg, context)
    x, y = data[f"x{pid}"], data[f"y{pid}"]
    config = context.run_config
    training = time.perf_counter()
    loss = train_model(
        model,
        x,
        y,
        config["local-epochs"],
        config["batch-size"],
        config["learning-rate"],
        config["momentum"],
    )
    training = time.perf_counter() - training
    metrics = MetricRecord({"num-examples": len(x), "train-loss": loss})
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()), "metrics": metrics})
    reply = Message(content=content, reply_to=msg)
    record_step(msg, started, "client training", training)
    return reply


@app.evaluate()
def evaluate(msg: Message, context: Context) -> Message:
    started = time.perf_counter()
    model, data, pid = model_and_data(msg, context)
    x, y = data[f"tx{pid}"], data[f"ty{pid}"]
    evaluation = time.perf_counter()
    loss, accuracy = evaluate_model(model, x, y)
    evaluation = time.perf_counter() - evaluation
    metrics = MetricRecord({"num-examples": len(x), "loss": loss, "accuracy": accuracy})
    reply = Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
    record_step(msg, started, "client evaluation", evaluation)
    return reply
'''

SERVER_APP = '''\
"""Flower's FedAvg over every client, the global model evaluated centrally after each round."""

import time
from pathlib import Path

import torch
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import FedAvg

from .task import evaluate, load, network_for, record_stage

torch.set_num_threads(1)
app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = context.run_config
    data = load(config["data"])
    torch.manual_seed(0)
    model = network_for(data)
    out = Path(config["output-dir"])
    out.mkdir(parents=True, exist_ok=True)
    writer = None
    if config["tracker"]:
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(str(out / "tensorboard"))
    round_started = [0.0]

    def central_evaluation(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        loss, accuracy = evaluate(model, data["x_test"], data["y_test"])
        if server_round > 0:
            if config["checkpoint"]:
                torch.save(model.state_dict(), out / "checkpoint.pt")
            if writer is not None:
                writer.add_scalar("loss", loss, server_round)
                writer.add_scalar("accuracy", accuracy, server_round)
                writer.flush()
            record_stage("round", time.perf_counter() - round_started[0], server_round)
        round_started[0] = time.perf_counter()
        return MetricRecord({"loss": loss, "accuracy": accuracy})

    nodes = len(list(grid.get_node_ids()))
    strategy = FedAvg(
        fraction_train=1.0,
        fraction_evaluate=config["fraction-evaluate"],
        min_train_nodes=nodes,
        min_evaluate_nodes=1,
        min_available_nodes=nodes,
    )
    strategy.start(
        grid=grid,
        initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=config["num-server-rounds"],
        evaluate_fn=central_evaluation,
    )
    if writer is not None:
        writer.close()
'''

FILES = {
    "pyproject.toml": PYPROJECT,
    "baretorchapp/__init__.py": '"""A bare Flower + PyTorch app."""\n',
    "baretorchapp/task.py": TASK,
    "baretorchapp/client_app.py": CLIENT_APP,
    "baretorchapp/server_app.py": SERVER_APP,
}


def partition_arrays(config: RunConfig, num_clients: int) -> dict[str, np.ndarray]:
    """flowerbed's partition of ``config``'s data set as arrays: ``x{pid}``/``y{pid}`` (a
        client's training split), ``tx{pid}``/``ty{pid}`` (its local test split), ``x_test``/
        ``y_test`` (the central test set) and ``num_classes``: each client's ``node_split``, what
    flowerbed's client trains and evaluates on."""
    data = load_splits(config)
    arrays = {
        "x_test": data.x_test.numpy(),
        "y_test": data.y_test.numpy(),
        "num_classes": np.array(data.num_classes),
    }
    for pid in range(num_clients):
        x, y, x_local_test, y_local_test = node_split(config, num_clients, pid)
        arrays |= {
            f"x{pid}": x.numpy(),
            f"y{pid}": y.numpy(),
            f"tx{pid}": x_local_test.numpy(),
            f"ty{pid}": y_local_test.numpy(),
        }
    return arrays


def write_bare_torch_app(folder: Path, config: RunConfig, num_clients: int) -> Path:
    """Write the app and its ``data.npz`` (``partition_arrays``) into ``folder``; returns it."""
    for name, text in FILES.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    np.savez(folder / "data.npz", **partition_arrays(config, num_clients))
    return folder


def check_same_network(folder: Path, config: RunConfig) -> None:
    """The bare app's network has flowerbed's parameter shapes, in the same order."""
    namespace: dict = {}
    exec((folder / "baretorchapp" / "task.py").read_text(), namespace)  # noqa: S102 - our file
    data = np.load(folder / "data.npz")
    bare = namespace["build_network"](data["x_test"].shape[1], int(data["num_classes"]))
    ours = build_model(config.model, tuple(data["x_test"].shape[1:]), int(data["num_classes"]))
    shapes = [tuple(p.shape) for p in bare.parameters()]
    if shapes != [tuple(p.shape) for p in ours.parameters()]:
        raise SystemExit(f"the bare app's network is not flowerbed's {config.model!r}: {shapes}")
