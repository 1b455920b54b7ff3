"""QKT's reproduction: Table 2's Average columns of "Query-based Knowledge Transfer for
Heterogeneous Learning Environments" (ICLR 2025, ``papers.PAPERS["qkt"]``) as a study.

A point is one column of the table on one data set: (data set, partition, query type). Its run
(one seed) runs every method of the table, FedAvg (multi-round, its final global model measured
with ``kt-metrics``), FedAvg(1), Ensemble, KD, QKT Light and QKT, plus Local (every client's own
model, the reference the paper measures query gain and forgetting against), one after the
other through the real ServerApp/ClientApp handlers in this process (``run_in_process``), with
the paper's Appendix A.2 settings (``APPENDIX_A2``). One point runs all methods, rather than
one point per method, so that the methods of a seed share one partition, the same queries and
the same locally trained models: ``local_fit.train_local_model`` trains a client's model once
per process, and every method (FedAvg's "before" model included) starts from that model. The
difference between two methods of a seed is then the methods' alone, which is what the paired
per-seed differences of the reproduction's report assume, and the ten local models (the
dearest step of the one-shot methods) are trained once per seed instead of seven times.

A row holds, per method, its accuracy, query-accuracy gain, forgetting and uniform accuracy
(``acc/QKT``, ...: fractions, means over clients, as ``kt_metrics.json`` has them), the
seconds it took (``seconds/QKT``) and its CPU seconds (``cpu-seconds/QKT``). ``cells`` makes one ``Cell`` per (method, setting, seed): the
accuracy in %, averaged over the budget's data sets as the paper's Average columns are (one
data set in the ``smoke`` and ``cpu`` budgets).

Budgets (``BUDGETS``; how each differs from the paper: ``regime``):

* ``smoke``: scikit-learn digits and an MLP, 2 seeds, 1 to 2 epochs everywhere, FedAvg 2
  rounds: the whole pipeline, in about a minute of CPU time;
* ``cpu``: ``mnist-5k`` (real MNIST, offline) with the paper's Path (M=3) and Dir(0.1)
  partitions, single- and multi-class queries, 3 seeds, the Appendix A.2 settings, and FedAvg
  for ``CPU_FEDAVG_ROUNDS`` rounds (the most a 2-hour run on 2 cores allows, ``regime``);
* ``paper``: the paper's ResNet-18, 100 FedAvg rounds and E = 25 transfer epochs on CIFAR-10,
  on the three of its five data sets flowerbed reads (CIFAR-10, BloodMNIST, PathMNIST), from
  ``data-dir``; a run whose files are missing fails at once, naming the missing path.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass, field

from ..inprocess import run_in_process
from .driver import BudgetError, Point, Value
from .papers import PAPERS
from .reproduction import Cell, RegimeDifference, Reproduction
from .study_runs import mean_std_cell, one_thread_quietly, seeded_config

PAPER = PAPERS["qkt"]
NUM_CLIENTS = 10  # the paper's cross-silo setting
# (name in the paper's table, flowerbed strategy); Local is not in the table: the reference
METHODS = (
    ("Local", "local"),
    ("FedAvg", "fedavg"),
    ("FedAvg(1)", "fedavg1"),
    ("Ensemble", "ensemble"),
    ("KD", "kd"),
    ("QKT Light", "qkt-light"),
    ("QKT", "qkt"),
)
METRICS = ("acc", "query_gain", "forgetting", "uniform_acc")  # kt_metrics.json's summary keys
PARTITIONS = (
    ("Path", {"partitioner": "pathological", "classes-per-client": 3}),
    ("Dir", {"partitioner": "dirichlet", "dirichlet-alpha": 0.1}),
)
QUERIES = ("single", "multi")  # the run config's kt-query
# Appendix A.2: Adam, lr 1e-3, weight decay 4e-4, batch 32; local training up to 100 epochs,
# early stopping after 10 without improvement; E = 10 transfer epochs (5 for QKT Light's
# head); FedAvg: 2 local epochs per round
APPENDIX_A2 = {
    "optimizer": "adam",
    "learning-rate": 0.001,
    "weight-decay": 0.0004,
    "batch-size": 32,
    "kt-local-max-epochs": 100,
    "kt-local-patience": 10,
    "kt-epochs": 10,
    "kt-light-head-epochs": 5,
    "local-epochs": 2,
}
# The under-representation threshold (samples) below which a class may be queried: the paper's
# 50 on its data sets (thousands of samples per client); about 10 % of a client's training data
# on the small sets (digits: ~115 per client, mnist-5k: 400), where 50 would make a client's
# own main classes query candidates
QUERY_THRESHOLD = {"digits": 10, "mnist-5k": 40, "cifar10": 50, "bloodmnist": 50, "pathmnist": 50}
CPU_FEDAVG_ROUNDS = 50  # why: ROUNDS_REASON["cpu"]


@dataclass(frozen=True)
class Budget:
    """A budget's data sets, seeds, FedAvg rounds and run-config changes to ``APPENDIX_A2``
    (``per_data``: further changes for one data set)."""

    data: tuple[str, ...]
    seeds: int
    fedavg_rounds: int
    config: dict = field(default_factory=dict)
    per_data: dict = field(default_factory=dict)


BUDGETS = {
    "smoke": Budget(
        ("digits",),
        seeds=2,
        fedavg_rounds=2,
        config={
            "model": "mlp",  # a run of the CNN costs three of the MLP on digits
            "kt-local-max-epochs": 2,
            "kt-epochs": 1,
            "kt-light-head-epochs": 1,
            "local-epochs": 1,
        },
    ),
    "cpu": Budget(("mnist-5k",), seeds=3, fedavg_rounds=CPU_FEDAVG_ROUNDS),
    "paper": Budget(
        ("cifar10", "bloodmnist", "pathmnist"),
        seeds=3,
        fedavg_rounds=100,
        config={"model": "resnet18"},
        per_data={"cifar10": {"kt-epochs": 25}},  # "25 for CIFAR10 and CINIC10"
    ),
}


def budget_of(name: str) -> Budget:
    if name not in BUDGETS:
        raise BudgetError(f"unknown budget {name!r}; valid: {', '.join(BUDGETS)}")
    return BUDGETS[name]


def setting_name(partition: str, query: str) -> str:
    """The paper's column name: ``single-class, Path``."""
    return f"{query}-class, {partition}"


