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

A study of the study driver (``flowerbed.experiments.study_cli``): a point is one method (a
strategy with its buffer rule) at a number of rounds, a run one seed of it, in a temporary
folder. Its row holds the central test accuracy and loss after each round (``accuracy/<r>``,
``loss/<r>``, round 0: the initial model; NaN where not finite), the final model's smallest
batch-norm running variance and its count of non-finite entries, and the seconds of its rounds
(``round_seconds``, no start-up). Budgets ``full`` (the default: seeds 7, 42, 123, 20 rounds,
27 runs, 23 min here with one worker beside another job) and ``quick`` (seed 42, 5 rounds: a
check that the measuring path works, into ``results/bn_collapse/quick``).

    python benchmarks/bn_collapse.py                # what rows.jsonl lacks of the full grid
    python benchmarks/bn_collapse.py --workers 2    # two runs at a time
    python benchmarks/bn_collapse.py --quick        # seed 42, 5 rounds
    python benchmarks/bn_collapse.py --report-only  # the tables and the plot from rows.jsonl

Writes into ``benchmarks/results/bn_collapse``: ``rows.jsonl`` (one row per run: the
committed record), ``measured.jsonl`` (one line per invocation that measured), and, made from
the rows of the most rounds and the provenance beside them alone, ``bn_collapse.md`` (the
per-method table and the paired per-seed differences: ``optimize`` minus ``average``; each
method minus FedAvg) and ``rounds.md``, which ``docs/studies-distillation.md`` includes
(``tests/test_published_tables.py`` checks both). The paper reports the best round on the test
set, not the final one, so ``rounds.md`` follows the runs round by round (best round and final
round per method, the round of the best, the first round at chance and the first non-finite
loss per seed, and ``optimize`` minus ``average`` paired by seed on both metrics), and
``rounds.png`` (accuracy by round, mean over seeds, with the chance line) is drawn with it.
The committed rows were measured on 2026-11-26 by the script before it became a study
(``measured.json``, its provenance, kept), into ``bn_collapse.csv`` and ``rounds.csv`` (their
accuracies to four decimals, the seconds to one), converted once into ``rows.jsonl``: to
measure anew, remove ``rows.jsonl`` and ``measured.json``.
"""

from __future__ import annotations

import math
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from result_tables import (
    measured_where,
    paired_cell,
    table_head,
    write_table,
)

from flowerbed.core.results import round_seconds
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.study_runs import one_thread_quietly
from flowerbed.inprocess import run_in_process
from flowerbed.sweep import load_history

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
DATA = RESULTS / ROWS
TABLE = RESULTS / "bn_collapse.md"
# the round-by-round table and its plot
ROUNDS_TABLE = RESULTS / "rounds.md"
ROUNDS_PLOT = RESULTS / "rounds.png"
# what rounds.md is made of: the round-by-round values of the same rows (report's argument)
ROUND_VALUES = f"{ROWS}:rounds"
PUBLISHED = [(DATA, TABLE), (RESULTS / ROUND_VALUES, ROUNDS_TABLE)]
# the page that includes bn_collapse.md and rounds.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-distillation.md"
BUDGETS = {"full": ((7, 42, 123), 20), "quick": ((42,), 5)}  # seeds, rounds


def grid(strategies: list[str]) -> list[tuple[str, str | None]]:
    """(strategy, buffers) pairs: fedavg has no server optimiser, so it runs once (None)."""
    return [
        (name, None) if name == "fedavg" else (name, rule)
        for name in strategies
        for rule in (BUFFER_RULES if name != "fedavg" else (None,))
    ]


def method_label(strategy: str, buffers: str | None) -> str:
    return f"{strategy}-{buffers}" if buffers else strategy


class BnCollapse:
    """The study (module docstring): a row per method, rounds and seed, what ``run_one``
    measures."""

    name = "bn_collapse"
    budgets = BUDGETS
    default_budget = "full"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        seeds, rounds = budget_of(BUDGETS, budget)
        points = [
            Point(
                f"{method_label(strategy, buffers)}/r{rounds}",
                {"strategy": strategy, "buffers": buffers, "rounds": rounds},
            )
            for strategy, buffers in grid(list(STRATEGIES))
        ]
        return points, list(seeds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        settings = point.settings
        strategy, buffers, rounds = settings["strategy"], settings["buffers"], settings["rounds"]
        with one_thread_quietly(), tempfile.TemporaryDirectory(prefix="flowerbed-bn-") as out:
            return run_one(strategy, buffers, seed, rounds, Path(out))

    def report(self, rows: list[dict[str, Value]]) -> dict:
        runs = runs_of(rows)
        if not runs:  # nothing measured yet: no table
            return {}
        return {
            TABLE.name: partial(table_text, runs),
            ROUNDS_TABLE.name: partial(rounds_and_plot, runs),
        }


def run_one(strategy: str, buffers: str | None, seed: int, rounds: int, out: Path) -> dict:
    """One run in ``out`` (``run_in_process``: the real ServerApp/ClientApp code) and its row
    (module docstring)."""
    overrides = {
        **SETTING,
        **STRATEGIES[strategy],
        **({"server-optimizer-buffers": buffers} if buffers else {}),
        "strategy": strategy,
        "num-server-rounds": rounds,
        "seed": seed,
        "output-dir": str(out),
    }
    run_dir = run_in_process(overrides, NUM_CLIENTS)
    model = torch.load(run_dir / "model.pt", weights_only=True)
    running_var = [v for k, v in model.items() if k.endswith("running_var")]
    row: dict[str, Value] = {
        "strategy": strategy,
        "buffers": buffers or "",
        "rounds": rounds,
        "nonfinite_entries": int(sum((~torch.isfinite(v.float())).sum() for v in model.values())),
        "min_running_var": float(min(v.min() for v in running_var)) if running_var else math.nan,
        "round_seconds": sum(round_seconds(run_dir)),  # the rounds, no start-up
    }
    for r, history_row in enumerate(load_history(run_dir)):  # row 0: the initial model
        for key, name in (("accuracy", "central_accuracy"), ("loss", "central_loss")):
            value = history_row.get(name)  # history.json holds a non-finite number as null
            row[f"{key}/{r}"] = math.nan if value is None else value
    return row


def runs_of(rows: list[dict[str, Value]]) -> list[dict]:
    """The runs of the most rounds in ``rows``, by seed and in ``grid``'s order: labels,
    ``method``, ``accuracy`` and ``loss_finite`` by round, ``best_accuracy`` (the best round
    after round 0: the paper's metric), ``best_round``, ``final_accuracy``, whether the final
    loss is finite, ``min_running_var`` (None where the model has no batch norm),
    ``nonfinite_entries`` and ``seconds`` (of the rounds)."""
    rounds = max((int(r["rounds"]) for r in rows), default=0)
    pairs = grid(list(STRATEGIES))
    runs = []
    for row in rows:
        if row["rounds"] != rounds:
            continue
        accuracy = [float(row[f"accuracy/{r}"]) for r in range(rounds + 1)]
        loss_finite = [math.isfinite(row[f"loss/{r}"]) for r in range(rounds + 1)]
        variance = row["min_running_var"]
        runs.append(
            {
                "strategy": row["strategy"],
                "buffers": row["buffers"] or None,
                "method": method_label(row["strategy"], row["buffers"] or None),
                "seed": row["seed"],
                "rounds": rounds,
                "accuracy": accuracy,
                "loss_finite": loss_finite,
                "best_accuracy": max(accuracy[1:]),
                "best_round": 1 + int(np.argmax(accuracy[1:])),
                "final_accuracy": accuracy[-1],
                "final_loss_finite": loss_finite[-1],
                "min_running_var": variance if math.isfinite(variance) else None,
                "nonfinite_entries": row["nonfinite_entries"],
                "seconds": row["round_seconds"],
            }
        )
    return sorted(runs, key=lambda r: (r["seed"], pairs.index((r["strategy"], r["buffers"]))))


def cell(values: list[float]) -> str:
    """``mean ± sample std`` in %, or the single value."""
    v = 100 * np.asarray(values, dtype=float)
    if len(v) == 0:
        return "–"
    if len(v) == 1:
        return f"{v[0]:.1f}"
    return f"{v.mean():.1f} ± {v.std(ddof=1):.1f}"


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
            f"{sum(not r['final_loss_finite'] for r in rs)}/{len(rs)}",
            f"{sum(r['nonfinite_entries'] > 0 for r in rs)}/{len(rs)}",
            f"{np.mean([r['seconds'] for r in rs]):.0f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


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


def rounds_and_plot(runs: list[dict], folder: Path) -> str:
    """``rounds_table``, with the plot of the same runs drawn beside it (``plot_rounds``)."""
    plot_rounds(runs, folder / ROUNDS_PLOT.name)
    return rounds_table(runs, folder)


def rounds_table(runs: list[dict], folder: Path) -> str:
    """``rounds.md``, from the runs (``runs_of``) and where they were measured: per method,
    the best round (the paper's metric) and the final round, the round of the best, and for
    each seed the first round at chance, the round from which it stays at chance, and the
    first with a non-finite central loss; then ``optimize`` minus ``average`` on the best and
    on the final round, paired by seed."""
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
    return "\n".join(lines) + "\n\n" + measured_where(folder) + "\n"


def plot_rounds(runs: list[dict], path: Path) -> None:
    """Accuracy by round, the mean over seeds, one panel per server optimiser (``average``
    solid, ``optimize`` dashed and each of its seeds thin, FedAvg grey in each), with the
    chance line."""
    optimisers = [s for s in STRATEGIES if s != "fedavg" and any(r["strategy"] == s for r in runs)]
    fig = Figure(figsize=(3.6 * len(optimisers), 3.2))
    axes = fig.subplots(1, len(optimisers), sharey=True, squeeze=False)

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


def table_text(runs: list[dict], folder: Path) -> str:
    """``bn_collapse.md``, from the runs (``runs_of``) and where they were measured: the
    per-method table and the paired differences of the final accuracy."""
    strategies = [s for s in STRATEGIES if any(r["strategy"] == s for r in runs)]
    pairs = [p for p in grid(strategies) if any((r["strategy"], r["buffers"]) == p for r in runs)]
    seeds = list(dict.fromkeys(r["seed"] for r in runs))
    rounds = runs[0]["rounds"]
    return (
        table(runs, pairs, seeds, rounds)
        + "\n"
        + paired_table(runs, pairs)
        + "\n"
        + measured_where(folder)
        + "\n"
    )


def report(data: Path) -> str:
    """The table made from the rows in ``data``'s folder (and the provenance beside them)
    alone: ``rounds.md`` for their round-by-round values (``ROUND_VALUES``), else
    ``bn_collapse.md``."""
    make = rounds_table if data.name == ROUND_VALUES else table_text
    return make(runs_of(measured_rows(data.parent)), data.parent)


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(BnCollapse(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
