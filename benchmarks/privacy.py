"""Differential privacy: final accuracy against the privacy spent, central and local DP.

Central DP with server-side fixed clipping (``dp='central-server-fixed'``) and local DP
(``dp='local'``, Flower's ``LocalDpMod``) at several noise multipliers z, beside the
non-private run, on two offline data sets: scikit-learn's digits (the one offline image set of
this machine; MedMNIST, CIFAR-10 and MNIST need downloads) and scikit-learn's bundled
breast-cancer (569 tabular records, 30 features, 2 classes: this machine has no second offline
image set), both with the ``mlp`` model; 10 clients, Dirichlet partition (alpha 0.5 on digits;
1.0 on breast-cancer, whose 455 training records Dirichlet(0.5) cannot split into 10 clients of
at least 10 for seed 1), 20 rounds, every client every round (``fraction-train`` 1: no
sampling, so no amplification), 3 seeds;
everything else is the run-config default (2 local epochs, SGD, learning rate 0.05). Every
run is the real ServerApp / ClientApp code in this process.

Settings and why:

* z in {0.1, 0.3, 1, 3, 10} for both modes. With every client every round, central and local
  DP with the same z spend the same epsilon (both are T = 20 Gaussian releases with multiplier
  z/2 under replace-one client adjacency, docs/privacy.md), so each z compares the two modes
  at equal epsilon; the grid spans epsilon from about 4 (z = 10) to thousands (z = 0.1).
* ``dp-clipping-norm`` C: 1.0 on digits, 0.2 on breast-cancer, about the median norm of the
  clients' updates in the first rounds of the non-private run (digits: 1.2 to 1.4 in rounds 1
  and 2, 0.4 to 0.6 after round 10; breast-cancer: 0.16 to 0.2, then 0.06 to 0.1; measured
  once, seed 0). Chosen from the clients' updates without privacy, as a study may; a
  deployment must fix C without looking at the clients' data (or spend privacy on it).
* ``dp-delta`` 1e-5 (well below 1/10).

A study of the study driver (``flowerbed.experiments.study_cli``): a point is one data set and
privacy setting at a number of rounds (or one setting of the adaptive-clipping runs below), a
run one seed of it, the run config run in this process in a temporary folder
(``sweep_study.run_cell``, one torch thread); its row holds the final and best centralized
test accuracy, the epsilon of the last round, the rounds it ran and, for a run the noise
stopped, the round it stopped at. Budgets ``full`` (the default: both data sets, every z, seeds
0, 1, 2, 20 rounds, and the adaptive-clipping runs: 75 runs) and ``quick`` (digits; none,
central z=1, local z=1; the three adaptive-clipping settings; seed 0; 3 rounds: a check that
the measuring path works, into ``results/privacy/quick``). Writes into
``benchmarks/results/privacy``: ``rows.jsonl`` (one row per run: the committed record),
``measured.jsonl`` (one line per invocation that measured) and, from the rows and the
provenance beside them alone, ``table.md`` (final test accuracy, mean ± sample std over seeds,
per mode and z, with epsilon) and ``accuracy_vs_epsilon.png`` (the same, accuracy against
epsilon, log scale), drawn with it.

Adaptive clipping (Andrew et al., "Differentially Private Learning with Adaptive Clipping",
NeurIPS 2021), two more measurements, each with its own table:

* the simulation: no training, a strategy-level simulation (seconds), measured by
  ``--adaptive`` (not a point of the study: one deterministic computation, without seeds),
  into a file of its own beside the rows. Ten clients whose updates all have norm 3 every round (so every quantile of the norms is 3), z = 0.5, count noise
  sigma_count = 0.5 (Flower's n/20), eta 0.2, target quantile 0.5, 25 rounds from C = 1 and
  from C = 10, NumPy seed 0, for Flower 1.42's ``DifferentialPrivacyServerSideAdaptiveClipping``
  and flowerbed's ``AdaptiveClippingServerSide``. Each round records the C the updates were
  clipped with, the next C, and the std of the noise actually added (the aggregate of
  D = 20,000 entries minus the mean of the clipped updates) over the std the accounting
  assumes, z_update C_used / n. ``adaptive_clipping.csv`` (one row per implementation, start
  and round), ``adaptive-measured.json``, ``adaptive_clipping.md`` (made from the CSV
  whenever the study writes its tables);
* the adaptive-clipping runs, points of the study (their rows in ``rows.jsonl``, about 6
  minutes on 2 cores): digits, mlp, 10 clients (as above), every client every round, 30 rounds, seeds 0 to 2, z = 0.5 (the adaptive modes need
  z < 2 sigma_count = 1 with n = 10), in ``central-server-adaptive`` and
  ``central-client-adaptive`` from C = 0.1 (Flower's default initial norm, an order of
  magnitude below the update norms: digits' first updates have norm 1.2 to 1.4), beside
  ``central-server-fixed`` at the hand-picked C = 1.0 of the main table.
  ``adaptive_runs.md``; their row adds the C of rounds 1, 5, 10, 20 and 30 and the mean
  noised unclipped fraction of the second half.

The committed rows were measured by the script when it was a sweep (``measured.json`` and
``adaptive-runs-measured.json``, their provenance, kept), into ``runs.csv`` and
``adaptive_runs.csv``, converted once into ``rows.jsonl``: to measure anew, remove
``rows.jsonl`` and those two files.

``docs/privacy.md`` includes the full benchmark's ``table.md`` and the two adaptive tables when
the site is built (the lines ``result_tables.docs_include`` makes);
``tests/test_published_tables.py`` checks each file against its data (``PUBLISHED``) and the
page's include lines.

    python benchmarks/privacy.py                # what rows.jsonl lacks of the full grid
    python benchmarks/privacy.py --workers 2    # two runs at a time
    python benchmarks/privacy.py --quick        # 6 runs of 3 rounds
    python benchmarks/privacy.py --report-only  # every table and the plot from the data files
    python benchmarks/privacy.py --adaptive     # the simulation, then every table
"""