class QktStudy:
    """Table 2's Average columns: one point per (data set, partition, query type), every
    method run on the same local models (module docstring)."""

    name = "qkt"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(budget)
        points = [
            Point(
                f"{data}-{partition}-{query}",
                {
                    "data": data,
                    "partition": partition,
                    "query": query,
                    "fedavg-rounds": chosen.fedavg_rounds,
                    "config": {
                        **APPENDIX_A2,
                        **chosen.config,
                        **chosen.per_data.get(data, {}),
                        **partition_config,
                        "dataset": data,
                        "kt-query": query,
                        "kt-query-threshold": QUERY_THRESHOLD[data],
                    },
                },
            )
            for data in chosen.data
            for partition, partition_config in PARTITIONS
            for query in QUERIES
        ]
        return points, list(range(chosen.seeds))

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        """Every method of ``METHODS`` on the point's setting with ``seed``
        (``one_thread_quietly``)."""
        config = seeded_config(point, seed)
        row: dict[str, Value] = {
            key: point.settings[key] for key in ("data", "partition", "query")
        } | {"setting": setting_name(point.settings["partition"], point.settings["query"])}
        with one_thread_quietly():
            for method, strategy in METHODS:
                overrides = {**config, "strategy": strategy}
                if strategy == "fedavg":
                    overrides |= {
                        "num-server-rounds": point.settings["fedavg-rounds"],
                        "kt-metrics": True,
                    }
                row |= run_method(method, overrides)
        return row

    def report(self, rows: list[dict[str, Value]]) -> dict[str, str]:
        return {"table.md": accuracy_table(rows)}


def run_method(method: str, overrides: dict) -> dict[str, Value]:
    """One method's run in a folder that is deleted afterwards: its ``METRICS`` (as
    ``metric/method``), the seconds it took (``seconds/method``) and the CPU seconds of this
    process (``cpu-seconds/method``: less moved than the wall clock by a busy machine)."""
    with tempfile.TemporaryDirectory(prefix="flowerbed-qkt-") as out:
        started, cpu = time.perf_counter(), time.process_time()
        run_dir = run_in_process({**overrides, "output-dir": out}, NUM_CLIENTS)
        times = {
            f"seconds/{method}": time.perf_counter() - started,
            f"cpu-seconds/{method}": time.process_time() - cpu,
        }
        summary = json.loads((run_dir / "kt_metrics.json").read_text())["summary"]
    return {f"{key}/{method}": float(summary[key]) for key in METRICS} | times


def accuracies(rows: list[dict[str, Value]]) -> dict[tuple[str, str], dict[int, float]]:
    """(method, setting) -> {seed: accuracy in %}, averaged over the data sets a seed has rows
    of (the paper's Average columns)."""
    values: dict[tuple[str, str, int], list[float]] = defaultdict(list)
    for row in rows:
        for method, _ in METHODS:
            key = f"acc/{method}"
            if key in row:
                values[method, str(row["setting"]), int(row["seed"])].append(100 * float(row[key]))
    table: dict[tuple[str, str], dict[int, float]] = defaultdict(dict)
    for (method, setting, seed), accuracy in sorted(values.items()):
        table[method, setting][seed] = statistics.mean(accuracy)
    return table


def cells(rows: list[dict[str, Value]]) -> list[Cell]:
    """One ``Cell`` per (method of the paper's table, setting, seed): its accuracy in %."""
    methods = {row.method for row in PAPER.rows}
    return [
        Cell(method, setting, seed, value)
        for (method, setting), by_seed in accuracies(rows).items()
        if method in methods
        for seed, value in by_seed.items()
    ]


