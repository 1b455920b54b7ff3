"""What a strategy is to flowerbed: a server-side Flower ``Strategy`` and a client-side step.

A ``StrategySpec`` pairs the two halves of one algorithm. ``build_server(config, **kwargs)``
returns the Flower strategy; ``kwargs`` (see ``flower_kwargs``) carries the settings every
strategy shares: client sampling and the metric aggregation that also reports the spread of
client accuracy. ``client_train(client, msg)`` is the client's step for one training message;
``client_evaluate(client, msg)`` answers an evaluation message. ``settings`` are the run-config
keys the algorithm reads (declared in its file). The FL-rounds phase
(``flowerbed.protocols.fl_rounds``) runs a spec for N rounds.

The rest of this module is the arithmetic that several server rules share (sample weights,
means over replies, the frame of rules on trainable parameters).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from logging import INFO
from typing import Any

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import log
from flwr.serverapp.strategy import FedAvg, Strategy
from flwr.serverapp.strategy.strategy_utils import (
    aggregate_metricrecords,
    validate_message_reply_consistency,
)

from ..data.site_reports import data_shape
from ..evaluation.clinical import SITE_COUNTS
from ..models import Classifier, build_model, run_model
from ..runtime.history import CLIENT_CLINICAL, weighted_mean
from ..settings import RunConfig, Setting, Value
from ..training.local_client import LocalClient
from ..trust.reply_checks import Schema, model_like_sent


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
    settings: tuple[Setting, ...] = ()
    # The model the algorithm trains, when it is not the registry's ``config.model`` as is
    # (MOON adds a projection head): ``model_builder(config, input_shape, num_classes)``.
    model_builder: Callable[..., Classifier] | None = None
    # The ``arrays`` record of a training reply is the client's trained model, so that
    # reply - global is its update (what model-poisoning attacks and ``max-update-norm`` act
    # on); False where it is something else (FedNova's normalised direction, SCAFFOLD's
    # update and control-variate deltas).
    replies_model: bool = True
    # What a training reply holds, exactly (``trust.reply_checks``): given the run config,
    # a function from the content the server sent to the array records, keys, shapes and
    # dtypes of the reply. By default the ``arrays`` the server sent; algorithms that send
    # more back declare it (SCAFFOLD's control-variate deltas, QFedFisher's Fisher values).
    reply_arrays: Callable[[RunConfig], Callable[[RecordDict], Schema]] = lambda config: (
        model_like_sent
    )
    # Requirements that depend on the federation (Krum's n > 2f + 2 sampled clients):
    # ``check_federation(config, num_clients)`` returns an error message or None; FLRounds
    # raises it before any training.
    check_federation: Callable[[RunConfig, int], str | None] | None = None
    # Run-config values the algorithm needs where the global defaults do not suit it (the
    # quantum baselines' model 'vqc'): its protocol's ``defaults`` (``ProtocolSpec``, which
    # states when they apply).
    defaults: Mapping[str, Value] = field(default_factory=dict)
    # For the documentation's protocol table: what kind of protocol this is and what crosses
    # the network (``docs_gen.tables.protocol_table``).
    kind: str = "multi-round FL"
    exchanged: str = "the model's weights, both ways, every round"
    reproduction: str = ""  # its protocol's (``ProtocolSpec.reproduction``)

    def build_model(self, config: RunConfig, input_shape: tuple[int, ...], num_classes: int):
        """The global model of this algorithm (the server's initial and evaluated model)."""
        builder = self.model_builder or run_model
        return builder(config, tuple(input_shape), num_classes)


def valid_replies(
    replies: Iterable[Message], weighted_by_key: str, check_arrayrecord: bool = True
) -> list[Message]:
    """The replies without an error, checked for consistent records (Flower's public
    ``validate_message_reply_consistency``); errors are logged (the recording grid has
    counted them already). Flower's ``FedAvg`` does the same in a private method."""
    replies = list(replies)
    valid = [msg for msg in replies if not msg.has_error()]
    log(INFO, "aggregate_train: %d results and %d failures", len(valid), len(replies) - len(valid))
    if valid:
        validate_message_reply_consistency(
            [msg.content for msg in valid], weighted_by_key, check_arrayrecord=check_arrayrecord
        )
    return valid


def aggregate_with_spread(records: list[RecordDict], weighting_key: str) -> MetricRecord:
    """Weighted mean of every metric (Flower's rule) plus the spread of client accuracy.

    ``partition-id`` is an identifier, not a metric, and the per-class test counts are counts
    (the history's per-site table reads them): they are left out of the average. A clinical
    metric (``runtime.history.CLIENT_CLINICAL``) is averaged over the clients where it is
    defined (a client whose test split lacks a class has no AUROC for it: NaN), as the
    history's ``federated_<name>`` is.
    """
    metrics = aggregate_metricrecords(records, weighting_key)
    # identifiers and counts, not metrics: no mean of them (the history's client_table has them)
    for key in ("partition-id", *SITE_COUNTS):
        metrics.pop(key, None)
    replies = [record.metric_records.get("metrics", {}) for record in records]
    for key in CLIENT_CLINICAL:
        pairs = [(float(m[weighting_key]), float(m[key])) for m in replies if key in m]
        if pairs:
            metrics[key] = weighted_mean(pairs)
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


# --- trainable parameters and buffers, for server rules on model updates --------------------


def trainable_keys(config: RunConfig) -> frozenset[str]:
    """State-dict keys of the run's model that are trainable parameters.

    Everything else in the state dict is a buffer (batch-norm running mean/var,
    num_batches_tracked). Server rules that treat model updates as gradients (FedNova,
    SCAFFOLD, FedDyn, the server optimisers) act on these keys only; buffers get the FedAvg
    value (sample-weighted mean).
    """
    model = build_model(config.model, *data_shape(config), config=config)
    return frozenset(name for name, p in model.named_parameters() if p.requires_grad)


def sample_weights(contents: list[RecordDict], key: str = "num-examples") -> np.ndarray:
    """p_i = n_i / sum_j n_j over the replies (the FedAvg weights)."""
    counts = np.array([float(next(iter(c.metric_records.values()))[key]) for c in contents])
    return counts / counts.sum()


def mean_of_replies(
    contents: list[RecordDict], keys, weights=None, record_key: str = "arrays"
) -> dict[str, np.ndarray]:
    """sum_i w_i * array_i[k] for each k in ``keys`` (uniform w_i = 1/|S| by default).

    Hand-written because Flower's ``aggregate_arrayrecords`` averages whole records with
    sample weights only, while these rules need subsets of keys and uniform means too.
    """
    weights = np.full(len(contents), 1.0 / len(contents)) if weights is None else weights
    return {
        k: sum(w * c[record_key][k].numpy().astype(np.float64) for c, w in zip(contents, weights))
        for k in keys
    }


def as_arrayrecord(arrays: dict[str, np.ndarray], like: dict[str, np.ndarray]) -> ArrayRecord:
    """An ArrayRecord with the key order and dtypes of ``like`` (integer buffers rounded)."""
    out = {}
    for key, ref in like.items():
        value = np.asarray(arrays[key])
        if np.issubdtype(ref.dtype, np.integer):
            value = np.rint(value)
        out[key] = Array(np.array(value.astype(ref.dtype), order="C"))  # keeps 0-d entries
    return ArrayRecord(out)


class ParameterRuleStrategy(FedAvg):
    """FedAvg whose server rule on the trainable parameters is its own; buffers are averaged.

    The shared frame of FedNova, SCAFFOLD and FedDyn: ``configure_train`` remembers the global
    arrays it sends (``self.current``) and the number of connected clients
    (``self.num_clients``, the N of partial participation); ``aggregate_train`` keeps the valid
    replies, gives batch-norm buffers the FedAvg value (sample-weighted mean) and asks the
    subclass for the new trainable parameters with ``update_parameters(contents, params)``.
    """

    def __init__(self, *, trainable, **kwargs) -> None:
        super().__init__(**kwargs)
        self.trainable = frozenset(trainable)
        self.current: dict[str, np.ndarray] | None = None
        self.num_clients = 0
        self.round_metrics: dict[str, float] = {}  # a subclass's own metrics of the round

    def configure_train(self, server_round, arrays, config, grid):
        self.current = {k: v.numpy() for k, v in arrays.items()}
        self.num_clients = len(list(grid.get_node_ids()))
        return super().configure_train(server_round, arrays, config, grid)

    def update_parameters(self, contents: list[RecordDict], params: list[str]) -> dict:
        """New values of the trainable parameters ``params`` from the valid replies."""
        raise NotImplementedError

    def aggregate_train(self, server_round, replies):
        valid = valid_replies(replies, self.weighted_by_key)
        if not valid:
            return None, None
        contents = [msg.content for msg in valid]
        params = [k for k in self.current if k in self.trainable]
        buffers = [k for k in self.current if k not in self.trainable]
        new = self.update_parameters(contents, params)
        weights = sample_weights(contents, self.weighted_by_key)
        new.update(mean_of_replies(contents, buffers, weights=weights))
        metrics = self.train_metrics_aggr_fn(contents, self.weighted_by_key)
        metrics.update(self.round_metrics)
        return as_arrayrecord(new, self.current), metrics