from __future__ import annotations

import logging
import math
import statistics
import sys
from functools import partial
from pathlib import Path

import dp_accounting
import numpy as np
from dp_accounting.rdp import RdpAccountant
from flwr.app import Array, ArrayRecord, ConfigRecord, Message, MetricRecord, RecordDict
from flwr.common.logger import FLOWER_LOGGER
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping, FedAvg
from matplotlib import colormaps
from matplotlib.figure import Figure
from result_tables import (
    PROVENANCE,
    accuracy_cell,
    column,
    percent_cell,
    provenance_line,
    read_runs,
    record_provenance,
    unrecorded_provenance_line,
    write_table,
)
from sweep_study import cell_point, run_cell, seed_major

from flowerbed.core.results import write_csv
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.provenance import provenance_lines
from flowerbed.inprocess import use_server_identity
from flowerbed.privacy.accounting import central_epsilon
from flowerbed.privacy.adaptive_clipping import AdaptiveClippingServerSide
from flowerbed.sweep import load_history

NOISE = (0.1, 0.3, 1.0, 3.0, 10.0)
MODES = {"central": "central-server-fixed", "local": "local"}
DATASETS = {
    "digits": {"dataset": "digits", "model": "mlp", "dp-clipping-norm": 1.0},
    "breast-cancer": {
        "dataset": "breast-cancer",
        "model": "mlp",
        "dirichlet-alpha": 1.0,
        "dp-clipping-norm": 0.2,
    },
}
SETTING = {"fraction-train": 1.0, "fraction-evaluate": 0.0, "dp-delta": 1e-5}
NUM_CLIENTS = 10
RESULTS = Path(__file__).parent / "results" / "privacy"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
PLOT = RESULTS / "accuracy_vs_epsilon.png"
# the page that includes table.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "privacy.md"
# adaptive clipping: the simulation and the runs (module docstring), their data and tables
ADAPTIVE_DATA, ADAPTIVE_TABLE = RESULTS / "adaptive_clipping.csv", RESULTS / "adaptive_clipping.md"
ADAPTIVE_PROVENANCE = "adaptive-measured.json"
RUNS_TABLE = RESULTS / "adaptive_runs.md"
RUNS_PROVENANCE = "adaptive-runs-measured.json"
# the adaptive-clipping runs' points are named from here; what adaptive_runs.md is made of
ADAPTIVE_RUNS = "adaptive-runs"
RUNS_VALUES = f"{ROWS}:{ADAPTIVE_RUNS}"
PUBLISHED = [
    (DATA, TABLE),
    (ADAPTIVE_DATA, ADAPTIVE_TABLE),
    (RESULTS / RUNS_VALUES, RUNS_TABLE),
]


