"""QFedAvg vs QFedAdam vs QFedFisher on the VQC (the comparison of the QFedFisher paper, Table I,
on data available offline): digits with Dirichlet(0.5) and breast-cancer with Dirichlet(0.1),
10 clients each, several seeds; accuracy and loss of the global model per round, seconds per
round; a markdown table and a plot.

    python benchmarks/quantum_fl.py                       # the default comparison (~15 min)
    python benchmarks/quantum_fl.py --quick               # 2 rounds, 1 seed, into <out>/quick
    python benchmarks/quantum_fl.py --report-only         # tables and plot from runs.json

The runs of a regime are one sweep (``flowerbed.sweep``: seed x data set x variant, as Ray
tasks, up to ``--workers`` at a time) in ``<out>/runs``; a rerun skips the completed points,
and more seeds or variants are added to the sweep. Every run is the real ServerApp job with
the real ClientApp handlers in one process (``run_in_process``, one torch thread); clients
train one after another, so a round's seconds are the sum of the clients' work plus the
evaluation (with several workers, runs share the machine's cores: compare seconds of runs made
one at a time). ``<out>/runs.json`` keeps what the tables read from each run (accuracy and loss
per round, seconds, bytes, kept and substituted shares); ``--report-only`` rebuilds
``<out>/<regime>.md`` and ``.png`` from it, and ``<out>/table.md``: the tables that
``docs/studies-quantum-fl.md`` includes (``report``: final accuracy and loss, mean ± std and per
seed, and the paired per-seed differences between the strategies with their 95 % t intervals),
made from ``<out>/runs.json`` alone (the threshold sweep's also reads the default regime's
``runs.json`` for QFedAvg, run with the same setting and seeds).

Regimes (``--regime``):

* ``default``: the comparison above (10 clients, 4 layers, Adam at 0.05, a few rounds).
* ``paper``: the QFedFisher paper's setting (Sec. IV: 100 clients of 500 samples drawn with a
  Dirichlet(0.5) label distribution, 5 % of them per round, 60 Kaiming-initialised layers,
  Adam at 1e-3, E = 1, B = 32, 300 rounds), scaled to a 2-core machine: ``PAPER_CLIENTS``
  clients of ``samples-per-client`` samples (``partitioner='dirichlet-sized'``: digits has
  1,437 training images, so clients share samples once a class is used up), 10 % of them per
  round, ``vqc-layers`` from ``PAPER``, as many rounds as about an hour allows for 3 seeds; on
  digits, and on MNIST when its files are in ``--data-dir``. Reports QFedAvg, QFedAdam and
  QFedFisher with and without the client rule, with the kept and substituted fractions.
* ``sweep``: QFedFisher's threshold on the default digits setting: delta from 0.001 to 0.9 and
  the quantile form (top q of each layer), final accuracy against the mean kept fraction.
* ``long``: is QFedFisher's deficit with the client rule a short-run effect? The ``paper``
  regime on digits with the paper's 5 % participation (2 of the 40 clients per round, so a
  client comes back about every 20 rounds) and ten times its learning rate (0.01) for
  ``LONG_ROUNDS`` = 50 rounds: lr x rounds is 0.5 against the paper's 300 x 1e-3 = 0.3, and a
  client takes part about 2.5 times. QFedAvg, QFedFisher and QFedFisher without the client
  rule; the accuracy at a few rounds (``CHECKPOINTS``) paired by seed against QFedAvg, and per
  round the kept share of the returning clients and their staleness (rounds since they last
  took part).
* ``mnist``: the ``long`` regime on the paper's MNIST task with its 10 qubits: ``mnist-5k``
  (5,000 real MNIST images, offline), 784 pixels amplitude-encoded into 1,024 amplitudes, one
  Pauli-Z readout per class (``vqc-qubits`` 0 and ``vqc-readout`` auto give both). Prepared,
  not run: a round of the three variants took about 70 s on one core of a loaded 2-core
  machine (most of it the central evaluation at 10 qubits), so 50 rounds x 3 seeds take hours.
* ``mnist-default``: the ``default`` regime (10 clients, all every round, 4 layers, Adam at
  0.05, 5 rounds) on ``mnist-5k`` with Dirichlet(0.5) and the same 10-qubit VQC: QFedAvg,
  QFedFisher and QFedFisher without the client rule, the paper's MNIST task at a cost this
  machine can pay (about 15 minutes for 3 seeds).

    python benchmarks/quantum_fl.py --regime paper --workers 2   # ~1 h of runs, resumable
    python benchmarks/quantum_fl.py --regime paper --quick    # 2 rounds, 1 seed: a smoke run
    python benchmarks/quantum_fl.py --regime sweep
    python benchmarks/quantum_fl.py --regime long             # 20-30 min on one core
    python benchmarks/quantum_fl.py --regime mnist-default    # about 15 min on one core
    python benchmarks/quantum_fl.py --client-overhead 15      # client_overhead.csv and .md
    python benchmarks/quantum_fl.py --client-overhead 1 --report-only   # its table from the csv

Staleness: the history does not name the clients of a round, so ``run_record`` reconstructs
them from the seeded sampling (``sampled_partitions``) and checks the reconstruction against
the client rule's kept shares (a client keeps nothing in its first round, something after).
"""

from __future__ import annotations

import argparse
import itertools
import json
import logging
import random
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from result_tables import (
    interval_cell,
    paired_cell,
    provenance_line,
    read_runs,
    record_provenance,
    table_head,
    write_table,
)

