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

The runs are one sweep (``flowerbed.sweep``: seed x method, as Ray tasks, up to ``--workers`` at a
time; a method is a strategy with its buffer rule) in ``<out>/runs``; a rerun skips the completed
points, and asking for more strategies or seeds adds them to the sweep. Outputs under ``--out``
(default ``benchmarks/results/bn_collapse``; ``--quick``: ``<out>/quick``): ``bn_collapse.csv`` (one
row per run) and ``bn_collapse.md`` (the tables, also printed), which ``report`` makes from
``bn_collapse.csv`` alone (``--report-only``) and ``docs/studies-distillation.md`` includes: the
per-method table and the paired per-seed differences (``optimize`` minus ``average``; each method
minus FedAvg). The paper reports the best round on the test set, not the final one, so the run
folders' histories (git-ignored) are also kept round by round: ``rounds.csv`` (per run and round:
central accuracy, loss, whether it is finite), from which ``rounds_report`` makes ``rounds.md``
(best round and final round per method, the round of the best, the first round at chance and the
first non-finite loss per seed, and ``optimize`` minus ``average`` paired by seed on both metrics)
and ``plot_rounds`` makes ``rounds.png`` (accuracy by round, mean over seeds, with the chance line);
``--report-only`` rewrites all three.

Usage::

    python benchmarks/bn_collapse.py --quick        # seed 42, 5 rounds
    python benchmarks/bn_collapse.py --workers 2    # everything, two runs at a time, then the table
    python benchmarks/bn_collapse.py --table-only   # the table from the sweep's runs
    python benchmarks/bn_collapse.py --report-only  # the tables and the plot from the CSVs
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
from result_tables import (
    paired_cell,
    provenance_line,
    record_provenance,
    table_head,
    write_table,
)

from flowerbed.core.results import round_seconds
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
# the round-by-round trace (one row per run and round), its table and its plot
ROUNDS_DATA = RESULTS / "rounds.csv"
ROUNDS_TABLE = RESULTS / "rounds.md"
ROUNDS_PLOT = RESULTS / "rounds.png"
# (data, table) of every published table
PUBLISHED = [(DATA, TABLE), (ROUNDS_DATA, ROUNDS_TABLE)]
# the page that includes bn_collapse.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-distillation.md"


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


def rounds_rows(runs: list[dict]) -> str:
    """``rounds.csv``: per run and round (round 0: the initial model), the central test
    accuracy and loss and whether the loss is finite. The smallest batch-norm running variance
    is known for the final model only (``bn_collapse.csv``): the runs keep no per-round model."""
    rows = ["strategy,buffers,seed,round,central_accuracy,central_loss,loss_finite"]
    for r in runs:
        for round_number, (accuracy, loss) in enumerate(zip(r["accuracy"], r["central_loss"])):
            rows.append(
                f"{r['strategy']},{r['buffers'] or ''},{r['seed']},{round_number},"
                f"{math.nan if accuracy is None else accuracy:.4f},"
                f"{loss if is_finite(loss) else math.nan},{is_finite(loss)}"
            )
    return "\n".join(rows) + "\n"


def read_rounds(path: Path) -> list[dict]:
    """The runs of ``rounds.csv``, one dict per run: its labels, ``accuracy`` and
    ``loss_finite`` by round, ``best_accuracy`` (the best round after round 0: the paper's
    metric) and ``final_accuracy``."""
    import csv

    runs: dict[tuple, dict] = {}
    with path.open() as f:
        for row in csv.DictReader(f):
            key = (row["strategy"], row["buffers"] or None, int(row["seed"]))
            run = runs.setdefault(
                key,
                {"strategy": key[0], "buffers": key[1], "seed": key[2], "accuracy": []},
            )
            run.setdefault("loss_finite", []).append(row["loss_finite"] == "True")
            run["accuracy"].append(float(row["central_accuracy"]))
    for run in runs.values():
        run["method"] = method_label(run["strategy"], run["buffers"])
        run["best_accuracy"] = max(run["accuracy"][1:])
        run["best_round"] = 1 + int(np.argmax(run["accuracy"][1:]))
        run["final_accuracy"] = run["accuracy"][-1]
    return list(runs.values())


def first_round(flags: list[bool]) -> int | None:
    """The first round after round 0 whose flag is set, or None."""
    return next((i for i, flag in enumerate(flags) if flag and i > 0), None)


def settled_round(flags: list[bool]) -> int | None:
    """The round after round 0 from which every flag is set to the end, or None."""
    if not flags[-1]:
        return None
    unset = [i for i, flag in enumerate(flags) if not flag]
    return max(1, unset[-1] + 1) if unset else 1


def per_seed(runs: list[dict], value) -> str:
    """``"7: 12 · 42: – · 123: 9"``: ``value(run)`` per seed, – for None."""
    return " · ".join(f"{r['seed']}: {'–' if value(r) is None else value(r)}" for r in runs)


def at_chance_by_round(run: dict) -> list[bool]:
    return [accuracy <= CHANCE + 0.05 for accuracy in run["accuracy"]]


