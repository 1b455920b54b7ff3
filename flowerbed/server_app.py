"""flowerbed's ServerApp: run config -> data, partition and strategy -> rounds -> results on disk.

Order of work, so that bad input fails before any client trains:

1. parse and validate the run config (unknown names, ranges);
2. load the data set (a missing file stops here, naming the path) and build the model once
   (a model that does not fit the data stops here);
3. handshake with the nodes: each reports its partition id and the number of partitions; the
   partition (more clients than samples, impossible minimum sizes...) is computed and its
   label-count table logged and saved;
4. run the strategy through a ``RecordingGrid``; after every round the global model is
   evaluated on the held-out test set and the history is rewritten on disk.
"""

from __future__ import annotations

import math
import random
from logging import INFO
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, Context, MetricRecord
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from .client import load_splits, partition_for
from .config import ConfigError, RunConfig
from .data.partition import format_label_table, label_counts
from .recording_grid import RecordingGrid
from .results import (
    HISTORY_COLUMNS,
    make_run_dir,
    plot_accuracy,
    save_model,
    write_csv,
    write_json,
    write_partition_table,
)
from .strategies import get_strategy
from .strategies.common import flower_kwargs
from .training import evaluate

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    config = RunConfig.from_run_config(context.run_config)
    run_federation(grid, config)


def federation_size(nodes: dict[int, tuple[int, int]]) -> int:
    """The number of partitions the nodes agree on; a clear error if they disagree."""
    if not nodes:
        raise ConfigError("no node answered the handshake: is any SuperNode connected?")
    sizes = {num for _, num in nodes.values()}
    if len(sizes) != 1:
        raise ConfigError(f"nodes disagree on num-partitions: {sorted(sizes)}")
    num_partitions = sizes.pop()
    ids = sorted(pid for pid, _ in nodes.values())
    bad = [pid for pid in ids if not 0 <= pid < num_partitions]
    if bad or len(set(ids)) != len(ids):
        raise ConfigError(
            f"partition ids {ids} must be distinct and in [0, {num_partitions}); check each"
            " SuperNode's --node-config"
        )
    return num_partitions


def run_federation(grid: Grid, config: RunConfig) -> Path:
    """Run one federated training job; returns its results folder."""
    spec = get_strategy(config.strategy)
    data = load_splits(config)
    torch.manual_seed(config.seed)  # the initial global model is a function of the seed
    model = spec.build_model(config, data.input_shape, data.num_classes)  # fails early on a mismatch

    recording = RecordingGrid(grid)
    nodes = recording.handshake(config.min_available_clients, config.round_timeout)
    num_partitions = federation_size(nodes)
    counts = label_counts(data.y_train.numpy(), partition_for(config, num_partitions), data.num_classes)
    log(INFO, "flowerbed: %s, %d clients, %s partition; label counts per client:\n%s",
        config.dataset, num_partitions, config.partitioner, format_label_table(counts))

    run_dir = make_run_dir(
        config.output_path, config.run_name or f"{config.strategy}-{config.dataset}-seed{config.seed}"
    )
    write_json(run_dir / "config.json", {**config.to_dict(), "num-partitions": num_partitions})
    write_partition_table(run_dir, counts)
    log(INFO, "flowerbed: results go to %s", run_dir)

    random.seed(config.seed)  # Flower samples clients with Python's random
    torch.manual_seed(config.seed)
    if spec.run_server is not None:  # a protocol of its own (one-shot knowledge transfer)
        spec.run_server(recording, config, data, run_dir)
        return run_dir
    if config.get("kt-metrics", False):  # issue 5: check the knowledge-transfer keys now
        from .strategies.one_shot import KTSettings

        KTSettings.from_config(config)
    strategy = spec.build_server(config, **flower_kwargs(config))
    history: list[dict] = []

    def central_evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
        model.load_state_dict(arrays.to_torch_state_dict())
        loss, accuracy = evaluate(model, data.x_test, data.y_test)
        row = history_row(server_round, loss, accuracy, recording)
        history.append(row)
        log(INFO, format_round(row, config.num_server_rounds))
        write_history(run_dir, history)
        return MetricRecord({"accuracy": accuracy, "loss": loss})

    result = strategy.start(
        grid=recording,
        initial_arrays=ArrayRecord(model.state_dict()),
        num_rounds=config.num_server_rounds,
        timeout=config.round_timeout,
        evaluate_fn=central_evaluate,
    )
    save_model(run_dir / "model.pt", result.arrays.to_torch_state_dict())
    if config.get("kt-metrics", False):  # knowledge-transfer metrics of the final model (issue 5)
        from .strategies.one_shot import write_global_kt_metrics

        model.load_state_dict(result.arrays.to_torch_state_dict())
        write_global_kt_metrics(run_dir, config, data, num_partitions, model)
    plot_accuracy(run_dir / "accuracy.png", history,
                  f"{config.strategy} on {config.dataset} ({num_partitions} clients)")
    log(INFO, "flowerbed: final accuracy %.4f; results in %s", history[-1]["central_accuracy"], run_dir)
    return run_dir


