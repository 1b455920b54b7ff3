"""FedSA's Transfer baseline: a teacher fine-tuned on the target's labelled set D_T.

Table 1 of "Federated Selective Aggregation for Knowledge Amalgamation" (Xie et al., 2022).
``owner_teacher`` rebuilds an owner's pre-trained teacher in this process
(``benchmarks/fedsa_explain.py`` uses it for its linear probes too).

The paper fine-tunes "a teacher" without saying which: ``transfer`` fine-tunes every clean
(not foreign) teacher the way the FedSA runs adapt their target model (``target.adapt``: a new
head, every parameter), and gives their mean and their best (an oracle).
"""

from __future__ import annotations

import statistics
import time

from flwr.app import Context, RecordDict

from ..catalog import parse_run_config
from ..data.federation import load_splits
from ..inprocess import resolve_run_config
from ..methods.fedsa.owner import is_foreign, teacher_model
from ..methods.fedsa.target import adapt, target_set
from ..models import Classifier
from ..settings import RunConfig
from ..training.local_client import LocalClient
from ..training.loops import evaluate
from .driver import Value

TRANSFER = "Transfer"  # the method's name in the paper's table
BENCHMARK_OWNERS = 10  # the owners of benchmarks/fedsa.py (and of the paper's teachers)


def owner_teacher(
    run_config: dict, config: RunConfig, pid: int, num_clients: int = BENCHMARK_OWNERS
) -> tuple[LocalClient, Classifier]:
    """Owner ``pid``'s client and teacher, rebuilt in this process as a run builds them
    (deterministic: the same data and the same pre-trained teacher, from the process cache
    when a run of the same seed trained it here)."""
    context = Context(
        run_id=1,
        node_id=1,
        node_config={"partition-id": pid, "num-partitions": num_clients},
        state=RecordDict(),
        run_config=run_config,
    )
    client = LocalClient.from_context(context, config)
    return client, teacher_model(client)


def transfer(overrides: dict, clients: int) -> dict[str, Value]:
    """Transfer: every clean teacher fine-tuned on D_T as the runs adapt their target model (a
    new head, every parameter: ``target.adapt``), its test accuracy; ``acc/Transfer`` is the
    mean over the clean teachers, ``transfer-best`` their best (an oracle)."""
    started = time.perf_counter()
    run_config = resolve_run_config({**overrides, "fedsa-selection": "saliency"})
    config = parse_run_config(run_config)
    x, y = target_set(config)
    data = load_splits(config)
    accuracies = []
    for pid in range(clients):
        if is_foreign(config, pid, clients):
            continue
        _, teacher = owner_teacher(run_config, config, pid, clients)
        tuned = adapt(teacher, x, y, config, "all", 0)
        accuracies.append(evaluate(tuned, data.x_test, data.y_test)[1])
    return {
        f"acc/{TRANSFER}": statistics.mean(accuracies),
        "transfer-best": max(accuracies),
        f"seconds/{TRANSFER}": time.perf_counter() - started,
    }
