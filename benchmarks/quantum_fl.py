"""QFedAvg vs QFedAdam vs QFedFisher on the VQC (the comparison of the QFedFisher paper, Table I,
on data available offline): digits with Dirichlet(0.5) and breast-cancer with Dirichlet(0.1),
10 clients each, several seeds; accuracy and loss of the global model per round, seconds per
round; markdown tables and a plot.

A study of the study driver (``flowerbed.experiments.study_cli``): a point is one regime's data
set and variant at a number of rounds (``<regime>/<data set>/<variant>/r<rounds>``), a run one
seed of it: the regime's run config run in this process in a temporary folder
(``sweep_study.run_cell``: the real ServerApp job with the real ClientApp handlers,
``run_in_process``, one torch thread). Clients train one after another, so a round's seconds
are the sum of the clients' work plus the evaluation (with several workers, runs share the
machine's cores: compare seconds of runs made one at a time). A run that stopped because no
client could send a finite update fails (the tables need every round) and runs again next time.

Its row holds the regime, data set and variant, the rounds it ran and, round by round
(``<key>/<r>``; the row's ``seconds`` is the whole run's, as the driver measures it): the
global model's test ``accuracy`` and ``loss`` (from round 0, the initial model), and from round
1 the round's wall ``seconds``, ``bytes_received`` and ``bytes_sent``, QFedFisher's ``kept``
(the clients' mean share of entries kept by the client rule) and ``substituted`` (the server's
share of entries that took the FedAvg value), ``clients_trained``, and the ``returning``
clients (how many had taken part before) with their ``staleness`` (rounds since each last took
part, space-separated). A round without a value has no key (``kept`` of a strategy without the
client rule); ``returning`` and ``staleness`` have none where the reconstruction of the round's
clients failed (below).

Budgets, one per regime (seeds 0, 1, 2; the default is ``default``), each committed in its own
folder (``FOLDERS``; ``--out`` for all but ``default``), and ``<regime>-quick`` for each other
regime (its grid at 2 rounds, seed 0: a smoke run, into ``results/quantum_fl/<regime>-quick``):

* ``default``: the comparison above (10 clients, 4 layers, Adam at 0.05, 5 rounds on digits, 8
  on breast-cancer; about 15 min).
* ``paper``: the QFedFisher paper's setting (Sec. IV: 100 clients of 500 samples drawn with a
  Dirichlet(0.5) label distribution, 5 % of them per round, 60 Kaiming-initialised layers,
  Adam at 1e-3, E = 1, B = 32, 300 rounds), scaled to a 2-core machine: ``PAPER_CLIENTS``
  clients of ``samples-per-client`` samples (``partitioner='dirichlet-sized'``: digits has
  1,437 training images, so clients share samples once a class is used up), 10 % of them per
  round, ``vqc-layers`` from ``PAPER``, as many rounds as about an hour allows for 3 seeds; on
  digits, and on MNIST when its files are in the run config's default ``data-dir`` (else its
  points are left out of the grid, and the script says so). Reports QFedAvg, QFedAdam and
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

The client overhead: one client's local work per round with and without the Fisher pass, a
point per data set of the default regime (``client-overhead/<data set>``), a run one repeat:
the three client steps (``OVERHEAD_STEPS``) timed back to back after one untimed pass of them
(the first model built and trained in a process is slower), from step ``repeat % 3`` on (no
step always runs first); its row holds each step's seconds (``seconds/<step>``), so that its
ratios are paired within the repeat. Budget ``client-overhead`` (repeats 0 to 14, committed in
``results/quantum_fl`` beside the default regime's rows); run it with one worker (runs side by
side would time their contention). ``quick``: the default regime's QFedAvg and QFedFisher at 2
rounds, seed 0, and one repeat of the client overhead: a check, in a few minutes, that the
measuring path works, into ``results/quantum_fl/quick``.

    python benchmarks/quantum_fl.py                    # what rows.jsonl lacks of the default
    python benchmarks/quantum_fl.py --quick            # into results/quantum_fl/quick
    python benchmarks/quantum_fl.py --report-only      # the default regime's tables and plot
    python benchmarks/quantum_fl.py --budget paper --workers 2 --out benchmarks/results/quantum_fl_paper
    python benchmarks/quantum_fl.py --budget paper-quick     # 2 rounds, 1 seed: a smoke run
    python benchmarks/quantum_fl.py --budget sweep --out benchmarks/results/quantum_fl_sweep
    python benchmarks/quantum_fl.py --budget long --out benchmarks/results/quantum_fl_long
    python benchmarks/quantum_fl.py --budget mnist-default --out benchmarks/results/quantum_fl_mnist_default
    python benchmarks/quantum_fl.py --budget client-overhead --out benchmarks/results/quantum_fl

Writes into its folder: ``rows.jsonl`` (one row per run: the committed record),
``measured.jsonl`` (one line per invocation that measured, said under the tables) and, from
the rows and the provenance beside them alone (a folder holds one regime's rows, and the client
overhead's), ``table.md``, the tables ``docs/studies-quantum-fl.md`` includes (final accuracy
and loss, mean ± std and per seed, and the paired per-seed differences between the strategies
with their 95 % t intervals; the threshold sweep's also reads the default regime's committed
rows for QFedAvg, run with the same setting and seeds), ``<regime>.md`` (``quantum_fl.md`` for
the default: the mean accuracy and loss per round and the rough seconds per round) with
``<regime>.png`` (and ``long_returning.png``) drawn with it, and ``client_overhead.md``. The
committed rows were measured by the script before it became a study (``measured.json`` and
``client_overhead.measured.json``, their provenance, kept where there was one), into
``runs.json`` and ``client_overhead.csv``, converted once into ``rows.jsonl``: to measure a
regime anew, remove its rows and ``measured.json``. The captions still name those two files and
``--client-overhead``, as the published tables do, which stay byte for byte what they were.

Staleness: the history does not name the clients of a round, so ``run_record`` reconstructs
them from the seeded sampling (``sampled_partitions``) and checks the reconstruction against
the client rule's kept shares (a client keeps nothing in its first round, something after).
"""

