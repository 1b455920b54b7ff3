"""The one-shot knowledge-transfer protocol shared by QKT, QKT Light and their baselines.

QKT paper ("Query-based Knowledge Transfer", ICLR 2025), Sec. 3.1 and Appendix A.2. Two
rounds of Flower messages:

1. **Local training** (server round 1). Every client trains its own model on its local
   training split, starting from a seeded initialisation common to every client of the same
   architecture, for up to ``kt-local-max-epochs`` epochs with early stopping: training stops
   when the accuracy on the client's local validation split (its ``local-test-fraction``
   share, never trained on) has not improved for ``kt-local-patience`` epochs; the model as
   it is then is kept (Keras' ``EarlyStopping`` default; the paper names neither the
   monitored quantity nor whether the best weights are restored). The model stays in the client's ``context.state``; methods that transfer
   knowledge also upload it (these uploads are the teachers).
2. **The transfer round** (server round 2). The server sends each student what its method
   needs, in one message: the other clients' models (Ensemble, KD, QKT, QKT Light: teachers
   are only used through their predictions, so their architectures may differ, run-config
   ``kt-client-models``), their sample-weighted average (FedAvg(1)), or nothing (local only).
   The student draws its query (``flowerbed.queries``), runs its method's transfer, evaluates
   its model before and after on the held-out test set per class, and replies with both
   per-class vectors. The server turns them into the metrics of Appendix A.2
   (``flowerbed.metrics``) and writes ``kt_metrics.json``/``.csv``.

A "communication round" in the paper's sense (each client sends its model, then receives the
others' models) is these two message rounds; ``kt_metrics.json`` reports 1 for the transfer
methods and 0 for local only, and ``history.json`` counts the bytes of both message rounds.

The locally trained model of a client is a pure function of the run config and its partition;
``train_local_model`` caches it per process, so that a benchmark running several methods in one
process trains each teacher once (every method then sees the same teachers, as in the paper).
"""

from __future__ import annotations

import functools
import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from logging import INFO
from pathlib import Path

import numpy as np
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common.logger import log
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from ..client import LocalClient, seed_for
from ..config import ConfigError, RunConfig
from ..metrics import client_kt_metrics, per_class_accuracy, predicted_classes, write_kt_metrics
from ..models import MODELS, Classifier, build_model
from ..queries import QUERY_MODES, draw_query
from ..training import build_optimizer, evaluate, train_local
from .common import StrategySpec

STEP_LOCAL, STEP_TRANSFER = "local", "transfer"
BROADCASTS = ("none", "average", "teachers")
_INIT_TAG, _QUERY_TAG, _TRANSFER_TAG = 0x1A17, 0x9E27, 0x7F3E


