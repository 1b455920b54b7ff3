"""Compare the classic FL strategies on the same non-IID federation.

Thirteen strategies (fedavg fedprox fednova scaffold feddyn fedavgm fedadam fedyogi fedadagrad
fedmedian fedbn moon ditto; those not registered in this checkout are listed as missing) on
scikit-learn digits, 10 clients, two label-skewed partitions (Dirichlet alpha = 0.1 and
label-sorted), heterogeneous local work (each client draws 1 to 5 local epochs per round,
run-config ``local-epochs-max``), 3 seeds; everything else is the run-config default (SGD,
learning rate 0.05, momentum 0.9, batch 32) with the ``mlp`` model. Every run is the real
ServerApp/ClientApp code in this process (``run_in_process``), one torch thread.

The runs are one sweep (``flowerbed.sweep``: strategy x partition x seed, as Ray tasks, up to
``--workers`` at a time) in ``<out>/runs``; a rerun skips the completed points, and asking for
more strategies or seeds adds them to the sweep. Writes to ``--out`` (default
``benchmarks/results/strategies``; ``--quick``: ``<out>/quick``):

* ``runs/``: the sweep folder (its run folders, ``summary.md``/``.csv``; not committed);
* ``runs.csv``: one row per run (final and best accuracy, cost, the accuracy curve), the
  committed record, and ``measured.json``: the commit, command, machine and date;
* ``table.md`` (from ``runs.csv`` alone, ``--report-only``): final and best centralized test
  accuracy (mean ± std over seeds) per partition, seconds per round and bytes per round (sent
  + received, over all runs of the strategy), and each strategy's final accuracy minus
  FedAvg's, paired by seed, with its 95 % t interval;
* ``accuracy.png``: centralized accuracy per round per strategy (mean over seeds), one panel
  per partition.

    python benchmarks/strategies.py [--rounds 20] [--seeds 0 1 2] [--strategies fedavg scaffold]
    python benchmarks/strategies.py --quick          # fedavg, fedprox; label-sorted; seed 0; 2 rounds
    python benchmarks/strategies.py --report-only    # table.md and plot from runs.csv

Variants for diagnosis go to their own folder, e.g. plain SGD instead of momentum 0.9:

    python benchmarks/strategies.py --set momentum=0.0 --strategies fedavg fednova scaffold \
        --out benchmarks/results/strategies-momentum0
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import numpy as np
from result_tables import (
    accuracy_cell,
    interval_cell,
    measure_and_report,
    paired_cell,
    percent_cell,
    provenance_line,
    read_runs,
    table_head,
)

from flowerbed.core.results import round_seconds
from flowerbed.strategies import STRATEGIES
from flowerbed.sweep import Axis, SweepSpec, grid_from_cli, load_history

RESULTS = Path(__file__).parent / "results" / "strategies"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "strategies.md"  # includes table.md
# the tables the docs include: digits (the default run), its two diagnostic variants, real
# MNIST (--set dataset=mnist-5k) and its two diagnostic variants
PUBLISHED = tuple(
    (RESULTS.with_name(name) / "runs.csv", RESULTS.with_name(name) / "table.md")
    for name in (
        "strategies",
        "strategies-momentum0",
        "strategies-lr0.01",
        "strategies-mnist-5k",
        "strategies-mnist-5k-lr0.01",
        "strategies-mnist-5k-momentum0",
    )
)
CLASSIC = (
    "fedavg",
    "fedprox",
    "fednova",
    "scaffold",
    "feddyn",
    "fedavgm",
    "fedadam",
    "fedyogi",
    "fedadagrad",
    "fedmedian",
    "fedbn",
    "moon",
    "ditto",
)
PARTITIONS = {
    "dirichlet-0.1": {"partitioner": "dirichlet", "dirichlet-alpha": 0.1},
    "label-sorted": {"partitioner": "label-sorted"},
}
HIGHLIGHT = {"fedavg": "black", "fednova": "tab:red", "scaffold": "tab:blue"}
SETTING = {"dataset": "digits", "model": "mlp", "local-epochs": 1, "local-epochs-max": 5}


def sweep_spec(
    strategies: list[str], partitions: list[str], seeds: list[int], rounds: int, extra: dict
) -> SweepSpec:
    return SweepSpec(
        (  # all strategies of one seed first: partial results stay balanced
            Axis.of_key("seed", seeds),
            Axis.of_bundles("partition", {p: PARTITIONS[p] for p in partitions}),
            Axis.of_key("strategy", strategies),
        ),
        fixed={**SETTING, **extra, "num-server-rounds": rounds},
        num_clients=10,
    )


FIELDS = (
    "dataset",
    "strategy",
    "partition",
    "seed",
    "rounds",
    "final",
    "best",
    "seconds_per_round",
    "bytes_per_round",
    "stopped",
    "curve",
)


def run_record(labels: dict, run_dir: Path, stopped: bool) -> dict:
    """One row of ``runs.csv``: what the tables and the plot read from one run (``curve``:
    the centralized accuracy after every round, round 0 first, space-separated). A run that
    stopped because no client could send a finite update (the model had diverged) counts with
    the last global model it had; ``stopped`` is the round it stopped in (0: it did not)."""
    history = load_history(run_dir)
    accuracy = [row["central_accuracy"] for row in history]
    return {
        "dataset": json.loads((run_dir / "config.json").read_text())["dataset"],
        "strategy": labels["strategy"],
        "partition": labels["partition"],
        "seed": int(labels["seed"]),
        "rounds": len(history) - 1,
        "final": accuracy[-1],
        "best": max(accuracy[1:]),
        "seconds_per_round": statistics.mean(round_seconds(run_dir)),
        "bytes_per_round": statistics.mean(
            row["bytes_sent"] + row["bytes_received"] for row in history[1:]
        ),
        "stopped": history[-1]["round"] + 1 if stopped else 0,
        "curve": " ".join(f"{a:.6g}" for a in accuracy),
    }


def read_results(runs_csv: Path) -> list[dict]:
    runs = read_runs(
        runs_csv,
        ("final", "best", "seconds_per_round", "bytes_per_round"),
        ("seed", "rounds", "stopped"),
    )
    for run in runs:
        run["curve"] = [float(a) for a in run["curve"].split()]
    return runs


def strategies_in(runs: list[dict]) -> list[str]:
    return list(dict.fromkeys(r["strategy"] for r in runs))


def partitions_in(runs: list[dict]) -> list[str]:
    return [p for p in PARTITIONS if any(r["partition"] == p for r in runs)]


def table(runs: list[dict]) -> str:
    seeds = sorted({r["seed"] for r in runs})
    rounds = max(r["rounds"] for r in runs)  # a stopped run has fewer
    datasets = ", ".join(sorted({r["dataset"] for r in runs}))
    caption = (
        f"{datasets}, 10 clients, mlp, local epochs drawn per client and round from 1..5, "
        f"{rounds} rounds, seeds {', '.join(map(str, seeds))}; centralized "
        "test accuracy in % (mean ± sample std over seeds); seconds and megabytes per round"
        " are means over all runs of the strategy (seconds measured on a shared machine)."
        ' "k/3 stopped": in k runs a round came in which no client could send a finite update'
        " (the model had diverged) and the run stopped there; it counts with the last global"
        " model it had."
    )
    columns = [f"{p} {what}" for p in partitions_in(runs) for what in ("final", "best")]
    lines = table_head(caption, "strategy", [*columns, "s / round", "MB / round"])
    for name in strategies_in(runs):
        mine = [r for r in runs if r["strategy"] == name]
        cells = []
        for partition in partitions_in(runs):
            rs = [r for r in mine if r["partition"] == partition]
            cells += [
                accuracy_cell(runs, "stopped", strategy=name, partition=partition),
                percent_cell([r["best"] for r in rs]),
            ]
        seconds = statistics.mean(r["seconds_per_round"] for r in mine)
        megabytes = statistics.mean(r["bytes_per_round"] for r in mine) / 1e6
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {seconds:.2f} | {megabytes:.2f} |")
    return "\n".join(lines) + "\n"


def paired_table(runs: list[dict], baseline: str = "fedavg") -> str:
    """Each strategy against FedAvg on the same partition, paired by seed (same partition of
    the data, same initial model): mean difference of final accuracy and its 95 % t interval."""
    caption = (
        f"Final accuracy minus {baseline}'s on the same partition, paired by seed, in percentage"
        " points: mean [95 % t interval]; **bold** where the interval excludes 0 (otherwise the"
        " difference is within noise)."
    )
    lines = table_head(caption, "strategy", partitions_in(runs))
    for name in strategies_in(runs):
        if name == baseline:
            continue
        cells = [
            paired_cell(
                runs, {"strategy": name, "partition": p}, {"strategy": baseline, "partition": p}
            )
            for p in partitions_in(runs)
        ]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# a diagnostic variant's folder -> the folder of the setting it varies (same seeds, partitions)
VARIANT_OF = {
    "strategies-momentum0": "strategies",
    "strategies-lr0.01": "strategies",
    "strategies-mnist-5k-lr0.01": "strategies-mnist-5k",
    "strategies-mnist-5k-momentum0": "strategies-mnist-5k",
}


def change_table(runs: list[dict], base_runs: list[dict], base: str, baseline="fedavg") -> str:
    """How much a variant changes each strategy's difference to FedAvg: per seed, (strategy −
    FedAvg in the variant) − (strategy − FedAvg in the setting it varies), both paired by seed
    (a seed fixes the partition and the initial model in both), as mean [95 % t interval]."""

    def gaps(rows: list[dict], name: str, partition: str) -> dict[int, float]:
        def by_seed(strategy: str) -> dict[int, float]:
            return {
                r["seed"]: r["final"]
                for r in rows
                if r["strategy"] == strategy and r["partition"] == partition
            }

        mine, fedavg = by_seed(name), by_seed(baseline)
        return {seed: mine[seed] - fedavg[seed] for seed in set(mine) & set(fedavg)}

    partitions = [p for p in partitions_in(runs) if p in partitions_in(base_runs)]
    caption = (
        f"Change of the difference to {baseline} from `{base}` (the setting this variant"
        f" varies, same seeds and partitions) to this variant, in percentage points: per seed,"
        f" (strategy − {baseline} here) − (strategy − {baseline} in `{base}`); mean [95 % t"
        " interval]; **bold** where the interval excludes 0 (a negative change: the strategy"
        f" falls further behind {baseline}, or its lead shrinks)."
    )
    lines = table_head(caption, "strategy", partitions)
    for name in strategies_in(runs):
        if name == baseline or name not in strategies_in(base_runs):
            continue
        cells = []
        for partition in partitions:
            here, there = gaps(runs, name, partition), gaps(base_runs, name, partition)
            seeds = sorted(set(here) & set(there))
            cells.append(interval_cell([100 * (here[s] - there[s]) for s in seeds]))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def report(runs_csv: Path) -> str:
    """The tables of ``table.md``, from ``runs.csv`` (and ``measured.json``) alone; for a
    diagnostic variant (``VARIANT_OF``) also the change against the setting it varies, from
    that setting's committed ``runs.csv``."""
    runs = read_results(runs_csv)
    text = table(runs) + "\n" + paired_table(runs) + "\n"
    base = VARIANT_OF.get(runs_csv.parent.name)
    if base is not None:
        base_runs = read_results(runs_csv.parent.with_name(base) / "runs.csv")
        text += change_table(runs, base_runs, base) + "\n"
    return text + provenance_line(runs_csv.parent) + "\n"


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    strategies = strategies_in(runs)
    partitions = partitions_in(runs)
    datasets = ", ".join(sorted({r["dataset"] for r in runs}))
    fig, axes = plt.subplots(1, len(partitions), figsize=(6.5 * len(partitions), 5), sharey=True)
    axes = np.atleast_1d(axes)
    colors = plt.get_cmap("tab20b")
    for ax, partition in zip(axes, partitions):
        for i, name in enumerate(strategies):
            curves = [
                r["curve"] for r in runs if r["strategy"] == name and r["partition"] == partition
            ]
            if not curves:
                continue
            length = min(map(len, curves))
            mean = [statistics.mean(c[t] for c in curves) for t in range(length)]
            if name in HIGHLIGHT:  # FedAvg and the two heterogeneity corrections: solid
                ax.plot(range(length), mean, "-", color=HIGHLIGHT[name], label=name, linewidth=2.4)
            else:
                ax.plot(range(length), mean, "--", color=colors(i), label=name, linewidth=1.2)
        ax.set_title(f"{datasets}, 10 clients, {partition}")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("centralized test accuracy (mean over seeds)")
    axes[-1].legend(fontsize=8, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--strategies", nargs="+", default=list(CLASSIC))
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument(
        "--report-only", action="store_true", help="table.md and the plot from runs.csv"
    )
    parser.add_argument(
        "--partitions", nargs="+", default=list(PARTITIONS), choices=list(PARTITIONS)
    )
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="run-config overrides on top of the benchmark's setting (use with --out)",
    )
    parser.add_argument("--workers", type=int, default=1, help="runs at the same time")
    parser.add_argument(
        "--quick", action="store_true", help="fedavg, fedprox; label-sorted; seed 0; 2 rounds"
    )
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seeds, args.out = 2, [0], args.out / "quick"
        args.strategies, args.partitions = ["fedavg", "fedprox"], ["label-sorted"]
    _, extra = grid_from_cli([], args.set)
    unknown = [s for s in args.strategies if s not in STRATEGIES]
    if unknown:
        parser.error(f"unknown strategies {unknown}; valid: {', '.join(STRATEGIES)}")
    spec = (
        None
        if args.report_only
        else sweep_spec(args.strategies, args.partitions, args.seeds, args.rounds, extra)
    )
    text = measure_and_report(args.out, spec, run_record, FIELDS, report, args.workers)
    runs_csv = args.out / "runs.csv"
    plot(read_results(runs_csv), args.out / "accuracy.png")
    print(text)
    print(f"written: {runs_csv}, {args.out / 'table.md'}, {args.out / 'accuracy.png'}")


if __name__ == "__main__":
    main()