from __future__ import annotations

import itertools
import json
import random
import textwrap
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from result_tables import (
    interval_cell,
    measured_where,
    paired_cell,
    provenance_line,
    table_head,
    unrecorded_provenance_line,
    write_table,
)
from sweep_study import cell_point, run_cell

from flowerbed.catalog import parse_run_config
from flowerbed.core.results import round_seconds
from flowerbed.core.seeding import seed_for
from flowerbed.data.federation import load_splits
from flowerbed.data.torchvision_files import missing_torchvision
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import provenance_lines
from flowerbed.experiments.qfedfisher import (  # the regimes' settings (module docstring)
    COMMON,
    LONG,
    LONG_ROUNDS,
    PAPER,
    PAPER_CLIENTS,
)
from flowerbed.experiments.stats import paired_ratio
from flowerbed.experiments.study_runs import data_dir
from flowerbed.models import build_model
from flowerbed.protocols.rounds_strategy import _TRAIN_SAMPLE
from flowerbed.strategies.qfedfisher import SquaredGradients, empirical_fisher
from flowerbed.sweep import load_history, mean_std
from flowerbed.training.loops import build_optimizer, train_local

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
TABLE = RESULTS / "table.md"
# the folder each regime's rows are committed in (the default budget's is the study's folder)
MEASURED_REGIMES = ("default", "paper", "sweep", "long", "mnist-default")
FOLDERS = {
    "default": RESULTS,
    "paper": RESULTS.with_name("quantum_fl_paper"),
    "sweep": RESULTS.with_name("quantum_fl_sweep"),
    "long": RESULTS.with_name("quantum_fl_long"),
    "mnist": RESULTS.with_name("quantum_fl_mnist"),
    "mnist-default": RESULTS.with_name("quantum_fl_mnist_default"),
}
# one client's work per round with and without the Fisher pass (module docstring): its points
# are named from here, its rows are what client_overhead.md is made of
OVERHEAD = "client-overhead"
OVERHEAD_VALUES = f"{ROWS}:{OVERHEAD}"
OVERHEAD_TABLE = RESULTS / "client_overhead.md"
OVERHEAD_PROVENANCE = "client_overhead.measured.json"
# (what ``report`` reads, the table it writes): one per measured regime (``mnist`` is prepared,
# not measured: it takes hours here), and the client overhead's; the docs page includes each
PUBLISHED = (
    *((FOLDERS[name] / ROWS, FOLDERS[name] / TABLE.name) for name in MEASURED_REGIMES),
    (RESULTS / OVERHEAD_VALUES, OVERHEAD_TABLE),
)
DATA = PUBLISHED[0][0]
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