from flowerbed.experiments.qfedfisher import (  # the regimes' settings (module docstring)
    COMMON,
    LONG,
    LONG_ROUNDS,
    PAPER,
    PAPER_CLIENTS,
)
from flowerbed.sweep import Axis, SweepSpec, load_history, mean_std, run_sweep

DATASETS = {
    "digits": {"dataset": "digits", "dirichlet-alpha": 0.5},
    # Dir(0.1) over 10 clients leaves some clients (almost) empty on 455 samples: no minimum
    "breast-cancer": {"dataset": "breast-cancer", "dirichlet-alpha": 0.1, "min-partition-size": 0},
}
PAPER_DATASETS = {"digits": {"dataset": "digits"}, "mnist": {"dataset": "mnist"}}
# the long regimes' accuracy is read at these rounds and the last
CHECKPOINTS = (10, 30)
VARIANTS = {
    "qfedavg": {"strategy": "qfedavg"},
    "qfedadam": {"strategy": "qfedadam"},
    "qfedfisher": {"strategy": "qfedfisher"},
    # the same rule with the Fisher taken from the training steps' gradients (no extra pass)
    "qfedfisher-training": {"strategy": "qfedfisher", "qfedfisher-fisher-pass": "training"},
    # server rule only, without the client-side rule of Fig. 3
    "qfedfisher-server-only": {"strategy": "qfedfisher", "qfedfisher-client-rule": False},
    # the threshold sweep: delta, then the quantile form
    **{
        f"delta={delta:g}": {"strategy": "qfedfisher", "qfedfisher-delta": delta}
        for delta in (0.001, 0.01, 0.05, 0.1, 0.3, 0.6, 0.9)
    },
    **{
        f"top-{q:g}": {
            "strategy": "qfedfisher",
            "qfedfisher-threshold": "quantile",
            "qfedfisher-quantile": q,
        }
        for q in (0.05, 0.2, 0.5, 0.8)
    },
}


RESULTS = Path(__file__).resolve().parent / "results" / "quantum_fl"
# the folder of each regime's runs.json and table.md
MEASURED_REGIMES = ("default", "paper", "sweep", "long", "mnist-default")
FOLDERS = {
    "default": RESULTS,
    "paper": RESULTS.parent / "quantum_fl_paper",
    "sweep": RESULTS.parent / "quantum_fl_sweep",
    "long": RESULTS.parent / "quantum_fl_long",
    "mnist": RESULTS.parent / "quantum_fl_mnist",
    "mnist-default": RESULTS.parent / "quantum_fl_mnist_default",
}
# one client's work per round with and without the Fisher pass (--client-overhead)
OVERHEAD_DATA, OVERHEAD_TABLE = RESULTS / "client_overhead.csv", RESULTS / "client_overhead.md"
# (what ``report`` reads, the table it writes): one per measured regime (``mnist`` is prepared,
# not measured: it takes hours here), and the client overhead's; the docs page includes each
PUBLISHED = (
    *((FOLDERS[name] / "runs.json", FOLDERS[name] / "table.md") for name in MEASURED_REGIMES),
    (OVERHEAD_DATA, OVERHEAD_TABLE),
)
DATA, TABLE = PUBLISHED[0]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-quantum-fl.md"


@dataclass(frozen=True)
class Regime:
    common: dict
    datasets: dict[str, dict]
    variants: tuple[str, ...]
    rounds: dict[str, int]
    clients: int


REGIMES = {
    "default": Regime(
        COMMON,
        DATASETS,
        ("qfedavg", "qfedadam", "qfedfisher", "qfedfisher-training", "qfedfisher-server-only"),
        {"digits": 5, "breast-cancer": 8},
        10,
    ),
    "paper": Regime(
        PAPER,
        PAPER_DATASETS,
        ("qfedavg", "qfedadam", "qfedfisher", "qfedfisher-server-only"),
        {"digits": 30, "mnist": 30},
        PAPER_CLIENTS,
    ),
    "sweep": Regime(
        COMMON,
        {"digits": DATASETS["digits"]},
        tuple(v for v in VARIANTS if v.startswith(("delta=", "top-"))),
        {"digits": 5},
        10,
    ),
    "long": Regime(
        LONG,
        {"digits": PAPER_DATASETS["digits"]},
        ("qfedavg", "qfedfisher", "qfedfisher-server-only"),
        {"digits": LONG_ROUNDS},
        PAPER_CLIENTS,
    ),
    "mnist-default": Regime(
        COMMON,
        {"mnist-5k": {"dataset": "mnist-5k", "dirichlet-alpha": 0.5}},
        ("qfedavg", "qfedfisher", "qfedfisher-server-only"),
        {"mnist-5k": 5},
        10,
    ),
    "mnist": Regime(
        LONG,
        {"mnist-5k": {"dataset": "mnist-5k"}},
        ("qfedavg", "qfedfisher", "qfedfisher-server-only"),
        {"mnist-5k": LONG_ROUNDS},
        PAPER_CLIENTS,
    ),
}
# the regimes whose report adds the accuracy at CHECKPOINTS and the returning clients' tables
LONG_REGIMES = ("long", "mnist")


