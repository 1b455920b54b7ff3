"""CTL's two simulations ("Distributed Collaborative Learning with Representative Knowledge
Sharing", Casey et al., Mathematics 2025), with the NumPy reference simulator
(``flowerbed.methods.ctl.reference``) for the sweeps and the Flower protocol for one seed as a
cross-check.

Simulation 1 (Sec. 4.1): breast cancer, 300 shifted copies (``breast-cancer-shifted``), 10
nodes by one k-means iteration on two principal components (``kmeans-pca``), each node
predicting its own test data and that of 2 other nodes, alpha 0.85, for the five guest rules of
the paper (best, all, random, worst, local) and two variants (random re-drawn every round;
local with the (1 - alpha)-scaled cross-entropy step, a fair comparison that the authors' code
does not make). A simulation in which a node lacks a class in its training or test data is
discarded, as in the authors' code; the discarded seeds are recorded. The orderings the paper
reports are tested by per-simulation paired differences (same seed, same data).

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
whose choice depends on H; ``best`` picks the task owners, whose H is 0 either way), on the
first simulations of Simulation 1. And how sensitive a run is to rounding: ``best`` guests
with every round's H moved by one or two units in the last place (``coefficient_perturbation``
of the reference simulator), in Simulation 1 and both base settings of Simulation 2.

A study of the study driver (``flowerbed.experiments.study_cli``). A point is one sweep:
Simulation 1, or one variant of Simulation 2 at one setting (``sim1-r<T>-s300``,
``sim2-r<T>-sp<spread>-di<dispersion>[-<variant>]``). A run is the point's n-th simulation
(the driver's ``seed`` is n, from 0): the n-th seed from 1 up that the point's discard rule
keeps (Simulation 1's are ``flowerbed.experiments.ctl.KEPT_SEEDS``, found once with the same
rule; Simulation 2's are found by drawing the nodes, a tenth of a second a seed), every rule of
the point on the same nodes, the seeds between the (n-1)-th and the n-th kept seed checked to
be discarded and recorded with why (a run whose seed the rule would not keep, or whose skipped
seeds it would, fails). Beside the rules, the same run makes the checks of that simulation:
the exact-energy check for Simulation 1's first ``exact`` simulations, the sensitivity check
for Simulation 1 and the base settings of Simulation 2, and, in Simulation 1's first
simulation, the Flower protocol in process against the reference simulator (``best``).

Its row: ``simulation_seed``, ``discarded`` (the skipped seeds and why, as JSON text),
``<metric>/<rule>`` (Simulation 1: the mean accuracy over nodes after every round, rounds 0 to
T, as text to five decimals; Simulation 2: after the last round, to five decimals; metric
``own``, ``other`` or ``all`` tasks), ``seconds/<rule>``, and where made ``energy/...``,
``sensitivity/...`` and ``flower/...``. Budgets ``full`` (the default: 20 simulations per
point, the exact check on 10, 100 rounds), ``paper`` (the paper's 100 simulations, into
``results/ctl/paper``) and ``quick`` (4 simulations, the exact check on 2, 40 rounds: a check
that the measuring path works, a few minutes, into ``results/ctl/quick``).

    python benchmarks/ctl.py                  # what rows.jsonl lacks of the full budget
    python benchmarks/ctl.py --workers 2      # two simulations at a time
    python benchmarks/ctl.py --quick          # 4 simulations, 40 rounds
    python benchmarks/ctl.py --budget paper   # 100 simulations per point
    python benchmarks/ctl.py --report-only    # the four tables and the plot from rows.jsonl

Writes into ``benchmarks/results/ctl``: ``rows.jsonl`` (one row per simulation: the committed
record), ``measured.jsonl`` (one line per invocation that measured), and ``table.md``
(Simulation 1), ``table_sim2.md``, ``table_energy.md`` and ``table_sensitivity.md``, made from
the rows and the provenance beside them alone, which ``docs/studies-ctl.md`` includes
(``tests/test_published_tables.py`` checks them), with ``ctl_sim1.png`` (Simulation 1's mean
curves with 95 % intervals, as the paper's Fig. 2) drawn with ``table.md``. The committed rows
were measured on 2026-11-26 by the script before it became a study (``measured.json``, its
provenance, kept), into ``sim1_runs.csv``, ``sim2_runs.csv``, ``energy_runs.csv``,
``sensitivity_runs.csv`` and ``discarded.csv``, and converted once into ``rows.jsonl`` (the
tables' captions still name those files); that script's log, ``ctl.md`` (seconds per
simulation, the Flower cross-check), is kept beside them. To measure anew, remove
``rows.jsonl`` and ``measured.json``.
"""