@dataclass(frozen=True)
class Budget:
    """What a budget runs: a regime's grid (its rounds, or ``rounds`` for every data set; its
    variants, or ``variants``) and the client overhead's points, for ``seeds``."""

    regime: str | None
    seeds: tuple[int, ...]
    rounds: int | None = None
    variants: tuple[str, ...] | None = None
    overhead: bool = False


SEEDS = (0, 1, 2)
QUICK_ROUNDS = 2
OVERHEAD_REPEATS = 15
BUDGETS = {
    **{name: Budget(name, SEEDS) for name in REGIMES},
    **{f"{name}-quick": Budget(name, (0,), QUICK_ROUNDS) for name in REGIMES if name != "default"},
    OVERHEAD: Budget(None, tuple(range(OVERHEAD_REPEATS)), overhead=True),
    study_cli.QUICK: Budget(
        "default", (0,), QUICK_ROUNDS, variants=("qfedavg", "qfedfisher"), overhead=True
    ),
}


class QuantumFL:
    """The study (module docstring): a row per regime, data set, variant, rounds and seed, and
    per data set and repeat of the client overhead."""

    name = "quantum_fl"
    budgets = BUDGETS
    default_budget = "default"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        points = [] if chosen.regime is None else regime_points(chosen)
        if chosen.overhead:
            points += [Point(f"{OVERHEAD}/{dataset}", {"dataset": dataset}) for dataset in DATASETS]
        return points, list(chosen.seeds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        if is_overhead(point.name):
            return client_overhead(point.settings["dataset"], seed)
        clients = REGIMES[point.settings["labels"]["regime"]].clients
        return run_cell(point, seed, clients, partial(run_record, clients))

    def report(self, rows: list[dict[str, Value]]) -> dict:
        tables = {}
        name, runs = regime_runs(rows)
        if runs:
            tables[TABLE.name] = partial(regime_table, name, runs)
            tables[f"{file_stem(name)}.md"] = partial(summary_and_plots, name, runs)
        overhead = overhead_rows(rows)
        if overhead:
            tables[OVERHEAD_TABLE.name] = partial(overhead_table, overhead)
        return tables


def mnist_missing() -> str | None:
    """Why the paper regime's MNIST points are left out of its grid (its files are not in the
    run config's default ``data-dir``); None when they are there."""
    return missing_torchvision("mnist", data_dir({}))


def regime_points(budget: Budget) -> list[Point]:
    """The points of ``budget``'s regime: data set (with its rounds) x variant, each the
    regime's run config with the data set's and the variant's settings."""
    regime = REGIMES[budget.regime]
    datasets = [d for d in regime.datasets if d != "mnist" or mnist_missing() is None]
    return [
        cell_point(
            {"regime": budget.regime, "dataset": dataset, "variant": variant},
            {**regime.common, **regime.datasets[dataset], **VARIANTS[variant]},
            budget.rounds or regime.rounds[dataset],
        )
        for dataset in datasets
        for variant in budget.variants or regime.variants
    ]


def is_overhead(point: str) -> bool:
    """Whether ``point`` names a point of the client overhead (else one of a regime)."""
    return point.startswith(f"{OVERHEAD}/")


# --- one run: the record the tables read, and its row -----------------------------------------

# a run's per-round lists, and the round each starts at (0: the initial model)
SERIES = {
    "accuracy": 0,
    "loss": 0,
    "seconds": 1,
    "bytes_received": 1,
    "bytes_sent": 1,
    "kept": 1,
    "substituted": 1,
}
# per-round lists that a run may lack altogether (None): the clients of its rounds
CLIENT_SERIES = ("clients_trained", "returning", "staleness")
LABELS = ("regime", "dataset", "variant", "seed", "rounds")


def sampled_partitions(seed: int, server_round: int, clients: int, sampled: int) -> list[int]:
    """The partitions sampled for training in a round, as the run drew them: the round's
    sampling seed (``rounds_strategy``) and Flower's ``random.sample`` over the nodes listed in
    partition order (``RecordingGrid.get_node_ids``)."""
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


def run_record(clients: int, run_dir: Path, stopped: bool) -> dict[str, Value]:
    """What the tables and plots read from one completed run, as row values
    (``series_values``); a run that stopped (its model diverged) raises: the tables need every
    round."""
    history = load_history(run_dir)
    if stopped:
        raise RuntimeError(
            f"the run stopped after round {history[-1]['round']}: no client could send a finite"
            " update"
        )
    config = json.loads((run_dir / "config.json").read_text())
    client_rule = config["strategy"] == "qfedfisher" and config["qfedfisher-client-rule"]
    record = {
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
        **returning_clients(history, int(config["seed"]), clients, client_rule),
    }
    return {"rounds": len(history) - 1, **series_values(record)}


def series_values(record: dict) -> dict[str, Value]:
    """A run's per-round lists as row values, ``<key>/<round>`` (module docstring): no key for
    a round without a value, a round's staleness as space-separated text."""
    values: dict[str, Value] = {}
    starts = {**SERIES, **dict.fromkeys(CLIENT_SERIES, 1)}
    for key, first in starts.items():
        for server_round, value in enumerate(record.get(key) or [], start=first):
            if value is not None:
                text = " ".join(map(str, value)) if key == "staleness" else value
                values[f"{key}/{server_round}"] = text
    return values


def run_of(row: dict[str, Value]) -> dict:
    """A regime's row as the record the tables read: its labels, seed and rounds, and its
    per-round lists (None for a round without a value; a client series none of whose rounds
    has one is None)."""
    rounds = int(row["rounds"])
    record = {key: row[key] for key in LABELS}
    for key, first in SERIES.items():
        record[key] = [row.get(f"{key}/{r}") for r in range(first, rounds + 1)]
    for key in CLIENT_SERIES:
        values = [row.get(f"{key}/{r}") for r in range(1, rounds + 1)]
        if key == "staleness":
            values = [None if v is None else [int(g) for g in str(v).split()] for v in values]
        record[key] = None if all(v is None for v in values) else values
    return record


def regime_runs(rows: list[dict[str, Value]]) -> tuple[str, list[dict]]:
    """The regime of a folder's rows and its runs (``run_of``), per data set those of the most
    rounds; ValueError for rows of several regimes (each has its own folder: ``--out``)."""
    runs = [run_of(row) for row in rows if not is_overhead(str(row["point"]))]
    regimes = list(dict.fromkeys(r["regime"] for r in runs))
    if len(regimes) > 1:
        raise ValueError(
            f"rows of the regimes {', '.join(regimes)} in one folder: each regime has its own"
            " (--out)"
        )
    most: dict[str, int] = {}
    for r in runs:
        most[r["dataset"]] = max(most.get(r["dataset"], 0), r["rounds"])
    return (regimes or ["default"])[0], [r for r in runs if r["rounds"] == most[r["dataset"]]]


def file_stem(regime: str) -> str:
    """The name of a regime's round-by-round table and plot."""
    return "quantum_fl" if regime == "default" else regime


# --- a regime's round-by-round table and its plots --------------------------------------------


def mean_fraction(values: list) -> float | None:
    """Mean over the rounds that report it (the kept fraction from round 2: a client has no
    previous round in round 1)."""
    numbers = [v for v in values if v is not None]
    return float(np.mean(numbers)) if numbers else None


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}"


