"""CTL, collaborative transfer learning: nodes share predictions on representatives, never models.

"Distributed Collaborative Learning with Representative Knowledge Sharing" (Casey et al.,
Mathematics 2025), Algorithm 1. There is no global model: node k keeps a logistic regression
f_k(x) = sigmoid(theta_k . x) (with an intercept, on its own standardised features) and
minimises, at round t,

    L_k(t) = (1 - alpha) L(D_k) + alpha sum_{j in guests(k)} lambda_{j,k}(t) L(p_j(t-1), p_k)   (C1)

with L(D_k) the mean cross-entropy on its training data (C2) and the distillation loss on all
2K representatives h (every node's two class centroids, C4-C5, weighted by their class counts
n_h; n = sum n_h):  L(p_j, p_k) = (1/n) sum_h n_h KL(Bernoulli(p_j(h)) || Bernoulli(p_k(h)))
(C7), where p_j(t-1) are guest j's predictions of the previous round and p_k the home node's
current ones. Guests and lambda (C13) follow ``rules``.

A node that holds no training sample of class c (the paper's simulations discard such draws;
real sites often lack a class) shares no representative for it: count n_{k,c} = 0, so its
term drops out of (C7) at every node; and the class-wise energy coefficient (C12) of a node
k to a task i averages only the classes C(k, i) both hold, with k's counts renormalised,
H[k, i] = sum_{c in C(k,i)} n_{k,c} H^(c)[k, i] / sum_{c in C(k,i)} n_{k,c}, and H[k, i] = 1
when they hold none in common (``rules``, "Missing class"). The run logs which nodes lack
which class.

Phases (the server only relays; model parameters never leave a node):

1. ``CTLShare`` (``query.ctl_share``): each node returns its two centroids with counts and its
   class-wise moments (mean, std, skewness, excess kurtosis per feature). A node that does not
   answer stops the run: every node's representatives are needed.
2. ``CTLRounds`` (``train.ctl_round``), rounds t = 0..T (T = ``num-server-rounds``): the server
   sends every node the representatives, counts and moments, and, for t >= 1, every node's
   predictions on all representatives and every node's coefficient row of round t - 1. Node k
   chooses its guests, computes lambda, takes ``ctl-steps`` full-batch gradient steps on (C1)
   (none at t = 0: round 0 measures the initial models), evaluates itself on its tasks, and
   replies with its predictions p_k(t) and its row H[k, :] (its feature importance, C11, from
   its current model). A node that fails a round keeps its previous predictions and row.

Every reply is checked before the server uses it (``replies``: the arrays' shapes, class
counts within the node's training split, probabilities, the round's metrics); a reply that
fails counts as a failed node, with the reason.

Settings from the authors' code, not the paper (which gives none): alpha 0.85, learning rate
0.5, 2 full-batch steps per round, models initialised at zero (the paper's Algorithm 1 "fits"
them first; with zeros, round 0 predicts 0.5 everywhere and feature importance is uniform).
Differences from the code, on purpose: accuracy is measured after the round's steps (the
code measured it after the first of its two steps); scores are not clipped to [-10, 10];
feature importance probes unit vectors of the data set's standardised features (one pooled
standard deviation per feature) where the code used raw units, in which features with tiny
scales dominate; ``worst`` takes the true argmax (the code's search started at H = 0 and fell
back to node 0 when every H was negative). ``ctl-local-ce`` chooses the code's full
cross-entropy step for ``local`` (default) or the same (1 - alpha) scaling as the other rules.

Each node predicts its own test data and that of ``ctl-tasks`` other nodes (a simulation
convenience: a node evaluates on other nodes' test data, which every process derives from the
run config). Results: ``ctl_metrics.json`` (tasks, per round and node: task accuracies,
guests, lambda, coefficient row) and ``ctl_metrics.csv`` (one row per round, node and task);
history rows carry the mean accuracy over all tasks (``client_models_test_accuracy_mean``),
the own task (``client_accuracy_unweighted_mean``) and the other tasks (``nonlocal_accuracy_mean``).
"""

from __future__ import annotations

import math
from logging import INFO, WARNING

import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.common.logger import log
from torch import nn