from __future__ import annotations

import functools
import json
import math
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure
from result_tables import (
    interval_cell,
    interval_text,
    measured_where,
    paired_cell,
    table_head,
    write_table,
)
from scipy import stats

from flowerbed.data.simulations import SimulationOptions
from flowerbed.experiments import study_cli
from flowerbed.experiments.ctl import (
    KEPT_SEEDS,
    NUM_NODES,
    SHIFTS,
    TARGET,
    lacking_class,
    simulation_config,
)
from flowerbed.experiments.ctl_gaussian import gaussian_config
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.stats import welch_test
from flowerbed.experiments.study_runs import one_thread_quietly
from flowerbed.inprocess import run_in_process
from flowerbed.methods.ctl.reference import generated_nodes, nodes_for, params_for, simulate

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
FIRST_SEED = 1  # the seeds of every sweep are tried from here up
# a sweep gives up when this many times the simulations it wants were tried
MOST_TRIED = 20
# the sensitivity check's perturbation: H times (1 + 2^-52), one or two units in the last place
ONE_ULP = 2.0**-52
RESULTS = Path(__file__).parent / "results" / "ctl"
DATA = RESULTS / ROWS
TABLE = RESULTS / "table.md"
PLOT = RESULTS / "ctl_sim1.png"
# what each table other than table.md is made of: a part of the same rows (report's argument)
SIM2_ROWS, ENERGY_ROWS, SENSITIVITY_ROWS = f"{ROWS}:sim2", f"{ROWS}:energy", f"{ROWS}:sensitivity"
# the files the committed rows were converted from, which the tables' captions name
SIM1_DATA, SIM2_DATA, ENERGY_DATA = "sim1_runs.csv", "sim2_runs.csv", "energy_runs.csv"
SENSITIVITY_DATA = "sensitivity_runs.csv"
# (data, the table ``report`` makes of it); docs/studies-ctl.md includes every table
PUBLISHED = [
    (DATA, TABLE),
    (RESULTS / SIM2_ROWS, RESULTS / "table_sim2.md"),
    (RESULTS / ENERGY_ROWS, RESULTS / "table_energy.md"),
    (RESULTS / SENSITIVITY_ROWS, RESULTS / "table_sensitivity.md"),
]
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-ctl.md"


@dataclass(frozen=True)
class Budget:
    """Simulations per point, how many of Simulation 1's get the exact-energy check, rounds."""

    simulations: int
    exact: int
    rounds: int


BUDGETS = {
    "full": Budget(20, 10, 100),
    "paper": Budget(100, 10, 100),
    "quick": Budget(4, 2, 40),
}


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
VARIANTS = {variant.name: variant for variant in VARIANTS_2}


@dataclass(frozen=True)
class Sweep:
    """The simulations of one point: its seeds' run configs, its rules, the splits in which a
    node lacking a class discards the seed, and its changes to every rule's parameters and to
    the simulated data."""

    name: str
    make_config: Callable  # seed -> RunConfig
    rules: tuple
    required_splits: tuple[str, ...]
    params: dict = field(default_factory=dict)
    options: dict = field(default_factory=dict)
    sensitivity: str = ""  # the sensitivity check's name for this setting; none where empty


def setting_name(spread: float, dispersion: float) -> str:
    return f"spread {spread:g}, dispersion {dispersion:g}"