# --- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class KTSettings:
    """The knowledge-transfer run-config keys, typed and checked (README, "Knowledge transfer")."""

    query_mode: str = "single"
    query_threshold: int = 50
    max_query_classes: int = 3
    local_max_epochs: int = 100
    local_patience: int = 10
    epochs: int = 10
    light_head_epochs: int = 5
    alpha: float = 1.0
    temperature: float = 1.0
    lam: float = 1.5
    tau: float = 0.01
    noise_samples: int = 20
    weight_mask_percent: float = 0.0
    client_models: tuple[str, ...] = ()

    @classmethod
    def from_config(cls, config: RunConfig) -> KTSettings:
        d = cls()
        models = tuple(
            m.strip() for m in config.get("kt-client-models", "").split(",") if m.strip()
        )
        s = cls(
            query_mode=config.get("kt-query", d.query_mode),
            query_threshold=config.get("kt-query-threshold", d.query_threshold),
            max_query_classes=config.get("kt-max-query-classes", d.max_query_classes),
            local_max_epochs=config.get("kt-local-max-epochs", d.local_max_epochs),
            local_patience=config.get("kt-local-patience", d.local_patience),
            epochs=config.get("kt-epochs", d.epochs),
            light_head_epochs=config.get("kt-light-head-epochs", d.light_head_epochs),
            alpha=config.get("kt-alpha", d.alpha),
            temperature=config.get("kt-temperature", d.temperature),
            lam=config.get("qkt-lambda", d.lam),
            tau=config.get("qkt-tau", d.tau),
            noise_samples=config.get("qkt-noise-samples", d.noise_samples),
            weight_mask_percent=config.get("qkt-weight-mask-percent", d.weight_mask_percent),
            client_models=models,
        )
        s.validate()
        return s

    def validate(self) -> None:
        if self.query_mode not in QUERY_MODES:
            raise ConfigError(
                f"unknown kt-query {self.query_mode!r}; valid choices: {', '.join(QUERY_MODES)}"
            )
        for key, value, low in (
            ("kt-query-threshold", self.query_threshold, 1),
            ("kt-max-query-classes", self.max_query_classes, 2),
            ("kt-local-max-epochs", self.local_max_epochs, 1),
            ("kt-local-patience", self.local_patience, 1),
            ("kt-epochs", self.epochs, 0),
            ("kt-light-head-epochs", self.light_head_epochs, 0),
            ("qkt-noise-samples", self.noise_samples, 1),
        ):
            if value < low:
                raise ConfigError(f"{key} must be at least {low}, got {value}")
        if self.alpha < 0:
            raise ConfigError(f"kt-alpha must be >= 0, got {self.alpha}")
        if not self.temperature > 0:
            raise ConfigError(f"kt-temperature must be > 0, got {self.temperature}")
        if self.lam < 0:
            raise ConfigError(f"qkt-lambda must be >= 0, got {self.lam}")
        if not 0 <= self.tau <= 1:
            raise ConfigError(f"qkt-tau must be in [0, 1], got {self.tau}")
        if not 0 <= self.weight_mask_percent < 100:
            raise ConfigError(
                f"qkt-weight-mask-percent must be in [0, 100), got {self.weight_mask_percent}"
            )
        for name in self.client_models:
            if name not in MODELS:
                raise ConfigError(
                    f"unknown model {name!r} in kt-client-models; valid choices: {', '.join(MODELS)}"
                )


def model_name_for(config: RunConfig, partition_id: int) -> str:
    """A client's architecture: ``kt-client-models`` cycled over partition ids, else ``model``."""
    models = KTSettings.from_config(config).client_models
    return models[partition_id % len(models)] if models else config.model


# --- round 1: local training with early stopping ------------------------------------------------

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
        "qkt-weight-mask-percent",
        "kt-metrics",
    }
)
_LOCAL_MODELS: OrderedDict[tuple, tuple[dict, dict]] = OrderedDict()
_CACHE_SIZE = 256


