"""The knowledge-transfer metrics phase: clients measure what a protocol's global model gave them.

Appended to a multi-round protocol with ``kt-metrics=true`` (FedAvg, FedProx, MOON, ...), so
that its final global model gets the metrics of the QKT paper's Appendix A.2 like the one-shot
methods: as the paper does for FL baselines, every client evaluates the global model ("post")
against the model it would have trained alone ("pre": the local-fit phase's model, trained
on the client from its own partition and seeds, ``local_fit.train_local_model``) with the
same query as in the one-shot runs. The server sends the final global arrays
(``query.kt_metrics``); each client computes both per-class accuracies on the held-out test
set and replies; the server only collects them into ``kt_metrics.json``/``.csv``. It never
trains a client's model nor reads a client's data.
"""

from __future__ import annotations

from flwr.app import ConfigRecord, Message, MessageType, RecordDict

from ..evaluation.metrics import eval_scores, test_accuracies, write_kt_metrics
from ..runtime.context import ModelBuilder, RunContext
from ..settings import RunConfig, Setting
from ..training.local_client import LocalClient
from ..trust.reply_checks import ReplyRules, client_metrics
from .exchange import kt_reply_rules, kt_row, log_kt_summary
from .local_fit import client_query, train_counts, train_local_model
from .messaging import send_to_nodes
from .phase import Handoff, Phase

SETTINGS = (
    Setting(
        "kt-metrics",
        False,
        "multi-round strategies: also write `kt_metrics.json` (the knowledge-transfer metrics of"
        " the final global model, see [QKT](docs/qkt.md))",
    ),
)
ACTION = f"{MessageType.QUERY}.kt_metrics"


class KTMetrics(Phase):
    """Clients evaluate the handoff's global model against their own (module docstring).

    ``build_model`` makes the protocol's global model (MOON's has a projection head).
    """

    MESSAGE_TYPES = (ACTION,)

    def __init__(self, build_model: ModelBuilder) -> None:
        self.build_model = build_model
        self.num_classes: int | None = None  # the run's, known from ``check``

    def check(self, run: RunContext) -> None:
        self.num_classes = run.num_classes

    def reply_rules(self, config: RunConfig) -> dict[str, ReplyRules]:
        """Metrics only: ``num-examples``, ``partition-id`` and the per-class vectors
        (``exchange.kt_reply_rules``)."""
        return {ACTION: kt_reply_rules(self.num_classes, **client_metrics())}

    def run(self, run: RunContext, handoff: Handoff) -> None:
        content = RecordDict({"arrays": handoff.arrays, "config": ConfigRecord({})})
        replies = send_to_nodes(run, ACTION, content)
        rows = [kt_row(r.content.metric_records["metrics"]) for r in replies]
        summary = write_kt_metrics(
            run.run_dir,
            rows,
            strategy=run.config.strategy,
            query_mode=run.config.kt_query,
            communication_rounds=run.config.num_server_rounds,
        )
        log_kt_summary(summary, run.config.kt_query, "knowledge-transfer metrics")

    def client_step(self, client: LocalClient, msg: Message) -> Message:
        local, _ = train_local_model(client)
        pre, _ = test_accuracies(eval_scores(local), client.data)
        data = client.data
        global_model = self.build_model(client.config, data.input_shape, data.num_classes)
        global_model.load_state_dict(msg.content.array_records["arrays"].to_torch_state_dict())
        post, _ = test_accuracies(eval_scores(global_model), data)
        counts = train_counts(client)
        metrics = client.metrics(
            len(client.y_train),
            **{
                "pre-per-class": [float(v) for v in pre],
                "post-per-class": [float(v) for v in post],
                "train-counts": [int(c) for c in counts],
                "query": [int(q) for q in client_query(client)],
            },
        )
        return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)
