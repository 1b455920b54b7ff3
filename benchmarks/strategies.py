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

* ``runs/``: the sweep folder (its run folders, ``summary.md``/``.csv``);
* ``table.md``: final and best centralized test accuracy (mean ± std over seeds) per partition,
  seconds per round and bytes per round (sent + received, over all runs of the strategy);
* ``accuracy.png``: centralized accuracy per round per strategy (mean over seeds), one panel
  per partition.

    python benchmarks/strategies.py [--rounds 20] [--seeds 0 1 2] [--strategies fedavg scaffold]
    python benchmarks/strategies.py --quick          # fedavg, fedprox; label-sorted; seed 0; 2 rounds
    python benchmarks/strategies.py --table-only     # rebuild table and plot from the sweep

Variants for diagnosis go to their own folder, e.g. plain SGD instead of momentum 0.9:

    python benchmarks/strategies.py --set momentum=0.0 --strategies fedavg fednova scaffold \
        --out benchmarks/results/strategies-momentum0
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from flowerbed.runtime.results import round_seconds
from flowerbed.strategies import STRATEGIES
from flowerbed.sweep import Axis, SweepSpec, grid_from_cli, load_history, load_spec, run_sweep
from flowerbed.sweep.folder import point_dir, point_state

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


def run_record(labels: dict, rounds: int, run_dir: Path) -> dict:
    """What the table and the plot read from one completed run."""
    history = load_history(run_dir)
    rounds_rows = history[1:]
    return {
        "strategy": labels["strategy"],
        "partition": labels["partition"],
        "seed": int(labels["seed"]),
        "rounds": rounds,
        "accuracy": [row["central_accuracy"] for row in history],
        "seconds_per_round": statistics.mean(round_seconds(run_dir)),
        "bytes_per_round": statistics.mean(
            row["bytes_sent"] + row["bytes_received"] for row in rounds_rows
        ),
    }


def mean_std(values: list[float]) -> str:
    if not values:
        return "–"
    std = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{100 * statistics.mean(values):.1f} ± {100 * std:.1f}"


def table(runs: list[dict], strategies: list[str], missing: list[str], extra: dict) -> str:
    seeds = sorted({r["seed"] for r in runs})
    rounds = sorted({r["rounds"] for r in runs})
    changed = "".join(f", {k}={v}" for k, v in extra.items())
    caption = (
        f"Digits, 10 clients, mlp, local epochs drawn per client and round from 1..5{changed}, "
        f"{'/'.join(map(str, rounds))} rounds, seeds {', '.join(map(str, seeds))}; centralized "
        "test accuracy in % (mean ± std over seeds)."
    )
    header = (
        "| strategy | Dir(0.1) final | Dir(0.1) best | label-sorted final | label-sorted best "
        "| s / round | MB / round |"
    )
    lines = [caption, "", header, "|---|---|---|---|---|---|---|"]
    for name in strategies:
        mine = [r for r in runs if r["strategy"] == name]
        if not mine:
            continue
        cells = []
        for partition in PARTITIONS:
            rs = [r for r in mine if r["partition"] == partition]
            cells += [
                mean_std([r["accuracy"][-1] for r in rs]),
                mean_std([max(r["accuracy"][1:]) for r in rs]),
            ]
        seconds = statistics.mean(r["seconds_per_round"] for r in mine)
        megabytes = statistics.mean(r["bytes_per_round"] for r in mine) / 1e6
        lines.append(f"| {name} | " + " | ".join(cells) + f" | {seconds:.2f} | {megabytes:.2f} |")
    if missing:
        lines += ["", f"Not registered in this checkout (not run): {', '.join(missing)}."]
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], strategies: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(PARTITIONS), figsize=(13, 5), sharey=True)
    colors = plt.get_cmap("tab20b")
    for ax, partition in zip(axes, PARTITIONS):
        for i, name in enumerate(strategies):
            curves = [
                r["accuracy"] for r in runs if r["strategy"] == name and r["partition"] == partition
            ]
            if not curves:
                continue
            length = min(map(len, curves))
            mean = [statistics.mean(c[t] for c in curves) for t in range(length)]
            if name in HIGHLIGHT:  # the comparison the issue asks about: solid, strong colours
                ax.plot(range(length), mean, "-", color=HIGHLIGHT[name], label=name, linewidth=2.4)
            else:
                ax.plot(range(length), mean, "--", color=colors(i), label=name, linewidth=1.2)
        ax.set_title(f"digits, 10 clients, {partition}")
        ax.set_xlabel("round")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("centralized test accuracy (mean over seeds)")
    axes[-1].legend(fontsize=8, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--strategies", nargs="+", default=list(CLASSIC))
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "strategies"
    )
    parser.add_argument("--table-only", action="store_true")
    parser.add_argument(
        "--partitions", nargs="+", default=list(PARTITIONS), choices=list(PARTITIONS)
    )
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="run-config overrides on top of the benchmark's setting",
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

    strategies = [s for s in args.strategies if s in STRATEGIES]
    missing = [s for s in args.strategies if s not in STRATEGIES]
    sweep = args.out / "runs"
    if args.table_only:
        spec = load_spec(sweep)
        args.rounds = spec.fixed["num-server-rounds"]
    else:
        spec = sweep_spec(strategies, args.partitions, args.seeds, args.rounds, extra)
        run_sweep(spec, sweep, workers=args.workers, extend=True)
    runs = []
    for point in spec.points():
        state = point_state(point_dir(sweep, point))
        wanted = point.labels["strategy"] in strategies and int(point.labels["seed"]) in args.seeds
        if state.finished and wanted and point.labels["partition"] in args.partitions:
            runs.append(run_record(point.labels, args.rounds, state.run_dir))
    text = table(runs, strategies, missing, extra)
    (args.out / "table.md").write_text(text)
    plot(runs, strategies, args.out / "accuracy.png")
    print(text)
    print(f"written: {args.out / 'table.md'}, {args.out / 'accuracy.png'}")


if __name__ == "__main__":
    main()
