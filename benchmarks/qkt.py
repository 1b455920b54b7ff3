"""The shape of Table 2 of the QKT paper (ICLR 2025) on data available offline.

For every data set, partition (pathological M=3, Dirichlet(0.1)), query type (single-class,
multi-class) and seed, it runs, through the real ServerApp/ClientApp handlers in this process
(``run_in_process``), with the same partitions, local models and queries:
Local, FedAvg(1), Ensemble, KD, QKT Light, QKT (one transfer round) and FedAvg over many rounds
(the multi-round reference, its metrics from ``kt-metrics=true``). It prints, per setting, a
markdown table of Acc, Query Acc. Gain, Forgetting and Uniform Acc. (mean ± std over seeds,
in %) and the communication rounds, then the Table 2 summary (Acc per setting).

Data: scikit-learn digits always (10 clients, ~115 training samples each). BloodMNIST
(``<data-dir>/bloodmnist.npz``) and CIFAR-10 (``<data-dir>/cifar-10-batches-py``) run the same
way when their files are present locally (nothing is downloaded).

Settings follow Appendix A.2 (``flowerbed.experiments.qkt.APPENDIX_A2``, which QKT's
reproduction study uses too): Adam, learning rate 1e-3, weight decay 4e-4, batch 32; local
training up to 100 epochs with early stopping (patience 10); E = 10 transfer epochs (5 for QKT
Light's head); alpha = T = 1, lambda = 1.5, tau = 0.01, B = 20. FedAvg: 2 local epochs per
round. The under-representation threshold is the paper's 50 samples on BloodMNIST/CIFAR-10
(thousands of samples per client) and 10 on digits, where 50 would be ~45 % of a client's
data and would make a client's own main classes query candidates.

A study of the study driver (``flowerbed.experiments.study_cli``): a point is one method on one
(data set, partition, query type), a run one seed of it, the run config above run in this
process in a temporary folder (``sweep_study.run_cell``, one torch thread). Its row holds the
run's knowledge-transfer metrics (means over clients, from ``kt_metrics.json``), its
communication rounds and ``round_seconds``, the sum of its rounds (history) without its
start-up. The methods of a seed share one partition, the same queries and the same locally
trained models (``local_fit.train_local_model`` trains a client's model once per process, and
every method starts from it), so the first method of a setting and seed that runs in a process
(Local, in the grid's order) is the one whose seconds include training them.

Budgets (``BUDGETS``): ``full`` (the default: digits, and BloodMNIST and CIFAR-10 where their
files are in ``--data-dir``; both partitions and query types; every method; seeds 0, 1, 2;
FedAvg 20 rounds: about 15 min on 2 busy cores for digits), ``mnist-5k`` (the 5,000 real MNIST
digits of the mnist extra, single-class queries, otherwise as ``full``: about 40 min; committed
in ``results/qkt-mnist-5k``, which ``--out`` names) and ``quick`` (digits, Local and QKT, seed
0: a check that the measuring path works, into ``results/qkt/quick``). ``--data-dir`` (default
``~/.flowerbed/data``) is this script's own option, taken before the study's command line.

    python benchmarks/qkt.py                      # what rows.jsonl lacks of the full grid
    python benchmarks/qkt.py --workers 2          # two runs at a time
    python benchmarks/qkt.py --quick              # 8 runs: Local and QKT, seed 0
    python benchmarks/qkt.py --report-only        # table.md from rows.jsonl
    python benchmarks/qkt.py --budget mnist-5k --out benchmarks/results/qkt-mnist-5k

Writes into its folder: ``rows.jsonl`` (one row per run: the committed record),
``measured.jsonl`` (one line per invocation that measured) and, from the rows and the
provenance beside them alone, ``table.md``: per setting every method's metrics (mean ± sample
std over seeds, in %), QKT's accuracy minus each method's paired by seed with its 95 % t
interval, and the Table 2 summary; ``docs/studies-qkt.md`` includes it. The committed rows were
measured by the script when it was a sweep (``measured.json`` in each folder, its provenance,
kept), into ``runs.csv``, converted once into ``rows.jsonl``: to measure anew, remove
``rows.jsonl`` and ``measured.json``.
"""

from __future__ import annotations

import argparse
import json
import math
from functools import partial
from pathlib import Path

from result_tables import (
    paired_cell,
    percent_cell,
    table_head,
    unrecorded_provenance_line,
    write_table,
)
from sweep_study import run_cell

from flowerbed.core.results import round_seconds
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.experiments.qkt import APPENDIX_A2, PARTITIONS, QUERY_THRESHOLD