from ...core.results import write_csv, write_json
from ...data.federation import SITE
from ...models import Classifier
from ...protocols.messaging import by_partition, send_to_nodes
from ...protocols.phase import Handoff, Phase, ProtocolSpec
from ...runtime.context import RunContext
from ...runtime.history import round_row, unweighted_client_accuracy
from ...runtime.outcome import RunFailed
from ...settings import ConfigError, RunConfig, Setting
from ...training.local_client import LocalClient
from ...trust.reply_checks import ReplyRules
from .node import round_step, share_step
from .replies import round_rules, share_rules
from .rules import GUEST_RULES, NUM_CLASSES, missing_classes, task_assignment

PAPER = "Distributed Collaborative Learning with Representative Knowledge Sharing (CTL), 2025"
SHARE = f"{MessageType.QUERY}.ctl_share"
ROUND = f"{MessageType.TRAIN}.ctl_round"

SETTINGS = (
    Setting(
        "ctl-alpha",
        0.85,
        "CTL: weight alpha of the distillation term (authors' code: 0.85 for the breast-cancer"
        " simulation, 0.15 for the spread/dispersion one)",
        low=0,
        high=1,
    ),
    Setting(
        "ctl-guests",
        "best",
        "CTL: guest selection, `best` (lowest energy coefficient to each other task), `all`,"
        " `random` (fixed per node), `random-redraw` (every round), `worst`, `local` (none)",
        choices=GUEST_RULES,
    ),
    Setting("ctl-num-guests", 2, "CTL: guests per node (best, worst, random)", low=1),
    Setting("ctl-tasks", 2, "CTL: other nodes' test sets each node also predicts", low=0),
    Setting("ctl-steps", 2, "CTL: full-batch gradient steps per round", low=1),
    Setting("ctl-learning-rate", 0.5, "CTL: gradient-descent step size", low=0, low_open=True),
    Setting(
        "ctl-local-ce",
        "full",
        "CTL, `ctl-guests=local`: `full` cross-entropy step (authors' code) or `scaled` by"
        " (1 - alpha) like the collaborative rules",
        choices=("full", "scaled"),
    ),
    Setting(
        "ctl-all-scale",
        True,
        "CTL, `ctl-guests=all`: scale lambda by num-guests / (K - 1) (authors' code)",
    ),
    Setting(
        "ctl-clip-h",
        False,
        "CTL: clip energy coefficients to [0, 1] (the moment approximation can leave it)",
    ),
)


def logistic_model(config: RunConfig, input_shape: tuple[int, ...], num_classes: int):
    """CTL's node model as a ``Classifier``: one logit, sigmoid(theta . x + b)."""
    return Classifier(nn.Flatten(), nn.Linear(math.prod(input_shape), 1))


# --- the server's side -----------------------------------------------------------------------