def mean_pm(values, scale: float = 1.0, digits: int = 1) -> str:
    """Mean ± sample std over seeds, as table text ("-" for the std of one seed)."""
    mean, std = mean_std([scale * float(v) for v in values])
    return f"{mean:.{digits}f} ± " + ("-" if std is None else f"{std:.{digits}f}")


def _title(regime: Regime, dataset: str, rounds: int) -> str:
    """A regime's setting on ``dataset`` in words, for captions and plot titles."""
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


def summary_and_plots(name: str, runs: list[dict], folder: Path) -> str:
    """``<regime>.md`` (``summarise``; the sweep's ``sweep_summary``), with the regime's plots
    of the same runs drawn beside it."""
    regime, stem = REGIMES[name], file_stem(name)
    if name == "sweep":
        return sweep_summary(runs, regime.variants, folder / f"{stem}.png")
    plot(runs, regime.variants, regime, folder / f"{stem}.png")
    if name in LONG_REGIMES:
        plot_returning(runs, folder / f"{stem}_returning.png")
    return summarise(runs, regime.variants, regime)


def summarise(runs: list[dict], variants: tuple[str, ...], regime: Regime) -> str:
    """``<regime>.md``: per data set and variant, the final accuracy and loss, the rough
    seconds and kilobytes per round, the kept and substituted shares, and the mean accuracy
    and loss round by round."""
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
    """Test accuracy and loss by round, mean ± sample std over seeds, a line per variant, a
    column per data set."""
    datasets = [d for d in regime.datasets if any(r["dataset"] == d for r in runs)]
    fig = Figure(figsize=(5.5 * len(datasets), 7))
    axes = fig.subplots(2, len(datasets), squeeze=False)
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