def rounds_report(rounds_csv: Path) -> str:
    """``rounds.md``, from ``rounds.csv`` alone: per method, the best round (the paper's
    metric) and the final round, the round of the best, and for each seed the first round at
    chance, the round from which it stays at chance, and the first with a non-finite central
    loss; then ``optimize`` minus ``average``
    on the best and on the final round, paired by seed."""
    runs = read_rounds(rounds_csv)
    strategies = [s for s in STRATEGIES if any(r["strategy"] == s for r in runs)]
    pairs = [p for p in grid(strategies) if any((r["strategy"], r["buffers"]) == p for r in runs)]
    seeds = sorted({r["seed"] for r in runs})
    rounds = len(runs[0]["accuracy"]) - 1
    lines = table_head(
        f"Round by round (`rounds.csv`; the setting above, {rounds} rounds, seeds"
        f" {', '.join(map(str, seeds))}): central test accuracy % of the best round (the"
        " paper's metric: the best round on the test set) and of the final round, mean ±"
        " sample std over seeds; the round of the best (mean, min–max); per seed, the first"
        f" round at chance (accuracy <= {100 * (CHANCE + 0.05):.0f} %; chance ="
        f" {100 * CHANCE:.0f} %), the round from which it stays at chance to the end, and the"
        " first round whose central loss is not finite (– : none).",
        "strategy",
        [
            "buffers",
            "best round",
            "final",
            "round of best",
            "first round at chance",
            "at chance from",
            "first non-finite loss",
        ],
    )
    for strategy, buffers in pairs:
        rs = sorted(
            (r for r in runs if (r["strategy"], r["buffers"]) == (strategy, buffers)),
            key=lambda r: r["seed"],
        )
        best_rounds = [r["best_round"] for r in rs]
        cells = [
            buffers or "–",
            cell([r["best_accuracy"] for r in rs]),
            cell([r["final_accuracy"] for r in rs]),
            f"{np.mean(best_rounds):.0f} ({min(best_rounds)}–{max(best_rounds)})",
            per_seed(rs, lambda r: first_round(at_chance_by_round(r))),
            per_seed(rs, lambda r: settled_round(at_chance_by_round(r))),
            per_seed(rs, lambda r: first_round([not ok for ok in r["loss_finite"]])),
        ]
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    lines += [""] + table_head(
        "`optimize` minus `average`, paired by seed, in points: mean [95 % t interval], bold"
        " where the interval excludes 0.",
        "strategy",
        ["best round", "final round"],
    )
    for strategy in dict.fromkeys(s for s, b in pairs if b):
        optimize, average = {"method": f"{strategy}-optimize"}, {"method": f"{strategy}-average"}
        cells = [
            paired_cell(runs, optimize, average, k) for k in ("best_accuracy", "final_accuracy")
        ]
        lines.append(f"| {strategy} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n\n" + provenance_line(rounds_csv.parent) + "\n"


def plot_rounds(rounds_csv: Path, path: Path) -> None:
    """Accuracy by round, the mean over seeds, one panel per server optimiser (``average``
    solid, ``optimize`` dashed and each of its seeds thin, FedAvg grey in each), with the
    chance line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = read_rounds(rounds_csv)
    optimisers = [s for s in STRATEGIES if s != "fedavg" and any(r["strategy"] == s for r in runs)]
    fig, axes = plt.subplots(
        1, len(optimisers), figsize=(3.6 * len(optimisers), 3.2), sharey=True, squeeze=False
    )

    def curve(ax, strategy: str, buffers: str | None, **style) -> None:
        rs = [r for r in runs if (r["strategy"], r["buffers"]) == (strategy, buffers)]
        if rs:
            mean = 100 * np.mean([r["accuracy"] for r in rs], axis=0)
            ax.plot(range(len(mean)), mean, label=f"{method_label(strategy, buffers)}", **style)

    for ax, strategy in zip(axes[0], optimisers):
        curve(ax, "fedavg", None, color="grey", linewidth=1)
        curve(ax, strategy, "average", color="C0")
        curve(ax, strategy, "optimize", color="C3", linestyle="--")
        for r in runs:
            if (r["strategy"], r["buffers"]) == (strategy, "optimize"):
                seed_curve = 100 * np.asarray(r["accuracy"])
                ax.plot(seed_curve, color="C3", linewidth=0.6, alpha=0.35)
        ax.axhline(100 * CHANCE, color="k", linestyle=":", linewidth=0.8, label="chance")
        ax.set_title(strategy)
        ax.set_xlabel("round")
        ax.set_ylim(0, 100)
        ax.legend(fontsize=7)
    axes[0][0].set_ylabel(
        f"central test accuracy % (mean of {len({r['seed'] for r in runs})} seeds)"
    )
    fig.suptitle("digits, cnn-bn, label-sorted: accuracy by round", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    """``bn_collapse.md``, from ``bn_collapse.csv`` alone (given ``rounds.csv``: ``rounds.md``,
    ``rounds_report``)."""
    if bn_collapse_csv.name == ROUNDS_DATA.name:
        return rounds_report(bn_collapse_csv)
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
        write_reports(args.out)
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
    write_atomically(args.out / DATA.name, csv_rows(runs))
    write_atomically(args.out / ROUNDS_DATA.name, rounds_rows(runs))
    if not args.quick and not args.table_only:
        record_provenance(args.out, sys.argv)
    write_reports(args.out)
    print(f"({time.perf_counter() - started:.0f} s)")


def write_reports(out: Path) -> None:
    """``bn_collapse.md`` from ``bn_collapse.csv``; ``rounds.md`` and ``rounds.png`` from
    ``rounds.csv`` where it exists (all in ``out``); the tables are printed."""
    written = []
    for data, table in ((DATA, TABLE), (ROUNDS_DATA, ROUNDS_TABLE)):
        if (out / data.name).is_file():
            text = write_table(out / table.name, lambda d=data: report(out / d.name))
            print(text)
            written += [out / table.name]
    if (out / ROUNDS_DATA.name).is_file():
        plot_rounds(out / ROUNDS_DATA.name, out / ROUNDS_PLOT.name)
        written += [out / ROUNDS_PLOT.name]
    print("written:", ", ".join(map(str, written)))


if __name__ == "__main__":
    main()