class CTLShare(Phase):
    """Phase 1: every node shares its representatives and moments (module docstring)."""

    SERVER_DATA = "the data set whose partition every node derives (not partitioner='site')"

    MESSAGE_TYPES = (SHARE,)

    def __init__(self) -> None:
        self.features: int | None = None  # d, known from ``check``

    def reply_rules(self, config: RunConfig) -> dict[str, ReplyRules]:
        """Centroids, counts and moments of known shapes; counts within the node's training
        split (``replies.share_rules``)."""
        return {SHARE: share_rules(self.features)}

    def check(self, run: RunContext) -> None:
        config, num_nodes = run.config, run.num_partitions
        self.features = math.prod(run.input_shape)
        if config.partitioner == SITE:
            raise ConfigError(
                "strategy='ctl' has each node predict other nodes' test data, which every"
                " process derives from the partition of one data set; partitioner='site' has"
                " none: choose another partitioner"
            )
        if run.data.num_classes != NUM_CLASSES:
            raise ConfigError(
                f"strategy='ctl' needs binary labels (CTL's node model is a logistic"
                f" regression); dataset={config.dataset!r} has {run.data.num_classes} classes;"
                " use breast-cancer, breast-cancer-shifted or ctl-gaussian"
            )
        if config.ctl_tasks > num_nodes - 1:
            raise ConfigError(
                f"ctl-tasks={config.ctl_tasks} but each node has {num_nodes - 1} other node(s) in"
                f" a federation of {num_nodes}; valid range: 0 to {num_nodes - 1}"
            )
        chooses = config.ctl_guests in ("best", "worst", "random", "random-redraw")
        if chooses and config.ctl_num_guests > num_nodes - 1:
            raise ConfigError(
                f"ctl-num-guests={config.ctl_num_guests} but each node has {num_nodes - 1} other"
                f" node(s) in a federation of {num_nodes}; valid range: 1 to {num_nodes - 1}"
            )

    def run(self, run: RunContext, handoff: Handoff) -> None:
        replies = by_partition(run, send_to_nodes(run, SHARE, RecordDict()))
        shares = {k: r.content.array_records["share"] for k, r in replies.items()}
        missing = sorted(set(range(run.num_partitions)) - set(shares))
        if missing:
            raise RunFailed(
                f"CTL: partitions {missing} did not share their representatives; CTL needs the"
                " representatives of every node"
            )
        ordered = [shares[k] for k in range(run.num_partitions)]
        handoff.shared = {
            "representatives": np.concatenate([s["centroids"].numpy() for s in ordered]),
            "counts": np.concatenate([s["counts"].numpy() for s in ordered]),
            "moments": np.stack([s["moments"].numpy() for s in ordered]),
        }
        lacking = missing_classes(handoff.shared["counts"].reshape(-1, NUM_CLASSES))
        if lacking:
            log(
                WARNING,
                "flowerbed: CTL: node(s) %s hold no training sample of a class; such a node"
                " shares no representative for it (weight n_h = 0 in the distillation loss)"
                " and energy coefficients compare only the classes both sides hold (none in"
                " common: H = 1); see flowerbed.methods.ctl.rules",
                ", ".join(f"{k} (class {', '.join(map(str, cs))})" for k, cs in lacking.items()),
            )

    def client_step(self, client: LocalClient, msg: Message) -> Message:
        return share_step(client, msg)


class CTLRounds(Phase):
    """Phase 2: rounds 0..T of relayed predictions and coefficient rows (module docstring)."""

    MESSAGE_TYPES = (ROUND,)

    def __init__(self) -> None:
        self.num_nodes: int | None = None  # K, known from ``check``

    def check(self, run: RunContext) -> None:
        self.num_nodes = run.num_partitions

    def reply_rules(self, config: RunConfig) -> dict[str, ReplyRules]:
        """Predictions and a coefficient row shaped by the board sent, the round's metrics
        (``replies.round_rules``)."""
        return {ROUND: round_rules(config, self.num_nodes)}

    def run(self, run: RunContext, handoff: Handoff) -> None:
        config, num_nodes = run.config, run.num_partitions
        tasks = task_assignment(num_nodes, config.ctl_tasks, config.seed)
        predictions = coefficients = None
        log_rounds: list[dict] = []
        for server_round in range(config.num_server_rounds + 1):
            board = {key: Array(value) for key, value in handoff.shared.items()}
            if server_round >= 1:
                board.update(predictions=Array(predictions), coefficients=Array(coefficients))
            content = RecordDict(
                {
                    "board": ArrayRecord(board),
                    "config": ConfigRecord({"server-round": server_round}),
                }
            )
            answered = by_partition(run, send_to_nodes(run, ROUND, content))
            if server_round == 0:
                missing = sorted(set(range(num_nodes)) - set(answered))
                if missing:
                    raise RunFailed(
                        f"CTL: partitions {missing} failed round 0; CTL needs every node's"
                        " initial predictions"
                    )
                predictions = np.zeros((num_nodes, len(handoff.shared["counts"])))
                coefficients = np.zeros((num_nodes, num_nodes))
            for k, reply in answered.items():  # a node that failed keeps its previous values
                shared = reply.content.array_records["shared"]
                predictions[k] = shared["predictions"].numpy()
                coefficients[k] = shared["coefficients"].numpy()
            nodes = {k: dict(r.content.metric_records["metrics"]) for k, r in answered.items()}
            log_rounds.append(round_log(server_round, nodes, coefficients))
            run.history.add(history_row(run, server_round, nodes), config.num_server_rounds)
            write_ctl_metrics(run, tasks, log_rounds)
        log(
            INFO,
            "flowerbed: CTL (%s guests) final accuracy: all tasks %.4f, own %.4f, other %.4f",
            config.ctl_guests,
            log_rounds[-1]["all-tasks"],
            log_rounds[-1]["own-task"],
            log_rounds[-1]["other-tasks"],
        )
        clipped = sum(n.get("clipped", 0) for r in log_rounds for n in r["nodes"])
        if config.ctl_clip_h and clipped:
            log(WARNING, "flowerbed: CTL clipped %d energy coefficients to [0, 1]", clipped)

    def client_step(self, client: LocalClient, msg: Message) -> Message:
        return round_step(client, msg)