def sweep_summary(runs: list[dict], variants: tuple[str, ...], path: Path) -> str:
    """Final accuracy against the mean kept / substituted fractions, per threshold, with its
    plot drawn at ``path``."""
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
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
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


def plot_returning(runs: list[dict], path: Path) -> None:
    """The long regime's second figure: per round, the share of entries the returning clients
    kept (QFedFisher with the client rule, mean over seeds) and their staleness."""
    ruled = [r for r in runs if r["variant"] == "qfedfisher" and r.get("returning")]
    if not ruled:
        return
    fig = Figure(figsize=(11, 3.5))
    kept_axis, stale_axis = fig.subplots(1, 2)
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


# --- a regime's table.md ---------------------------------------------------------------------


def _finals(runs: list[dict]) -> list[dict]:
    """One row per run: labels, seed, rounds, final accuracy and loss, mean kept and
    substituted shares."""
    return [
        {
            "dataset": r["dataset"],
            "variant": r["variant"],
            "seed": r["seed"],
            "rounds": r["rounds"],
            "final": r["accuracy"][-1],
            "loss": r["loss"][-1],
            "kept": mean_fraction(r["kept"][1:]),
            "substituted": mean_fraction(r["substituted"]),
        }
        for r in runs
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
    """Seeds, final accuracy and loss (mean ± std), kept and substituted shares of ``rows``."""
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


def regime_table(name: str, runs: list[dict], folder: Path) -> str:
    """``table.md`` of a regime from its runs and where they were measured: final accuracy
    and loss, mean ± sample std over seeds and per seed, the mean kept and substituted shares,
    and the paired per-seed differences between the strategies; the long regimes' also the
    accuracy at a few rounds and the returning clients' staleness and kept share; the sweep's
    its own (``_sweep_table``)."""
    regime = REGIMES[name]
    rows = _finals(runs)
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
            f"**{_title(regime, dataset, mine[0]['rounds'])}**: final test accuracy and"
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
            lines += _long_tables([r for r in runs if r["dataset"] == dataset], variants)
    lines.append(measured_where(folder))
    return "\n".join(lines) + "\n"


def report(data: Path) -> str:
    """A table of the docs from its data alone: a regime's ``table.md`` from the rows in
    ``data``'s folder (the sweep's also from the default regime's), ``client_overhead.md``
    (``OVERHEAD_VALUES``) from the client overhead's."""
    rows = measured_rows(data.parent)
    if data.name == OVERHEAD_VALUES:
        return overhead_table(overhead_rows(rows), data.parent)
    return regime_table(*regime_runs(rows), data.parent)


def _at_round(runs: list[dict], server_round: int) -> list[dict]:
    """Accuracy (as ``final``, what ``paired_cell`` reads) and loss of the global model after
    ``server_round``, one row per run."""
    return [
        {
            "variant": r["variant"],
            "seed": r["seed"],
            "final": r["accuracy"][server_round],
            "loss": r["loss"][server_round],
        }
        for r in runs
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


def _long_tables(runs: list[dict], variants: list[str]) -> list[str]:
    """The long regime's own tables: accuracy and loss at ``CHECKPOINTS`` and the last round
    with the paired per-seed differences, and by window of rounds the returning clients, their
    staleness and the share of entries they kept (``runs``: one data set's)."""
    rounds = runs[0]["rounds"]
    checkpoints = [c for c in CHECKPOINTS if c < rounds] + [rounds]
    at = {c: _at_round(runs, c) for c in checkpoints}
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


def _sweep_table(rows: list[dict], regime: Regime, folder: Path) -> str:
    """The threshold sweep: per threshold, final accuracy, kept and substituted shares, and
    the paired differences against QFedAvg (the default regime's committed runs of the same
    setting, rounds and seeds, where there are any) and against the paper's delta = 0.01."""
    dataset = next(iter(regime.datasets))
    rounds = rows[0]["rounds"]
    base = [
        r
        for r in _finals(regime_runs(measured_rows(FOLDERS["default"]))[1])
        if r["dataset"] == dataset and r["variant"] == "qfedavg" and r["rounds"] == rounds
    ]
    both = rows + base
    lines = table_head(
        f"**QFedFisher's threshold, {_title(regime, dataset, rounds)}**: final"
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
    if base:
        lines.append(
            f"| qfedavg (default comparison) | {_summary_cells(base)} | – |"
            f" {paired_cell(both, qfedavg, reference)} |"
        )
    lines += ["", measured_where(folder)]
    return "\n".join(lines) + "\n"


# --- the client overhead ----------------------------------------------------------------------

# the client steps, by the name of their seconds in a row (``seconds/<step>``): the first is
# the base of the ratios
OVERHEAD_STEPS = {
    "train": "qfedavg (train)",
    "fisher-pass": "qfedfisher final (train + Fisher pass)",
    "hook": "qfedfisher training (train + hook)",
}
OVERHEAD_CLIENT = 160  # samples: 5 batches of 32


def client_step(step: str, model: torch.nn.Module, x, y, config) -> None:
    """One client's local work of ``step`` (E = 1): plain training (QFedAvg), training + the
    Fisher pass after it (QFedFisher, 'final'), training with the squared-gradient hook
    (QFedFisher, 'training')."""
    hook = SquaredGradients() if step == "hook" else None
    train_local(
        model,
        x,
        y,
        epochs=1,
        batch_size=32,
        generator=torch.Generator().manual_seed(0),
        optimizer=build_optimizer(model.parameters(), config),
        **({"after_backward": hook} if hook else {}),
    )
    if step == "fisher-pass":
        empirical_fisher(model, x, y, 32, torch.Generator().manual_seed(1))
    if hook is not None:
        hook.mean(model)


def client_overhead(dataset: str, repeat: int) -> dict[str, Value]:
    """One repeat of the client overhead (module docstring) on ``dataset``'s default regime: a
    client of ``OVERHEAD_CLIENT`` samples, each step on a model built afresh, the steps in the
    order of ``repeat``, once untimed, then timed; the seconds of each."""
    config = parse_run_config({**COMMON, **DATASETS[dataset]})
    data = load_splits(config)
    x, y = data.x_train[:OVERHEAD_CLIENT], data.y_train[:OVERHEAD_CLIENT]
    steps = list(OVERHEAD_STEPS)
    order = steps[repeat % len(steps) :] + steps[: repeat % len(steps)]
    seconds = {}
    for timed in (False, True):
        for step in order:
            model = build_model("vqc", data.input_shape, data.num_classes, config=config)
            start = time.perf_counter()
            client_step(step, model, x, y, config)
            if timed:
                seconds[f"seconds/{step}"] = time.perf_counter() - start
    return {"dataset": dataset, **seconds}


def overhead_rows(rows: list[dict[str, Value]]) -> list[dict[str, Value]]:
    """The client overhead's rows of a folder."""
    return [row for row in rows if is_overhead(str(row["point"]))]


def overhead_measured(folder: Path) -> str:
    """Where the client overhead in ``folder`` was measured: ``OVERHEAD_PROVENANCE``'s
    sentence (the measurement before the port) where there is one, then ``Measured: `` and the
    sentence of each invocation of the study (``provenance_lines``); or that it is not known."""
    first = [provenance_line(folder, OVERHEAD_PROVENANCE)]
    lines = first if (folder / OVERHEAD_PROVENANCE).is_file() else []
    lines += [f"Measured: {line}" for line in provenance_lines(folder)]
    return " ".join(lines) or unrecorded_provenance_line(folder)


def overhead_table(rows: list[dict[str, Value]], folder: Path) -> str:
    """``client_overhead.md`` from the client overhead's rows: per data set and step, the
    median seconds over the repeats and the median of the per-repeat ratios to plain training
    measured in the same repeat (side by side), with their range."""
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
    base_step = next(iter(OVERHEAD_STEPS))
    for dataset in dict.fromkeys(r["dataset"] for r in rows):
        mine = [r for r in rows if r["dataset"] == dataset]
        base = {r["seed"]: r[f"seconds/{base_step}"] for r in mine}
        for step, label in OVERHEAD_STEPS.items():
            times = {r["seed"]: r[f"seconds/{step}"] for r in mine}
            ratio = paired_ratio(times, base)
            relative = (
                "–"
                if step == base_step
                else f"{100 * (ratio.median - 1):+.1f} [{100 * (ratio.low - 1):+.1f},"
                f" {100 * (ratio.high - 1):+.1f}]"
            )
            lines.append(
                f"| {dataset}, {label} | {len(times)} | {np.median(list(times.values())):.3f}"
                f" | {relative} |"
            )
    lines += ["", overhead_measured(folder)]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    missing = mnist_missing()
    if missing is not None:
        print(f"{missing}: the paper regime's MNIST points are left out of its grid")
    return study_cli.main(QuantumFL(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
