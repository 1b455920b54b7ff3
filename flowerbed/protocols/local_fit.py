"""The local-fit phase: every client trains a model of its own, alone, and optionally uploads it.

QKT paper ("Query-based Knowledge Transfer", ICLR 2025), Sec. 3.1, first step of the one-shot
protocol (server round 1).

Client half (``train.local_fit``): the client trains its own model on its local training
split, starting from a seeded initialisation common to every client of the same architecture,
for up to ``kt-local-max-epochs`` epochs with early stopping: training stops when the accuracy
on the client's local validation split (its ``local-test-fraction`` share, never trained on)
has not improved for ``kt-local-patience`` epochs; the model as it is then is kept (Keras'
``EarlyStopping`` default; the paper names neither the monitored quantity nor whether the best
weights are restored). The model stays in the client's ``context.state``; with ``upload`` it
is also sent to the server (these uploads are the teachers of the exchange phase).
Architectures may differ per client (``kt-client-models``, cycled over partition ids).

Server half: one message per node; the replies go to the handoff (``Handoff.uploads``) and
make history row 1. What a reply must hold (``LocalFit.reply_rules``): the ``metrics`` record
of ``CLIENT_MODEL_METRICS`` plus ``local-epochs``, ``num-examples`` within the node's training
split; with ``upload`` the client's model as ``arrays`` (exactly the keys, shapes and dtypes of
the architecture its partition trains, ``model_name_for``) and a ``model`` config record
naming that architecture; without, no array record. A reply that fails is dropped like a
failed client; the run goes on with the others, and stops with one line when none is left. A
one-shot protocol has no global model: the row's test-set column is
``client_models_test_accuracy_mean``, the mean over clients of their own model's accuracy on
the held-out test set.

The locally trained model of a client is a pure function of the run config and its partition;
``train_local_model`` caches it per process, so that a benchmark running several methods in
one process trains each teacher once (every method then sees the same teachers, as in the
paper), and the knowledge-transfer metrics phase finds the same model.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import replace

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict

from ..core.seeding import seed_for
from ..evaluation.metrics import eval_scores, local_test_accuracy, test_accuracies
from ..models import MODELS, Classifier, build_model
from ..runtime.context import RunContext
from ..runtime.history import round_row, unweighted_client_accuracy
from ..runtime.outcome import RunFailed
from ..runtime.recording_grid import RecordingGrid
from ..settings import RunConfig, Setting, comma_list
from ..training.local_client import LocalClient
from ..training.loops import build_optimizer, evaluate, train_local
from ..trust.reply_checks import (
    FRACTION,
    LOSS,
    TRAIN,
    Metric,
    NodeSizes,
    RejectedReply,
    ReplyRules,
    Schema,
    client_metrics,
    no_arrays,
    schema_of,
)
from .messaging import send_to_nodes
from .phase import Handoff, Phase
from .query_draw import draw_query


def _check_client_models(value: str, config: RunConfig) -> str | None:
    unknown = [name for name in comma_list(value) if name not in MODELS]
    if unknown:
        return (
            f"unknown model {unknown[0]!r} in kt-client-models; valid choices: {', '.join(MODELS)}"
        )
    return None


SETTINGS = (
    Setting(
        "kt-local-max-epochs",
        100,
        "knowledge transfer, round 1: most local epochs (early stopping on the local validation"
        " split)",
        low=1,
    ),
    Setting(
        "kt-local-patience",
        10,
        "knowledge transfer, round 1: stop after this many epochs without a better validation"
        " accuracy",
        low=1,
    ),
    Setting(
        "kt-client-models",
        "",
        'knowledge transfer: architectures per client, cycled over partition ids (e.g. `"cnn,mlp"`;'
        " teachers are black boxes); empty = `model`",
        check=_check_client_models,
    ),
)

ACTION = f"{MessageType.TRAIN}.local_fit"
LOCAL_MODEL_KEY = "kt-local-model"  # context.state key of the model the client fitted alone
_INIT_TAG, _QUERY_TAG = 0x1A17, 0x9E27
NUM_ROUNDS = 2  # a one-shot protocol: local fit, then the exchange


def client_models(config: RunConfig) -> list[str]:
    """The architectures of ``kt-client-models`` (empty: every client uses ``model``)."""
    return comma_list(config.kt_client_models)


def model_name_for(config: RunConfig, partition_id: int) -> str:
    """A client's architecture: ``kt-client-models`` cycled over partition ids, else ``model``."""
    models = client_models(config)
    return models[partition_id % len(models)] if models else config.model


# --- the client's own model -----------------------------------------------------------------

