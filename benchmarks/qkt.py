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

The runs are one sweep (``flowerbed.sweep``: data set x partition x query x seed x method, as
Ray tasks, up to ``--workers`` at a time) in ``<out>/runs`` (not committed); a rerun skips the
completed runs, and asking for more seeds or methods adds them to the sweep. Each run becomes
one row of ``<out>/runs.csv`` (default ``benchmarks/results/qkt``; the committed record, with
``measured.json``: commit, command, machine, date), and ``table.md`` is made from that file
alone (``--report-only``): per setting every method's metrics, QKT's accuracy minus each
method's paired by seed with its 95 % t interval, and the Table 2 summary. ``s / run`` is the
sum of a run's rounds (history), without its start-up.

Usage::

    python benchmarks/qkt.py                      # digits, 3 seeds (about 15 min on 2 busy cores)
    python benchmarks/qkt.py --seeds 1 --fedavg-rounds 10   # quicker
    python benchmarks/qkt.py --quick              # 1 seed; Local and QKT only
    python benchmarks/qkt.py --report-only        # table.md from runs.csv
    python benchmarks/qkt.py --data mnist-5k --queries single --out benchmarks/results/qkt-mnist-5k
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from result_tables import (
    measure_and_report,
    paired_cell,
    percent_cell,
    provenance_line,
    read_runs,
    table_head,
)

from flowerbed.core.results import round_seconds
from flowerbed.experiments.qkt import APPENDIX_A2, PARTITIONS, QUERY_THRESHOLD
from flowerbed.sweep import Axis, SweepSpec