def sweep_spec(
    regime: str,
    datasets: list[str],
    variants: tuple[str, ...],
    seeds: int,
    rounds: dict,
    data_dir: str,
) -> SweepSpec:
    """The regime's grid: seed x data set (with its rounds) x variant; every run of one seed
    comes before the next seed's (partial results stay balanced)."""
    setting = REGIMES[regime]
    bundles = {
        "dataset": {d: {**setting.datasets[d], "num-server-rounds": rounds[d]} for d in datasets},
        "variant": {v: VARIANTS[v] for v in variants},
    }
    axes, fixed = [Axis.of_key("seed", list(range(seeds)))], dict(setting.common)
    for name, axis in bundles.items():
        # a key one bundle sets is set by all of them (a sweep keeps a key either fixed or on
        # one axis), to the regime's value where a bundle leaves it
        keys = {key for bundle in axis.values() for key in bundle}
        inherited = {key: fixed.pop(key) for key in sorted(keys) if key in fixed}
        filled = {label: {**inherited, **bundle} for label, bundle in axis.items()}
        axes.append(Axis.of_bundles(name, filled))
    return SweepSpec(tuple(axes), {**fixed, "data-dir": data_dir}, setting.clients)


def sampled_partitions(seed: int, server_round: int, clients: int, sampled: int) -> list[int]:
    """The partitions sampled for training in a round, as the run drew them: the round's
    sampling seed (``rounds_strategy``) and Flower's ``random.sample`` over the nodes listed in
    partition order (``RecordingGrid.get_node_ids``)."""
    from flowerbed.core.seeding import seed_for
    from flowerbed.protocols.rounds_strategy import _TRAIN_SAMPLE

    return random.Random(seed_for(seed, server_round, _TRAIN_SAMPLE)).sample(
        range(clients), sampled
    )


def returning_clients(history: list[dict], seed: int, clients: int, client_rule: bool) -> dict:
    """Per round (from 1), from the reconstructed samples (``sampled_partitions``): how many
    of the round's clients had taken part before, and their staleness (rounds since they last
    did). With the client rule the reconstruction is checked: a client keeps no entry in its
    first round and some after, so the round's smallest kept share is 0 exactly when a client
    is new, its largest exactly when all are; None where the check fails."""
    last: dict[int, int] = {}
    returning, staleness = [], []
    for row in history[1:]:
        sampled = row["clients_trained"] + row["clients_failed"]
        sample = sampled_partitions(seed, row["round"], clients, sampled)
        gaps = [row["round"] - last[p] for p in sample if p in last]
        if client_rule:
            anyone_new = row["client_fisher_kept_fraction_min"] == 0
            all_new = row["client_fisher_kept_fraction_max"] == 0
            if anyone_new != (len(gaps) < len(sample)) or all_new != (not gaps):
                print(f"round {row['round']}: the reconstructed sample is not the run's")
                return {"returning": None, "staleness": None}
        last.update({p: row["round"] for p in sample})
        returning.append(len(gaps))
        staleness.append(gaps)
    return {"returning": returning, "staleness": staleness}


def run_record(labels: dict, run_dir: Path, clients: int) -> dict:
    """What the tables and plots read from one completed run (``runs.json`` keeps them)."""
    from flowerbed.core.results import round_seconds

    history = load_history(run_dir)
    config = json.loads((run_dir / "config.json").read_text())
    client_rule = config["strategy"] == "qfedfisher" and config["qfedfisher-client-rule"]
    return {
        "dataset": labels["dataset"],
        "variant": labels["variant"],
        "seed": int(labels["seed"]),
        "rounds": len(history) - 1,
        "accuracy": [row["central_accuracy"] for row in history],
        "loss": [row["central_loss"] for row in history],
        "seconds": round_seconds(run_dir),
        "bytes_received": [row["bytes_received"] for row in history[1:]],
        "bytes_sent": [row["bytes_sent"] for row in history[1:]],
        # QFedFisher only: per round, the clients' mean share of entries kept by the client
        # rule, and the server's share of entries that took the FedAvg value
        "kept": [row.get("client_fisher_kept_fraction_mean") for row in history[1:]],
        "substituted": [row.get("server_fisher_substituted_fraction") for row in history[1:]],
        "clients_trained": [row["clients_trained"] for row in history[1:]],
        **returning_clients(history, int(labels["seed"]), clients, client_rule),
    }


def mean_fraction(values: list) -> float | None:
    """Mean over the rounds that report it (the kept fraction from round 2: a client has no
    previous round in round 1)."""
    numbers = [v for v in values if v is not None]
    return float(np.mean(numbers)) if numbers else None


def _point(record: dict) -> tuple:
    return record["dataset"], record["variant"], record["seed"], record["rounds"]


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def mean_pm(values, scale: float = 1.0, digits: int = 1) -> str:
    """Mean ± sample std over seeds, as table text ("-" for the std of one seed)."""
    mean, std = mean_std([scale * float(v) for v in values])
    return f"{mean:.{digits}f} ± " + ("-" if std is None else f"{std:.{digits}f}")


def _title(regime: Regime, dataset: str, rounds: int) -> str:
    options = {**regime.common, **regime.datasets[dataset]}
    sized = options.get("partitioner") == "dirichlet-sized"
    size = f" x {options['samples-per-client']} samples" if sized else ""
    sampled = (
        f", {options['fraction-train']:.0%} per round" if options["fraction-train"] < 1 else ""
    )
    return (
        f"{dataset}, Dirichlet({options['dirichlet-alpha']}), {regime.clients} clients{size}"
        f"{sampled}, {options['vqc-layers']} layers, lr {options['learning-rate']:g},"
        f" {rounds} rounds"
    )


