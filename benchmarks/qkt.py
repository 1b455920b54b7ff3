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

Settings follow Appendix A.2: Adam, learning rate 1e-3, weight decay 4e-4, batch 32; local
training up to 100 epochs with early stopping (patience 10); E = 10 transfer epochs (5 for QKT
Light's head); alpha = T = 1, lambda = 1.5, tau = 0.01, B = 20. FedAvg: 2 local epochs per
round. The under-representation threshold is the paper's 50 samples on BloodMNIST/CIFAR-10
(thousands of samples per client) and 10 on digits, where 50 would be ~45 % of a client's
data and would make a client's own main classes query candidates.

The runs are one sweep (``flowerbed.sweep``: data set x partition x query x seed x method, as
Ray tasks, up to ``--workers`` at a time) in ``--sweep`` (default
``benchmarks/results/qkt/runs``); a rerun skips the completed runs, and asking for more seeds
or methods adds them to the sweep. ``seconds/run`` is the sum
of a run's rounds (history), without its start-up.

Usage::

    python benchmarks/qkt.py                      # digits, 3 seeds (about 15 min on 2 busy cores)
    python benchmarks/qkt.py --seeds 1 --fedavg-rounds 10   # quicker
    python benchmarks/qkt.py --quick              # 1 seed; Local and QKT only
    python benchmarks/qkt.py --out benchmarks/results/qkt.md --workers 2
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flowerbed.runtime.results import round_seconds
from flowerbed.sweep import Axis, SweepSpec, run_sweep

METHODS = (
    ("Local", "local"),
    ("FedAvg(1)", "fedavg1"),
    ("Ensemble", "ensemble"),
    ("KD", "kd"),
    ("QKT Light", "qkt-light"),
    ("QKT", "qkt"),
    ("FedAvg (R rounds)", "fedavg"),
)
PARTITIONS = (
    ("Path", {"partitioner": "pathological", "classes-per-client": 3}),
    ("Dir", {"partitioner": "dirichlet", "dirichlet-alpha": 0.1}),
)
QUERIES = (("single", "Single-class"), ("multi", "Multi-class"))
COLUMNS = (
    ("acc", "Acc"),
    ("query_gain", "Query Acc. Gain"),
    ("forgetting", "Forgetting"),
    ("uniform_acc", "Uniform Acc."),
)
COMMON = {
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


def datasets(data_dir: Path) -> list[tuple[str, dict]]:
    found = [("digits", {"dataset": "digits", "kt-query-threshold": 10})]
    if (data_dir / "bloodmnist.npz").is_file():
        found.append(
            (
                "BloodMNIST",
                {"dataset": "bloodmnist", "data-dir": str(data_dir), "kt-query-threshold": 50},
            )
        )
    if (data_dir / "cifar-10-batches-py").is_dir():
        found.append(
            (
                "CIFAR-10",
                {"dataset": "cifar10", "data-dir": str(data_dir), "kt-query-threshold": 50},
            )
        )
    return found


def sweep_spec(
    data_sets: list[tuple[str, dict]],
    methods: list[str],
    seeds: int,
    fedavg_rounds: int,
    clients: int,
) -> SweepSpec:
    """Data set x partition x query x seed x method; FedAvg runs ``fedavg_rounds`` rounds and
    measures the same knowledge-transfer metrics (``kt-metrics``)."""
    fedavg = {"num-server-rounds": fedavg_rounds, "kt-metrics": True}
    return SweepSpec(
        (
            Axis.of_bundles("data", dict(data_sets)),
            Axis.of_bundles("partition", dict(PARTITIONS)),
            Axis.of_key("kt-query", [mode for mode, _ in QUERIES]),
            Axis.of_key("seed", list(range(seeds))),
            Axis.of_bundles(
                "method",
                {
                    name: {"strategy": name, **(fedavg if name == "fedavg" else {})}
                    for name in methods
                },
            ),
        ),
        fixed=COMMON,
        num_clients=clients,
    )


def run_metrics(run_dir: Path) -> dict:
    """A run's knowledge-transfer metrics (means over clients), its communication rounds and
    the seconds of its rounds."""
    result = json.loads((run_dir / "kt_metrics.json").read_text())
    seconds = sum(round_seconds(run_dir))
    return {**result["summary"], "comm": result["communication_rounds"], "seconds": seconds}


def cell(values: list[float]) -> str:
    values = [v for v in values if v is not None and not math.isnan(v)]
    if not values:
        return "n/a"
    return f"{100 * np.mean(values):.2f} ± {100 * np.std(values):.2f}"


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
    parser.add_argument("--out", type=Path, default=None, help="also write the tables here")
    parser.add_argument(
        "--sweep",
        type=Path,
        default=Path(__file__).parent / "results" / "qkt" / "runs",
        help="the sweep folder (run folders; a rerun skips completed runs)",
    )
    parser.add_argument("--workers", type=int, default=1, help="runs at the same time")
    parser.add_argument("--quick", action="store_true", help="1 seed; Local and QKT only")
    args = parser.parse_args()

    if args.quick:
        args.seeds, args.methods = 1, "local,qkt"
    wanted = set(args.methods.split(","))
    methods = [
        (label.replace("R rounds", f"{args.fedavg_rounds} rounds"), name)
        for label, name in METHODS
        if name in wanted
    ]
    lines: list[str] = []

    def emit(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    started = time.perf_counter()
    data_sets = datasets(args.data_dir)
    spec = sweep_spec(
        data_sets, [n for _, n in methods], args.seeds, args.fedavg_rounds, args.clients
    )
    runs: dict[tuple, list[dict]] = {}
    for result in run_sweep(spec, args.sweep, workers=args.workers, extend=True):
        labels = result.point.labels
        if (
            result.state.finished
            and labels["method"] in wanted
            and int(labels["seed"]) < args.seeds
        ):
            key = (labels["data"], labels["partition"], labels["kt-query"], labels["method"])
            runs.setdefault(key, []).append(run_metrics(result.run_dir))
    summary: dict = {}
    for data_label, _ in data_sets:
        for part_label, _ in PARTITIONS:
            for mode, mode_label in QUERIES:
                results = {
                    name: runs.get((data_label, part_label, mode, name), []) for _, name in methods
                }
                seconds = {name: sum(r["seconds"] for r in results[name]) for _, name in methods}
                emit(
                    f"\n### {data_label}, {part_label}, {mode_label} queries "
                    f"({args.clients} clients, {args.seeds} seeds; mean ± std in %)\n"
                )
                emit("| Method | Comm | " + " | ".join(c for _, c in COLUMNS) + " | seconds/run |")
                emit("|---|---|" + "---|" * len(COLUMNS) + "---|")
                for label, name in methods:
                    rows = results[name]
                    emit(
                        f"| {label} | {rows[0]['comm']} | "
                        + " | ".join(cell([r[key] for r in rows]) for key, _ in COLUMNS)
                        + f" | {seconds[name] / args.seeds:.1f} |"
                    )
                    summary[(label, data_label, part_label, mode)] = [r["acc"] for r in rows]
                if "local" in wanted:
                    emit(
                        f"\n(Local: query-class accuracy before transfer {cell([r['query_acc_pre'] for r in results['local']])})"
                    )

    emit("\n### Table 2 shape: Acc (%) per setting, mean over seeds\n")
    settings = [
        (d, p, m) for d, _ in datasets(args.data_dir) for p, _ in PARTITIONS for m, _ in QUERIES
    ]
    emit("| Method | " + " | ".join(f"{d} {p} {m}" for d, p, m in settings) + " |")
    emit("|---|" + "---|" * len(settings))
    for label, _ in methods:
        emit(
            f"| {label} | "
            + " | ".join(f"{100 * np.mean(summary[(label, d, p, m)]):.2f}" for d, p, m in settings)
            + " |"
        )
    emit(f"\nTotal {time.perf_counter() - started:.0f} s; run folders under {args.sweep}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