def simulation_1(rounds: int) -> Sweep:
    return Sweep(
        f"sim1-r{rounds}-s{SHIFTS}",
        partial(simulation_config, rounds=rounds),
        RULES_1,
        ("training", "test"),
        sensitivity="Simulation 1",
    )


def simulation_2(variant: Variant, rounds: int, spread: float, dispersion: float) -> Sweep:
    suffix = "" if variant.name == "base" else "-" + variant.name.replace(" ", "_")
    return Sweep(
        f"sim2-r{rounds}-sp{spread}-di{dispersion}{suffix}",
        partial(gaussian_config, rounds=rounds, spread=spread, dispersion=dispersion),
        variant.rules,
        variant.required_splits,
        variant.params,
        variant.options,
        f"Simulation 2, {setting_name(spread, dispersion)}" if variant.name == "base" else "",
    )


def sweep_of(settings: dict) -> Sweep:
    """The sweep a point's settings name."""
    if settings["simulation"] == 1:
        return simulation_1(settings["rounds"])
    return simulation_2(
        VARIANTS[settings["variant"]],
        settings["rounds"],
        settings["spread"],
        settings["dispersion"],
    )


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


@functools.cache
def gaussian_seeds(variant: str, rounds: int, spread: float, dispersion: float, count: int):
    """The first ``count`` seeds from ``FIRST_SEED`` up that a Simulation 2 sweep keeps, found
    by drawing their nodes (once per process); ValueError when ``MOST_TRIED`` times ``count``
    seeds do not give them."""
    sweep = simulation_2(VARIANTS[variant], rounds, spread, dispersion)
    kept = []
    for seed in range(FIRST_SEED, FIRST_SEED + MOST_TRIED * count):
        nodes, _ = usable_nodes(sweep.make_config(seed), sweep.required_splits, sweep.options)
        if nodes is not None:
            kept.append(seed)
            if len(kept) == count:
                return tuple(kept)
    raise ValueError(f"{sweep.name}: {len(kept)} of {MOST_TRIED * count} seeds kept, not {count}")


def kept_seeds(settings: dict) -> tuple[int, ...]:
    """The seeds of a point's simulations, in order (module docstring)."""
    count = settings["simulations"]
    if settings["simulation"] == 1:
        if count > len(KEPT_SEEDS):
            raise ValueError(f"Simulation 1 knows {len(KEPT_SEEDS)} kept seeds, not {count}")
        return KEPT_SEEDS[:count]
    return gaussian_seeds(
        settings["variant"], settings["rounds"], settings["spread"], settings["dispersion"], count
    )


def curves(accuracy: np.ndarray) -> dict[str, list[float]]:
    """Mean over nodes per round: own task, other tasks, all tasks."""
    return {
        "own": accuracy[:, :, 0].mean(axis=1).tolist(),
        "other": accuracy[:, :, 1:].mean(axis=(1, 2)).tolist(),
        "all": accuracy.mean(axis=(1, 2)).tolist(),
    }


def five_decimals(value: float) -> float:
    """``value`` as the rows keep it: to five decimals."""
    return float(f"{value:.5f}")