def summarise(runs: list[dict], variants: tuple[str, ...], regime: Regime) -> str:
    lines = []
    for dataset in regime.datasets:
        rows = [r for r in runs if r["dataset"] == dataset]
        if not rows:
            continue
        rounds = rows[0]["rounds"]
        lines += [
            f"### {_title(regime, dataset, rounds)}",
            "",
            (
                "| strategy | seeds | final accuracy (%) | final loss | s / round |"
                " time vs qfedavg | KB received / round | kept (%, rounds 2+) |"
                " substituted (%) |"
            ),
            "|---|---|---|---|---|---|---|---|---|",
        ]
        base = None
        for variant in variants:
            vr = [r for r in rows if r["variant"] == variant]
            if not vr:
                continue
            acc = np.array([r["accuracy"][-1] for r in vr])
            loss = np.array([r["loss"][-1] for r in vr])
            sec = float(np.mean([np.mean(r["seconds"]) for r in vr]))
            if variant == "qfedavg":
                base = sec
            rel = f"{100 * (sec / base - 1):+.1f}%" if base else ""
            kb = np.mean([np.mean(r["bytes_received"]) for r in vr]) / 1e3
            kept = mean_fraction([mean_fraction(r.get("kept", [])[1:]) for r in vr])
            substituted = mean_fraction([mean_fraction(r.get("substituted", [])) for r in vr])
            lines.append(
                f"| {variant} | {len(vr)} | {mean_pm(acc, 100)} | {mean_pm(loss, digits=3)}"
                f" | {sec:.2f} | {rel}"
                f" | {kb:.1f} | {_percent(kept)} | {_percent(substituted)} |"
            )
        lines += [
            "",
            (
                "s / round: wall seconds of a round, mean over the runs, which shared the"
                " machine with each other (--workers) and with other jobs, so the two time"
                " columns are rough; the Fisher pass's cost is measured side by side with"
                " --client-overhead."
            ),
            "",
            (
                "Mean test accuracy (%) / loss of the global model per round (round 0 ="
                " initial model):"
            ),
            "",
            "| strategy | " + " | ".join(str(i) for i in range(rounds + 1)) + " |",
            "|---|" + "---|" * (rounds + 1),
        ]
        for variant in variants:
            vr = [r for r in rows if r["variant"] == variant]
            if vr:
                acc = np.mean([r["accuracy"] for r in vr], axis=0)
                loss = np.mean([r["loss"] for r in vr], axis=0)
                cells = " | ".join(f"{100 * a:.1f} / {l:.2f}" for a, l in zip(acc, loss))
                lines.append(f"| {variant} | {cells} |")
        lines.append("")
    return "\n".join(lines)


