"""What a strategy is to flowerbed: a server-side Flower ``Strategy`` and a client-side step.

A ``StrategySpec`` pairs the two halves of one algorithm. ``build_server(config, **kwargs)``
returns the Flower strategy; ``kwargs`` (see ``flower_kwargs``) carries the settings every
strategy shares: client sampling and the metric aggregation that also reports the spread of
client accuracy. ``client_train(client, msg)`` is the client's step for one training message;
``client_evaluate(client, msg)`` answers an evaluation message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
from flwr.app import Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import Strategy
from flwr.serverapp.strategy.strategy_utils import aggregate_metricrecords

from ..client import LocalClient, local_epochs_range
from ..config import RunConfig


def evaluate_global_model(client: LocalClient, msg: Message) -> Message:
    """Default evaluation: the global model the server sent, on the client's local test split."""
    return client.evaluate_reply(msg, client.model_from(msg))


@dataclass(frozen=True)
class StrategySpec:
    name: str
    summary: str
    paper: str
    build_server: Callable[..., Strategy]
    client_train: Callable[[LocalClient, Message], Message]
    client_evaluate: Callable[[LocalClient, Message], Message] = evaluate_global_model
    config_keys: tuple[str, ...] = ()


def aggregate_with_spread(records: list[RecordDict], weighting_key: str) -> MetricRecord:
    """Weighted mean of every metric (Flower's rule) plus the spread of client accuracy.

    ``partition-id`` is an identifier, not a metric: it is left out of the average.
    """
    metrics = aggregate_metricrecords(records, weighting_key)
    metrics.pop("partition-id", None)
    accuracies = [
        float(record.metric_records["metrics"]["accuracy"])
        for record in records
        if "accuracy" in record.metric_records.get("metrics", {})
    ]
    if accuracies:
        metrics["accuracy-std"] = float(np.std(accuracies))
        metrics["accuracy-min"] = float(np.min(accuracies))
        metrics["accuracy-max"] = float(np.max(accuracies))
    return metrics


def flower_kwargs(config: RunConfig) -> dict[str, Any]:
    """Constructor arguments shared by every Flower ``FedAvg``-family strategy."""
    return {
        "fraction_train": config.fraction_train,
        "fraction_evaluate": config.fraction_evaluate,
        "min_train_nodes": 1,
        "min_evaluate_nodes": 1 if config.fraction_evaluate > 0 else 0,
        "min_available_nodes": config.min_available_clients,
        "train_metrics_aggr_fn": aggregate_with_spread,
        "evaluate_metrics_aggr_fn": aggregate_with_spread,
    }
    local_epochs_range(config)  # every server is built here, before training: check the range