def simulation_row(settings: dict, index: int) -> dict[str, Value]:
    """The row of a point's ``index``-th simulation (module docstring)."""
    sweep = sweep_of(settings)
    seeds = kept_seeds(settings)
    seed = seeds[index]
    discarded = {}
    for tried in range(seeds[index - 1] + 1 if index else FIRST_SEED, seed):
        nodes, reason = usable_nodes(sweep.make_config(tried), sweep.required_splits, sweep.options)
        if nodes is not None:
            raise ValueError(f"{sweep.name}: seed {tried} is kept, but not among its kept seeds")
        discarded[str(tried)] = reason
    config = sweep.make_config(seed)
    nodes, reason = usable_nodes(config, sweep.required_splits, sweep.options)
    if nodes is None:
        raise ValueError(
            f"{sweep.name}: seed {seed}, one of its kept seeds, is discarded: {reason}"
        )
    row: dict[str, Value] = {
        "simulation": settings["simulation"],
        "rounds": settings["rounds"],
        "simulation_seed": seed,
        "discarded": json.dumps(discarded),
    }
    if settings["simulation"] == 2:
        row |= {key: settings[key] for key in ("variant", "spread", "dispersion")}
    outcomes = {}
    for label, change in sweep.rules:
        started = time.perf_counter()
        outcomes[label] = simulate(nodes, replace(params_for(config), **sweep.params, **change))
        row[f"seconds/{label}"] = time.perf_counter() - started
        for metric, curve in curves(outcomes[label]["accuracy"]).items():
            row[f"{metric}/{label}"] = (
                " ".join(f"{v:.5f}" for v in curve)
                if settings["simulation"] == 1
                else five_decimals(curve[-1])
            )
    if settings["simulation"] == 1 and index < settings["exact"]:
        row |= exact_energy_check(nodes, config, outcomes["Worst"])
    if sweep.sensitivity:
        row["sensitivity/setting"] = sweep.sensitivity
        row |= sensitivity_check(nodes, config, outcomes["Best"])
    if settings["simulation"] == 1 and index == 0:
        row |= cross_check(nodes, config)
    return row


def exact_energy_check(nodes, config, moments: dict) -> dict[str, Value]:
    """Moments (``moments``: the simulation with ``worst`` guests) against exact coefficients:
    the largest difference in H, the share of node-rounds whose guest set changes, the final
    non-local accuracy both ways."""
    params = replace(params_for(config), guests="worst")
    exact = simulate(nodes, replace(params, energy="exact"))
    chosen_a, chosen_e = moments["lambdas"][1:] > 0, exact["lambdas"][1:] > 0
    return {
        "energy/largest_h_difference": float(
            np.abs(moments["coefficients"] - exact["coefficients"]).max()
        ),
        "energy/guest_set_changes": float(np.mean(np.any(chosen_a != chosen_e, axis=2))),
        "energy/final_other_moments": curves(moments["accuracy"])["other"][-1],
        "energy/final_other_exact": curves(exact["accuracy"])["other"][-1],
    }


def sensitivity_check(nodes, config, as_is: dict) -> dict[str, Value]:
    """How much a run's outcome depends on rounding: ``best`` guests (``as_is``), and again
    with every round's H multiplied by (1 + 2^-52) (``coefficient_perturbation``: each entry
    moves by one or two units in the last place, the size of a change in the order of a
    floating-point sum): final accuracy on all tasks both ways, the largest change of one
    node's accuracy on one task after the last round, and the first round at which any node's
    accuracy on any task differs ("" when none does)."""
    params = replace(params_for(config), guests="best", coefficient_perturbation=ONE_ULP)
    perturbed = simulate(nodes, params)["accuracy"]
    accuracy = as_is["accuracy"]
    differs = np.flatnonzero(np.any(accuracy != perturbed, axis=(1, 2)))
    return {
        "sensitivity/final_all": curves(accuracy)["all"][-1],
        "sensitivity/final_all_perturbed": curves(perturbed)["all"][-1],
        "sensitivity/largest_node_task_change": float(np.abs(accuracy[-1] - perturbed[-1]).max()),
        "sensitivity/first_round_differing": int(differs[0]) if len(differs) else "",
    }


def cross_check(nodes, config) -> dict[str, Value]:
    """The Flower protocol in process (one torch thread, quietly, in a temporary folder)
    against the reference simulator on the same simulation: the largest accuracy difference
    and the seconds of each."""
    with one_thread_quietly(), tempfile.TemporaryDirectory(prefix="flowerbed-ctl-") as out:
        started = time.perf_counter()
        run_dir = run_in_process(config.to_dict() | {"output-dir": out}, NUM_NODES)
        flower_seconds = time.perf_counter() - started
        log = json.loads((run_dir / "ctl_metrics.json").read_text())
    flower = np.array([[n["task-accuracies"] for n in r["nodes"]] for r in log["rounds"]])
    started = time.perf_counter()
    reference = simulate(nodes, params_for(config))["accuracy"]
    return {
        "flower/largest_difference": float(np.abs(flower - reference).max()),
        "flower/seconds": flower_seconds,
        "flower/reference_seconds": time.perf_counter() - started,
    }