def plot(runs: list[dict], variants: tuple[str, ...], regime: Regime, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    datasets = [d for d in regime.datasets if any(r["dataset"] == d for r in runs)]
    fig, axes = plt.subplots(2, len(datasets), figsize=(5.5 * len(datasets), 7), squeeze=False)
    for col, dataset in enumerate(datasets):
        for variant in variants:
            vr = [r for r in runs if r["dataset"] == dataset and r["variant"] == variant]
            if not vr:
                continue
            for row, metric in enumerate(("accuracy", "loss")):
                values = np.array([r[metric] for r in vr])
                mean = values.mean(axis=0)
                std = values.std(axis=0, ddof=1) if len(values) > 1 else np.zeros_like(mean)
                x = np.arange(len(mean))
                axes[row, col].plot(x, mean, label=variant)
                axes[row, col].fill_between(x, mean - std, mean + std, alpha=0.2)
                axes[row, col].set_xlabel("round")
                axes[row, col].set_ylabel(f"test {metric}")
        rounds = next(r["rounds"] for r in runs if r["dataset"] == dataset)
        title = textwrap.fill(_title(regime, dataset, rounds), 80)
        axes[0, col].set_title(title, fontsize=8)
        axes[0, col].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def sweep_report(runs: list[dict], variants: tuple[str, ...], path: Path) -> str:
    """Final accuracy against the mean kept / substituted fractions, per threshold."""
    lines = [
        (
            "| threshold | seeds | final accuracy (%) | kept by the client rule (%, rounds 2+) |"
            " substituted by the server (%) |"
        ),
        "|---|---|---|---|---|",
    ]
    points = []
    for variant in variants:
        vr = [r for r in runs if r["variant"] == variant]
        if not vr:
            continue
        acc = np.array([r["accuracy"][-1] for r in vr])
        kept = mean_fraction([mean_fraction(r["kept"][1:]) for r in vr])
        substituted = mean_fraction([mean_fraction(r["substituted"]) for r in vr])
        mean, std = mean_std(list(acc))
        points.append((variant, kept, mean, std or 0.0))
        lines.append(
            f"| {variant} | {len(vr)} | {mean_pm(acc, 100)} |"
            f" {_percent(kept)} | {_percent(substituted)} |"
        )
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for variant, kept, mean, std in points:
        if kept is not None:
            marker = "o" if variant.startswith("delta") else "s"
            ax.errorbar(100 * kept, 100 * mean, yerr=100 * std, fmt=marker, capsize=3)
            ax.annotate(variant, (100 * kept, 100 * mean), fontsize=7)
    ax.set_xlabel("kept by the client rule (% of entries, mean of rounds 2+)")
    ax.set_ylabel("final test accuracy (%)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return "\n".join(lines) + "\n"


def _finals(runs: list[dict], regime: Regime) -> list[dict]:
    """One row per run of the regime's grid: labels, seed, final accuracy and loss."""
    return [
        {
            "dataset": r["dataset"],
            "variant": r["variant"],
            "seed": r["seed"],
            "final": r["accuracy"][-1],
            "loss": r["loss"][-1],
            "kept": mean_fraction(r["kept"][1:]),
            "substituted": mean_fraction(r["substituted"]),
        }
        for r in runs
        if _in_grid(r, regime)
    ]


def _loss_cell(rows: list[dict], mine: dict, base: dict) -> str:
    """Final loss of the runs labelled ``mine`` minus ``base``, paired by seed: mean [95 % t
    interval], bold where the interval excludes 0."""

    def by_seed(labels: dict) -> dict[int, float]:
        return {r["seed"]: r["loss"] for r in rows if all(r[k] == v for k, v in labels.items())}

    mine_values, base_values = by_seed(mine), by_seed(base)
    seeds = sorted(set(mine_values) & set(base_values))
    if len(seeds) < 2:
        return "–"
    return interval_cell([mine_values[s] - base_values[s] for s in seeds], 3)


def _summary_cells(rows: list[dict]) -> str:
    kept = mean_fraction([r["kept"] for r in rows])
    substituted = mean_fraction([r["substituted"] for r in rows])
    return (
        f"{len(rows)} | {mean_pm([r['final'] for r in rows], 100)}"
        f" | {mean_pm([r['loss'] for r in rows], digits=3)} | {_percent(kept)}"
        f" | {_percent(substituted)}"
    )


# the paired comparisons of the report: (mine, base), where both were run
COMPARISONS = (
    ("qfedadam", "qfedavg"),
    ("qfedfisher", "qfedavg"),
    ("qfedfisher-training", "qfedavg"),
    ("qfedfisher-server-only", "qfedavg"),
    ("qfedfisher", "qfedfisher-server-only"),
    ("qfedfisher-training", "qfedfisher"),
)
SUMMARY_COLUMNS = [
    "seeds",
    "final accuracy (%)",
    "final loss",
    "kept by the client rule (%, rounds 2+)",
    "substituted by the server (%)",
]
PAIRED_NOTE = (
    "Paired differences: per seed (the same partition and client sampling for every"
    " strategy), mine minus base; mean [95 % Student-t interval over the seeds], in bold where"
    " the interval excludes 0."
)


def report(data: Path) -> str:
    """The tables of one regime (``table.md``) from its ``runs.json`` alone (the sweep's
    QFedAvg baseline from the default regime's): final accuracy and loss, mean ± sample std over
    seeds and per seed, the mean kept and substituted shares, and the paired per-seed
    differences between the strategies; the long regime's also the accuracy at a few rounds
    and the returning clients' staleness and kept share. ``client_overhead.csv``: its table
    (``overhead_report``)."""
    if data.name == OVERHEAD_DATA.name:
        return overhead_report(data)
    folder = data.parent
    name = next(n for n, f in FOLDERS.items() if f.name == folder.name)
    regime = REGIMES[name]
    runs = json.loads(data.read_text())
    rows = _finals(runs, regime)
    if name == "sweep":
        return _sweep_table(rows, regime, folder)
    lines = []
    for dataset in regime.datasets:
        mine = [r for r in rows if r["dataset"] == dataset]
        if not mine:
            continue
        variants = [v for v in regime.variants if any(r["variant"] == v for r in mine)]
        seeds = sorted({r["seed"] for r in mine})
        lines += table_head(
            f"**{_title(regime, dataset, regime.rounds[dataset])}**: final test accuracy and"
            " loss of the global model, mean ± sample std over seeds; the clients' mean share"
            " of entries kept by the client rule (rounds 2 on) and the server's share replaced"
            " by the FedAvg value (`runs.json`).",
            "strategy",
            SUMMARY_COLUMNS,
        )
        for variant in variants:
            vr = [r for r in mine if r["variant"] == variant]
            lines.append(f"| {variant} | {_summary_cells(vr)} |")
        lines += [""] + table_head(
            "Per seed: final accuracy (%) / loss.", "strategy", [f"seed {s}" for s in seeds]
        )
        for variant in variants:
            by_seed = {r["seed"]: r for r in mine if r["variant"] == variant}
            cells = [
                f"{100 * by_seed[s]['final']:.1f} / {by_seed[s]['loss']:.3f}"
                if s in by_seed
                else "–"
                for s in seeds
            ]
            lines.append(f"| {variant} | {' | '.join(cells)} |")
        lines += [""] + table_head(
            PAIRED_NOTE, "mine − base", ["final accuracy (points)", "final loss"]
        )
        for a, b in COMPARISONS:
            if a in variants and b in variants:
                mine_labels, base_labels = (
                    {"dataset": dataset, "variant": a},
                    {"dataset": dataset, "variant": b},
                )
                lines.append(
                    f"| {a} − {b} | {paired_cell(mine, mine_labels, base_labels)}"
                    f" | {_loss_cell(mine, mine_labels, base_labels)} |"
                )
        lines.append("")
        if name in LONG_REGIMES:
            lines += _long_tables([r for r in runs if _in_grid(r, regime)], dataset, variants)
    lines.append(provenance_line(folder))
    return "\n".join(lines) + "\n"


def _in_grid(record: dict, regime: Regime) -> bool:
    """Whether a run of ``runs.json`` belongs to the regime's grid (its data sets, variants
    and rounds: runs.json may also hold runs of other rounds or variants)."""
    return (
        record["dataset"] in regime.rounds
        and record["variant"] in regime.variants
        and record["rounds"] == regime.rounds[record["dataset"]]
    )


def _at_round(runs: list[dict], dataset: str, server_round: int) -> list[dict]:
    """Accuracy (as ``final``, what ``paired_cell`` reads) and loss of the global model after
    ``server_round``, one row per run of ``dataset``."""
    return [
        {
            "variant": r["variant"],
            "seed": r["seed"],
            "final": r["accuracy"][server_round],
            "loss": r["loss"][server_round],
        }
        for r in runs
        if r["dataset"] == dataset
    ]


def _windows(rounds: int) -> list[tuple[int, int]]:
    """Rounds 1-10, 11-30, 31-last (``CHECKPOINTS``): first and last round of each window."""
    edges = [0, *(c for c in CHECKPOINTS if c < rounds), rounds]
    return [(low + 1, high) for low, high in itertools.pairwise(edges)]


def _returning_kept(record: dict) -> list[float | None]:
    """Per round, the mean share of entries kept by the clients that had taken part before
    (a new client keeps none, so the round's mean times its clients over the returning ones);
    None in a round without a returning client."""
    return [
        kept * trained / returning if returning else None
        for kept, trained, returning in zip(
            record["kept"], record["clients_trained"], record["returning"]
        )
    ]


def _long_tables(runs: list[dict], dataset: str, variants: list[str]) -> list[str]:
    """The long regime's own tables: accuracy and loss at ``CHECKPOINTS`` and the last round
    with the paired per-seed differences, and by window of rounds the returning clients, their
    staleness and the share of entries they kept."""
    rounds = runs[0]["rounds"]
    checkpoints = [c for c in CHECKPOINTS if c < rounds] + [rounds]
    at = {c: _at_round(runs, dataset, c) for c in checkpoints}
    lines = table_head(
        "Test accuracy (%) / loss of the global model after a few rounds, mean over seeds, and"
        " the paired per-seed differences (accuracy in points / loss, mean [95 % Student-t"
        " interval], in bold where it excludes 0): does a gap shrink with rounds?",
        "strategy",
        [f"round {c}" for c in checkpoints],
    )
    for variant in variants:
        cells = []
        for c in checkpoints:
            vr = [r for r in at[c] if r["variant"] == variant]
            cells.append(
                f"{100 * np.mean([r['final'] for r in vr]):.1f}"
                f" / {np.mean([r['loss'] for r in vr]):.3f}"
            )
        lines.append(f"| {variant} | {' | '.join(cells)} |")
    for a, b in COMPARISONS:
        if a in variants and b in variants:
            mine, base = {"variant": a}, {"variant": b}
            cells = [
                f"{paired_cell(at[c], mine, base)} / {_loss_cell(at[c], mine, base)}"
                for c in checkpoints
            ]
            lines.append(f"| {a} − {b} | {' | '.join(cells)} |")
    ruled = [r for r in runs if r["variant"] == "qfedfisher" and r.get("returning")]
    if not ruled:
        return [*lines, ""]
    lines += [""] + table_head(
        "QFedFisher with the client rule, by window of rounds, mean over its runs: clients that"
        " had taken part before (per round), their staleness (rounds since they last took part:"
        " mean, and the range), and the share of entries the client rule kept (all clients:"
        " new ones keep none; returning clients only). The clients of a round are reconstructed"
        " from the seeded sampling, checked against the kept shares (module docstring).",
        "rounds",
        [
            "returning clients / round",
            "staleness (rounds)",
            "kept, all clients (%)",
            "kept, returning clients (%)",
        ],
    )
    for first, last in _windows(rounds):
        window = slice(first - 1, last)
        gaps = [g for r in ruled for gs in r["staleness"][window] for g in gs]
        returning = np.mean([n for r in ruled for n in r["returning"][window]])
        kept = mean_fraction([mean_fraction(r["kept"][window]) for r in ruled])
        kept_back = mean_fraction([v for r in ruled for v in _returning_kept(r)[window]])
        span = f"{np.mean(gaps):.1f} [{min(gaps)}–{max(gaps)}]" if gaps else "–"
        lines.append(
            f"| {first}–{last} | {returning:.2f} | {span} | {_percent(kept)}"
            f" | {_percent(kept_back)} |"
        )
    return [*lines, ""]


def plot_returning(runs: list[dict], path: Path) -> None:
    """The long regime's second figure: per round, the share of entries the returning clients
    kept (QFedFisher with the client rule, mean over seeds) and their staleness."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ruled = [r for r in runs if r["variant"] == "qfedfisher" and r.get("returning")]
    if not ruled:
        return
    fig, (kept_axis, stale_axis) = plt.subplots(1, 2, figsize=(11, 3.5))
    for record in ruled:
        x = np.arange(1, record["rounds"] + 1)
        kept = [np.nan if v is None else 100 * v for v in _returning_kept(record)]
        stale = [np.mean(gaps) if gaps else np.nan for gaps in record["staleness"]]
        kept_axis.plot(x, kept, ".", label=f"seed {record['seed']}")
        stale_axis.plot(x, stale, ".", label=f"seed {record['seed']}")
    kept_axis.set_ylabel("kept by returning clients (%)")
    stale_axis.set_ylabel("staleness of returning clients (rounds)")
    for axis in (kept_axis, stale_axis):
        axis.set_xlabel("round")
        axis.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _sweep_table(rows: list[dict], regime: Regime, folder: Path) -> str:
    """The threshold sweep: per threshold, final accuracy, kept and substituted shares, and
    the paired differences against QFedAvg (the default regime's runs of the same setting and
    seeds) and against the paper's delta = 0.01."""
    default = REGIMES["default"]
    base = [
        r
        for r in _finals(json.loads((FOLDERS["default"] / "runs.json").read_text()), default)
        if r["dataset"] == "digits" and r["variant"] == "qfedavg"
    ]
    both = rows + base
    dataset = next(iter(regime.datasets))
    lines = table_head(
        f"**QFedFisher's threshold, {_title(regime, dataset, regime.rounds[dataset])}**: final"
        " test accuracy, mean ± sample std over seeds; the clients' mean share of entries kept"
        " by the client rule (rounds 2 on) and the server's share replaced by the FedAvg value;"
        " the paired per-seed difference in final accuracy (points) against QFedAvg (the"
        " default comparison's runs, same setting and seeds) and against delta = 0.01 (the"
        " paper's), mean [95 % Student-t interval], in bold where it excludes 0 (`runs.json`).",
        "threshold",
        [*SUMMARY_COLUMNS, "− qfedavg", "− delta=0.01"],
    )
    qfedavg = {"dataset": dataset, "variant": "qfedavg"}
    reference = {"dataset": dataset, "variant": "delta=0.01"}
    for variant in regime.variants:
        vr = [r for r in rows if r["variant"] == variant]
        if not vr:
            continue
        mine = {"dataset": dataset, "variant": variant}
        against = "" if variant == "delta=0.01" else paired_cell(both, mine, reference)
        lines.append(
            f"| {variant} | {_summary_cells(vr)} | {paired_cell(both, mine, qfedavg)}"
            f" | {against or '–'} |"
        )
    lines.append(
        f"| qfedavg (default comparison) | {_summary_cells(base)} | – |"
        f" {paired_cell(both, qfedavg, reference)} |"
    )
    lines += ["", provenance_line(folder)]
    return "\n".join(lines) + "\n"


def write_report(data: Path) -> str:

    return write_table(data.parent / "table.md", lambda: report(data))


# the client steps --client-overhead times; the first is the base of the ratios
OVERHEAD_STEPS = (
    "qfedavg (train)",
    "qfedfisher final (train + Fisher pass)",
    "qfedfisher training (train + hook)",
)
OVERHEAD_PROVENANCE = "client_overhead.measured.json"


def client_overhead(dataset: str, repeats: int) -> list[dict]:
    """Seconds of one client's local work on the VQC (E = 1), one row per repeat and step,
    the steps measured back to back in this process so that the load of other jobs hits every
    step alike: plain training (QFedAvg), training + the Fisher pass after it (QFedFisher,
    'final'), training with the squared-gradient hook (QFedFisher, 'training'). One repeat
    before them is not recorded (the first model built and trained in the process is slower),
    and each repeat starts one step later than the one before (no step always runs first)."""
    import torch

    from flowerbed.catalog import parse_run_config
    from flowerbed.data.federation import load_splits
    from flowerbed.models import build_model
    from flowerbed.strategies.qfedfisher import SquaredGradients, empirical_fisher
    from flowerbed.training.loops import build_optimizer, train_local

    config = parse_run_config({**COMMON, **DATASETS[dataset]})
    data = load_splits(config)
    x, y = data.x_train[:160], data.y_train[:160]  # a client of 160 samples: 5 batches

    def train(model, **hooks):
        return train_local(
            model,
            x,
            y,
            epochs=1,
            batch_size=32,
            generator=torch.Generator().manual_seed(0),
            optimizer=build_optimizer(model.parameters(), config),
            **hooks,
        )

    def plain(model):
        train(model)

    def final(model):
        train(model)
        empirical_fisher(model, x, y, 32, torch.Generator().manual_seed(1))

    def during(model):
        hook = SquaredGradients()
        train(model, after_backward=hook)
        hook.mean(model)

    steps = dict(zip(OVERHEAD_STEPS, (plain, final, during), strict=True))
    rows = []
    for repeat in range(-1, repeats):  # -1: the warm-up
        order = OVERHEAD_STEPS[repeat % 3 :] + OVERHEAD_STEPS[: repeat % 3]
        for name in order:
            model = build_model("vqc", data.input_shape, data.num_classes, config=config)
            start = time.perf_counter()
            steps[name](model)
            seconds = time.perf_counter() - start
            if repeat >= 0:
                rows.append(
                    {"dataset": dataset, "repeat": repeat, "step": name, "seconds": seconds}
                )
    return rows


def overhead_report(data: Path) -> str:
    """The client overhead table from ``client_overhead.csv`` alone: per data set and step,
    the median seconds over the repeats and the median of the per-repeat ratios to plain
    training measured in the same repeat (side by side), with their range."""
    rows = read_runs(data, floats=("seconds",), ints=("repeat",))
    lines = table_head(
        "**One client's work per round with and without QFedFisher's Fisher pass**: the"
        " default regime's VQC (4 layers), a client of 160 samples, E = 1, B = 32; the steps"
        " timed back to back in each repeat, in a rotating order, after one repeat not"
        " recorded; seconds: median over the repeats; vs qfedavg:"
        " median [min, max] over the repeats of the step's time over plain training's in the"
        " same repeat, minus 1 (`client_overhead.csv`).",
        "data set, client step",
        ["repeats", "seconds", "vs qfedavg (%)"],
    )
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == dataset]
        base = {r["repeat"]: r["seconds"] for r in mine if r["step"] == OVERHEAD_STEPS[0]}
        for step in OVERHEAD_STEPS:
            times = {r["repeat"]: r["seconds"] for r in mine if r["step"] == step}
            ratios = [100 * (times[k] / base[k] - 1) for k in sorted(times)]
            relative = (
                "–"
                if step == OVERHEAD_STEPS[0]
                else f"{np.median(ratios):+.1f} [{min(ratios):+.1f}, {max(ratios):+.1f}]"
            )
            lines.append(
                f"| {dataset}, {step} | {len(times)} | {np.median(list(times.values())):.3f}"
                f" | {relative} |"
            )
    lines += ["", provenance_line(data.parent, file=OVERHEAD_PROVENANCE)]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--regime", choices=list(REGIMES), default="default")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--rounds", type=int, help="rounds for every data set (else the regime's)")
    parser.add_argument("--variants", nargs="+", choices=list(VARIANTS))
    parser.add_argument("--datasets", nargs="+")
    parser.add_argument("--data-dir", default="~/.flowerbed/data", help="where MNIST is read")
    parser.add_argument("--quick", action="store_true", help="2 rounds, 1 seed, into <out>/quick")
    parser.add_argument(
        "--out",
        type=Path,
        help="default: the regime's folder under benchmarks/results (FOLDERS)",
    )
    parser.add_argument("--workers", type=int, default=1, help="runs at the same time")
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="tables, table.md and plot from <out>/runs.json",
    )
    parser.add_argument(
        "--client-overhead",
        type=int,
        default=0,
        metavar="REPEATS",
        help="only measure one client's local work per variant, REPEATS times, into"
        " client_overhead.csv and .md (with --report-only: the table from the csv)",
    )
    args = parser.parse_args()
    if args.out is None:
        args.out = FOLDERS[args.regime]
    import flowerbed.inprocess  # noqa: F401 - configures Flower's logger, then quiet it
    from flowerbed.core.results import atomic_write

    logging.getLogger("flwr").setLevel(logging.WARNING)
    regime = REGIMES[args.regime]
    variants = tuple(args.variants or regime.variants)
    datasets = [d for d in (args.datasets or regime.datasets) if d in regime.datasets]
    rounds = {d: args.rounds or regime.rounds[d] for d in datasets}
    if args.quick:
        args.seeds, rounds, args.out = 1, {d: 2 for d in datasets}, args.out / "quick"
    if args.regime == "paper" and "mnist" in datasets:
        from flowerbed.data import DataNotFoundError, load_dataset

        try:
            load_dataset("mnist", Path(args.data_dir).expanduser())
        except DataNotFoundError as error:
            print(f"MNIST left out: {error}")
            datasets.remove("mnist")
    args.out.mkdir(parents=True, exist_ok=True)
    if args.client_overhead:
        from flowerbed.core.results import write_csv

        data = args.out / OVERHEAD_DATA.name
        if not args.report_only:
            rows = [row for d in datasets for row in client_overhead(d, args.client_overhead)]
            write_csv(data, rows, ["dataset", "repeat", "step", "seconds"])
            record_provenance(args.out, sys.argv, file=OVERHEAD_PROVENANCE)
        elif not data.is_file():
            parser.error(f"--report-only reads {data}, which does not exist: run without it first")
        text = write_table(args.out / OVERHEAD_TABLE.name, lambda: overhead_report(data))
        print(text)
        return
    store = args.out / "runs.json"
    if args.report_only and not store.is_file():
        parser.error(f"--report-only reads {store}, which does not exist: run without it first")
    runs = json.loads(store.read_text()) if store.is_file() else []
    if not args.report_only:
        spec = sweep_spec(args.regime, datasets, variants, args.seeds, rounds, args.data_dir)
        results = run_sweep(spec, args.out / "runs", workers=args.workers, extend=True)
        fresh = [
            run_record(r.point.labels, r.run_dir, regime.clients)
            for r in results
            if r.state.finished
        ]
        # runs.json keeps every record it held (runs made earlier, elsewhere or by a subset of
        # the variants); a fresh run replaces the record of the same point
        by_point = {_point(r): r for r in runs} | {_point(r): r for r in fresh}
        runs = list(by_point.values())
        atomic_write(store, lambda f: f.write(json.dumps(runs, indent=1)))
        if args.out.resolve() == FOLDERS[args.regime]:
            record_provenance(args.out, sys.argv)
    runs = [  # runs.json may hold more (other seeds, variants or rounds asked before)
        r
        for r in runs
        if r["dataset"] in datasets
        and r["variant"] in variants
        and r["seed"] < args.seeds
        and r["rounds"] == rounds[r["dataset"]]
    ]
    name = "quantum_fl" if args.regime == "default" else args.regime
    if args.regime == "sweep":
        text = sweep_report(runs, variants, args.out / f"{name}.png")
    else:
        text = summarise(runs, variants, regime)
        plot(runs, variants, regime, args.out / f"{name}.png")
        if args.regime in LONG_REGIMES:
            plot_returning(runs, args.out / f"{name}_returning.png")
    atomic_write(args.out / f"{name}.md", lambda f: f.write(text))
    print(text)
    if args.out.resolve() == FOLDERS[args.regime]:  # the published table.md
        print(write_report(store))


if __name__ == "__main__":
    main()