RESULTS = Path(__file__).parent / "results" / "qkt"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-qkt.md"  # includes table.md
# the tables the docs include: digits (the default run) and real MNIST (--data mnist-5k)
PUBLISHED = tuple(
    (folder / "runs.csv", folder / "table.md")
    for folder in (RESULTS, RESULTS.with_name("qkt-mnist-5k"))
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


def datasets(data_dir: Path, names: list[str]) -> list[tuple[str, dict]]:
    """The asked-for data sets among those available here (BloodMNIST and CIFAR-10 only when
    their files are in ``data_dir``). The under-representation threshold is about 10 % of a
    client's training data on the small sets (digits: ~115 per client; mnist-5k: 400)."""
    found = [
        ("digits", {"dataset": "digits", "kt-query-threshold": QUERY_THRESHOLD["digits"]}),
        ("mnist-5k", {"dataset": "mnist-5k", "kt-query-threshold": QUERY_THRESHOLD["mnist-5k"]}),
    ]
    if (data_dir / "bloodmnist.npz").is_file():
        found.append(
            (
                "BloodMNIST",
                {
                    "dataset": "bloodmnist",
                    "data-dir": str(data_dir),
                    "kt-query-threshold": QUERY_THRESHOLD["bloodmnist"],
                },
            )
        )
    if (data_dir / "cifar-10-batches-py").is_dir():
        found.append(
            (
                "CIFAR-10",
                {
                    "dataset": "cifar10",
                    "data-dir": str(data_dir),
                    "kt-query-threshold": QUERY_THRESHOLD["cifar10"],
                },
            )
        )
    return [(label, config) for label, config in found if label in names]


def sweep_spec(
    data_sets: list[tuple[str, dict]],
    methods: list[str],
    seeds: int,
    fedavg_rounds: int,
    clients: int,
    queries: list[str],
) -> SweepSpec:
    """Data set x partition x query x seed x method; FedAvg runs ``fedavg_rounds`` rounds and
    measures the same knowledge-transfer metrics (``kt-metrics``)."""
    fedavg = {"num-server-rounds": fedavg_rounds, "kt-metrics": True}
    return SweepSpec(
        (
            Axis.of_bundles("data", dict(data_sets)),
            Axis.of_bundles("partition", dict(PARTITIONS)),
            Axis.of_key("kt-query", queries),
            Axis.of_key("seed", list(range(seeds))),
            Axis.of_bundles(
                "method",
                {
                    name: {"strategy": name, **(fedavg if name == "fedavg" else {})}
                    for name in methods
                },
            ),
        ),
        fixed=APPENDIX_A2,
        num_clients=clients,
    )


METRICS = ("acc", "query_gain", "forgetting", "uniform_acc", "query_acc_pre")
FIELDS = ("data", "partition", "query", "seed", "method", *METRICS, "comm", "seconds")


def run_record(labels: dict, run_dir: Path, stopped: bool) -> dict:
    """One row of ``runs.csv``: a run's knowledge-transfer metrics (means over clients), its
    communication rounds and the seconds of its rounds (without start-up)."""
    result = json.loads((run_dir / "kt_metrics.json").read_text())
    summary = result["summary"]
    return {
        "data": labels["data"],
        "partition": labels["partition"],
        "query": labels["kt-query"],
        "seed": int(labels["seed"]),
        "method": labels["method"],
        **{key: summary.get(key, math.nan) for key in METRICS},
        "comm": result["communication_rounds"],
        "seconds": sum(round_seconds(run_dir)),
    }


def read_results(runs_csv: Path) -> list[dict]:
    return read_runs(runs_csv, (*METRICS, "seconds"), ("seed", "comm"))


def report(runs_csv: Path) -> str:
    """The tables of ``table.md``, from ``runs.csv`` (and ``measured.json``) alone: per setting
    the metrics of every method (mean ± sample std over seeds, in %), QKT's accuracy minus
    each method's paired by seed with its 95 % t interval, and the Table 2 summary."""
    runs = read_results(runs_csv)
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
            rows = [r for r in mine if r["method"] == method]
            if not rows:
                continue
            cells = [percent_cell([r[key] for r in rows]) for key, _ in COLUMNS]
            seconds = sum(r["seconds"] for r in rows) / len(rows)
            lines.append(
                f"| {names[method]} | {rows[0]['comm']} | "
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
    for mine, base in pairs:
        cells = [
            paired_cell(
                runs,
                {"data": d, "partition": p, "query": q, "method": mine},
                {"data": d, "partition": p, "query": q, "method": base},
                key="acc",
            )
            for d, p, q in settings
        ]
        lines.append(f"| {names[mine]} − {names[base]} | " + " | ".join(cells) + " |")
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
    lines += ["", provenance_line(runs_csv.parent)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--fedavg-rounds", type=int, default=20)
    parser.add_argument("--data-dir", type=Path, default=Path("~/.flowerbed/data").expanduser())
    parser.add_argument(
        "--methods",
        default=",".join(m for _, m in METHODS),
        help="comma-separated strategy names (default: all)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=RESULTS,
        help="the results folder: runs.csv, measured.json, table.md, and the sweep in runs/",
    )
    parser.add_argument(
        "--data",
        default="digits,BloodMNIST,CIFAR-10",
        help="comma-separated data sets: digits, mnist-5k (the mnist extra), BloodMNIST and"
        " CIFAR-10 (when their files are in --data-dir); those absent are left out",
    )
    parser.add_argument(
        "--queries", default="single,multi", help="comma-separated query types: single, multi"
    )
    parser.add_argument("--workers", type=int, default=1, help="runs at the same time")
    parser.add_argument("--report-only", action="store_true", help="table.md from runs.csv")
    parser.add_argument("--quick", action="store_true", help="1 seed; Local and QKT only")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.methods, args.out = 1, "local,qkt", args.out / "quick"
    methods = args.methods.split(",")
    unknown = sorted(set(methods) - {name for _, name in METHODS})
    if unknown:
        parser.error(f"unknown methods {unknown}; valid: {', '.join(n for _, n in METHODS)}")
    spec = (
        None
        if args.report_only
        else sweep_spec(
            datasets(args.data_dir, args.data.split(",")),
            methods,
            args.seeds,
            args.fedavg_rounds,
            args.clients,
            args.queries.split(","),
        )
    )
    text = measure_and_report(args.out, spec, run_record, FIELDS, report, args.workers)
    runs_csv = args.out / "runs.csv"
    print(text)
    print(f"written: {runs_csv}, {args.out / 'table.md'}")


if __name__ == "__main__":
    main()