def train_local_model(client: LocalClient) -> tuple[Classifier, dict]:
    """The client's model trained on its local data only, with early stopping (see module doc).

    Returns the model and ``{"train-loss", "epochs", "val-accuracy"}``. Cached per process (a pure
    function of the run config and the partition).
    """
    config, pid = client.config, client.partition_id
    key = (
        pid,
        client.num_partitions,
        tuple(sorted((k, v) for k, v in config.raw.items() if k not in _NOT_LOCAL)),
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

    settings = KTSettings.from_config(config)
    torch.manual_seed(seed_for(config.seed, pid, 1, 1))
    generator = torch.Generator().manual_seed(seed_for(config.seed, pid, 1))
    optimizer = build_optimizer(model.parameters(), config)
    best_accuracy, best_epoch, epoch, loss = -math.inf, 0, 0, math.nan
    for epoch in range(1, settings.local_max_epochs + 1):
        loss = train_local(
            model,
            client.x_train,
            client.y_train,
            epochs=1,
            batch_size=config.batch_size,
            optimizer=optimizer,
            generator=generator,
        ).mean_loss
        if len(client.y_test) == 0:  # no validation split: train the full budget
            continue
        _, accuracy = evaluate(model, client.x_test, client.y_test)
        if accuracy > best_accuracy:
            best_accuracy, best_epoch = accuracy, epoch
        elif epoch - best_epoch >= settings.local_patience:
            break
    info = {"train-loss": loss, "epochs": epoch, "val-accuracy": best_accuracy}
    _LOCAL_MODELS[key] = ({k: v.detach().clone() for k, v in model.state_dict().items()}, info)
    while len(_LOCAL_MODELS) > _CACHE_SIZE:
        _LOCAL_MODELS.popitem(last=False)
    return model, dict(info)


def train_counts(client: LocalClient) -> np.ndarray:
    return np.bincount(client.y_train.numpy(), minlength=client.data.num_classes)


def client_query(client: LocalClient) -> list[int]:
    """The client's seeded query (``flowerbed.queries.draw_query``)."""
    s = KTSettings.from_config(client.config)
    return draw_query(
        train_counts(client),
        s.query_threshold,
        s.query_mode,
        seed_for(client.config.seed, client.partition_id, _QUERY_TAG),
        s.max_query_classes,
    )


# --- round 2: what a method receives and returns ------------------------------------------------


@dataclass
class Transfer:
    """Everything a student's transfer step can use (one per student, round 2)."""

    client: LocalClient
    settings: KTSettings
    student: Classifier  # the student's local model; the method may train it in place
    query: list[int]
    local_classes: list[int]  # classes with local training samples
    teachers: list[Classifier] = field(default_factory=list)  # other clients' models, eval mode
    teacher_ids: list[int] = field(default_factory=list)
    global_model: Classifier | None = None  # FedAvg(1)

    def generator(self, tag: int) -> torch.Generator:
        """A generator seeded per (run seed, partition, purpose)."""
        return torch.Generator().manual_seed(
            seed_for(self.client.config.seed, self.client.partition_id, tag)
        )

    def optimizer(self, params) -> torch.optim.Optimizer:
        return build_optimizer(params, self.client.config)

    def train(
        self, model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, epochs: int, loss_fn
    ) -> float:
        """``epochs`` of the run's optimizer and batch size with ``loss_fn``; returns mean loss."""
        torch.manual_seed(
            seed_for(self.client.config.seed, self.client.partition_id, _TRANSFER_TAG, 1)
        )
        result = train_local(
            model,
            x,
            y,
            epochs=epochs,
            batch_size=self.client.config.batch_size,
            optimizer=self.optimizer([p for p in model.parameters() if p.requires_grad]),
            generator=self.generator(_TRANSFER_TAG),
            loss_fn=loss_fn,
        )
        return result.mean_loss


Scores = Callable[[torch.Tensor], torch.Tensor]
# A method's transfer step: returns the student's post-transfer predictor (logits or
# probabilities) and extra metrics to report.
TransferFn = Callable[[Transfer], tuple[Scores, dict]]


def eval_scores(model: torch.nn.Module) -> Scores:
    model.eval()
    return model


def test_accuracies(scores: Scores, data) -> tuple[np.ndarray, float]:
    """Per-class accuracy and accuracy of ``scores`` on the held-out test set."""
    predictions = predicted_classes(scores, data.x_test)
    labels = data.y_test.numpy()
    return per_class_accuracy(predictions, labels, data.num_classes), float(
        (predictions == labels).mean()
    )


def local_test_accuracy(scores: Scores, client: LocalClient) -> float:
    """Accuracy on the client's local test (validation) split; NaN when it is empty."""
    if len(client.y_test) == 0:
        return math.nan
    return float((predicted_classes(scores, client.x_test) == client.y_test.numpy()).mean())


def make_client_train(transfer: TransferFn) -> Callable[[LocalClient, Message], Message]:
    """The client step of a one-shot method: round 1 trains locally, round 2 transfers."""

    def client_train(client: LocalClient, msg: Message) -> Message:
        config = msg.content.config_records["config"]
        if config["kt-step"] == STEP_LOCAL:
            return _local_step(client, msg, bool(config["kt-upload"]))
        return _transfer_step(client, msg, transfer)

    return client_train


def _local_step(client: LocalClient, msg: Message, upload: bool) -> Message:
    model, info = train_local_model(client)
    client.context.state["kt-local-model"] = ArrayRecord(model.state_dict())
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
    if upload:
        content["arrays"] = ArrayRecord(model.state_dict())
        content["model"] = ConfigRecord(
            {"name": model_name_for(client.config, client.partition_id)}
        )
    return Message(content=content, reply_to=msg)


def _transfer_step(client: LocalClient, msg: Message, transfer: TransferFn) -> Message:
    config = client.config
    settings = KTSettings.from_config(config)
    data = client.data
    student = build_model(
        model_name_for(config, client.partition_id),
        data.input_shape,
        data.num_classes,
        config=config,
    )
    if "kt-local-model" in client.context.state:
        student.load_state_dict(client.context.state["kt-local-model"].to_torch_state_dict())
    else:  # a node restarted since round 1: retrain (deterministic, same model)
        student, _ = train_local_model(client)
    pre, _ = test_accuracies(eval_scores(student), data)

    received = msg.content.config_records["config"]
    teacher_ids = [int(t) for t in received.get("teacher-ids", [])]
    teacher_names = list(received.get("teacher-models", []))
    teachers = []
    for pid, name in zip(teacher_ids, teacher_names):
        teacher = build_model(str(name), data.input_shape, data.num_classes, config=config)
        teacher.load_state_dict(msg.content.array_records[f"teacher-{pid}"].to_torch_state_dict())
        teachers.append(teacher.eval())
    global_model = None
    if "arrays" in msg.content.array_records:
        global_model = client.model_from(msg)

    counts = train_counts(client)
    query = client_query(client)
    job = Transfer(
        client=client,
        settings=settings,
        student=student,
        query=query,
        local_classes=[int(j) for j in np.flatnonzero(counts > 0)],
        teachers=teachers,
        teacher_ids=teacher_ids,
        global_model=global_model,
    )
    if query:
        scores, extra = transfer(job)
    else:  # nothing under-represented: no query, the local model stays as it is
        scores, extra = eval_scores(student), {}
    post, accuracy = test_accuracies(scores, data)
    metrics = client.metrics(
        len(client.y_train),
        **{
            "accuracy": local_test_accuracy(scores, client),
            "test-accuracy": accuracy,
            "pre-per-class": [float(v) for v in pre],
            "post-per-class": [float(v) for v in post],
            "train-counts": [int(c) for c in counts],
            "query": [int(q) for q in query],
        },
        **extra,
    )
    return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)


