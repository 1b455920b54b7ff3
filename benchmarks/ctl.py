"""CTL's two simulations ("Distributed Collaborative Learning with Representative Knowledge
Sharing", Casey et al., Mathematics 2025), with the NumPy reference simulator
(``flowerbed.methods.ctl.reference``) for the sweeps and the Flower protocol for one seed as a
cross-check.

Simulation 1 (Sec. 4.1): breast cancer, 300 shifted copies (``breast-cancer-shifted``), 10
nodes by one k-means iteration on two principal components (``kmeans-pca``), each node
predicting its own test data and that of 2 other nodes, 100 rounds, alpha 0.85, for the five
guest rules of the paper (best, all, random, worst, local) and two variants (random re-drawn
every round; local with the (1 - alpha)-scaled cross-entropy step, a fair comparison that the
authors' code does not make). A simulation in which a node lacks a class in its training or
test data is discarded, as in the authors' code; the discarded seeds are recorded. The orderings
the paper reports are tested by per-simulation paired differences (same seed, same data).

Simulation 2 (Sec. 4.2): Gaussian nodes (``ctl-gaussian``) at (spread 3, dispersion 0.5) and
(spread 0.5, dispersion 3), best vs local (and all), in the base setting (alpha 0.15, the
authors' value; a seed in which a node has one class only in its training data is discarded;
the paper's label model, without intercept) and in three variants, each changing one thing
against the base, to test the three explanations of why the paper's result did not appear in
the base setting:

* ``alpha 0.85``: alpha 0.85 instead of 0.15 (0.15 leaves 85 % of every step to the local
  cross-entropy);
* ``every seed``: no seed discarded, the first N seeds, a node without a class handled by the
  project's missing-class rule (``flowerbed.methods.ctl.rules``), so that the kept seeds are
  not a selection;
* ``label intercept``: the labels drawn from the authors' code's label model, whose parameter
  vector has a 31st component multiplying a constant 1 (an intercept, drawn, normalised and
  perturbed per node with the other 30; ``flowerbed.data.simulations.gaussian_nodes``); the
  paper's text has none. The nodes' logistic models have an intercept in every setting.

Also measured: whether exact energy coefficients (pairwise, on 300-sample subsets) instead of
the moment approximation change the guest choice or the accuracy (simulation 1, ``worst``,
whose choice depends on H; ``best`` picks the task owners, whose H is 0 either way). And how
sensitive a run is to rounding: ``best`` guests with every round's H moved by one or two units
in the last place (``coefficient_perturbation`` of the reference simulator), in Simulation 1
and both base settings of Simulation 2.

Resumable: every (sweep, seed, rule) writes one JSON under ``<out>/runs`` (git-ignored); a rerun
skips what exists (``--quick`` writes to its own folder). The committed data files in ``--out``
(default ``benchmarks/results/ctl``), one row per simulation:

* ``sim1_runs.csv``: seed, rule, metric (own / other / all tasks), the mean accuracy over nodes
  after every round (``r0`` .. ``r<T>``);
* ``sim2_runs.csv``: variant, spread, dispersion, seed, rule, final accuracy on own / other /
  all tasks;
* ``energy_runs.csv``: seed, largest |H difference|, share of node-rounds whose guest set
  changes, final non-local accuracy with moments and with exact coefficients;
* ``sensitivity_runs.csv``: setting, seed, final accuracy on all tasks as it is and with H
  perturbed, the largest change of one node's accuracy on one task, the first round differing;
* ``discarded.csv``: every seed a sweep discarded, and why;
* ``measured.json``: commit, command, machine, date.

``report`` (``--report-only``) makes ``table.md`` (Simulation 1), ``table_sim2.md``,
``table_energy.md`` and ``table_sensitivity.md`` from these files alone;
``docs/studies-ctl.md`` includes them. The run also writes ``ctl_sim1.png`` (mean curves with
95 % intervals, as the paper's Fig. 2) and ``ctl.md`` (its log: the tables, seconds per
simulation, the Flower cross-check), which no table depends on.

Usage::

    python benchmarks/ctl.py --quick                 # 4 simulations, 40 rounds (~3 min)
    python benchmarks/ctl.py --report-only           # the four tables from the data files
    python benchmarks/ctl.py                         # 20 simulations, 100 rounds (~25 min)
    python benchmarks/ctl.py --simulations 100       # the paper's count
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from result_tables import (
    interval_cell,
    interval_text,
    paired_cell,
    provenance_line,
    read_runs,
    record_provenance,
    table_head,
    write_table,
)
from scipy import stats

from flowerbed.catalog import parse_run_config
from flowerbed.core.results import write_csv
from flowerbed.data.simulations import SimulationOptions
from flowerbed.experiments.ctl import lacking_class
from flowerbed.experiments.stats import welch_test
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.methods.ctl.reference import generated_nodes, nodes_for, params_for, simulate

NUM_NODES = 10
TARGET = 0.85
RULES_1 = (
    ("Best", {"guests": "best"}),
    ("All", {"guests": "all"}),
    ("Random", {"guests": "random"}),
    ("Worst", {"guests": "worst"}),
    ("Local", {"guests": "local"}),
    ("Random (re-drawn)", {"guests": "random-redraw"}),
    ("Local (scaled CE)", {"guests": "local", "local_ce": "scaled"}),
)
RULES_2 = (("Best", {"guests": "best"}), ("All", {"guests": "all"}), ("Local", {"guests": "local"}))
SETTINGS_2 = ((3.0, 0.5), (0.5, 3.0))  # (spread, dispersion)
METRICS = ("own", "other", "all")
METRIC_NAMES = {"own": "own task", "other": "non-local tasks", "all": "all tasks"}
# Simulation 1's orderings in the paper, tested by paired per-simulation differences:
# (metric, first rule, second rule)
ORDERINGS_1 = (
    ("other", "Best", "All"),
    ("other", "All", "Random"),
    ("other", "Random", "Worst"),
    ("other", "Worst", "Local"),
    ("own", "Local", "Best"),
    ("own", "Local (scaled CE)", "Best"),
    ("all", "Best", "All"),
    ("all", "Best", "Random"),
)
RESULTS = Path(__file__).parent / "results" / "ctl"
SIM1_DATA, SIM2_DATA, ENERGY_DATA = "sim1_runs.csv", "sim2_runs.csv", "energy_runs.csv"
SENSITIVITY_DATA = "sensitivity_runs.csv"
# the sensitivity check's perturbation: H times (1 + 2^-52), one or two units in the last place
ONE_ULP = 2.0**-52
DISCARDED = "discarded.csv"
# (data file, the table ``report`` makes of it); docs/studies-ctl.md includes every table
PUBLISHED = [
    (RESULTS / SIM1_DATA, RESULTS / "table.md"),
    (RESULTS / SIM2_DATA, RESULTS / "table_sim2.md"),
    (RESULTS / ENERGY_DATA, RESULTS / "table_energy.md"),
    (RESULTS / SENSITIVITY_DATA, RESULTS / "table_sensitivity.md"),
]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-ctl.md"


@dataclass(frozen=True)
class Variant:
    """One Simulation 2 setting: what it changes against the base, one thing at a time."""

    name: str
    description: str
    params: dict = field(default_factory=dict)  # CTLParams changes for every rule
    required_splits: tuple[str, ...] = ("training",)  # a node lacking a class there: discarded
    options: dict = field(default_factory=dict)  # SimulationOptions changes (no run-config key)
    rules: tuple = RULES_2[::2]  # Best and Local


VARIANTS_2 = (
    Variant(
        "base",
        "alpha 0.15, seeds with a one-class node discarded, no label intercept",
        rules=RULES_2,
    ),
    Variant("alpha 0.85", "alpha 0.85 instead of 0.15", params={"alpha": 0.85}),
    Variant(
        "every seed", "no seed discarded (the project's missing-class rule)", required_splits=()
    ),
    Variant(
        "label intercept",
        "labels from the authors' label model, with an intercept",
        options={"label_intercept": True},
    ),
)


def simulation_1_config(seed: int, rounds: int, shifts: int):
    return parse_run_config(
        resolve_run_config(
            {
                "strategy": "ctl",
                "dataset": "breast-cancer-shifted",
                "sim-shifts": shifts,
                "partitioner": "kmeans-pca",
                "num-server-rounds": rounds,
                "ctl-alpha": 0.85,
                "seed": seed,
            }
        )
    )


def simulation_2_config(seed: int, rounds: int, spread: float, dispersion: float):
    return parse_run_config(
        resolve_run_config(
            {
                "strategy": "ctl",
                "dataset": "ctl-gaussian",
                "sim-spread": spread,
                "sim-dispersion": dispersion,
                "sim-nodes": NUM_NODES,
                "partitioner": "dataset-nodes",
                "num-server-rounds": rounds,
                "ctl-alpha": 0.15,
                "seed": seed,
            }
        )
    )


@dataclass(frozen=True)
class Sweep:
    """Simulations of one setting: their run files are ``<store>/<name>-seed<s>-<rule>.json``."""

    name: str
    make_config: Callable  # seed -> RunConfig
    rules: tuple
    required_splits: tuple[str, ...]  # a node lacking a class in one of them: discarded
    params: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)


def usable_nodes(config, required_splits: tuple[str, ...], options: dict | None = None):
    """The nodes of a simulation (drawn with the ``SimulationOptions`` changes ``options``), or
    the reason it is discarded: a k-means cluster is empty, or a node lacks a class in one of
    ``required_splits`` ("training": CTL's representatives need both classes, the paper's rule;
    "test": the authors' rule for simulation 1; none: the missing-class rule handles it)."""
    try:
        if options:
            base = SimulationOptions.from_config(config)
            nodes = generated_nodes(config, NUM_NODES, replace(base, **options))
        else:
            nodes = nodes_for(config, NUM_NODES)
    except ValueError as error:  # an empty cluster
        return None, str(error)
    reason = lacking_class(nodes, tuple(required_splits))
    if reason:
        return None, reason
    return nodes, ""


def curves(accuracy: np.ndarray) -> dict[str, list[float]]:
    """Mean over nodes per round: own task, other tasks, all tasks."""
    return {
        "own": accuracy[:, :, 0].mean(axis=1).tolist(),
        "other": accuracy[:, :, 1:].mean(axis=(1, 2)).tolist(),
        "all": accuracy.mean(axis=(1, 2)).tolist(),
    }


def run_sweep(
    store: Path, sweep: Sweep, first_seed: int, wanted: int
) -> tuple[dict, list[int], list[tuple[int, str]]]:
    """Seeds from ``first_seed`` on until ``wanted`` simulations are usable (at most 20 times
    as many tried): {rule label: [run record per usable seed]}, the usable seeds, the discarded
    seeds with reasons."""
    results: dict[str, list[dict]] = {label: [] for label, _ in sweep.rules}
    used, discarded = [], []
    for seed in range(first_seed, first_seed + 20 * wanted):
        if len(used) == wanted:
            break
        marker = store / f"{sweep.name}-seed{seed}-discarded.json"
        nodes = None
        for label, change in sweep.rules:
            if marker.is_file():
                break
            path = store / f"{sweep.name}-seed{seed}-{label.replace(' ', '_')}.json"
            if not path.is_file():
                config = sweep.make_config(seed)
                if nodes is None:
                    nodes, reason = usable_nodes(config, sweep.required_splits, sweep.options)
                    if nodes is None:
                        marker.write_text(json.dumps({"reason": reason}))
                        break
                started = time.perf_counter()
                params = replace(params_for(config), **sweep.params, **change)
                out = simulate(nodes, params)
                record = {
                    **curves(out["accuracy"]),
                    "seconds": time.perf_counter() - started,
                    "clipped": int(out["clipped"]),
                }
                path.write_text(json.dumps(record))
            results[label].append(json.loads(path.read_text()))
        if marker.is_file():
            discarded.append((seed, json.loads(marker.read_text())["reason"]))
        else:
            used.append(seed)
    return results, used, discarded


def mean_ci(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean over axis 0 and the half-width of its 95 % t interval."""
    n = len(values)
    mean = values.mean(axis=0)
    if n < 2:
        return mean, np.full_like(mean, np.nan)
    return mean, stats.t.ppf(0.975, n - 1) * values.std(axis=0, ddof=1) / math.sqrt(n)


def first_round_at(curve, target: float) -> int | None:
    """The first round at which ``curve`` reaches ``target``; None if it never does."""
    above = np.flatnonzero(np.asarray(curve) >= target)
    return int(above[0]) if len(above) else None


def plot_simulation_1(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("all", "(a) all tasks", None),
        ("other", "(b) non-local tasks", None),
        ("own", "(c) local tasks", None),
        ("other", "(d) non-local tasks, first 25 rounds", 26),
    )
    fig, axes = plt.subplots(1, 4, figsize=(20, 4.5))
    for ax, (key, title, limit) in zip(axes, panels):
        for label, runs in results.items():
            if not runs:
                continue
            mean, half = mean_ci(np.array([r[key] for r in runs]))
            rounds = np.arange(len(mean))[:limit]
            ax.plot(rounds, mean[:limit], label=label)
            ax.fill_between(rounds, (mean - half)[:limit], (mean + half)[:limit], alpha=0.2)
        if key == "other":
            ax.axhline(TARGET, color="grey", linestyle=":", linewidth=1)
        ax.set_title(title)
        ax.set_xlabel("round")
        ax.set_ylabel("mean test accuracy")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


def exact_energy_check(store: Path, seeds, rounds: int, shifts: int) -> list[dict]:
    """Moments vs exact coefficients on ``seeds``, ``worst`` guests, one record per seed (kept
    under ``store``: a rerun reads it)."""
    records = []
    for seed in seeds:
        path = store / f"energy-r{rounds}-s{shifts}-seed{seed}.json"
        if not path.is_file():
            config = simulation_1_config(seed, rounds, shifts)
            nodes, _ = usable_nodes(config, ("training", "test"))
            params = replace(params_for(config), guests="worst")
            approx = simulate(nodes, params)
            exact = simulate(nodes, replace(params, energy="exact"))
            chosen_a, chosen_e = approx["lambdas"][1:] > 0, exact["lambdas"][1:] > 0
            record = {
                "seed": seed,
                "largest_h_difference": float(
                    np.abs(approx["coefficients"] - exact["coefficients"]).max()
                ),
                "guest_set_changes": float(np.mean(np.any(chosen_a != chosen_e, axis=2))),
                "final_other_moments": curves(approx["accuracy"])["other"][-1],
                "final_other_exact": curves(exact["accuracy"])["other"][-1],
            }
            path.write_text(json.dumps(record))
        records.append(json.loads(path.read_text()))
    return records


def sensitivity_check(store: Path, settings: list[tuple[str, Callable, list[int]]]) -> list[dict]:
    """How much a run's outcome depends on rounding: ``best`` guests, each simulation run as it
    is and with every round's H multiplied by (1 + 2^-52) (``coefficient_perturbation``: each
    entry moves by one or two units in the last place, the size of a change in the order of a
    floating-point sum). ``settings``: (name, seed -> RunConfig, the kept seeds). One record
    per setting and seed (kept under ``store``: a rerun reads it): final accuracy on all tasks
    both ways, the largest change of one node's accuracy on one task after the last round, and
    the first round at which any node's accuracy on any task differs."""
    records = []
    for name, make_config, seeds in settings:
        for seed in seeds:
            path = store / f"sensitivity-{name.replace(' ', '_')}-seed{seed}.json"
            if not path.is_file():
                config = make_config(seed)
                nodes, _ = usable_nodes(config, ())
                params = replace(params_for(config), guests="best")
                as_is = simulate(nodes, params)["accuracy"]
                perturbed = simulate(nodes, replace(params, coefficient_perturbation=ONE_ULP))[
                    "accuracy"
                ]
                differs = np.flatnonzero(np.any(as_is != perturbed, axis=(1, 2)))
                record = {
                    "setting": name,
                    "seed": seed,
                    "final_all": curves(as_is)["all"][-1],
                    "final_all_perturbed": curves(perturbed)["all"][-1],
                    "largest_node_task_change": float(np.abs(as_is[-1] - perturbed[-1]).max()),
                    "first_round_differing": int(differs[0]) if len(differs) else "",
                }
                path.write_text(json.dumps(record))
            records.append(json.loads(path.read_text()))
    return records


def cross_check(seed: int, rounds: int, shifts: int) -> str:
    """The Flower protocol in process against the reference simulator, one seed, ``best``."""
    config = simulation_1_config(seed, rounds, shifts)
    nodes, _ = usable_nodes(config, ("training", "test"))
    started = time.perf_counter()
    run_dir = run_in_process(config.to_dict() | {"output-dir": "/tmp/flowerbed-ctl-bench"}, 10)
    flower_seconds = time.perf_counter() - started
    log = json.loads((run_dir / "ctl_metrics.json").read_text())
    flower = np.array([[n["task-accuracies"] for n in r["nodes"]] for r in log["rounds"]])
    started = time.perf_counter()
    reference = simulate(nodes, params_for(config))["accuracy"]
    reference_seconds = time.perf_counter() - started
    return (
        f"Flower protocol (in process) vs reference simulator, seed {seed}, best, {rounds}"
        f" rounds: largest accuracy difference {np.abs(flower - reference).max():.2e};"
        f" {flower_seconds:.1f} s vs {reference_seconds:.1f} s"
        f" ({flower_seconds / reference_seconds:.1f} x)."
    )


# --- the committed data files ----------------------------------------------------------------
def sim1_rows(results: dict, seeds: list[int]) -> list[dict]:
    """One row per (seed, rule, metric): the mean accuracy over nodes after every round."""
    rows = []
    for label, runs in results.items():
        for seed, run in zip(seeds, runs, strict=True):
            for metric in METRICS:
                values = {f"r{t}": f"{v:.5f}" for t, v in enumerate(run[metric])}
                rows.append({"seed": seed, "rule": label, "metric": metric, **values})
    return rows


def read_sim1(path: Path) -> tuple[list[dict], int]:
    """The rows of ``sim1_runs.csv`` with ``curve`` (floats, rounds 0..T) and T."""
    rows = read_runs(path, (), ())
    rounds = sum(1 for key in rows[0] if key.startswith("r") and key[1:].isdigit()) - 1
    for row in rows:
        row["seed"] = int(row["seed"])
        row["curve"] = [float(row[f"r{t}"]) for t in range(rounds + 1)]
        first = first_round_at(row["curve"], TARGET)
        row["first"] = rounds + 1 if first is None else first  # never: counted as T + 1
        row["reached"] = first is not None
    return rows, rounds


def read_discarded(folder: Path, simulation: int) -> list[dict]:
    rows = read_runs(folder / DISCARDED, (), ("simulation",))
    return [r for r in rows if r["simulation"] == simulation]


# --- the tables ------------------------------------------------------------------------------
def report_rounds(rounds: int) -> list[int]:
    """The rounds the paired table reports: 5, 20 and the last."""
    return [t for t in (5, 20) if t < rounds] + [rounds]


def paired_rounds_cell(differences: list[float], never: int) -> str:
    """Paired difference of first rounds at TARGET, in rounds (as ``paired_cell``'s format);
    ``never``: simulations in which one of the two never reached it (counted as T + 1)."""
    text = interval_cell(differences)
    return text + (f" ({never} never: T + 1)" if never else "")


def report_simulation_1(path: Path) -> str:
    """Simulation 1's tables from ``sim1_runs.csv`` (and ``discarded.csv`` beside it): means
    over simulations with 95 % t intervals, then the paper's orderings as paired differences."""
    folder = path.parent
    rows, rounds = read_sim1(path)
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    seeds = sorted({r["seed"] for r in rows})
    discarded = read_discarded(folder, 1)

    def of(rule: str, metric: str) -> list[dict]:
        return [r for r in rows if r["rule"] == rule and r["metric"] == metric]

    lines = table_head(
        f"Simulation 1 (breast cancer, {NUM_NODES} nodes), {len(seeds)} simulations (seeds"
        f" {seeds[0]} to {seeds[-1]}; {len(discarded)} seeds discarded: a node lacked a class in"
        f" its training or test data), after round {rounds}: mean over nodes and simulations ±"
        " the half-width of the 95 % t interval over simulations; the first round at which the"
        f" mean non-local curve reaches {TARGET}, and in how many simulations the non-local"
        f" curve reaches it (`{path.name}`).",
        "guests",
        [
            f"first round non-local ≥ {TARGET}",
            "simulations reaching it",
            "final non-local",
            "final local",
            "final all",
        ],
    )
    for rule in rules:
        other = of(rule, "other")
        mean_curve = np.mean([r["curve"] for r in other], axis=0)
        first = first_round_at(mean_curve, TARGET)
        cells = []
        for metric in ("other", "own", "all"):
            mean, half = mean_ci(np.array([r["curve"][-1] for r in of(rule, metric)]))
            cells.append(f"{mean:.4f} ± {half:.4f}")
        reached = sum(r["reached"] for r in other)
        lines.append(
            f"| {rule} | {'never' if first is None else first} | {reached}/{len(other)} |"
            f" {' | '.join(cells)} |"
        )
    shown = report_rounds(rounds)
    runs = [{**r, **{f"at{t}": r["curve"][t] for t in shown}} for r in rows]
    lines += [""] + table_head(
        "Simulation 1, the paper's orderings as paired per-simulation differences (same seed,"
        " same data): mean [95 % t interval] over simulations, in bold where the interval"
        " excludes 0; first round at which the simulation's non-local curve reaches"
        f" {TARGET}, in rounds (a simulation that never does counts as round {rounds + 1});"
        f" accuracy in percentage points (`{path.name}`).",
        "difference",
        ["tasks", f"first round ≥ {TARGET}", *(f"round {t}" for t in shown)],
    )
    for metric, mine, base in ORDERINGS_1:
        first = "–"
        if metric == "other":
            by_seed = {(r["rule"], r["seed"]): r for r in of(mine, metric) + of(base, metric)}
            pairs = [(by_seed[mine, s], by_seed[base, s]) for s in seeds]
            never = sum(1 for a, b in pairs if not (a["reached"] and b["reached"]))
            first = paired_rounds_cell([a["first"] - b["first"] for a, b in pairs], never)
        cells = [
            paired_cell(
                runs,
                {"rule": mine, "metric": metric},
                {"rule": base, "metric": metric},
                key=f"at{t}",
            )
            for t in shown
        ]
        lines.append(
            f"| {mine} − {base} | {METRIC_NAMES[metric]} | {first} | {' | '.join(cells)} |"
        )
    lines += ["", provenance_line(folder)]
    return "\n".join(lines) + "\n"


def setting_name(spread: float, dispersion: float) -> str:
    return f"spread {spread:g}, dispersion {dispersion:g}"


def gap_change_cell(gaps: dict, variant: str, setting: str) -> str:
    """A variant's Best − Local gap minus the base's (same setting), in percentage points:
    paired by seed where both kept the same seeds, else Welch's unpaired interval."""
    mine = {seed: g for (v, s, seed), g in gaps.items() if (v, s) == (variant, setting)}
    base = {seed: g for (v, s, seed), g in gaps.items() if (v, s) == ("base", setting)}
    if set(mine) == set(base):
        runs = [{"seed": seed, "side": "variant", "gap": g} for seed, g in mine.items()]
        runs += [{"seed": seed, "side": "base", "gap": g} for seed, g in base.items()]
        return paired_cell(runs, {"side": "variant"}, {"side": "base"}, key="gap")
    if min(len(mine), len(base)) < 2:
        return "–"
    percent = [[100 * g for g in side.values()] for side in (mine, base)]
    return interval_text(welch_test(*percent)) + " (unpaired)"


def report_simulation_2(path: Path) -> str:
    """Simulation 2's table from ``sim2_runs.csv`` (and ``discarded.csv``): per variant and
    setting, final accuracy on all tasks (mean ± 95 % t half-width), best − local paired by
    seed, and the change of that gap against the base setting, paired by seed."""
    folder = path.parent
    rows = read_runs(path, (), ())
    for row in rows:
        row["seed"] = int(row["seed"])
        row["setting"] = setting_name(float(row["spread"]), float(row["dispersion"]))
        for metric in METRICS:
            row[metric] = float(row[metric])
    discarded = read_discarded(folder, 2)
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    settings = list(dict.fromkeys(r["setting"] for r in rows))
    rules = list(dict.fromkeys(r["rule"] for r in rows))
    outcome = {
        (r["variant"], r["setting"], r["seed"], r["rule"]): r["all"]
        for r in rows
        if r["rule"] in ("Best", "Local")
    }
    gaps = {
        key[:3]: value - outcome[(*key[:3], "Local")]
        for key, value in outcome.items()
        if key[3] == "Best"
    }
    lines = table_head(
        "Simulation 2 (Gaussian nodes), final accuracy on all tasks: mean ± the half-width of"
        " the 95 % t interval over simulations; Best − Local paired by simulation (same seed,"
        " same data), in percentage points, mean [95 % t interval], in bold where it excludes 0;"
        " its change against the base setting (paired by seed where the variant kept the"
        " base's seeds, else Welch's unpaired t interval: other seeds kept, or other data);"
        f" simulations kept (discarded) (`{path.name}`). Variants, each one"
        " change against the base: "
        + "; ".join(f"{v.name}: {v.description}" for v in VARIANTS_2)
        + ".",
        "variant",
        ["setting", *rules, "Best − Local (pp)", "change vs base (pp)", "simulations"],
    )
    for variant in variants:
        for setting in settings:
            mine = {"variant": variant, "setting": setting}
            cells = []
            for rule in rules:
                values = np.array(
                    [
                        r["all"]
                        for r in rows
                        if r["rule"] == rule and r["variant"] == variant and r["setting"] == setting
                    ]
                )
                if len(values) == 0:
                    cells.append("–")
                    continue
                mean, half = mean_ci(values)
                cells.append(f"{mean:.4f} ± {half:.4f}")
            gap = paired_cell(rows, {**mine, "rule": "Best"}, {**mine, "rule": "Local"}, "all")
            change = "–" if variant == "base" else gap_change_cell(gaps, variant, setting)
            kept = len(
                {r["seed"] for r in rows if r["variant"] == variant and r["setting"] == setting}
            )
            lost = sum(
                1
                for r in discarded
                if r["variant"] == variant
                and setting_name(float(r["spread"]), float(r["dispersion"])) == setting
            )
            lines.append(
                f"| {variant} | {setting} | {' | '.join(cells)} | {gap} | {change} |"
                f" {kept} ({lost}) |"
            )
    lines += ["", provenance_line(folder)]
    return "\n".join(lines) + "\n"


def report_energy(path: Path) -> str:
    """The exact-energy check's table from ``energy_runs.csv``: per simulation, then the
    ranges and the paired difference of final non-local accuracy (exact − moments)."""
    rows = read_runs(path, (), ())
    lines = table_head(
        "Moment approximation against exact energy coefficients (pairwise on 300-sample"
        " subsets), Simulation 1, `worst` guests (the rule whose choice depends on H), per"
        " simulation: the largest absolute difference in H over rounds and node pairs, the share of"
        " node-rounds whose guest set changes, the final non-local accuracy with each and"
        " exact − moments in percentage points; last row: the ranges, and exact − moments"
        f" paired by simulation, mean [95 % t interval] (`{path.name}`).",
        "seed",
        [
            "largest absolute H difference",
            "node-rounds whose guest set changes",
            "final non-local (moments)",
            "final non-local (exact)",
            "exact − moments (pp)",
        ],
    )
    runs = []
    for row in rows:
        seed = int(row["seed"])
        moments, exact = float(row["final_other_moments"]), float(row["final_other_exact"])
        runs += [
            {"seed": seed, "energy": "moments", "final": moments},
            {"seed": seed, "energy": "exact", "final": exact},
        ]
        lines.append(
            f"| {seed} | {float(row['largest_h_difference']):.3f} |"
            f" {100 * float(row['guest_set_changes']):.1f} % | {moments:.4f} | {exact:.4f} |"
            f" {100 * (exact - moments):+.2f} |"
        )
    h = [float(r["largest_h_difference"]) for r in rows]
    changes = [100 * float(r["guest_set_changes"]) for r in rows]
    lines.append(
        f"| {len(rows)} simulations | {min(h):.3f} to {max(h):.3f} | {min(changes):.1f} to"
        f" {max(changes):.1f} % | | |"
        f" {paired_cell(runs, {'energy': 'exact'}, {'energy': 'moments'})} |"
    )
    lines += ["", provenance_line(path.parent)]
    return "\n".join(lines) + "\n"


def report_sensitivity(path: Path) -> str:
    """The sensitivity check's table from ``sensitivity_runs.csv``: per setting, how many
    simulations end elsewhere when H moves by one or two units in the last place, and by how
    much."""
    rows = read_runs(path, (), ())
    lines = table_head(
        "Sensitivity to rounding, `best` guests: each simulation run as it is and with every"
        " round's H multiplied by (1 + 2^-52), one or two units in the last place (the size of"
        " a change in the order of a floating-point sum); per setting, the mean final accuracy"
        " on all tasks over the simulations both ways, the simulations whose"
        " final accuracy on all tasks changes by 1 percentage point or more, the median and"
        " largest change of it, the largest change of one node's accuracy on one task after"
        " the last round, and the first round at which any accuracy differs (median, earliest;"
        f" `{path.name}`).",
        "setting",
        [
            "simulations",
            "mean final all-task accuracy, as is → perturbed",
            "final all-task accuracy changed ≥ 1 pp",
            "median change (pp)",
            "largest change (pp)",
            "largest node-task change (pp)",
            "first round differing",
        ],
    )
    for setting in dict.fromkeys(r["setting"] for r in rows):
        runs = [r for r in rows if r["setting"] == setting]
        changes = [100 * abs(float(r["final_all_perturbed"]) - float(r["final_all"])) for r in runs]
        node_task = max(100 * float(r["largest_node_task_change"]) for r in runs)
        firsts = [int(r["first_round_differing"]) for r in runs if r["first_round_differing"]]
        first = f"{np.median(firsts):g}, {min(firsts)}" if firsts else "none"
        as_is = np.mean([float(r["final_all"]) for r in runs])
        perturbed = np.mean([float(r["final_all_perturbed"]) for r in runs])
        lines.append(
            f"| {setting} | {len(runs)} | {as_is:.4f} → {perturbed:.4f} |"
            f" {sum(c >= 1 for c in changes)} |"
            f" {np.median(changes):.1f} | {max(changes):.1f} | {node_task:.1f} | {first} |"
        )
    lines += ["", provenance_line(path.parent)]
    return "\n".join(lines) + "\n"


REPORTS = {
    SIM1_DATA: report_simulation_1,
    SIM2_DATA: report_simulation_2,
    ENERGY_DATA: report_energy,
    SENSITIVITY_DATA: report_sensitivity,
}


def report(data: Path) -> str:
    """The table made of one committed data file (``PUBLISHED``), from that folder's files
    alone."""
    if data.name not in REPORTS:
        raise ValueError(f"no table is made of {data.name}; one of: {', '.join(REPORTS)}")
    return REPORTS[data.name](data)


def write_report(folder: Path) -> str:
    """Every table of ``folder``'s data files, written beside them; their text."""
    texts = []
    for data, table in PUBLISHED:
        texts.append(write_table(folder / table.name, lambda d=data: report(folder / d.name)))
    return "\n".join(texts)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--simulations", type=int, default=20, help="per sweep")
    parser.add_argument(
        "--exact-simulations",
        type=int,
        default=10,
        help="simulations of the exact-energy check (the first usable seeds)",
    )
    parser.add_argument("--rounds", type=int, default=100)
    parser.add_argument("--shifts", type=int, default=300)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument(
        "--quick", action="store_true", help="4 simulations (2 for the exact check), 40 rounds"
    )
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/ctl"))
    parser.add_argument(
        "--report-only", action="store_true", help="the tables from the committed data files"
    )
    args = parser.parse_args()
    for name in ("simulations", "exact_simulations", "rounds", "shifts"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    if args.report_only:
        print(write_report(args.out))
        return
    if args.quick:
        args.simulations, args.exact_simulations, args.rounds = 4, 2, 40
        args.out = args.out / "quick"
    args.exact_simulations = min(args.exact_simulations, args.simulations)
    logging.getLogger("flwr").setLevel(logging.WARNING)
    store = args.out / "runs"
    store.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []

    def emit(text: str = "") -> None:
        print(text, flush=True)
        lines.append(text)

    started = time.perf_counter()
    discarded_rows = []
    sweep_1 = Sweep(
        f"sim1-r{args.rounds}-s{args.shifts}",
        lambda seed: simulation_1_config(seed, args.rounds, args.shifts),
        RULES_1,
        ("training", "test"),
    )
    results, used, discarded = run_sweep(store, sweep_1, args.first_seed, args.simulations)
    discarded_rows += [
        {"simulation": 1, "variant": "", "spread": "", "dispersion": "", "seed": s, "reason": why}
        for s, why in discarded
    ]
    write_csv(
        args.out / SIM1_DATA,
        sim1_rows(results, used),
        ["seed", "rule", "metric", *(f"r{t}" for t in range(args.rounds + 1))],
    )
    plot_simulation_1(results, args.out / "ctl_sim1.png")
    emit(
        f"Simulation 1: {time.perf_counter() - started:.0f} s; median seconds per simulation: "
        + ", ".join(
            f"{label} {np.median([r['seconds'] for r in runs]):.1f}"
            for label, runs in results.items()
        )
    )

    sim2 = []
    sensitivity_settings = [
        (
            "Simulation 1",
            lambda seed: simulation_1_config(seed, args.rounds, args.shifts),
            used,
        )
    ]
    for variant in VARIANTS_2:
        for spread, dispersion in SETTINGS_2:
            suffix = "" if variant.name == "base" else "-" + variant.name.replace(" ", "_")
            sweep = Sweep(
                f"sim2-r{args.rounds}-sp{spread}-di{dispersion}{suffix}",
                lambda seed, s=spread, d=dispersion: simulation_2_config(seed, args.rounds, s, d),
                variant.rules,
                variant.required_splits,
                variant.params,
                variant.options,
            )
            results_2, used_2, discarded_2 = run_sweep(
                store, sweep, args.first_seed, args.simulations
            )
            labels = {"variant": variant.name, "spread": spread, "dispersion": dispersion}
            if variant.name == "base":
                sensitivity_settings.append(
                    (f"Simulation 2, {setting_name(spread, dispersion)}", sweep.make_config, used_2)
                )
            discarded_rows += [
                {"simulation": 2, **labels, "seed": s, "reason": why} for s, why in discarded_2
            ]
            for label, runs in results_2.items():
                sim2 += [
                    {
                        **labels,
                        "seed": seed,
                        "rule": label,
                        **{metric: f"{run[metric][-1]:.5f}" for metric in METRICS},
                    }
                    for seed, run in zip(used_2, runs, strict=True)
                ]
    write_csv(
        args.out / SIM2_DATA, sim2, ["variant", "spread", "dispersion", "seed", "rule", *METRICS]
    )
    write_csv(
        args.out / DISCARDED,
        discarded_rows,
        ["simulation", "variant", "spread", "dispersion", "seed", "reason"],
    )
    emit(f"Simulations 1 and 2: {time.perf_counter() - started:.0f} s")

    energy = exact_energy_check(store, used[: args.exact_simulations], args.rounds, args.shifts)
    write_csv(args.out / ENERGY_DATA, energy, list(energy[0]))
    emit(f"Exact-energy check done: {time.perf_counter() - started:.0f} s")

    sensitivity = sensitivity_check(store, sensitivity_settings)
    write_csv(args.out / SENSITIVITY_DATA, sensitivity, list(sensitivity[0]))
    emit(f"Sensitivity check done: {time.perf_counter() - started:.0f} s")

    emit("\n" + cross_check(used[0], args.rounds, args.shifts))
    emit(f"\nTotal {time.perf_counter() - started:.0f} s.")
    if not args.quick:
        record_provenance(args.out, sys.argv)
    emit("\n" + write_report(args.out))
    (args.out / "ctl.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