# Keys that do not change a client's locally trained model (everything else is in the cache key).
_NOT_LOCAL = frozenset(
    {
        "strategy",
        "output-dir",
        "run-name",
        "round-timeout",
        "num-server-rounds",
        "fraction-train",
        "fraction-evaluate",
        "min-available-clients",
        "failing-partitions",
        "failure-mode",
        "wait-timeout",
        "max-failed-rounds",
        "local-epochs",
        "kt-query",
        "kt-query-threshold",
        "kt-max-query-classes",
        "kt-epochs",
        "kt-light-head-epochs",
        "kt-alpha",
        "kt-temperature",
        "qkt-lambda",
        "qkt-tau",
        "qkt-noise-samples",
        "qkt-teacher-weight",
        "qkt-weight-mask-percent",
        "kt-metrics",
    }
)
_NOT_LOCAL_PREFIXES = ("fedsa-", "ctl-")  # other protocols' keys (a variant names what matters)
_LOCAL_MODELS: OrderedDict[tuple, tuple[dict, dict]] = OrderedDict()
_CACHE_SIZE = 256


def train_local_model(client: LocalClient, variant: str = "") -> tuple[Classifier, dict]:
    """The client's model trained on its local data only, with early stopping (module doc).

    Returns the model and ``{"train-loss", "epochs", "val-accuracy"}``. Cached per process (a
    pure function of the run config and the partition); ``variant`` names what else changes the
    client's data (FedSA's pixel-permuted teachers: ``client`` then holds the permuted data).
    """
    config, pid = client.config, client.partition_id
    key = (
        pid,
        client.num_partitions,
        variant,
        tuple(
            sorted(
                (k, v)
                for k, v in config.items()
                if k not in _NOT_LOCAL and not k.startswith(_NOT_LOCAL_PREFIXES)
            )
        ),
    )
    torch.manual_seed(seed_for(config.seed, _INIT_TAG))  # same initial model per architecture
    model = build_model(
        model_name_for(config, pid), client.data.input_shape, client.data.num_classes, config=config
    )
    if key in _LOCAL_MODELS:
        _LOCAL_MODELS.move_to_end(key)
        state, info = _LOCAL_MODELS[key]
        model.load_state_dict(state)
        return model, dict(info)

    torch.manual_seed(seed_for(config.seed, pid, 1, 1))
    generator = torch.Generator().manual_seed(seed_for(config.seed, pid, 1))
    optimizer = build_optimizer(model.parameters(), config)
    best_accuracy, best_epoch, epoch, loss = -math.inf, 0, 0, math.nan
    for epoch in range(1, config.kt_local_max_epochs + 1):
        loss = train_local(
            model,
            client.x_train,
            client.y_train,
            epochs=1,
            batch_size=config.batch_size,
            optimizer=optimizer,
            generator=generator,
            augment=client.data.augment,
        ).mean_loss
        if len(client.y_test) == 0:  # no validation split: train the full budget
            continue
        _, accuracy = evaluate(model, client.x_test, client.y_test)
        if accuracy > best_accuracy:
            best_accuracy, best_epoch = accuracy, epoch
        elif epoch - best_epoch >= config.kt_local_patience:
            break
    info = {"train-loss": loss, "epochs": epoch, "val-accuracy": best_accuracy}
    _LOCAL_MODELS[key] = ({k: v.detach().clone() for k, v in model.state_dict().items()}, info)
    while len(_LOCAL_MODELS) > _CACHE_SIZE:
        _LOCAL_MODELS.popitem(last=False)
    return model, dict(info)


def train_counts(client: LocalClient) -> np.ndarray:
    return np.bincount(client.y_train.numpy(), minlength=client.data.num_classes)


def client_query(client: LocalClient) -> list[int]:
    """The client's seeded query (``query_draw.draw_query``)."""
    config = client.config
    return draw_query(
        train_counts(client),
        config.kt_query_threshold,
        config.kt_query,
        seed_for(config.seed, client.partition_id, _QUERY_TAG),
        config.kt_max_query_classes,
    )


# --- what replies hold ---------------------------------------------------------------------

# The metrics of a reply about a client's own model (local fit, exchange): its accuracy on
# its local validation split and on the held-out test set (``client_models_row``).
CLIENT_MODEL_METRICS = client_metrics(accuracy=FRACTION, **{"test-accuracy": FRACTION})


def architecture_schemas(config: RunConfig, input_shape, num_classes: int) -> dict[str, dict]:
    """The keys, shapes and dtypes of each architecture the clients train (``model``, or
    every one of ``kt-client-models``), by name."""
    return {
        name: schema_of(
            ArrayRecord(build_model(name, input_shape, num_classes, config=config).state_dict())
        )
        for name in client_models(config) or (config.model,)
    }


# --- history -------------------------------------------------------------------------------


def client_models_row(server_round: int, grid: RecordingGrid, replies: list[Message]) -> dict:
    """A history row of a one-shot protocol: the mean over clients of their own model's
    accuracy on the held-out test set, and their local validation accuracies."""
    metrics = [r.content.metric_records["metrics"] for r in replies]
    tests = [float(m["test-accuracy"]) for m in metrics]
    row = round_row(
        server_round,
        grid,
        client_models_test_accuracy_mean=float(np.mean(tests)) if tests else math.nan,
    )
    accuracies = {int(m["partition-id"]): float(m["accuracy"]) for m in metrics}
    row.update(
        **unweighted_client_accuracy(list(accuracies.values())), client_accuracies=accuracies
    )
    return row