def accuracy_table(rows: list[dict[str, Value]]) -> str:
    """Per method and setting, the accuracy in % as mean ± sample std over seeds, and n."""
    table = accuracies(rows)
    settings = [row.setting for row in PAPER.rows if row.method == "QKT"]
    data = sorted({str(row["data"]) for row in rows})
    lines = [
        (
            f"Acc (%) per method and setting on {', '.join(data) or 'no data yet'}: mean ±"
            " sample std over seeds (n seeds; averaged over the data sets within a seed)."
        ),
        "",
        "| Method | " + " | ".join(settings) + " |",
        "|---|" + "---|" * len(settings),
    ]
    for method, _ in METHODS:
        lines.append(
            f"| {method} | "
            + " | ".join(mean_std_cell(list(table.get((method, s), {}).values())) for s in settings)
            + " |"
        )
    return "\n".join(lines) + "\n"


def regime(budget: str) -> list[RegimeDifference]:
    """Every way ``budget``'s regime differs from the paper's (Sec. 4.1, Appendix A.2)."""
    chosen = budget_of(budget)
    differences = [data_difference(budget)]
    model = chosen.config.get("model", "cnn")  # cnn: the data sets' own (``fitting_model``)
    if model != "resnet18":
        differences.append(RegimeDifference("model", "ResNet-18", *MODELS[model]))
    if chosen.fedavg_rounds != 100:
        differences.append(
            RegimeDifference(
                "FedAvg rounds", "100", str(chosen.fedavg_rounds), ROUNDS_REASON[budget]
            )
        )
    if chosen.config.get("kt-local-max-epochs", 100) != 100:
        differences.append(
            RegimeDifference(
                "local training",
                "up to 100 epochs, early stopping after 10 without improvement",
                f"up to {chosen.config['kt-local-max-epochs']} epochs",
                "smoke: the pipeline, not the numbers",
            )
        )
    if chosen.config.get("kt-epochs", 10) != 10 or chosen.config.get("local-epochs", 2) != 2:
        differences.append(
            RegimeDifference(
                "epochs",
                "E = 10 transfer epochs (25 on CIFAR10, CINIC10), 5 for QKT Light's head;"
                " FedAvg 2 local epochs per round",
                f"E = {chosen.config['kt-epochs']}, QKT Light's head"
                f" {chosen.config['kt-light-head-epochs']}; FedAvg"
                f" {chosen.config['local-epochs']} local epoch per round",
                "smoke: the pipeline, not the numbers",
            )
        )
    small = [data for data in chosen.data if QUERY_THRESHOLD[data] != 50]
    if small:
        differences.append(
            RegimeDifference(
                "query threshold",
                "a class under 50 samples on a client may be queried",
                ", ".join(f"{QUERY_THRESHOLD[data]} on {data}" for data in small),
                "about 10 % of a client's training data, as 50 is of the paper's; at 50 a"
                " client's own main classes would be query candidates",
            )
        )
    differences.append(
        RegimeDifference(
            "seeds",
            "not stated (Table 2 gives one value per cell)",
            str(chosen.seeds),
            "smoke: the pipeline only"
            if budget == "smoke"
            else "at least 3 seeds for a paired per-seed difference with its interval",
        )
    )
    return differences


MODELS = {  # the model, and why it is not ResNet-18
    "cnn": (
        "flowerbed's small CNN (`cnn`: two convolutions, 151k parameters on digits)",
        (
            "ResNet-18 on 10 clients x 4 settings x 3 seeds, with up to 100 local epochs each,"
            " does not fit 2 CPU cores in 2 hours"
        ),
    ),
    "mlp": (
        "flowerbed's MLP (`mlp`: two hidden layers of 64)",
        "smoke: the pipeline; a run of the MLP costs a third of the CNN's on digits",
    ),
}
PAPER_DATA = "CIFAR10, CIFAR100, CINIC10, BloodMNIST, PathMNIST (the Average columns)"
ROUNDS_REASON = {
    "smoke": "smoke: the pipeline, not the numbers",
    "cpu": (
        "measured first: one seed of mnist-5k, Dir, multi-class took 401 CPU seconds for Local"
        " and the five one-shot methods and 8.4 per FedAvg round (one torch thread, on 2 cores"
        " at load 6 to 8, 2026-11-28). The grid's 12 runs then take 12 x (401 + 50 x 8.4) s ="
        " 82 min with 2 workers, a third of 2 hours to spare for a busy machine; 100 rounds"
        " would take 124 min"
    ),
}


def data_difference(budget: str) -> RegimeDifference:
    """What the budget's data sets are instead of the paper's five."""
    if budget == "paper":
        return RegimeDifference(
            "data",
            PAPER_DATA,
            "CIFAR-10, BloodMNIST, PathMNIST (from data-dir)",
            "flowerbed has no loader for CIFAR-100 or CINIC-10: the Average is over three",
        )
    ours = {
        "smoke": "scikit-learn digits (8x8 images, 1,797 in all)",
        "cpu": "mnist-5k (real MNIST, 4,000 training images over 10 clients, 1,000 test)",
    }[budget]
    return RegimeDifference(
        "data", PAPER_DATA, ours, "offline: the paper's data sets are not on this machine"
    )


REPRODUCTION = Reproduction(paper="qkt", study=QktStudy(), cells=cells, regime=regime)
