"""Compare the classic FL strategies on the same non-IID federation.

Thirteen strategies (fedavg fedprox fednova scaffold feddyn fedavgm fedadam fedyogi fedadagrad
fedmedian fedbn moon ditto; those not registered in this checkout are listed as missing) on
scikit-learn digits, 10 clients, two label-skewed partitions (Dirichlet alpha = 0.1 and
label-sorted), heterogeneous local work (each client draws 1 to 5 local epochs per round,
run-config ``local-epochs-max``), 3 seeds; everything else is the run-config default (SGD,
learning rate 0.05, momentum 0.9, batch 32) with the ``mlp`` model. Every run is the real
ServerApp/ClientApp code in this process (``run_in_process``), one torch thread.

A study of the study driver (``flowerbed.experiments.study_cli``): a point is one strategy on
one partition at a number of rounds, a run one seed of it, the run config above run in this
process in a temporary folder (``sweep_study.run_cell``); its row holds the data set, the
final and best centralized test accuracy, the seconds of a round (mean over its rounds), the
bytes sent and received per round, the rounds it ran, the round a diverged model stopped it at
(0: it did not; it counts with the last global model it had) and ``curve``, the accuracy after
every round, round 0 first, space-separated. Budgets (``BUDGETS``): ``full`` (the default, every
strategy on both partitions, seeds 0, 1, 2, 20 rounds), ``quick`` (fedavg, fedprox;
label-sorted; seed 0; 2 rounds: a check that the measuring path works, into
``results/strategies/quick``), and the variants for diagnosis, each committed in its own folder
``results/strategies-<budget>`` (``--out``): ``momentum0`` and ``lr0.01`` (fedavg, fednova,
scaffold on dirichlet-0.1 with plain SGD, or learning rate 0.01), ``mnist-5k`` (every strategy on
real MNIST, 5,000 images), ``mnist-5k-lr0.01`` (the same at learning rate 0.01) and
``mnist-5k-momentum0`` (fedavg, fednova, scaffold on both partitions, plain SGD).

    python benchmarks/strategies.py                # what rows.jsonl lacks of the full grid
    python benchmarks/strategies.py --workers 2    # two runs at a time
    python benchmarks/strategies.py --quick        # 2 runs of 2 rounds
    python benchmarks/strategies.py --report-only  # table.md and the plot from rows.jsonl
    python benchmarks/strategies.py --budget momentum0 --out benchmarks/results/strategies-momentum0

Writes into its folder: ``rows.jsonl`` (one row per run: the committed record),
``measured.jsonl`` (one line per invocation that measured), and, from the rows and the
provenance beside them alone, ``table.md``: final and best centralized test accuracy (mean ±
std over seeds) per partition, seconds per round and bytes per round (sent + received, over all
runs of the strategy), each strategy's final accuracy minus FedAvg's, paired by seed, with its
95 % t interval, and for a variant's folder (``VARIANT_OF``) how it changes each strategy's
difference to FedAvg against the setting it varies (from that setting's folder); and
``accuracy.png`` (centralized accuracy per round per strategy, mean over seeds, one panel per
partition), drawn with it. The committed rows were measured by the script when it was a sweep
(``measured.json`` in each folder, its provenance, kept), into ``runs.csv``, converted once into
``rows.jsonl``: to measure anew, remove ``rows.jsonl`` and ``measured.json``.
"""

from __future__ import annotations

import statistics
from functools import partial
from pathlib import Path

from matplotlib import colormaps
from matplotlib.figure import Figure
from result_tables import (
    accuracy_cell,
    interval_cell,
    paired_cell,
    percent_cell,
    table_head,
    unrecorded_provenance_line,
    write_table,
)
from sweep_study import cell_point, run_cell, seed_major

from flowerbed.core.results import round_seconds
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.sweep import load_history

