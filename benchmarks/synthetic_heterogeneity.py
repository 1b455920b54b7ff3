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

Writes to ``--out`` (default ``benchmarks/results/synthetic_heterogeneity``): ``runs.jsonl``
(one line per run; a rerun skips runs already there), ``table.md`` (``report``, made from
``runs.jsonl`` alone and included by ``docs/benchmarks.md``: training loss at a few rounds and
test accuracy, mean ± std over seeds, in how many rounds each strategy had the lowest loss of
all and a loss above 10, and the paired per-seed differences from FedAvg with their 95 % t
intervals) and ``loss.png`` (training loss per round, mean ± std over seeds).

    python benchmarks/synthetic_heterogeneity.py                 # 200 rounds, seeds 0 1 2
    python benchmarks/synthetic_heterogeneity.py --quick         # 20 rounds, seed 0
    python benchmarks/synthetic_heterogeneity.py --report-only   # table.md from runs.jsonl
    python benchmarks/synthetic_heterogeneity.py --table-only    # table.md and loss.png
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import tempfile
import time
from pathlib import Path

import torch
from flwr.app import MessageType
from result_tables import interval_cell, provenance_line, table_head, write_table

from flowerbed.data.fedprox_synthetic import PAPER_TRAINING

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
# what ``report`` reads and writes, and the page that includes table.md
DATA = RESULTS / "runs.jsonl"
TABLE = RESULTS / "table.md"
DOCS = Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md"
DIVERGED = 10.0  # a training loss above this counts as diverged in the report


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


def run_one(strategy: str, seed: int, rounds: int, workdir: Path) -> dict:
    from flowerbed.catalog import parse_run_config
    from flowerbed.client_app import app as client_app
    from flowerbed.data.federation import load_splits
    from flowerbed.inprocess import InProcessGrid, resolve_run_config
    from flowerbed.models import build_model
    from flowerbed.server_app import run_protocol
    from flowerbed.training.loops import evaluate

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
    history = json.loads((run_dir / "history.json").read_text())
    data = load_splits(config)
    model = build_model(config.model, data.input_shape, data.num_classes)
    train_loss = []
    for arrays in [*tap.global_arrays, torch.load(run_dir / "model.pt", weights_only=True)]:
        model.load_state_dict(arrays)
        loss, _ = evaluate(model, data.x_train, data.y_train)
        train_loss.append(loss if math.isfinite(loss) else None)
    return {
        "strategy": strategy,
        "seed": seed,
        "rounds": rounds,
        "train_loss": train_loss,  # rounds 0 .. R: the global model after r rounds
        "test_accuracy": [row["central_accuracy"] for row in history],
        "clients_failed": sum(row.get("clients_failed", 0) for row in history[1:]),
        "samples": len(data.y_train),
        "wall_seconds": seconds,
    }


def mean_std(values: list[float | None], digits: int = 3) -> str:
    """Mean ± sample std over seeds; one seed: its value alone (no std)."""
    values = [v for v in values if v is not None and math.isfinite(v)]
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
        lowest = [min((v for v in r["train_loss"] if v is not None), default=None) for r in mine]
        cells.append(mean_std(lowest))
        cells.append(mean_std([r["test_accuracy"][-1] for r in mine]))
        cells.append(str(sum(r["clients_failed"] for r in mine)))
        cells.append(f"{statistics.mean(r['wall_seconds'] for r in mine):.0f}")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _losses(run: dict) -> list[float]:
    return [math.inf if v is None else v for v in run["train_loss"]]


def report(data: Path) -> str:
    """``table.md`` from ``runs.jsonl`` alone (its runs of the most rounds): the loss table;
    per strategy, the rounds (1..) in which its training loss was the lowest of all strategies
    of the same seed and those above DIVERGED; the paired per-seed differences from FedAvg."""
    every = [json.loads(line) for line in data.read_text().splitlines() if line.strip()]
    rounds = max(r["rounds"] for r in every)
    runs = [r for r in every if r["rounds"] == rounds]
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
    lines += ["", provenance_line(data.parent)]
    return "\n".join(lines) + "\n"


def _paired_text(differences: list[float], digits: int) -> str:
    if not differences:
        return "–"
    if not all(math.isfinite(d) for d in differences):
        return "diverged"
    return interval_cell(differences, digits)


def write_report(data: Path) -> str:
    return write_table(data.parent / "table.md", lambda: report(data))


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(8, 5))
    for name in STRATEGIES:
        curves = [r["train_loss"] for r in runs if r["strategy"] == name]
        if not curves:
            continue
        values = np.array([[np.nan if v is None else v for v in c] for c in curves], dtype=float)
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


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="20 rounds, seed 0")
    parser.add_argument(
        "--out", type=Path, default=Path(__file__).parent / "results" / "synthetic_heterogeneity"
    )
    parser.add_argument("--table-only", action="store_true", help="table.md and loss.png")
    parser.add_argument("--report-only", action="store_true", help="table.md from runs.jsonl")
    args = parser.parse_args()
    if args.report_only:
        print(write_report(args.out / "runs.jsonl"))
        return
    rounds, seeds = (20, [0]) if args.quick else (args.rounds, args.seeds)

    torch.set_num_threads(1)  # a 610-parameter model: threads only contend on a shared machine
    logging.getLogger("flwr").setLevel(logging.WARNING)
    args.out.mkdir(parents=True, exist_ok=True)
    log = args.out / "runs.jsonl"
    runs = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    if not args.table_only:
        done = {(r["strategy"], r["seed"], r["rounds"]) for r in runs}
        with tempfile.TemporaryDirectory() as workdir:
            for seed in seeds:  # all strategies of one seed first: partial results stay balanced
                for name in STRATEGIES:
                    if (name, seed, rounds) in done:
                        continue
                    result = run_one(name, seed, rounds, Path(workdir))
                    runs.append(result)
                    with log.open("a") as f:
                        f.write(json.dumps(result) + "\n")
                    print(
                        f"{name:9s} seed {seed}: training loss {result['train_loss'][0]:.3f} ->"
                        f" {result['train_loss'][-1]} ({result['wall_seconds']:.0f} s)",
                        flush=True,
                    )
    runs = [r for r in runs if r["rounds"] == rounds and r["seed"] in seeds]
    text = write_report(log)
    plot(runs, args.out / "loss.png")
    print(text)
    print(f"written: {args.out / 'table.md'}, {args.out / 'loss.png'}")


if __name__ == "__main__":
    main()
