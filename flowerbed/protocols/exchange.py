"""The exchange phase: the one-shot broadcast and transfer step of the QKT family.

QKT paper ("Query-based Knowledge Transfer", ICLR 2025), Sec. 3.1 and Appendix A.2; second
step of the one-shot protocol (server round 2), after the local-fit phase.

Server half: the server sends each student what its method needs, in one message
(``train.exchange``): the other clients' uploaded models (``broadcast='teachers'``: Ensemble,
KD, QKT, QKT Light; teachers are only used through their predictions, so their architectures
may differ), their sample-weighted average (``'average'``: FedAvg(1)), or nothing
(``'none'``: local only). The replies carry each student's per-class accuracy before and after
the transfer on the held-out test set; the server turns them into the metrics of Appendix A.2
(``flowerbed.evaluation.metrics``) and writes ``kt_metrics.json``/``.csv``.

What a reply must hold (``Exchange.reply_rules``): no array record, and a ``metrics`` record
with the client-model metrics (``local_fit.CLIENT_MODEL_METRICS``) and the per-class vectors
of ``kt_metric_schema``; a reply that fails is dropped (that student is missing from
``kt_metrics.json``). An upload dropped in the local-fit phase is no teacher (nor part of the
average); a run with none left stops there, with one line saying so.

Client half: the student takes its local model (``local_fit.local_model``), draws its query
(``query_draw``), runs its method's transfer step (a ``TransferFn``, see
``flowerbed.methods``) when it has a query, and replies with both per-class vectors.

A "communication round" in the paper's sense (each client sends its model, then receives the
others' models) is the two message rounds of local fit and exchange; ``kt_metrics.json``
reports 1 for the transfer methods and 0 for local only, and ``history.json`` counts the bytes
of both message rounds.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from logging import INFO

import numpy as np
import torch
from flwr.app import ConfigRecord, Message, MessageType, RecordDict
from flwr.common.logger import log
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from ..core.seeding import seed_for
from ..evaluation.metrics import (
    Scores,
    client_kt_metrics,
    eval_scores,
    local_test_accuracy,
    test_accuracies,
    write_kt_metrics,
)
from ..kd.loop import distill
from ..kd.objectives import KDParams
from ..models import Classifier, build_model
from ..runtime.context import RunContext
from ..settings import ConfigError, RunConfig
from ..training.local_client import LocalClient
from ..training.loops import build_optimizer
from ..trust.reply_checks import (
    TRAIN,
    Metric,
    NodeSizes,
    RejectedReply,
    ReplyRules,
    no_arrays,
)
from .local_fit import (
    CLIENT_MODEL_METRICS,
    NUM_ROUNDS,
    client_models,
    client_models_row,
    client_query,
    local_model,
    train_counts,
)
from .messaging import send_to_nodes
from .phase import Handoff, Phase

ACTION = f"{MessageType.TRAIN}.exchange"
BROADCASTS = ("none", "average", "teachers")
_TRANSFER_TAG = 0x7F3E


@dataclass
class Transfer:
    """Everything a student's transfer step can use (one per student)."""

    client: LocalClient
    student: Classifier  # the student's local model; the method may train it in place
    query: list[int]
    local_classes: list[int]  # classes with local training samples
    teachers: list[Classifier] = field(default_factory=list)  # other clients' models, eval mode
    teacher_ids: list[int] = field(default_factory=list)
    global_model: Classifier | None = None  # FedAvg(1)

    @property
    def config(self):
        return self.client.config

    def generator(self, tag: int) -> torch.Generator:
        """A generator seeded per (run seed, partition, purpose)."""
        return torch.Generator().manual_seed(
            seed_for(self.client.config.seed, self.client.partition_id, tag)
        )

    def distill(
        self,
        model: torch.nn.Module,
        inputs: torch.Tensor,
        teacher_probs: torch.Tensor,
        objective: str,
        params: KDParams,
        epochs: int,
    ) -> float:
        """``kd.loop.distill`` on the student's labels with the run's optimizer and batch
        size, seeded per (run seed, partition); returns the mean loss."""
        torch.manual_seed(
            seed_for(self.client.config.seed, self.client.partition_id, _TRANSFER_TAG, 1)
        )
        return distill(
            model,
            inputs,
            self.client.y_train,
            teacher_probs,
            objective,
            params,
            epochs=epochs,
            batch_size=self.client.config.batch_size,
            optimizer=build_optimizer(
                [p for p in model.parameters() if p.requires_grad], self.client.config
            ),
            generator=self.generator(_TRANSFER_TAG),
        ).mean_loss