def _mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return float(np.mean(values)) if values else math.nan


def round_log(server_round: int, nodes: dict[int, dict], coefficients: np.ndarray) -> dict:
    """One round of ``ctl_metrics.json``: per node accuracies, guests, lambda, H row."""
    entries = []
    for k in sorted(nodes):
        m = nodes[k]
        guests = [int(g) for g in m["guests"]]
        entries.append(
            {
                "partition": k,
                "task-accuracies": list(m["task-accuracies"]),
                "guests": guests,
                "lambdas": list(m["lambdas"]),
                "coefficients": coefficients[k].tolist(),
                "train-loss": m["train-loss"],
                "clipped": m["clipped"],
            }
        )
    return {
        "round": server_round,
        "all-tasks": _mean([a for n in entries for a in n["task-accuracies"]]),
        "own-task": _mean([n["task-accuracies"][0] for n in entries]),
        "other-tasks": _mean([a for n in entries for a in n["task-accuracies"][1:]]),
        "nodes": entries,
    }


def history_row(run: RunContext, server_round: int, nodes: dict[int, dict]) -> dict:
    accuracies = [a for m in nodes.values() for a in m["task-accuracies"]]
    own = [m["accuracy"] for m in nodes.values()]
    row = round_row(server_round, run.grid, client_models_test_accuracy_mean=_mean(accuracies))
    if server_round == 0:  # the initial exchange (shares and round 0) closes here
        traffic = run.grid.end_round()
        row.update(
            bytes_sent=traffic.bytes_sent,
            bytes_received=traffic.bytes_received,
            seconds=traffic.seconds,
            failures=traffic.failures,
        )
    row.update(
        **unweighted_client_accuracy(own),
        nonlocal_accuracy_mean=_mean([m["nonlocal-accuracy"] for m in nodes.values()]),
        client_accuracies={k: m["accuracy"] for k, m in nodes.items()},
    )
    return row


def write_ctl_metrics(run: RunContext, tasks: np.ndarray, rounds: list[dict]) -> None:
    write_json(
        run.run_dir / "ctl_metrics.json",
        {"guests": run.config.ctl_guests, "tasks": tasks.tolist(), "rounds": rounds},
    )
    rows = [
        {
            "round": r["round"],
            "partition": n["partition"],
            "task": int(tasks[n["partition"]][i]),
            "own_task": i == 0,
            "accuracy": accuracy,
        }
        for r in rounds
        for n in r["nodes"]
        for i, accuracy in enumerate(n["task-accuracies"])
    ]
    write_csv(
        run.run_dir / "ctl_metrics.csv",
        rows,
        ("round", "partition", "task", "own_task", "accuracy"),
    )


# CTL's node model is a binary logistic regression and digits, the global default, has 10
# classes: the bundled breast-cancer data (569 clinical cases, 30 features) instead, under the
# global partition (Dirichlet 0.5), where a node may well hold no case of a class (see the
# missing-class rule). The paper's Simulation 1 is dataset='breast-cancer-shifted' with
# partitioner='kmeans-pca'.
DEFAULTS = {"dataset": "breast-cancer"}

PROTOCOL = ProtocolSpec(
    name="ctl",
    summary="decentralised, no global model: each node keeps a logistic regression, shares its two"
    " class centroids, its class-wise moments and, every round, its predictions on"
    " everyone's centroids; it distils (Bernoulli KL) from selected guests weighted by"
    " energy coefficients between data distributions (keys `ctl-*`; binary labels)",
    paper=PAPER,
    phases=lambda config: (CTLShare(), CTLRounds()),
    settings=SETTINGS,
    build_model=logistic_model,
    defaults=DEFAULTS,
    uses_model=False,  # its own logistic model, whatever `model` says
    kind="decentralised, no global model",
    exchanged="once: each node's two class centroids (with counts) and class-wise feature"
    " moments; every round: each node's predictions on all representatives and its row of"
    " energy coefficients; never model parameters",
    reproduction="ctl",
)