def label(mode: str, z: float) -> str:
    return f"{mode} z={z:g}"


def privacy_bundles(modes, noise) -> dict[str, dict]:
    bundles = {"none": {"dp": "none"}}
    for mode in modes:
        for z in noise:
            bundles[label(mode, z)] = {"dp": MODES[mode], "dp-noise-multiplier": z}
    return bundles


# seeds, data sets, noise multipliers, rounds, adaptive-clipping runs' rounds
BUDGETS = {
    "full": ((0, 1, 2), list(DATASETS), NOISE, 20, 30),
    "quick": ((0,), ["digits"], (1.0,), 3, 3),
}


class Privacy:
    """The study (module docstring): a row per data set, privacy setting, rounds and seed, and
    per adaptive-clipping setting, rounds and seed."""

    name = "privacy"
    budgets = BUDGETS
    default_budget = "full"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        seeds, datasets, noise, rounds, adaptive_rounds = budget_of(BUDGETS, budget)
        points = [
            cell_point(
                {"dataset": dataset, "privacy": setting},
                {**SETTING, **DATASETS[dataset], **bundle},
                rounds,
            )
            for dataset in datasets
            for setting, bundle in privacy_bundles(MODES, noise).items()
        ]
        points += [
            cell_point(
                {"privacy": setting},
                {**SETTING, **ADAPTIVE_RUN, **bundle},
                adaptive_rounds,
                kind=ADAPTIVE_RUNS,
            )
            for setting, bundle in RUN_SETTINGS.items()
        ]
        return points, list(seeds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        record = adaptive_run_record if is_adaptive_run(point.name) else run_record
        return run_cell(point, seed, NUM_CLIENTS, partial(record, point.settings["labels"]))

    def report(self, rows: list[dict[str, Value]]) -> dict:
        grid_rows, adaptive_rows = split_rows(rows)
        tables = {}
        if grid_rows:
            tables[TABLE.name] = partial(table_and_plot, grid_rows)
        tables[ADAPTIVE_TABLE.name] = adaptive_table_of  # from a side file of the folder
        if adaptive_rows:
            tables[RUNS_TABLE.name] = partial(adaptive_runs_table, adaptive_rows)
        return tables


def is_adaptive_run(point: str) -> bool:
    """Whether ``point`` names an adaptive-clipping run (else a point of the main grid)."""
    return point.startswith(f"{ADAPTIVE_RUNS}/")


def split_rows(rows: list[dict[str, Value]]) -> tuple[list[dict], list[dict]]:
    """The main grid's rows and the adaptive-clipping runs' rows, each seed by seed."""
    ordered = seed_major(rows)
    return (
        [r for r in ordered if not is_adaptive_run(r["point"])],
        [r for r in ordered if is_adaptive_run(r["point"])],
    )


def run_record(labels: dict, run_dir: Path, stopped: bool) -> dict[str, Value]:
    """What the table reads from one run. A run the noise stopped (a round in which no client
    could send a finite update: the model had diverged) counts with the last global model it
    had, and the epsilon it had spent."""
    history = load_history(run_dir)
    accuracy = [row["central_accuracy"] for row in history]
    return {
        "rounds": len(history) - 1,
        "final": accuracy[-1],
        "best": max(accuracy[1:]),
        "epsilon": history[-1].get("dp_epsilon", math.inf),
        "stopped": history[-1]["round"] + 1 if stopped else 0,
    }


def setting_epsilon(runs, setting: str) -> float:
    """The epsilon a setting spends in a complete run (the same for every seed, data set and
    mode at one z): read from the runs that completed, else computed for their rounds."""
    complete = [r for r in runs if r["privacy"] == setting and not r["stopped"]]
    if complete:
        return max(r["epsilon"] for r in complete)
    z = float(setting.split("=")[1])
    rounds = max(r["rounds"] for r in runs if not r["stopped"])
    return central_epsilon(z, rounds, 10, 10, SETTING["dp-delta"])


def epsilon_text(epsilon: float) -> str:
    if math.isinf(epsilon):
        return "∞ (no privacy)"
    return f"{epsilon:.3g}" if epsilon < 1000 else f"{epsilon:,.0f}"


def ordered_settings(runs) -> list[str]:
    present = {r["privacy"] for r in runs}
    noise = sorted({float(p.split("=")[1]) for p in present if "=" in p}, reverse=True)
    settings = ["none"] + [label(m, z) for m in MODES for z in noise]
    return [s for s in settings if s in present]


def table(runs: list[dict], folder: Path) -> str:
    datasets = [d for d in DATASETS if any(r["dataset"] == d for r in runs)]
    seeds = sorted({r["seed"] for r in runs})
    rounds = sorted({r["rounds"] for r in runs if not r["stopped"]})
    caption = (
        f"10 clients (Dirichlet 0.5; breast-cancer 1.0), mlp, {'/'.join(map(str, rounds))} rounds, every client every"
        f" round; seeds {', '.join(map(str, seeds))}. Final centralized test accuracy in % (mean"
        " ± sample std over seeds). epsilon: the privacy spent after the last round, client-level"
        " (replace-one), delta = 1e-5; the same for both data sets and both modes at one z."
        " Central: server-side fixed clipping; local: Flower's LocalDpMod."
        f' "k/{len(seeds)} diverged": in k'
        " runs a round came in which no client could send a finite update, and the run stopped"
        " there; it counts with the last global model it had."
        f" {measured_where(folder)}"
    )
    lines = [
        caption,
        "",
        "| privacy | z | epsilon | " + " | ".join(datasets) + " |",
        "|---|---|---|" + "---|" * len(datasets),
    ]
    for setting in ordered_settings(runs):
        mode, _, z = setting.partition(" z=")
        epsilon = setting_epsilon(runs, setting) if z else math.inf
        cells = [accuracy_cell(runs, "diverged", dataset=d, privacy=setting) for d in datasets]
        name = "non-private" if setting == "none" else mode
        lines.append(
            f"| {name} | {z or '–'} | {epsilon_text(epsilon)} | " + " | ".join(cells) + " |"
        )
    return "\n".join(lines) + "\n"


def measured_where(folder: Path, file: str = PROVENANCE) -> str:
    """Where the rows in ``folder`` were measured: ``file``'s sentence (``provenance_line``:
    the measurement before the port) where there is one, then ``Measured: `` and the sentence
    of each invocation of the study (``provenance_lines``); or that it is not known."""
    first = [provenance_line(folder, file)] if (Path(folder) / file).is_file() else []
    lines = first + [f"Measured: {line}" for line in provenance_lines(folder)]
    return " ".join(lines) or unrecorded_provenance_line(folder)


def table_and_plot(runs: list[dict], folder: Path) -> str:
    """``table.md`` (``table``), with the plot of the same runs drawn beside it."""
    plot(runs, folder / PLOT.name)
    return table(runs, folder)


def adaptive_table_of(folder: Path) -> str:
    """``adaptive_clipping.md`` from the simulation's file in ``folder``, or a line saying that
    it has not been measured there."""
    data = Path(folder) / ADAPTIVE_DATA.name
    if not data.is_file():
        command = f"python {Path(__file__).name} {ADAPTIVE}"
        return f"The simulation has not been measured here (`{command}`).\n"
    return adaptive_table(data)


def report(data: Path) -> str:
    """A table of the docs from its data alone: ``table.md`` and ``adaptive_runs.md`` from the
    rows in ``data``'s folder (``RUNS_VALUES``: the adaptive-clipping runs'), the simulation's
    table from ``adaptive_clipping.csv``."""
    if data.name == ADAPTIVE_DATA.name:
        return adaptive_table(data)
    grid_rows, adaptive_rows = split_rows(measured_rows(data.parent))
    if data.name == RUNS_VALUES:
        return adaptive_runs_table(adaptive_rows, data.parent)
    return table(grid_rows, data.parent)


# --- adaptive clipping: Flower's against flowerbed's, simulated -------------------------------

SIMULATION = {
    "clients": 10,
    "norm": 3.0,  # every update's norm, every round
    "z": 0.5,
    "count_stddev": 0.5,  # Flower's n/20
    "rounds": 25,
    "starts": (1.0, 10.0),
    "entries": 20_000,  # noise draws per aggregate
    "seed": 0,
}
IMPLEMENTATIONS = ("Flower 1.42", "flowerbed")
ADAPTIVE_FIELDS = ("implementation", "start", "round", "clipping_norm", "next", "noise_ratio")


def simulate(implementation: str, start: float) -> list[dict]:
    """Rounds of server-side adaptive clipping at the strategy level (``SIMULATION``): the C
    each round clipped with, the next C, and the measured noise std over z_update C_used / n."""
    n, dim, norm = SIMULATION["clients"], SIMULATION["entries"], SIMULATION["norm"]

    class Nodes:
        def get_node_ids(self):
            return list(range(100, 100 + n))

    wrapper = (
        AdaptiveClippingServerSide
        if implementation == "flowerbed"
        else DifferentialPrivacyServerSideAdaptiveClipping
    )
    strategy = wrapper(
        FedAvg(fraction_train=1.0, fraction_evaluate=0.0, min_available_nodes=n),
        SIMULATION["z"],
        n,
        initial_clipping_norm=start,
        clipped_count_stddev=SIMULATION["count_stddev"],
    )
    np.random.seed(SIMULATION["seed"])
    use_server_identity()
    sent = np.zeros(dim, np.float32)
    update = np.zeros(dim, np.float32)
    update[0] = norm
    rows = []
    for server_round in range(1, SIMULATION["rounds"] + 1):
        used = strategy.clipping_norm
        arrays = ArrayRecord({"w": Array(sent)})
        messages = strategy.configure_train(server_round, arrays, ConfigRecord(), Nodes())
        replies = [
            Message(
                RecordDict(
                    {
                        "arrays": ArrayRecord({"w": Array(sent + update)}),
                        "metrics": MetricRecord({"num-examples": 1}),
                    }
                ),
                reply_to=message,
            )
            for message in messages
        ]
        aggregated, _ = strategy.aggregate_train(server_round, replies)
        noise = aggregated["w"].numpy().astype(np.float64)
        noise[0] -= min(norm, used)
        accounted = strategy.noise_multiplier * used / n
        rows.append(
            {
                "implementation": implementation,
                "start": start,
                "round": server_round,
                "clipping_norm": used,
                "next": strategy.clipping_norm,
                "noise_ratio": float(noise.std()) / accounted,
            }
        )
    return rows


def measure_adaptive(out: Path) -> None:
    """The simulation (``simulate``) of both implementations from both starts, into
    ``adaptive_clipping.csv`` in ``out`` with its provenance."""
    FLOWER_LOGGER.setLevel(logging.WARNING)  # Flower logs every round
    rows = [
        row
        for start in SIMULATION["starts"]
        for implementation in ("flower", "flowerbed")
        for row in simulate(implementation, start)
    ]
    for row in rows:
        row["implementation"] = IMPLEMENTATIONS[row["implementation"] == "flowerbed"]
    out.mkdir(parents=True, exist_ok=True)
    write_csv(out / ADAPTIVE_DATA.name, rows, ADAPTIVE_FIELDS)
    record_provenance(out, sys.argv, file=ADAPTIVE_PROVENANCE)


def applied_epsilon(ratios: list[float]) -> float:
    """Epsilon (delta 1e-5, replace-one, every client every round) of rounds whose update noise
    was ``ratio`` x z_update C_used / n: each round one Gaussian mechanism with multiplier mu,
    mu^-2 = (ratio z_update / 2)^-2 + sigma_count^-2 (sum of clipped updates: sensitivity
    2 C_used; count: sensitivity 1), composed with dp-accounting."""
    z, sigma = SIMULATION["z"], SIMULATION["count_stddev"]
    z_update = (z**-2 - (2 * sigma) ** -2) ** -0.5
    accountant = RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
    for ratio in ratios:
        mu = ((ratio * z_update / 2) ** -2 + sigma**-2) ** -0.5
        accountant.compose(dp_accounting.GaussianDpEvent(mu))
    return float(accountant.get_epsilon(SETTING["dp-delta"]))


def adaptive_table(data: Path) -> str:
    """C by round, Flower's wrapper against flowerbed's, and the noise each added against the
    noise the accounting assumes (``adaptive_clipping.csv``)."""
    rows = read_runs(data, ("start", "clipping_norm", "next", "noise_ratio"), ("round",))
    starts = sorted({r["start"] for r in rows})
    series = {
        (i, s): sorted(
            (r for r in rows if r["implementation"] == i and r["start"] == s),
            key=lambda r: r["round"],
        )
        for s in starts
        for i in IMPLEMENTATIONS
    }
    last = max(r["round"] for r in rows)
    sim = SIMULATION
    caption = (
        f"Adaptive clipping simulated at the strategy level: {sim['clients']} clients whose updates"
        f" all have norm {sim['norm']:g} every round (so every quantile of the norms is"
        f" {sim['norm']:g}), target quantile 0.5, eta 0.2, z = {sim['z']:g} split into the"
        f" update's z_update and the count's sigma_count = {sim['count_stddev']:g}, NumPy seed"
        f" {sim['seed']}. Flower 1.42: `DifferentialPrivacyServerSideAdaptiveClipping`;"
        " flowerbed: `AdaptiveClippingServerSide`. The C each round's updates were clipped with;"
        " *noise applied / accounted*: the std of the noise added to the aggregate"
        f" ({sim['entries']:,} draws a round, about ±0.5 %) over z_update C_used / n, lowest and"
        " highest over the rounds; *epsilon*: after the last round (delta 1e-5, client-level"
        " replace-one), as reported (z accounted) and of the noise applied (from the measured"
        f" stds, within about ±1 %). {provenance_line(data.parent, ADAPTIVE_PROVENANCE)}"
    )
    columns = [f"{i}, C from {s:g}" for s in starts for i in IMPLEMENTATIONS]
    lines = [
        caption,
        "",
        "| round | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    shown = [r for r in (1, 5, 10, 15, 20, 25) if r <= last]
    for server_round in shown:
        cells = [
            f"{series[i, s][server_round - 1]['clipping_norm']:.3g}"
            for s in starts
            for i in IMPLEMENTATIONS
        ]
        lines.append(f"| {server_round} | " + " | ".join(cells) + " |")
    cells = [f"{series[i, s][-1]['next']:.3g}" for s in starts for i in IMPLEMENTATIONS]
    lines.append(f"| after {last} | " + " | ".join(cells) + " |")
    cells = []
    for s in starts:
        for i in IMPLEMENTATIONS:
            ratios = [r["noise_ratio"] for r in series[i, s]]
            cells.append(f"{min(ratios):.3f} to {max(ratios):.3f}")
    lines.append("| noise applied / accounted | " + " | ".join(cells) + " |")
    reported = central_epsilon(sim["z"], last, sim["clients"], sim["clients"], SETTING["dp-delta"])
    lines.append("| epsilon reported | " + " | ".join(f"{reported:.3g}" for _ in columns) + " |")
    cells = [
        f"{applied_epsilon([r['noise_ratio'] for r in series[i, s]]):.3g}"
        for s in starts
        for i in IMPLEMENTATIONS
    ]
    lines.append("| epsilon of the noise applied | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# --- adaptive clipping in real runs -----------------------------------------------------------

RUN_Z = 0.5
RUN_SETTINGS = {
    "fixed, C = 1": {"dp": "central-server-fixed", "dp-clipping-norm": 1.0},
    "server-adaptive, C from 0.1": {"dp": "central-server-adaptive", "dp-clipping-norm": 0.1},
    "client-adaptive, C from 0.1": {"dp": "central-client-adaptive", "dp-clipping-norm": 0.1},
}
ADAPTIVE_ROUNDS = 30
SHOWN_ROUNDS = (1, 5, 10, 20, 30)
RUNS_FIELDS = (
    "privacy",
    "seed",
    "rounds",
    "final",
    "epsilon",
    *(f"c{r}" for r in SHOWN_ROUNDS),
    "unclipped_last_half",
    "stopped",
)


# what the adaptive-clipping runs set beside ``SETTING`` and their ``RUN_SETTINGS``
ADAPTIVE_RUN = {
    **{k: v for k, v in DATASETS["digits"].items() if k != "dp-clipping-norm"},
    "dp-noise-multiplier": RUN_Z,
}


def adaptive_run_record(labels: dict, run_dir: Path, stopped: bool) -> dict[str, Value]:
    """One run: final accuracy, epsilon, the C its rounds clipped with, and the mean noised
    unclipped fraction of its second half (adaptive modes; NaN for fixed clipping)."""
    history = load_history(run_dir)
    by_round = {row["round"]: row for row in history}
    half = [
        row["dp_unclipped_fraction"]
        for row in history
        if row["round"] > len(history) // 2 and "dp_unclipped_fraction" in row
    ]
    fixed = float(RUN_SETTINGS[labels["privacy"]]["dp-clipping-norm"])
    return {
        "rounds": len(history) - 1,
        "final": history[-1]["central_accuracy"],
        "epsilon": history[-1]["dp_epsilon"],
        **{
            f"c{r}": by_round[r].get("dp_clipping_norm", fixed) if r in by_round else math.nan
            for r in SHOWN_ROUNDS
        },
        "unclipped_last_half": statistics.mean(half) if half else math.nan,
        "stopped": history[-1]["round"] + 1 if stopped else 0,
    }


def adaptive_runs_table(runs: list[dict], folder: Path) -> str:
    """``adaptive_runs.md``, from the adaptive-clipping runs and where they were measured."""
    seeds = sorted({r["seed"] for r in runs})
    rounds = max(r["rounds"] for r in runs)
    shown = [r for r in SHOWN_ROUNDS if r <= rounds]
    caption = (
        f"Digits, mlp, 10 clients (Dirichlet 0.5), every client every round, {rounds} rounds,"
        f" z = {RUN_Z:g}, seeds {', '.join(map(str, seeds))}. Central DP with fixed clipping at"
        " the hand-picked C = 1 (about the median update norm of the first non-private rounds),"
        " and flowerbed's adaptive clipping, server- and client-side, from C = 0.1 (target"
        " quantile 0.5, eta 0.2, sigma_count 0.5 = n/20, z_update 0.577). *C in round t*: the"
        " norm round t clipped with (history's `dp_clipping_norm`), mean over seeds;"
        " *unclipped*: the mean noised fraction of unclipped updates (`dp_unclipped_fraction`)"
        " over the second half of the rounds, mean over seeds (0.5 when C sits at the median"
        " norm); accuracy: final centralized test accuracy in % (mean ± sample std over seeds);"
        " epsilon: after the last round, the same for the three (z is what is accounted)."
        f" {measured_where(folder, RUNS_PROVENANCE)}"
    )
    columns = [f"C in round {r}" for r in shown] + ["unclipped", "accuracy", "epsilon"]
    lines = [
        caption,
        "",
        "| clipping | " + " | ".join(columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for setting in RUN_SETTINGS:
        mine = [r for r in runs if r["privacy"] == setting]
        if not mine:
            continue
        cells = [f"{statistics.mean(r[f'c{t}'] for r in mine):.3g}" for t in shown]
        half = [r["unclipped_last_half"] for r in mine if not math.isnan(r["unclipped_last_half"])]
        cells.append(f"{statistics.mean(half):.2f}" if half else "–")
        cells.append(percent_cell([r["final"] for r in mine]))
        cells.append(f"{max(r['epsilon'] for r in mine):.3g}")
        lines.append(f"| {setting} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: Path) -> None:
    """Final accuracy against epsilon per data set, a line per mode (mean ± sample std over
    seeds), the non-private run's mean dashed."""
    datasets = [d for d in DATASETS if any(r["dataset"] == d for r in runs)]
    fig = Figure(figsize=(6 * len(datasets), 4.5))
    axes = fig.subplots(1, len(datasets), squeeze=False)
    for ax, dataset in zip(axes[0], datasets):
        for i, mode in enumerate(MODES):
            points = []
            for setting in ordered_settings(runs):
                if not setting.startswith(mode + " "):
                    continue
                values = column(runs, dataset=dataset, privacy=setting)
                if values:
                    std = statistics.stdev(values) if len(values) > 1 else 0.0
                    points.append((setting_epsilon(runs, setting), statistics.mean(values), std))
            points.sort()
            if points:
                xs, ys, es = zip(*points)
                ax.errorbar(
                    xs,
                    [100 * y for y in ys],
                    yerr=[100 * e for e in es],
                    marker="o",
                    capsize=3,
                    label=f"{mode} DP",
                    color=colormaps["tab10"](i),
                )
        baseline = column(runs, dataset=dataset, privacy="none")
        if baseline:
            ax.axhline(100 * statistics.mean(baseline), color="black", ls="--", label="non-private")
        ax.set_xscale("log")
        ax.set_xlabel("epsilon after the last round (delta = 1e-5, client level)")
        ax.set_ylabel("final centralized test accuracy (%)")
        ax.set_ylim(0, 100)
        ax.set_title(f"{dataset}, mlp, 10 clients: mean ± std over seeds")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


ADAPTIVE = "--adaptive"


def main(argv: list[str] | None = None) -> int:
    """The study's command line (``study_cli``); with ``--adaptive``, the simulation measured
    first into the folder the tables go to, and the tables from the rows on disk."""
    study = Privacy()
    words = sys.argv[1:] if argv is None else list(argv)
    if ADAPTIVE in words:
        words = [word for word in words if word != ADAPTIVE] + ["--report-only"]
        args = study_cli.parser(study, __doc__).parse_args(words)
        budget = study_cli.QUICK if args.quick else args.budget
        measure_adaptive(study_cli.out_folder(study, RESULTS, budget, args.out))
    return study_cli.main(study, RESULTS, __doc__, words, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