# A method's transfer step: returns the student's post-transfer predictor (logits or
# probabilities) and extra metrics to report.
TransferFn = Callable[[Transfer], tuple[Scores, dict]]


def kt_metric_schema(num_classes: int | None) -> dict[str, Metric]:
    """The per-class vectors of a knowledge-transfer reply (exchange, metrics phase), one entry
    per class where the number of classes is known: ``pre-per-class`` and ``post-per-class``
    accuracies in [0, 1] (NaN: a class absent from the test set), ``train-counts`` whole
    numbers >= 0, ``query`` class indices (at most one per class)."""
    classes = Metric(low=0, high=1, is_list=True, length=num_classes, nan=True)
    last = math.inf if num_classes is None else num_classes - 1
    return {
        "pre-per-class": classes,
        "post-per-class": classes,
        "train-counts": Metric(low=0, whole=True, is_list=True, length=num_classes),
        "query": Metric(low=0, high=last, whole=True, is_list=True),
    }


def check_kt_counts(
    reply: RecordDict, sent: RecordDict, partition: int | None, sizes: NodeSizes | None
) -> None:
    """A knowledge-transfer reply's ``train-counts`` sum to its ``num-examples`` (the node's
    training samples) and its ``query`` names each class at most once."""
    metrics = reply.metric_records["metrics"]
    counts, query = metrics["train-counts"], metrics["query"]
    if sum(counts) != metrics["num-examples"]:
        raise RejectedReply(
            f"metrics/train-counts sum to {sum(counts)!r}, but num-examples is"
            f" {metrics['num-examples']!r}"
        )
    if len(set(query)) != len(query):
        raise RejectedReply(f"metrics/query={query!r} names a class twice")


def kt_reply_rules(num_classes: int | None, **metrics: Metric) -> ReplyRules:
    """The rules of a knowledge-transfer reply: metrics only (``kt_metric_schema`` and
    ``metrics``), ``num-examples`` within the node's training split (``check_kt_counts``)."""
    return ReplyRules(
        arrays=no_arrays,
        metrics={"metrics": {**metrics, **kt_metric_schema(num_classes)}},
        list_metrics=frozenset(),
        examples=TRAIN,
        check=check_kt_counts,
    )


def kt_row(metrics) -> dict:
    """One client's row of ``kt_metrics.json`` from its reply (exchange or metrics phase)."""
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


def log_kt_summary(summary: dict, query_mode: str, prefix: str, suffix: str = "") -> None:
    log(
        INFO,
        "flowerbed: %s (%s queries): Acc %.4f, query gain %.4f, forgetting %.4f,"
        " uniform acc %.4f%s",
        prefix,
        query_mode,
        summary["acc"],
        summary["query_gain"],
        summary["forgetting"],
        summary["uniform_acc"],
        suffix,
    )


def check_one_architecture(config: RunConfig) -> None:
    """Methods that average client models need one architecture for all."""
    if len(set(client_models(config))) > 1:
        raise ConfigError(
            f"strategy {config.strategy!r} averages models and needs one architecture;"
            f" kt-client-models={','.join(client_models(config))!r} mixes several"
        )