# --- the phase -----------------------------------------------------------------------------


class LocalFit(Phase):
    """Every client trains alone (module docstring); ``upload``: send the models to the server."""

    MESSAGE_TYPES = (ACTION,)

    def __init__(self, upload: bool) -> None:
        self.upload = upload
        self.config: RunConfig | None = None
        self.schemas: dict[str, dict] = {}  # architecture name -> keys, shapes, dtypes

    def check(self, run: RunContext) -> None:
        self.config = run.config
        self.schemas = architecture_schemas(run.config, run.input_shape, run.num_classes)

    def reply_rules(self, config: RunConfig) -> dict[str, ReplyRules]:
        """A ``metrics`` record (``CLIENT_MODEL_METRICS``, ``local-epochs``, ``train-loss``),
        ``num-examples`` within the training split; with ``upload`` the client's model
        (``upload_schema``) and the ``model`` record naming its architecture
        (``check_architecture``), without: no arrays."""
        metrics = {
            **CLIENT_MODEL_METRICS,
            "train-loss": LOSS,
            "local-epochs": Metric(low=1, high=config.kt_local_max_epochs, whole=True),
        }
        rules = ReplyRules(
            arrays=no_arrays, metrics={"metrics": metrics}, list_metrics=frozenset(), examples=TRAIN
        )
        if self.upload:
            rules = replace(
                rules,
                arrays=self.upload_schema,
                by_partition=True,
                configs={"model": {"name": str}},
                check=self.check_architecture,
            )
        return {ACTION: rules}

    def upload_schema(self, sent: RecordDict, partition: int | None) -> Schema:
        """An upload: ``arrays``, the model of the architecture the node's partition trains
        (partition not known yet: the run's one architecture, else none passes)."""
        if partition is not None:
            return {"arrays": self.schemas[model_name_for(self.config, partition)]}
        if len(self.schemas) == 1:
            return {"arrays": next(iter(self.schemas.values()))}
        raise RejectedReply("the node's partition, hence its architecture, is not known")

    def check_architecture(
        self, reply: RecordDict, sent: RecordDict, partition: int | None, sizes: NodeSizes | None
    ) -> None:
        """The ``model`` record names the architecture the node's partition trains."""
        name = reply.config_records["model"]["name"]
        expected = (
            {model_name_for(self.config, partition)} if partition is not None else self.schemas
        )
        if name not in expected:
            raise RejectedReply(
                f"model/name={name!r}, but the node's partition ({partition}) trains"
                f" {' or '.join(map(repr, sorted(expected)))}"
            )

    def run(self, run: RunContext, handoff: Handoff) -> None:
        config = ConfigRecord({"server-round": 1, "upload": self.upload})
        handoff.uploads = send_to_nodes(run, ACTION, RecordDict({"config": config}))
        if not handoff.uploads:
            raise RunFailed(
                "local fit: every client failed or had its reply dropped (the reasons are in"
                " the WARNING lines above); no client model is left to go on with"
            )
        row = client_models_row(1, run.grid, handoff.uploads)
        run.history.add(row, NUM_ROUNDS, "local training")

    def client_step(self, client: LocalClient, msg: Message) -> Message:
        model, info = train_local_model(client)
        client.context.state[LOCAL_MODEL_KEY] = ArrayRecord(model.state_dict())
        metrics = client.metrics(
            len(client.y_train),
            **{
                "train-loss": info["train-loss"],
                "local-epochs": info["epochs"],
                "accuracy": local_test_accuracy(eval_scores(model), client),
                "test-accuracy": test_accuracies(eval_scores(model), client.data)[1],
            },
        )
        content = RecordDict({"metrics": metrics})
        if bool(msg.content.config_records["config"]["upload"]):
            content["arrays"] = ArrayRecord(model.state_dict())
            content["model"] = ConfigRecord(
                {"name": model_name_for(client.config, client.partition_id)}
            )
        return Message(content=content, reply_to=msg)


def local_model(
    client: LocalClient, state_key: str = LOCAL_MODEL_KEY, variant: str = ""
) -> Classifier:
    """The model the client fitted alone, kept in ``context.state[state_key]`` (a node
    restarted since then retrains it: deterministic, the same model). ``variant``: as in
    ``train_local_model``."""
    if state_key not in client.context.state:
        return train_local_model(client, variant)[0]
    data = client.data
    name = model_name_for(client.config, client.partition_id)
    model = build_model(name, data.input_shape, data.num_classes, config=client.config)
    model.load_state_dict(client.context.state[state_key].to_torch_state_dict())
    return model