RESULTS = Path(__file__).parent / "results" / "qkt"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-qkt.md"  # includes table.md
# the tables the docs include: digits (the default budget) and real MNIST (the mnist-5k budget)
PUBLISHED = tuple(
    (folder / ROWS, folder / TABLE.name) for folder in (RESULTS, RESULTS.with_name("qkt-mnist-5k"))
)
METHODS = (
    ("Local", "local"),
    ("FedAvg(1)", "fedavg1"),
    ("Ensemble", "ensemble"),
    ("KD", "kd"),
    ("QKT Light", "qkt-light"),
    ("QKT", "qkt"),
    ("FedAvg (multi-round)", "fedavg"),
)
QUERIES = (("single", "Single-class"), ("multi", "Multi-class"))
COLUMNS = (
    ("acc", "Acc"),
    ("query_gain", "Query Acc. Gain"),
    ("forgetting", "Forgetting"),
    ("uniform_acc", "Uniform Acc."),
)
METRICS = ("acc", "query_gain", "forgetting", "uniform_acc", "query_acc_pre")
NUM_CLIENTS = 10
DATA_DIR = Path("~/.flowerbed/data").expanduser()
# a data set's label in the tables -> its run config; the files it needs in the data dir (none:
# installed with flowerbed or its extras)
DATA_SETS = {
    "digits": ({"dataset": "digits", "kt-query-threshold": QUERY_THRESHOLD["digits"]}, None),
    "mnist-5k": ({"dataset": "mnist-5k", "kt-query-threshold": QUERY_THRESHOLD["mnist-5k"]}, None),
    "BloodMNIST": (
        {"dataset": "bloodmnist", "kt-query-threshold": QUERY_THRESHOLD["bloodmnist"]},
        "bloodmnist.npz",
    ),
    "CIFAR-10": (
        {"dataset": "cifar10", "kt-query-threshold": QUERY_THRESHOLD["cifar10"]},
        "cifar-10-batches-py",
    ),
}
ALL_METHODS = tuple(name for _, name in METHODS)
QUERY_TYPES = tuple(name for name, _ in QUERIES)
FEDAVG_ROUNDS = 20
# data sets (those that need files only where they are in the data dir), query types, methods,
# seeds, FedAvg's rounds
BUDGETS = {
    "full": (("digits", "BloodMNIST", "CIFAR-10"), QUERY_TYPES, ALL_METHODS, 3, FEDAVG_ROUNDS),
    "quick": (("digits",), QUERY_TYPES, ("local", "qkt"), 1, FEDAVG_ROUNDS),
    "mnist-5k": (("mnist-5k",), ("single",), ALL_METHODS, 3, FEDAVG_ROUNDS),
}


class Qkt:
    """The study (module docstring): a row per data set, partition, query type, method and
    seed; ``data_dir``: where BloodMNIST's and CIFAR-10's files are looked for."""

    name = "qkt"
    budgets = BUDGETS
    default_budget = "full"

    def __init__(self, data_dir: Path = DATA_DIR) -> None:
        self.data_dir = data_dir

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        data_sets, queries, methods, seeds, rounds = budget_of(BUDGETS, budget)
        points = [
            method_point(self.data_config(data), data, partition, query, method, rounds)
            for data in data_sets
            if self.available(data)
            for partition in dict(PARTITIONS)
            for query in queries
            for method in methods
        ]
        return points, list(range(seeds))

    def available(self, data: str) -> bool:
        """Whether ``data`` runs here: its files, if it needs any, are in the data dir."""
        needed = DATA_SETS[data][1]
        return needed is None or (self.data_dir / needed).exists()

    def data_config(self, data: str) -> dict:
        """The run config of ``data``, with the data dir where it reads files from there."""
        config, needed = DATA_SETS[data]
        return config if needed is None else {**config, "data-dir": str(self.data_dir)}

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        return run_cell(point, seed, NUM_CLIENTS, run_record)

    def report(self, rows: list[dict[str, Value]]) -> dict:
        if not rows:  # nothing measured yet: no table
            return {}
        return {TABLE.name: partial(table_text, rows)}


def method_point(
    data_config: dict, data: str, partition: str, query: str, method: str, rounds: int
) -> Point:
    """One method on one setting, as ``sweep_study.run_cell`` runs it: named by its labels
    (and, for multi-round FedAvg, its rounds, which it runs with ``kt-metrics``: the one-shot
    methods keep the run config's rounds, as the sweep ran them)."""
    labels = {"data": data, "partition": partition, "query": query, "method": method}
    config = {
        **APPENDIX_A2,
        **data_config,
        **dict(PARTITIONS)[partition],
        "kt-query": query,
        "strategy": method,
    }
    name = "/".join(labels.values())
    if method == "fedavg":
        config |= {"num-server-rounds": rounds, "kt-metrics": True}
        name += f"/r{rounds}"
    return Point(name, {"labels": labels, "config": config})