def history_row(server_round: int, loss: float, accuracy: float, recording: RecordingGrid) -> dict:
    """One history row; for rounds >= 1 it closes the grid's record of that round."""
    row = {"round": server_round, "central_accuracy": accuracy, "central_loss": loss}
    if server_round == 0:
        return row
    traffic = recording.end_round()
    train_losses = [(m["num-examples"], m["train-loss"]) for m in traffic.train if "train-loss" in m]
    accuracies = [m["accuracy"] for m in traffic.evaluate if "accuracy" in m]
    row.update(
        train_loss=_weighted_mean(train_losses),
        client_accuracy_mean=float(np.mean(accuracies)) if accuracies else math.nan,
        client_accuracy_std=float(np.std(accuracies)) if accuracies else math.nan,
        clients_trained=traffic.clients_trained,
        clients_failed=traffic.clients_failed,
        bytes_sent=traffic.bytes_sent,
        bytes_received=traffic.bytes_received,
        seconds=traffic.seconds,
        client_accuracies={int(m["partition-id"]): m["accuracy"] for m in traffic.evaluate
                           if "partition-id" in m and "accuracy" in m},
        failures=traffic.failures,
    )
    # any other metric the clients' evaluation reports (Ditto's personal-accuracy): its mean
    # over the clients, as client_<name>_mean (JSON history only)
    standard = {"num-examples", "partition-id", "loss", "accuracy"}
    for key in sorted({k for m in traffic.evaluate for k in m} - standard):
        values = [m[key] for m in traffic.evaluate if isinstance(m.get(key), (int, float))]
        if values:
            row[f"client_{key.replace('-', '_')}_mean"] = float(np.mean(values))
    return row


def _weighted_mean(pairs: list[tuple[float, float]]) -> float:
    """Sample-weighted mean; clients with no training step (NaN loss) are left out."""
    pairs = [(n, v) for n, v in pairs if math.isfinite(v)]
    total = sum(n for n, _ in pairs)
    return sum(n * v for n, v in pairs) / total if total else math.nan


def format_round(row: dict, num_rounds: int) -> str:
    """The concise per-round log line."""
    text = f"flowerbed round {row['round']}/{num_rounds}: test acc {row['central_accuracy']:.4f} loss {row['central_loss']:.4f}"
    if row["round"] == 0:
        return text + " (initial model)"
    return text + (
        f" | train loss {row['train_loss']:.4f} | client acc {row['client_accuracy_mean']:.4f}"
        f" ± {row['client_accuracy_std']:.4f} | clients {row['clients_trained']} ok,"
        f" {row['clients_failed']} failed | {row['bytes_sent'] / 1e6:.2f} MB sent,"
        f" {row['bytes_received'] / 1e6:.2f} MB received | {row['seconds']:.1f} s"
    )


def write_history(run_dir: Path, history: list[dict]) -> None:
    write_json(run_dir / "history.json", history)
    write_csv(run_dir / "history.csv", history, HISTORY_COLUMNS)