class Ctl:
    """The study (module docstring): a row per point and simulation, what ``simulation_row``
    measures."""

    name = "ctl"
    budgets = BUDGETS
    default_budget = "full"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        common = {"rounds": chosen.rounds, "simulations": chosen.simulations}
        first = simulation_1(chosen.rounds)
        points = [Point(first.name, {**common, "simulation": 1, "exact": chosen.exact})]
        for variant in VARIANTS_2:
            for spread, dispersion in SETTINGS_2:
                sweep = simulation_2(variant, chosen.rounds, spread, dispersion)
                setting = {"variant": variant.name, "spread": spread, "dispersion": dispersion}
                points.append(Point(sweep.name, {**common, "simulation": 2, **setting}))
        return points, list(range(chosen.simulations))

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        return simulation_row(point.settings, seed)

    def report(self, rows: list[dict[str, Value]]) -> dict:
        """Each table whose rows there are (a table and the plot for Simulation 1)."""
        made = {}
        if simulation_rows(rows, 1):
            made[TABLE.name] = partial(table_and_plot, rows)
        for data, table in PUBLISHED[1:]:
            part = data.name.partition(":")[2]
            if any(PART_ROWS[part](row) for row in rows):
                made[table.name] = partial(TABLES[part], rows)
        return made


# --- the rows, as the tables read them -------------------------------------------------------
def simulation_rows(rows: list[dict[str, Value]], simulation: int) -> list[dict[str, Value]]:
    """The rows of Simulation ``simulation`` in the order of the old data files: by variant
    (``VARIANTS_2``), setting (``SETTINGS_2``) and seed."""
    mine = [row for row in rows if row.get("simulation") == simulation]
    variants = list(VARIANTS)
    return sorted(
        mine,
        key=lambda row: (
            variants.index(row["variant"]) if simulation == 2 else 0,
            SETTINGS_2.index((row["spread"], row["dispersion"])) if simulation == 2 else 0,
            row["seed"],
        ),
    )


def discarded_count(rows: list[dict[str, Value]]) -> int:
    """How many seeds the rows' simulations skipped as discarded."""
    return sum(len(json.loads(str(row["discarded"]))) for row in rows)


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


def simulation_1_curves(rows: list[dict[str, Value]]) -> tuple[list[dict], int]:
    """One record per (rule, simulation, metric) of Simulation 1, rule by rule: its ``curve``
    (rounds 0..T), the ``first`` round at TARGET (T + 1 when never) and whether it was
    ``reached``; and T."""
    sim1 = simulation_rows(rows, 1)
    records = []
    for label, _ in RULES_1:
        for row in sim1:
            if f"other/{label}" not in row:
                continue
            for metric in METRICS:
                curve = [float(v) for v in str(row[f"{metric}/{label}"]).split()]
                records.append(
                    {
                        "seed": row["simulation_seed"],
                        "rule": label,
                        "metric": metric,
                        "curve": curve,
                    }
                )
    rounds = len(records[0]["curve"]) - 1
    for record in records:
        first = first_round_at(record["curve"], TARGET)
        record["first"] = rounds + 1 if first is None else first  # never: counted as T + 1
        record["reached"] = first is not None
    return records, rounds