# --- the server side -----------------------------------------------------------------------------


def _train_message(node: int, content: RecordDict) -> Message:
    return Message(content=content, message_type=MessageType.TRAIN, dst_node_id=node)


def _round_row(server_round: int, grid, replies: list[Message]) -> dict:
    """A history row; ``central_accuracy`` is the mean over clients of their own model's
    accuracy on the held-out test set (one-shot methods have no single global model)."""
    from ..server_app import history_row  # imported here: server_app imports the registry

    tests = [float(r.content.metric_records["metrics"]["test-accuracy"]) for r in replies]
    row = history_row(server_round, math.nan, float(np.mean(tests)) if tests else math.nan, grid)
    accuracies = {
        int(r.content.metric_records["metrics"]["partition-id"]): float(
            r.content.metric_records["metrics"]["accuracy"]
        )
        for r in replies
    }
    values = [v for v in accuracies.values() if not math.isnan(v)]
    row.update(
        client_accuracy_mean=float(np.mean(values)) if values else math.nan,
        client_accuracy_std=float(np.std(values)) if values else math.nan,
        client_accuracies=accuracies,
    )
    return row


def run_one_shot(grid, config: RunConfig, data, run_dir: Path, *, broadcast: str) -> None:
    """The server's two rounds (module docstring). ``broadcast``: what each student receives,
    ``none`` (local only), ``average`` (FedAvg(1)) or ``teachers`` (the other clients' models)."""
    from ..results import plot_accuracy
    from ..server_app import format_round, write_history

    if broadcast not in BROADCASTS:
        raise ValueError(f"unknown broadcast {broadcast!r}; valid choices: {', '.join(BROADCASTS)}")
    settings = KTSettings.from_config(config)  # bad values stop here, before any training
    for name in settings.client_models or (config.model,):
        build_model(name, data.input_shape, data.num_classes, config=config)
    if broadcast == "average" and len(set(settings.client_models)) > 1:
        raise ConfigError(
            f"strategy {config.strategy!r} averages models and needs one architecture;"
            f" kt-client-models={','.join(settings.client_models)!r} mixes several"
        )

    nodes = list(grid.get_node_ids())
    history: list[dict] = []
    # Round 1: local training (uploads are the teachers).
    upload = broadcast != "none"
    config_1 = ConfigRecord({"server-round": 1, "kt-step": STEP_LOCAL, "kt-upload": upload})
    replies = [
        r
        for r in grid.send_and_receive(
            [_train_message(n, RecordDict({"config": config_1})) for n in nodes],
            timeout=config.round_timeout,
        )
        if not r.has_error()
    ]
    history.append(_round_row(1, grid, replies))
    log(INFO, format_round(history[-1], 2) + " (local training)")
    write_history(run_dir, history)

    # Round 2: one transfer message per student.
    students = [r.metadata.src_node_id for r in replies]
    pid_of = {
        r.metadata.src_node_id: int(r.content.metric_records["metrics"]["partition-id"])
        for r in replies
    }
    messages = []
    if broadcast == "average":
        average = aggregate_arrayrecords([r.content for r in replies], "num-examples")
    for node in students:
        config_2 = ConfigRecord({"server-round": 2, "kt-step": STEP_TRANSFER})
        content = RecordDict({"config": config_2})
        if broadcast == "average":
            content["arrays"] = average
        elif broadcast == "teachers":
            others = [r for r in replies if r.metadata.src_node_id != node]
            config_2["teacher-ids"] = [pid_of[r.metadata.src_node_id] for r in others]
            config_2["teacher-models"] = [
                str(r.content.config_records["model"]["name"]) for r in others
            ]
            for r in others:
                content[f"teacher-{pid_of[r.metadata.src_node_id]}"] = r.content.array_records[
                    "arrays"
                ]
        messages.append(_train_message(node, content))
    results = [
        r
        for r in grid.send_and_receive(messages, timeout=config.round_timeout)
        if not r.has_error()
    ]
    history.append(_round_row(2, grid, results))
    log(INFO, format_round(history[-1], 2) + " (transfer)")
    write_history(run_dir, history)

    rows = [kt_row(r.content.metric_records["metrics"]) for r in results]
    summary = write_kt_metrics(
        run_dir,
        rows,
        strategy=config.strategy,
        query_mode=settings.query_mode,
        communication_rounds=0 if broadcast == "none" else 1,
    )
    plot_accuracy(run_dir / "accuracy.png", history, f"{config.strategy} on {config.dataset}")
    log(
        INFO,
        "flowerbed: %s, %s queries: Acc %.4f, query gain %.4f, forgetting %.4f, uniform acc %.4f;"
        " results in %s",
        config.strategy,
        settings.query_mode,
        summary["acc"],
        summary["query_gain"],
        summary["forgetting"],
        summary["uniform_acc"],
        run_dir,
    )