class Exchange(Phase):
    """One transfer round: ``broadcast`` what each student receives, ``transfer`` its step."""

    MESSAGE_TYPES = (ACTION,)

    def __init__(self, broadcast: str, transfer: TransferFn) -> None:
        if broadcast not in BROADCASTS:
            raise ValueError(
                f"unknown broadcast {broadcast!r}; valid choices: {', '.join(BROADCASTS)}"
            )
        self.broadcast, self.transfer = broadcast, transfer
        self.num_classes: int | None = None  # the run's, known from ``check``
        self.num_partitions: int | None = None

    def check(self, run: RunContext) -> None:
        self.num_classes, self.num_partitions = run.num_classes, run.num_partitions
        if self.broadcast == "average":
            check_one_architecture(run.config)

    def reply_rules(self, config: RunConfig) -> dict[str, ReplyRules]:
        """Metrics only (``kt_reply_rules``): the client-model metrics, and what a transfer
        step may add: ``teachers-kept`` (at most the other clients), the losses of its
        phases."""
        others = math.inf if self.num_partitions is None else self.num_partitions - 1
        extra = {
            "teachers-kept": Metric(low=0, high=others, whole=True, required=False),
            "phase1-loss": Metric(nan=True, required=False),
            "train-loss": Metric(nan=True, required=False),
        }
        return {ACTION: kt_reply_rules(self.num_classes, **CLIENT_MODEL_METRICS, **extra)}

    # --- server half ---------------------------------------------------------------------
    def run(self, run: RunContext, handoff: Handoff) -> None:
        uploads = handoff.uploads
        pid_of = {
            r.metadata.src_node_id: int(r.content.metric_records["metrics"]["partition-id"])
            for r in uploads
        }
        if self.broadcast == "average":
            average = aggregate_arrayrecords([r.content for r in uploads], "num-examples")
        contents: dict[int, RecordDict] = {}  # node id -> what it receives
        for node in pid_of:
            config = ConfigRecord({"server-round": 2})
            content = RecordDict({"config": config})
            if self.broadcast == "average":
                content["arrays"] = average
            elif self.broadcast == "teachers":
                others = [r for r in uploads if r.metadata.src_node_id != node]
                config["teacher-ids"] = [pid_of[r.metadata.src_node_id] for r in others]
                config["teacher-models"] = [
                    str(r.content.config_records["model"]["name"]) for r in others
                ]
                for r in others:
                    content[f"teacher-{pid_of[r.metadata.src_node_id]}"] = r.content.array_records[
                        "arrays"
                    ]
            contents[node] = content
        results = send_to_nodes(run, ACTION, contents)
        run.history.add(client_models_row(2, run.grid, results), NUM_ROUNDS, "transfer")

        rows = [kt_row(r.content.metric_records["metrics"]) for r in results]
        summary = write_kt_metrics(
            run.run_dir,
            rows,
            strategy=run.config.strategy,
            query_mode=run.config.kt_query,
            communication_rounds=0 if self.broadcast == "none" else 1,
        )
        log_kt_summary(
            summary, run.config.kt_query, run.config.strategy, f"; results in {run.run_dir}"
        )

    # --- client half ---------------------------------------------------------------------
    def client_step(self, client: LocalClient, msg: Message) -> Message:
        data = client.data
        student = local_model(client)
        pre, _ = test_accuracies(eval_scores(student), data)

        received = msg.content.config_records["config"]
        teacher_ids = [int(t) for t in received.get("teacher-ids", [])]
        teacher_names = list(received.get("teacher-models", []))
        teachers = []
        for pid, name in zip(teacher_ids, teacher_names):
            teacher = build_model(
                str(name), data.input_shape, data.num_classes, config=client.config
            )
            teacher.load_state_dict(
                msg.content.array_records[f"teacher-{pid}"].to_torch_state_dict()
            )
            teachers.append(teacher.eval())
        global_model = None
        if "arrays" in msg.content.array_records:
            global_model = client.model_from(msg)

        counts = train_counts(client)
        query = client_query(client)
        job = Transfer(
            client=client,
            student=student,
            query=query,
            local_classes=[int(j) for j in np.flatnonzero(counts > 0)],
            teachers=teachers,
            teacher_ids=teacher_ids,
            global_model=global_model,
        )
        if query:
            scores, extra = self.transfer(job)
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