def simulation_2_finals(rows: list[dict[str, Value]]) -> list[dict]:
    """One record per (variant, setting, rule, simulation) of Simulation 2: its final accuracy
    on each metric."""
    sim2 = simulation_rows(rows, 2)
    records = []
    for variant in VARIANTS_2:
        for spread, dispersion in SETTINGS_2:
            mine = [
                r
                for r in sim2
                if (r["variant"], r["spread"], r["dispersion"])
                == (variant.name, spread, dispersion)
            ]
            for label, _ in variant.rules:
                records += [
                    {
                        "variant": variant.name,
                        "setting": setting_name(spread, dispersion),
                        "seed": r["simulation_seed"],
                        "rule": label,
                        **{metric: float(r[f"{metric}/{label}"]) for metric in METRICS},
                    }
                    for r in mine
                ]
    return records


# --- the tables ------------------------------------------------------------------------------
def report_rounds(rounds: int) -> list[int]:
    """The rounds the paired table reports: 5, 20 and the last."""
    return [t for t in (5, 20) if t < rounds] + [rounds]


def paired_rounds_cell(differences: list[float], never: int) -> str:
    """Paired difference of first rounds at TARGET, in rounds (as ``paired_cell``'s format);
    ``never``: simulations in which one of the two never reached it (counted as T + 1)."""
    text = interval_cell(differences)
    return text + (f" ({never} never: T + 1)" if never else "")


