"""Do the server optimisers collapse because they optimise the batch-norm statistics?

"Benchmarking Federated Learning & Knowledge Distillation for Point Cloud Classification"
reports FedAvgM, FedAdam, FedYogi and FedAdagrad collapsing to chance accuracy under label
skew. Its code runs these optimisers on every float entry of the state dict, batch-norm
running_mean / running_var included; flowerbed averages those statistics instead (run-config
``server-optimizer-buffers``: ``average``, the default, or ``optimize``, the paper code's
behaviour). This benchmark runs both on a batch-norm model and reports final and best central
accuracy, so the two can be compared with FedAvg on the same federation.

Setting (the paper's, scaled to digits): dataset ``digits``, model ``cnn-bn``, 5 clients,
``label-sorted`` partition, 20 rounds of 5 local epochs, client Adam at learning rate 1e-3,
weight decay 1e-4, batch 24. Strategies: fedavg (reference, once), fedavgm (server learning
rate 1.0, momentum 0.9), fedadam, fedyogi (eta 0.05, beta1 0.9, beta2 0.999, tau 1e-3),
fedadagrad (eta 0.05, tau 1e-3), each with ``server-optimizer-buffers`` = ``average`` and
``optimize``; seeds 7, 42, 123. Every run is the real ServerApp/ClientApp code in this process
(``run_in_process``), one torch thread.

The runs are one sweep (``flowerbed.sweep``: seed x method, as Ray tasks, up to ``--workers``
at a time; a method is a strategy with its buffer rule) in ``<out>/runs``; a rerun skips the
completed points, and asking for more strategies or seeds adds them to the sweep. Outputs
under ``--out`` (default ``benchmarks/results/bn_collapse``; ``--quick``: ``<out>/quick``):
``bn_collapse.csv`` (one row per run) and ``bn_collapse.md`` (the tables, also printed), which
``report`` makes from ``bn_collapse.csv`` alone (``--report-only``) and ``docs/distillation.md``
includes: the per-method table and the paired per-seed differences (``optimize`` minus
``average``; each method minus FedAvg).

Usage::

    python benchmarks/bn_collapse.py --quick        # seed 42, 5 rounds
    python benchmarks/bn_collapse.py --workers 2    # everything, two runs at a time, then the table
    python benchmarks/bn_collapse.py --table-only   # the table from the sweep's runs
    python benchmarks/bn_collapse.py --report-only  # bn_collapse.md from bn_collapse.csv
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from result_tables import paired_cell, provenance_line, record_provenance, table_head

from flowerbed.runtime.results import round_seconds
from flowerbed.sweep import Axis, SweepSpec, load_history, load_spec, run_sweep
from flowerbed.sweep.folder import point_dir, point_state

NUM_CLIENTS = 5
SETTING = {
    "dataset": "digits",
    "model": "cnn-bn",
    "partitioner": "label-sorted",
    "local-epochs": 5,
    "optimizer": "adam",
    "learning-rate": 1e-3,
    "weight-decay": 1e-4,
    "batch-size": 24,
}
ADAPTIVE = {"adaptive-eta": 0.05, "adaptive-tau": 1e-3}
STRATEGIES = {
    "fedavg": {},
    "fedavgm": {"server-learning-rate": 1.0, "server-momentum": 0.9},
    "fedadam": {**ADAPTIVE, "adaptive-beta-1": 0.9, "adaptive-beta-2": 0.999},
    "fedyogi": {**ADAPTIVE, "adaptive-beta-1": 0.9, "adaptive-beta-2": 0.999},
    "fedadagrad": ADAPTIVE,
}
BUFFER_RULES = ("average", "optimize")
CHANCE = 0.1  # ten digit classes
RESULTS = Path(__file__).parent / "results" / "bn_collapse"
# what ``report`` reads and writes
DATA = RESULTS / "bn_collapse.csv"
TABLE = RESULTS / "bn_collapse.md"
# the page that includes bn_collapse.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "distillation.md"


def grid(strategies: list[str]) -> list[tuple[str, str | None]]:
    """(strategy, buffers) pairs: fedavg has no server optimiser, so it runs once (None)."""
    return [
        (name, None) if name == "fedavg" else (name, rule)
        for name in strategies
        for rule in (BUFFER_RULES if name != "fedavg" else (None,))
    ]


def method_label(strategy: str, buffers: str | None) -> str:
    return f"{strategy}-{buffers}" if buffers else strategy


def sweep_spec(pairs, seeds: list[int], rounds: int) -> SweepSpec:
    """Seed x method; a method is a strategy, its keys and its buffer rule."""
    methods = {
        method_label(strategy, buffers): {
            **STRATEGIES[strategy],
            **({"server-optimizer-buffers": buffers} if buffers else {}),
            "strategy": strategy,
        }
        for strategy, buffers in pairs
    }
    return SweepSpec(
        (Axis.of_key("seed", seeds), Axis.of_bundles("method", methods)),
        fixed={**SETTING, "num-server-rounds": rounds},
        num_clients=NUM_CLIENTS,
    )


def write_atomically(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", dir=path.parent, delete=False, suffix=".tmp") as f:
        f.write(text)
    os.replace(f.name, path)


def run_record(strategy: str, buffers: str | None, seed: int, rounds: int, run_dir: Path) -> dict:
    """What the table reads from one completed run folder."""
    history = load_history(run_dir)
    accuracy = [row["central_accuracy"] for row in history]
    model = torch.load(run_dir / "model.pt", weights_only=True)
    running_var = [v for k, v in model.items() if k.endswith("running_var")]
    return {
        "strategy": strategy,
        "buffers": buffers,
        "seed": seed,
        "rounds": rounds,
        "accuracy": accuracy,  # row 0: the initial model
        "final_accuracy": accuracy[-1],
        "best_accuracy": max(accuracy[1:]),
        "central_loss": [row.get("central_loss") for row in history],
        "nonfinite_entries": int(sum((~torch.isfinite(v.float())).sum() for v in model.values())),
        "min_running_var": float(min(v.min() for v in running_var)) if running_var else None,
        "seconds": sum(round_seconds(run_dir)),  # the rounds, no start-up
    }


def cell(values: list[float]) -> str:
    """``mean ± sample std`` in %, or the single value."""
    v = 100 * np.asarray(values, dtype=float)
    if len(v) == 0:
        return "–"
    if len(v) == 1:
        return f"{v[0]:.1f}"
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}"


def is_finite(value: float | None) -> bool:
    """History files store a non-finite number as null."""
    return value is not None and math.isfinite(value)


def at_chance(record: dict) -> bool:
    return record["final_accuracy"] <= CHANCE + 0.05 or not math.isfinite(record["final_accuracy"])


def table(runs: list[dict], pairs, seeds: list[int], rounds: int) -> str:
    caption = (
        f"digits, cnn-bn, {NUM_CLIENTS} clients, label-sorted, {rounds} rounds x 5 local epochs, "
        "client Adam lr 1e-3 (weight decay 1e-4, batch 24); seeds "
        f"{', '.join(map(str, seeds))}. Central test accuracy in % (mean ± sample std over "
        "seeds). `buffers`: `average` = BN running statistics take the FedAvg value (flowerbed's "
        "default); `optimize` = they go through the server optimiser (the paper code). "
        "`at chance`: runs whose final accuracy is <= 15 % (chance = 10 %). `min running_var`: "
        "smallest batch-norm running variance in the final model (over runs; a negative variance "
        "makes batch norm output NaN in evaluation); `NaN loss`: runs whose final central loss "
        "is not finite; `NaN weights`: runs whose final model has NaN/Inf entries."
    )
    header = "| strategy | buffers | final | best | at chance | min running_var | NaN loss "
    lines = [caption, "", header + "| NaN weights | s / run |", "|---" * 9 + "|"]
    for strategy, buffers in pairs:
        rs = [
            r
            for r in runs
            if r["strategy"] == strategy and r["buffers"] == buffers and r["seed"] in seeds
        ]
        if not rs:
            continue
        variances = [r["min_running_var"] for r in rs if r["min_running_var"] is not None]
        cells = [
            strategy,
            buffers or "–",
            cell([r["final_accuracy"] for r in rs]),
            cell([r["best_accuracy"] for r in rs]),
            f"{sum(map(at_chance, rs))}/{len(rs)}",
            f"{min(variances):.3g}" if variances else "–",
            f"{sum(not is_finite(r['central_loss'][-1]) for r in rs)}/{len(rs)}",
            f"{sum(r['nonfinite_entries'] > 0 for r in rs)}/{len(rs)}",
            f"{np.mean([r['seconds'] for r in rs]):.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def csv_rows(runs: list[dict]) -> str:
    header = "strategy,buffers,seed,rounds,final_accuracy,best_accuracy,min_running_var,"
    header += "final_loss_finite,nonfinite_entries,seconds"
    rows = [header]
    for r in runs:
        rows.append(
            f"{r['strategy']},{r['buffers'] or ''},{r['seed']},{r['rounds']},"
            f"{r['final_accuracy']:.4f},{r['best_accuracy']:.4f},{r['min_running_var']},"
            f"{is_finite(r['central_loss'][-1])},{r['nonfinite_entries']},{r['seconds']:.1f}"
        )
    return "\n".join(rows) + "\n"


def read_csv(path: Path) -> list[dict]:
    """The rows of ``bn_collapse.csv`` in ``run_record``'s shape (the final central loss only:
    0 where it was finite, NaN where not)."""
    import csv

    with path.open() as f:
        rows = list(csv.DictReader(f))
    return [
        {
            "strategy": r["strategy"],
            "buffers": r["buffers"] or None,
            "seed": int(r["seed"]),
            "rounds": int(r["rounds"]),
            "final_accuracy": float(r["final_accuracy"]),
            "best_accuracy": float(r["best_accuracy"]),
            "central_loss": [0.0 if r["final_loss_finite"] == "True" else math.nan],
            "nonfinite_entries": int(r["nonfinite_entries"]),
            "min_running_var": None
            if r["min_running_var"] == "None"
            else float(r["min_running_var"]),
            "seconds": float(r["seconds"]),
        }
        for r in rows
    ]


def paired_table(runs: list[dict], pairs) -> str:
    """Final accuracy, paired by seed, in points: ``optimize`` minus ``average`` per strategy,
    and each method minus FedAvg (``result_tables.paired_cell``)."""
    labelled = [{**r, "method": method_label(r["strategy"], r["buffers"])} for r in runs]
    methods = [method_label(*pair) for pair in pairs]
    lines = table_head(
        "Final accuracy, paired by seed, in points: mean [95 % t interval], bold where the"
        " interval excludes 0.",
        "strategy",
        ["optimize − average", "average − fedavg", "optimize − fedavg"],
    )
    for strategy in dict.fromkeys(s for s, b in pairs if b):

        def gap(mine: str, base: str) -> str:
            if mine not in methods or base not in methods:
                return "–"
            return paired_cell(labelled, {"method": mine}, {"method": base}, "final_accuracy")

        average, optimize = f"{strategy}-average", f"{strategy}-optimize"
        cells = [gap(optimize, average), gap(average, "fedavg"), gap(optimize, "fedavg")]
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def report(bn_collapse_csv: Path) -> str:
    """``bn_collapse.md``, from ``bn_collapse.csv`` alone."""
    runs = read_csv(bn_collapse_csv)
    strategies = [s for s in STRATEGIES if any(r["strategy"] == s for r in runs)]
    pairs = [p for p in grid(strategies) if any((r["strategy"], r["buffers"]) == p for r in runs)]
    seeds = list(dict.fromkeys(r["seed"] for r in runs))
    rounds = runs[0]["rounds"]
    return (
        table(runs, pairs, seeds, rounds)
        + "\n"
        + paired_table(runs, pairs)
        + "\n"
        + provenance_line(bn_collapse_csv.parent)
        + "\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", type=int, nargs="+", default=[7, 42, 123])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument(
        "--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES)
    )
    parser.add_argument("--quick", action="store_true", help="seed 42, 5 rounds")
    parser.add_argument("--workers", type=int, default=1, help="runs at the same time")
    parser.add_argument("--table-only", action="store_true", help="no runs: the stored ones")
    parser.add_argument(
        "--report-only", action="store_true", help="bn_collapse.md from bn_collapse.csv"
    )
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "bn_collapse"
    )
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.rounds, args.out = [42], 5, args.out / "quick"

    if args.report_only:
        text = report(args.out / "bn_collapse.csv")
        write_atomically(args.out / "bn_collapse.md", text)
        print(text)
        return
    pairs = grid(args.strategies)
    sweep = args.out / "runs"
    started = time.perf_counter()
    if args.table_only:
        spec = load_spec(sweep)
        args.rounds = spec.fixed["num-server-rounds"]
    else:
        spec = sweep_spec(pairs, args.seeds, args.rounds)
        run_sweep(spec, sweep, workers=args.workers, extend=True)
    methods = {method_label(*pair): pair for pair in pairs}
    runs = []
    for point in spec.points():
        state = point_state(point_dir(sweep, point))
        seed, method = int(point.labels["seed"]), point.labels["method"]
        if state.finished and seed in args.seeds and method in methods:
            runs.append(run_record(*methods[method], seed, args.rounds, state.run_dir))
    write_atomically(args.out / "bn_collapse.csv", csv_rows(runs))
    if not args.quick and not args.table_only:
        record_provenance(args.out, sys.argv)
    text = report(args.out / "bn_collapse.csv")
    write_atomically(args.out / "bn_collapse.md", text)
    print(text)
    print(f"written: {args.out / 'bn_collapse.md'}, {args.out / 'bn_collapse.csv'}")
    print(f"({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