RESULTS = Path(__file__).parent / "results" / "strategies"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
PLOT = RESULTS / "accuracy.png"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "strategies.md"  # includes table.md
# the tables the docs include: digits (the default run), its two diagnostic variants, real
# MNIST (--set dataset=mnist-5k) and its two diagnostic variants
PUBLISHED = tuple(
    (RESULTS.with_name(name) / ROWS, RESULTS.with_name(name) / TABLE.name)
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


NUM_CLIENTS = 10
SEEDS = (0, 1, 2)
ROUNDS = 20
CORRECTIONS = ["fedavg", "fednova", "scaffold"]
MNIST = {"dataset": "mnist-5k"}
# strategies, partitions, seeds, rounds, run-config overrides on top of SETTING
BUDGETS = {
    "full": (list(CLASSIC), list(PARTITIONS), SEEDS, ROUNDS, {}),
    "quick": (["fedavg", "fedprox"], ["label-sorted"], (0,), 2, {}),
    "momentum0": (CORRECTIONS, ["dirichlet-0.1"], SEEDS, ROUNDS, {"momentum": 0.0}),
    "lr0.01": (CORRECTIONS, ["dirichlet-0.1"], SEEDS, ROUNDS, {"learning-rate": 0.01}),
    "mnist-5k": (list(CLASSIC), list(PARTITIONS), SEEDS, ROUNDS, MNIST),
    "mnist-5k-lr0.01": (
        list(CLASSIC),
        list(PARTITIONS),
        SEEDS,
        ROUNDS,
        {**MNIST, "learning-rate": 0.01},
    ),
    "mnist-5k-momentum0": (
        CORRECTIONS,
        list(PARTITIONS),
        SEEDS,
        ROUNDS,
        {**MNIST, "momentum": 0.0},
    ),
}


class Strategies:
    """The study (module docstring): a row per partition, strategy, rounds and seed."""

    name = "strategies"
    budgets = BUDGETS
    default_budget = "full"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        strategies, partitions, seeds, rounds, extra = budget_of(BUDGETS, budget)
        points = [
            cell_point(
                {"partition": partition, "strategy": strategy},
                {**SETTING, **extra, **PARTITIONS[partition], "strategy": strategy},
                rounds,
            )
            for partition in partitions
            for strategy in strategies
        ]
        return points, list(seeds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        row = run_cell(point, seed, NUM_CLIENTS, run_record)
        return {"dataset": point.settings["config"]["dataset"], **row}

    def report(self, rows: list[dict[str, Value]]) -> dict:
        if not rows:  # nothing measured yet: no table
            return {}
        return {TABLE.name: partial(table_and_plot, runs_of(rows))}


def run_record(run_dir: Path, stopped: bool) -> dict[str, Value]:
    """What the tables and the plot read from one run (``curve``: the centralized accuracy
    after every round, round 0 first, space-separated). A run that stopped because no client
    could send a finite update (the model had diverged) counts with the last global model it
    had; ``stopped`` is the round it stopped in (0: it did not)."""
    history = load_history(run_dir)
    accuracy = [row["central_accuracy"] for row in history]
    return {
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


def runs_of(rows: list[dict[str, Value]]) -> list[dict]:
    """The rows seed by seed, each with its ``curve`` as a list of accuracies."""
    return [
        {**row, "curve": [float(a) for a in str(row["curve"]).split()]} for row in seed_major(rows)
    ]


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


def table_text(runs: list[dict], folder: Path) -> str:
    """The tables of ``table.md``, from the runs and where they were measured; for a diagnostic
    variant's folder (``VARIANT_OF``) also the change against the setting it varies, from the
    rows of that setting's folder beside it."""
    text = table(runs) + "\n" + paired_table(runs) + "\n"
    base = VARIANT_OF.get(folder.name)
    if base is not None:
        base_runs = runs_of(measured_rows(folder.with_name(base)))
        text += change_table(runs, base_runs, base) + "\n"
    provenance = " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)
    return text + provenance + "\n"


def table_and_plot(runs: list[dict], folder: Path) -> str:
    """``table_text``, with the plot of the same runs drawn beside it."""
    plot(runs, folder / PLOT.name)
    return table_text(runs, folder)


def report(data: Path) -> str:
    """``table.md``, from the rows in ``data``'s folder (and, for a variant, in its setting's
    folder) and the provenance beside them alone."""
    return table_text(runs_of(measured_rows(data.parent)), data.parent)


def plot(runs: list[dict], path: Path) -> None:
    """Centralized accuracy by round, the mean over seeds, a line per strategy (FedAvg and the
    two heterogeneity corrections solid), one panel per partition."""
    strategies = strategies_in(runs)
    partitions = partitions_in(runs)
    datasets = ", ".join(sorted({r["dataset"] for r in runs}))
    fig = Figure(figsize=(6.5 * len(partitions), 5))
    axes = fig.subplots(1, len(partitions), sharey=True, squeeze=False)[0]
    colors = colormaps["tab20b"]
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


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(Strategies(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