def report_simulation_1(rows: list[dict[str, Value]], folder: Path) -> str:
    """Simulation 1's tables: means over simulations with 95 % t intervals, then the paper's
    orderings as paired differences."""
    records, rounds = simulation_1_curves(rows)
    rules = list(dict.fromkeys(r["rule"] for r in records))
    seeds = sorted({r["seed"] for r in records})
    discarded = discarded_count(simulation_rows(rows, 1))

    def of(rule: str, metric: str) -> list[dict]:
        return [r for r in records if r["rule"] == rule and r["metric"] == metric]

    lines = table_head(
        f"Simulation 1 (breast cancer, {NUM_NODES} nodes), {len(seeds)} simulations (seeds"
        f" {seeds[0]} to {seeds[-1]}; {discarded} seeds discarded: a node lacked a class in"
        f" its training or test data), after round {rounds}: mean over nodes and simulations ±"
        " the half-width of the 95 % t interval over simulations; the first round at which the"
        f" mean non-local curve reaches {TARGET}, and in how many simulations the non-local"
        f" curve reaches it (`{SIM1_DATA}`).",
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
    runs = [{**r, **{f"at{t}": r["curve"][t] for t in shown}} for r in records]
    lines += [""] + table_head(
        "Simulation 1, the paper's orderings as paired per-simulation differences (same seed,"
        " same data): mean [95 % t interval] over simulations, in bold where the interval"
        " excludes 0; first round at which the simulation's non-local curve reaches"
        f" {TARGET}, in rounds (a simulation that never does counts as round {rounds + 1});"
        f" accuracy in percentage points (`{SIM1_DATA}`).",
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
    lines += ["", measured_where(folder)]
    return "\n".join(lines) + "\n"


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


def report_simulation_2(runs: list[dict[str, Value]], folder: Path) -> str:
    """Simulation 2's table: per variant and setting, final accuracy on all tasks (mean ± 95 %
    t half-width), best − local paired by seed, and the change of that gap against the base
    setting, paired by seed."""
    rows = simulation_2_finals(runs)
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
        f" simulations kept (discarded) (`{SIM2_DATA}`). Variants, each one"
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
            lost = discarded_count(
                [
                    r
                    for r in simulation_rows(runs, 2)
                    if r["variant"] == variant
                    and setting_name(r["spread"], r["dispersion"]) == setting
                ]
            )
            lines.append(
                f"| {variant} | {setting} | {' | '.join(cells)} | {gap} | {change} |"
                f" {kept} ({lost}) |"
            )
    lines += ["", measured_where(folder)]
    return "\n".join(lines) + "\n"


def report_energy(runs: list[dict[str, Value]], folder: Path) -> str:
    """The exact-energy check's table: per simulation, then the ranges and the paired
    difference of final non-local accuracy (exact − moments)."""
    rows = [
        {"seed": r["simulation_seed"]} | {key[7:]: r[key] for key in r if key.startswith("energy/")}
        for r in simulation_rows(runs, 1)
        if PART_ROWS["energy"](r)
    ]
    lines = table_head(
        "Moment approximation against exact energy coefficients (pairwise on 300-sample"
        " subsets), Simulation 1, `worst` guests (the rule whose choice depends on H), per"
        " simulation: the largest absolute difference in H over rounds and node pairs, the share of"
        " node-rounds whose guest set changes, the final non-local accuracy with each and"
        " exact − moments in percentage points; last row: the ranges, and exact − moments"
        f" paired by simulation, mean [95 % t interval] (`{ENERGY_DATA}`).",
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
    lines += ["", measured_where(folder)]
    return "\n".join(lines) + "\n"


def report_sensitivity(runs: list[dict[str, Value]], folder: Path) -> str:
    """The sensitivity check's table: per setting, how many simulations end elsewhere when H
    moves by one or two units in the last place, and by how much."""
    rows = [
        {"seed": r["simulation_seed"]}
        | {key[12:]: r[key] for key in r if key.startswith("sensitivity/")}
        for r in simulation_rows(runs, 1) + simulation_rows(runs, 2)
        if PART_ROWS["sensitivity"](r)
    ]
    lines = table_head(
        "Sensitivity to rounding, `best` guests: each simulation run as it is and with every"
        " round's H multiplied by (1 + 2^-52), one or two units in the last place (the size of"
        " a change in the order of a floating-point sum); per setting, the mean final accuracy"
        " on all tasks over the simulations both ways, the simulations whose"
        " final accuracy on all tasks changes by 1 percentage point or more, the median and"
        " largest change of it, the largest change of one node's accuracy on one task after"
        " the last round, and the first round at which any accuracy differs (median, earliest;"
        f" `{SENSITIVITY_DATA}`).",
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
    lines += ["", measured_where(folder)]
    return "\n".join(lines) + "\n"


def plot_simulation_1(rows: list[dict[str, Value]], path: Path) -> None:
    """Simulation 1's mean curves with 95 % intervals per rule, as the paper's Fig. 2."""
    records, _ = simulation_1_curves(rows)
    panels = (
        ("all", "(a) all tasks", None),
        ("other", "(b) non-local tasks", None),
        ("own", "(c) local tasks", None),
        ("other", "(d) non-local tasks, first 25 rounds", 26),
    )
    fig = Figure(figsize=(20, 4.5))
    axes = fig.subplots(1, 4)
    for ax, (key, title, limit) in zip(axes, panels):
        for label in dict.fromkeys(r["rule"] for r in records):
            curves_ = [r["curve"] for r in records if r["rule"] == label and r["metric"] == key]
            mean, half = mean_ci(np.array(curves_))
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


def table_and_plot(rows: list[dict[str, Value]], folder: Path) -> str:
    """``report_simulation_1``, with the plot of the same rows drawn beside it."""
    plot_simulation_1(rows, folder / PLOT.name)
    return report_simulation_1(rows, folder)


# the tables other than table.md: the part of the rows each is made of, and what makes it
PART_ROWS = {
    "sim2": lambda row: row.get("simulation") == 2,
    "energy": lambda row: "energy/final_other_exact" in row,
    "sensitivity": lambda row: "sensitivity/final_all" in row,
}
TABLES = {"sim2": report_simulation_2, "energy": report_energy, "sensitivity": report_sensitivity}


def report(data: Path) -> str:
    """The table made of one ``PUBLISHED`` data name, from the rows in its folder (and the
    provenance beside them) alone: ``table.md`` for the rows themselves, another for a part
    of them (``rows.jsonl:sim2``, ``:energy``, ``:sensitivity``)."""
    part = data.name.partition(":")[2]
    if part and part not in TABLES:
        raise ValueError(f"no table is made of {data.name}; one of: {', '.join(TABLES)}")
    make = TABLES[part] if part else report_simulation_1
    return make(measured_rows(data.parent), data.parent)


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(Ctl(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