def kt_row(metrics) -> dict:
    """One client's row of ``kt_metrics.json`` from its round-2 reply."""
    pre, post = list(metrics["pre-per-class"]), list(metrics["post-per-class"])
    counts, query = [int(c) for c in metrics["train-counts"]], [int(q) for q in metrics["query"]]
    row = {
        "partition_id": int(metrics["partition-id"]),
        "query": query,
        "train_counts": counts,
        "pre_per_class": pre,
        "post_per_class": post,
        **client_kt_metrics(pre, post, counts, query),
    }
    if "teachers-kept" in metrics:
        row["teachers_kept"] = int(metrics["teachers-kept"])
    return row


# --- the same metrics for multi-round strategies (run-config kt-metrics=true) -------------------


def reference_client(config: RunConfig, partition_id: int, num_partitions: int) -> LocalClient:
    """The ``LocalClient`` a node with this partition id builds (same data, same splits)."""
    context = Context(
        run_id=0,
        node_id=0,
        node_config={"partition-id": partition_id, "num-partitions": num_partitions},
        state=RecordDict(),
        run_config=dict(config.raw),
    )
    return LocalClient.from_context(context)


def write_global_kt_metrics(
    run_dir: Path, config: RunConfig, data, num_partitions: int, global_model: torch.nn.Module
) -> dict:
    """``kt_metrics.json`` for a strategy with one global model (FedAvg, FedProx, MOON, ...).

    As the paper does for FL baselines, every client evaluates the global model ("post"); its
    "pre" is the model it would have trained alone, i.e. round 1 of the one-shot protocol. The
    ServerApp recomputes that local model from the same partition and seeds (an evaluation
    step only, nothing is sent) and draws the same queries, so rows match the QKT runs'.
    """
    settings = KTSettings.from_config(config)
    post, _ = test_accuracies(eval_scores(global_model), data)
    rows = []
    for pid in range(num_partitions):
        client = reference_client(config, pid, num_partitions)
        local, _ = train_local_model(client)
        pre, _ = test_accuracies(eval_scores(local), data)
        counts, query = train_counts(client), client_query(client)
        rows.append(
            {
                "partition_id": pid,
                "query": query,
                "train_counts": [int(c) for c in counts],
                "pre_per_class": [float(v) for v in pre],
                "post_per_class": [float(v) for v in post],
                **client_kt_metrics(pre, post, counts, query),
            }
        )
    summary = write_kt_metrics(
        run_dir,
        rows,
        strategy=config.strategy,
        query_mode=settings.query_mode,
        communication_rounds=config.num_server_rounds,
    )
    log(
        INFO,
        "flowerbed: knowledge-transfer metrics (%s queries): Acc %.4f, query gain %.4f,"
        " forgetting %.4f, uniform acc %.4f",
        settings.query_mode,
        summary["acc"],
        summary["query_gain"],
        summary["forgetting"],
        summary["uniform_acc"],
    )
    return summary


def no_flower_strategy(config: RunConfig, **kwargs):
    raise NotImplementedError(
        f"strategy {config.strategy!r} runs its own two-round protocol"
        " (StrategySpec.run_server), not a Flower Strategy"
    )


def one_shot_spec(
    name: str,
    summary: str,
    paper: str,
    transfer: TransferFn,
    broadcast: str,
    config_keys: tuple[str, ...] = (),
) -> StrategySpec:
    """The registry entry of a one-shot method: its transfer step and what the server sends."""
    if broadcast not in BROADCASTS:
        raise ValueError(f"unknown broadcast {broadcast!r}; valid choices: {', '.join(BROADCASTS)}")
    return StrategySpec(
        name=name,
        summary=summary,
        paper=paper,
        build_server=no_flower_strategy,
        client_train=make_client_train(transfer),
        config_keys=config_keys,
        run_server=functools.partial(run_one_shot, broadcast=broadcast),
    )
