"""FedAvg, FedProx, FedNova and SCAFFOLD on Synthetic(1, 1) with heterogeneous local work.

The regime these papers claim an advantage in: statistically heterogeneous clients (the FedProx
paper's Synthetic(1, 1), each of 30 clients its own partition and labelling model) doing
different amounts of local work. The FedProx paper's synthetic setting (its code's
``run_fedprox.sh``): 30 clients, 10 sampled per round, multinomial logistic regression
(``logreg``), plain SGD with learning rate 0.01 and batch size 10, 20 local epochs, 200 rounds,
mu = 1 for FedProx. Here every sampled client draws its epochs uniformly from 1 to 20 afresh
every round (``local-epochs=1``, ``local-epochs-max=20``, seeded by seed, client and round: the
same draws for every strategy); in the paper's straggler runs, a share of the clients runs
1 to 19 epochs and the rest 20. FedAvg here keeps every client's update, whatever its epochs (the
paper's FedAvg drops stragglers; this FedAvg is its "FedProx, mu = 0"). FedNova: plain SGD, so
a_i = tau_i (the steps client i ran). SCAFFOLD: option II, server learning rate 1. Nothing is
tuned: every value is the paper's or flowerbed's default.

Training loss is what the FedProx paper plots: the global model's cross-entropy on every
client's training data (all 30, weighted by their sizes), after each round; round 0 is the
initial model. It is measured here from the global arrays the server sends each round (a grid
wrapper keeps them) and the final model. Test accuracy is the history's ``central_accuracy``
(the global model on every client's held-out 10 %). ``seed`` also draws the data set, so each
seed is another Synthetic(1, 1); client sampling and local epochs are the same for all
strategies of a seed. Every run is the real ServerApp/ClientApp code in this process, one torch
thread.

A study of the study driver (``flowerbed.experiments.study_cli``): a point is one strategy at
a number of rounds, a run one seed of it, all strategies of a seed in turn (``alternate``: the
same client sampling and local epochs for each, so partial results stay paired) and one at a
time. Its row holds the training loss after each round (``train_loss/<r>``, rounds 0 .. R: the
global model after r rounds; NaN where it was not finite), the test accuracy
(``test_accuracy/<r>``), the failed replies, the training samples and the seconds of the
protocol (``wall_seconds``). Budgets: ``published`` (the default: 50 rounds, seed 0, the
committed measurement), ``paper`` (the FedProx paper's 200 rounds, seeds 0, 1, 2; 13 to 30
minutes per strategy and seed at 50 rounds on a shared 2-core machine, four times that at 200;
into ``results/synthetic_heterogeneity/paper``) and ``quick`` (10 rounds, seed 0: a check that
the measuring path works, into ``results/synthetic_heterogeneity/quick``).

    python benchmarks/synthetic_heterogeneity.py                 # 50 rounds, seed 0
    python benchmarks/synthetic_heterogeneity.py --budget paper  # 200 rounds, seeds 0 1 2
    python benchmarks/synthetic_heterogeneity.py --quick         # 10 rounds, seed 0
    python benchmarks/synthetic_heterogeneity.py --report-only   # table.md and loss.png

Writes into ``benchmarks/results/synthetic_heterogeneity``: ``rows.jsonl`` (one row per run:
the committed record), ``measured.jsonl`` (one line per invocation that measured), ``table.md``
(``report``, made from the rows of the most rounds and the provenance beside them alone, and
included by ``docs/benchmarks.md``: training loss at a few rounds and test accuracy, mean ± std
over seeds, in how many rounds each strategy had the lowest loss of all and a loss above 10,
and the paired per-seed differences from FedAvg with their 95 % t intervals) and, drawn with
it, ``loss.png`` (training loss per round, mean ± std over seeds). The committed rows were
measured before the script became a study (``runs.jsonl``, converted once into ``rows.jsonl``;
its provenance was not recorded) and before client sampling was reseeded every round: a rerun
samples other clients.
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np
import torch
from flwr.app import MessageType
from matplotlib.figure import Figure
from result_tables import interval_cell, table_head, unrecorded_provenance_line, write_table

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.data.federation import load_splits
from flowerbed.data.fedprox_synthetic import PAPER_TRAINING
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.experiments.study_runs import one_thread_quietly
from flowerbed.inprocess import InProcessGrid, resolve_run_config
from flowerbed.models import build_model
from flowerbed.server_app import run_protocol
from flowerbed.sweep import load_history
from flowerbed.training.loops import evaluate

STRATEGIES = {
    "fedavg": {},
    "fedprox": {"proximal-mu": 1.0},
    "fednova": {},
    "scaffold": {},
}
SETTING = {
    **PAPER_TRAINING,
    "synthetic-alpha": 1.0,
    "synthetic-beta": 1.0,
    "sim-nodes": 30,
    "local-epochs": 1,
    "local-epochs-max": 20,
    "fraction-train": 10 / 30,
    "fraction-evaluate": 0.0,
}
NUM_CLIENTS = 30
CHECKPOINTS = (1, 10, 50, 100, 200)
COLORS = {"fedavg": "black", "fedprox": "tab:green", "fednova": "tab:red", "scaffold": "tab:blue"}
LABELS = {"fedprox": "fedprox (mu = 1)"}
RESULTS = Path(__file__).resolve().parent / "results" / "synthetic_heterogeneity"
# what ``report`` reads and writes, the plot drawn with it, and the page that includes table.md
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
PLOT = RESULTS / "loss.png"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
DIVERGED = 10.0  # a training loss above this counts as diverged in the report
BUDGETS = {"published": (50, (0,)), "paper": (200, (0, 1, 2)), "quick": (10, (0,))}  # rounds, seeds


class SyntheticHeterogeneity:
    """The study (module docstring): a row per strategy, rounds and seed, what ``run_one``
    measures."""

    name = "synthetic_heterogeneity"
    budgets = BUDGETS
    default_budget = "published"
    alternate = True

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        rounds, seeds = budget_of(BUDGETS, budget)
        points = [
            Point(f"{name}/r{rounds}", {"strategy": name, "rounds": rounds}) for name in STRATEGIES
        ]
        return points, list(seeds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        settings = point.settings
        with one_thread_quietly(), tempfile.TemporaryDirectory(prefix="flowerbed-synth-") as out:
            return run_one(settings["strategy"], seed, settings["rounds"], Path(out))

    def report(self, rows: list[dict[str, Value]]) -> dict:
        if not rows:  # nothing measured yet: no table
            return {}
        return {TABLE.name: partial(table_and_plot, runs_of(rows))}


class GlobalModelTap:
    """A grid that passes everything on and keeps the global arrays each round's training
    messages carry (every strategy here sends them under ``arrays``)."""

    def __init__(self, grid) -> None:
        self.grid = grid
        self.global_arrays: list[dict[str, torch.Tensor]] = []

    def get_node_ids(self):
        return self.grid.get_node_ids()

    def send_and_receive(self, messages, *, timeout=None):
        messages = list(messages)
        if messages and messages[0].metadata.message_type == MessageType.TRAIN:
            self.global_arrays.append(messages[0].content["arrays"].to_torch_state_dict())
        return self.grid.send_and_receive(messages, timeout=timeout)


def run_one(strategy: str, seed: int, rounds: int, workdir: Path) -> dict[str, Value]:
    """One run in ``workdir`` and its row (module docstring)."""
    overrides = {
        **SETTING,
        **STRATEGIES[strategy],
        "strategy": strategy,
        "seed": seed,
        "num-server-rounds": rounds,
        "output-dir": str(workdir),
        "run-name": f"{strategy}-{seed}",
    }
    run_config = resolve_run_config(overrides)
    config = parse_run_config(run_config)
    tap = GlobalModelTap(InProcessGrid(client_app, run_config, NUM_CLIENTS))
    started = time.perf_counter()
    run_dir = run_protocol(tap, config)
    seconds = time.perf_counter() - started
    history = load_history(run_dir)
    data = load_splits(config)
    model = build_model(config.model, data.input_shape, data.num_classes)
    row: dict[str, Value] = {
        "strategy": strategy,
        "rounds": rounds,
        "clients_failed": sum(r.get("clients_failed", 0) for r in history[1:]),
        "samples": len(data.y_train),
        "wall_seconds": seconds,
    }
    final = torch.load(run_dir / "model.pt", weights_only=True)
    for r, arrays in enumerate([*tap.global_arrays, final]):  # rounds 0 .. R
        model.load_state_dict(arrays)
        row[f"train_loss/{r}"] = evaluate(model, data.x_train, data.y_train)[0]
    for r, history_row in enumerate(history):  # history.json holds a non-finite number as null
        accuracy = history_row["central_accuracy"]
        row[f"test_accuracy/{r}"] = math.nan if accuracy is None else accuracy
    return row


def series(row: dict[str, Value], key: str) -> list[float]:
    """``key/0`` .. ``key/R`` of a row: its values by round."""
    return [float(row[f"{key}/{r}"]) for r in range(int(row["rounds"]) + 1)]


def runs_of(rows: list[dict[str, Value]]) -> list[dict]:
    """The runs of ``rows`` (strategy, seed, rounds, their values, ``train_loss`` and
    ``test_accuracy`` by round), by seed."""
    return [
        {
            **row,
            "train_loss": series(row, "train_loss"),
            "test_accuracy": series(row, "test_accuracy"),
        }
        for row in sorted(rows, key=lambda r: r["seed"])
    ]


def finite(values: list[float]) -> list[float]:
    return [v for v in values if math.isfinite(v)]


def mean_std(values: list[float], digits: int = 3) -> str:
    """Mean ± sample std over seeds of the finite values; one seed: its value alone (no
    std)."""
    values = finite(values)
    if not values:
        return "diverged"
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{statistics.mean(values):.{digits}f} ± {statistics.stdev(values):.{digits}f}"


def table(runs: list[dict], rounds: int) -> str:
    seeds = sorted({r["seed"] for r in runs})
    checkpoints = [c for c in CHECKPOINTS if c <= rounds] or [rounds]
    caption = (
        "Synthetic(1, 1), 30 clients, 10 per round, logreg, SGD (lr 0.01, batch 10, momentum 0),"
        f" local epochs drawn from 1..20 per client and round, {rounds} rounds, seeds"
        f" {', '.join(map(str, seeds))}: training loss of the global model on all clients'"
        " training data (mean ± std over seeds), test accuracy on all clients' test data."
    )
    header = (
        "| strategy | "
        + " | ".join(f"loss round {c}" for c in checkpoints)
        + " | lowest loss | final test acc | failed replies | s / run |"
    )
    lines = [caption, "", header, "|---|" + "---|" * (len(checkpoints) + 4)]
    for name in STRATEGIES:
        mine = [r for r in runs if r["strategy"] == name]
        if not mine:
            continue
        name = LABELS.get(name, name)
        cells = [mean_std([r["train_loss"][c] for r in mine]) for c in checkpoints]
        lowest = [min(finite(r["train_loss"]), default=math.nan) for r in mine]
        cells.append(mean_std(lowest))
        cells.append(mean_std([r["test_accuracy"][-1] for r in mine]))
        cells.append(str(sum(r["clients_failed"] for r in mine)))
        cells.append(f"{statistics.mean(r['wall_seconds'] for r in mine):.0f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _losses(run: dict) -> list[float]:
    return [v if math.isfinite(v) else math.inf for v in run["train_loss"]]


def report(data: Path) -> str:
    """``table.md`` from ``rows.jsonl`` and the provenance beside it alone (``table_text``)."""
    return table_text(runs_of(measured_rows(data.parent)), data.parent)


def most_rounds(runs: list[dict]) -> list[dict]:
    """The runs of the most rounds: what the table and the plot show."""
    rounds = max(r["rounds"] for r in runs)
    return [r for r in runs if r["rounds"] == rounds]


def table_and_plot(runs: list[dict], folder: Path) -> str:
    """``table_text``, with the plot of the same runs drawn beside it (``plot``)."""
    plot(most_rounds(runs), folder / PLOT.name)
    return table_text(runs, folder)


def table_text(every: list[dict], folder: Path) -> str:
    """``table.md`` from the runs of the most rounds: the loss table; per strategy, the
    rounds (1..) in which its training loss was the lowest of all strategies of the same seed
    and those above DIVERGED; the paired per-seed differences from FedAvg; where the rows were
    measured."""
    runs = most_rounds(every)
    rounds = runs[0]["rounds"]
    seeds = sorted({r["seed"] for r in runs})
    names = [n for n in STRATEGIES if any(r["strategy"] == n for r in runs)]
    run = {(r["strategy"], r["seed"]): r for r in runs}
    lowest = {n: 0 for n in names}
    for seed in seeds:
        for t in range(1, rounds + 1):
            losses = {n: _losses(run[n, seed])[t] for n in names if (n, seed) in run}
            lowest[min(losses, key=losses.get)] += 1
    lines = [table(runs, rounds).rstrip("\n"), ""]
    lines += table_head(
        f"Rounds 1..{rounds}, summed over {len(seeds)} seed(s): in how many the strategy's"
        f" training loss was the lowest of the {len(names)}, and in how many it was above"
        f" {DIVERGED:g} (or not finite).",
        "strategy",
        ["rounds with the lowest loss", f"rounds with loss > {DIVERGED:g}"],
    )
    for name in names:
        above = sum(
            1
            for seed in seeds
            if (name, seed) in run
            for v in _losses(run[name, seed])[1:]
            if not v <= DIVERGED
        )
        lines.append(f"| {LABELS.get(name, name)} | {lowest[name]} | {above} |")
    lines += [""] + table_head(
        "Paired differences from FedAvg, seed by seed (the same data set, client sampling and"
        " local epochs): mean [95 % Student-t interval over seeds], in bold where it excludes"
        " 0; with one seed, the difference alone: no interval, no ordering is tested.",
        "strategy − fedavg",
        [f"loss round {rounds}", "lowest loss", "final test accuracy (points)"],
    )
    keys = (
        (lambda r: _losses(r)[rounds], 1.0, 3),
        (lambda r: min(_losses(r)), 1.0, 3),
        (lambda r: r["test_accuracy"][-1], 100.0, 1),
    )
    for name in names[1:]:
        cells = []
        for value, scale, digits in keys:
            both = [s for s in seeds if (name, s) in run and ("fedavg", s) in run]
            differences = [scale * (value(run[name, s]) - value(run["fedavg", s])) for s in both]
            cells.append(_paired_text(differences, digits))
        lines.append(f"| {LABELS.get(name, name)} | {' | '.join(cells)} |")
    lines += ["", " ".join(measurement_lines(folder)) or unrecorded_provenance_line(folder)]
    return "\n".join(lines) + "\n"


def _paired_text(differences: list[float], digits: int) -> str:
    if not differences:
        return "–"
    if not all(math.isfinite(d) for d in differences):
        return "diverged"
    return interval_cell(differences, digits)


def plot(runs: list[dict], path: Path) -> None:
    """Training loss per round, mean ± std over seeds, per strategy (log scale)."""
    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    for name in STRATEGIES:
        curves = [r["train_loss"] for r in runs if r["strategy"] == name]
        if not curves:
            continue
        values = np.array([[v if math.isfinite(v) else np.nan for v in c] for c in curves])
        mean, std = np.nanmean(values, axis=0), np.nanstd(values, axis=0)
        x = np.arange(values.shape[1])
        ax.plot(x, mean, color=COLORS[name], label=LABELS.get(name, name), linewidth=1.6)
        ax.fill_between(x, mean - std, mean + std, color=COLORS[name], alpha=0.15)
    ax.set_yscale("log")
    ax.set_xlabel("round")
    ax.set_ylabel("training loss of the global model (all clients)")
    seeds = len({r["seed"] for r in runs})
    ax.set_title(
        f"Synthetic(1, 1), 30 clients, 10 per round, epochs 1..20 (mean ± std, {seeds} seeds)"
    )
    ax.grid(alpha=0.3, which="both")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(SyntheticHeterogeneity(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