def run_record(run_dir: Path, stopped: bool) -> dict[str, Value]:
    """What the table reads of one run: its knowledge-transfer metrics (means over clients),
    its communication rounds and the seconds of its rounds (without start-up)."""
    result = json.loads((run_dir / "kt_metrics.json").read_text())
    summary = result["summary"]
    return {
        **{key: summary.get(key, math.nan) for key in METRICS},
        "comm": result["communication_rounds"],
        "round_seconds": sum(round_seconds(run_dir)),
    }


def grid_order(row: dict) -> tuple:
    """Where a row's run is in the grid (data set, partition, query type, seed, method): the
    order the sweep wrote ``runs.csv`` in, which the tables' sums follow."""
    return (
        list(DATA_SETS).index(row["data"]),
        [name for name, _ in PARTITIONS].index(row["partition"]),
        QUERY_TYPES.index(row["query"]),
        row["seed"],
        ALL_METHODS.index(row["method"]),
    )


def report(data: Path) -> str:
    """``table.md``, from the rows in ``data``'s folder and the provenance beside them alone."""
    return table_text(measured_rows(data.parent), data.parent)


def table_text(rows: list[dict[str, Value]], folder: Path) -> str:
    """The tables of ``table.md``, from the rows and where they were measured: per setting the
    metrics of every method (mean ± sample std over seeds, in %), QKT's accuracy minus each
    method's paired by seed with its 95 % t interval, and the Table 2 summary."""
    runs = sorted(rows, key=grid_order)
    names = {name: label for label, name in METHODS}
    methods = [m for m in names if any(r["method"] == m for r in runs)]
    seeds = sorted({r["seed"] for r in runs})
    lines: list[str] = []
    settings = list(dict.fromkeys((r["data"], r["partition"], r["query"]) for r in runs))
    for data, partition, query in settings:
        mine = [
            r for r in runs if (r["data"], r["partition"], r["query"]) == (data, partition, query)
        ]
        caption = (
            f"**{data}, {partition}, {dict(QUERIES)[query]} queries** (seeds"
            f" {', '.join(map(str, seeds))}; mean ± sample std over seeds, in %; seconds: the"
            " rounds of one run, on a shared machine)"
        )
        lines += table_head(caption, "Method", ["Comm", *(c for _, c in COLUMNS), "s / run"])
        for method in methods:
            method_runs = [r for r in mine if r["method"] == method]
            if not method_runs:
                continue
            cells = [percent_cell([r[key] for r in method_runs]) for key, _ in COLUMNS]
            seconds = sum(r["round_seconds"] for r in method_runs) / len(method_runs)
            lines.append(
                f"| {names[method]} | {method_runs[0]['comm']} | "
                + " | ".join(cells)
                + f" | {seconds:.1f} |"
            )
        local = [r["query_acc_pre"] for r in mine if r["method"] == "local"]
        if local:
            lines += ["", f"Local: query-class accuracy before transfer {percent_cell(local)}."]
        lines.append("")
    lines += table_head(
        "QKT's accuracy minus each method's (and QKT Light's minus Local's), paired by seed"
        " (same partition, same local models), in percentage points: mean [95 % t interval];"
        " **bold** where the interval excludes 0 (otherwise the two are within noise).",
        "Method",
        [f"{d} {p} {q}" for d, p, q in settings],
    )
    pairs = [("qkt", method) for method in methods if method != "qkt" and "qkt" in methods]
    if {"qkt-light", "local"} <= set(methods):
        pairs.append(("qkt-light", "local"))
    for better, base in pairs:
        cells = [
            paired_cell(
                runs,
                {"data": d, "partition": p, "query": q, "method": better},
                {"data": d, "partition": p, "query": q, "method": base},
                key="acc",
            )
            for d, p, q in settings
        ]
        lines.append(f"| {names[better]} − {names[base]} | " + " | ".join(cells) + " |")
    lines.append("")
    lines += table_head(
        "Table 2 shape: Acc (%) per setting, mean ± sample std over seeds",
        "Method",
        [f"{d} {p} {q}" for d, p, q in settings],
    )
    for method in methods:
        cells = [
            percent_cell(
                [
                    r["acc"]
                    for r in runs
                    if (r["data"], r["partition"], r["query"], r["method"]) == (d, p, q, method)
                ]
            )
            for d, p, q in settings
        ]
        lines.append(f"| {names[method]} | " + " | ".join(cells) + " |")
    provenance = " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)
    lines += ["", provenance]
    return "\n".join(lines) + "\n"


def options() -> argparse.ArgumentParser:
    """This script's own option, beside the study's command line (``study_cli``)."""
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument(
        "--data-dir",
        type=Path,
        default=DATA_DIR,
        help=f"where bloodmnist.npz and cifar-10-batches-py are looked for (default {DATA_DIR})",
    )
    return own


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(
        lambda own: Qkt(own.data_dir.expanduser()),
        RESULTS,
        __doc__,
        argv,
        write=write_table,
        options=options(),
    )


if __name__ == "__main__":
    raise SystemExit(main())
