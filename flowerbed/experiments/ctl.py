"""CTL's reproduction: "Distributed Collaborative Learning with Representative Knowledge
Sharing" (Casey et al., Mathematics 2025), Simulation 1 (``papers.PAPERS["ctl"]``: the first
iteration at which the mean accuracy on non-local tasks exceeds 0.85, per guest strategy) and
Simulation 2 (``papers.CTL_FIGURE_4``, with ``ctl_gaussian``: Best against Local at two settings
of spread and dispersion).

Each simulation is the paper's Simulation 1 as ``benchmarks/ctl.py`` runs it with the NumPy
reference simulator (``methods.ctl.reference``): breast cancer in 300 shifted copies
(``breast-cancer-shifted``), 10 nodes by one k-means iteration on two principal components
(``kmeans-pca``), each node predicting its own test data and that of 2 other nodes, alpha 0.85.
A simulation in which a node lacks a class in its training or test data is discarded, as in
the authors' code: it gives a row ``discarded`` (with the reason) and no cell.

One ``Point`` per simulation (seed), not one per guest rule: a run simulates the five rules
(Best, All, Random, Worst, Local) on the same nodes, so the nodes are built and the discard
rule applied once per seed, and a row holds the five paired values a claim compares. Its
values: ``first <rule>``, the first round at which that simulation's non-local accuracy (mean
over nodes and their 2 other tasks) exceeds 0.85 (strictly, as the paper's "surpass"), or
"never" within the budget's rounds (a cell of ``math.inf``); ``final <rule>``, the non-local
accuracy after the last round.

The seeds: ``KEPT_SEEDS``, the first 100 seeds from 1 up that the discard rule keeps (found
once with the rule itself; ``run`` still applies it), so that the grid is known before
anything runs. Simulation 2's two points run on their own seeds (``ctl_gaussian.KEPT_SEEDS``,
found alike), with the rules Best, All and Local on the same nodes. Budgets, the same number
of simulations for Simulation 1 and for each setting of Simulation 2: ``smoke`` (3
simulations, 20 rounds), ``cpu`` (100 simulations and 100 rounds: about 14 s a simulation of
Simulation 1 here and 1.2 s one of Simulation 2, 27 min on one core) and ``paper`` (the same as
``cpu``: it already is the paper's regime).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

import numpy as np

from ..catalog import parse_run_config
from ..inprocess import resolve_run_config
from ..methods.ctl.reference import NodeData, nodes_for, params_for, simulate
from ..settings import RunConfig
from . import ctl_gaussian
from .ctl_gaussian import final_key
from .driver import BudgetError, Point, Value
from .figure_report import FigureReproduction
from .papers import CTL_FIGURE_4
from .reproduction import Cell, RegimeDifference, Reproduction

NUM_NODES = 10
TARGET = 0.85
SHIFTS = 300
NEVER = "never"
RULES = (
    ("Best", "best"),
    ("All", "all"),
    ("Random", "random"),
    ("Worst", "worst"),
    ("Local", "local"),
)
# (simulations, rounds) per budget
BUDGETS = {"smoke": (3, 20), "cpu": (100, 100), "paper": (100, 100)}
# seconds a simulation of the five rules takes here per 100 rounds, and to build its nodes
# (measured on the 2-core development machine, one worker)
SECONDS_PER_100_ROUNDS, SECONDS_FOR_NODES = 12.5, 1.0
# the same for a simulation of Simulation 2's three rules: its processor time, 0.9 to 1.3 s for
# 100 rounds in 12 simulations (seeds 13, 15, 17 and 1, 2, 3, twice), since the machine was
# shared: their wall-clock times were 2.6 to 3.9 s at load 7 to 8, and up to 20 s at load 11
SECONDS_2_PER_100_ROUNDS, SECONDS_2_FOR_NODES = 1.1, 0.1
# the first 100 seeds from 1 up that the discard rule keeps (``usable_nodes``), in order: seeds
# 1 to 495, of which 395 are discarded
# fmt: off
KEPT_SEEDS = (
    1, 15, 19, 20, 23, 25, 43, 49, 61, 69, 70, 71, 81, 83, 84, 90, 94, 101, 105, 112, 115, 124,
    126, 135, 143, 145, 148, 154, 156, 164, 165, 172, 175, 176, 186, 188, 199, 201, 207, 214,
    219, 220, 221, 224, 227, 228, 231, 232, 233, 236, 241, 244, 252, 258, 263, 264, 265, 276,
    283, 313, 323, 333, 335, 336, 346, 348, 350, 360, 362, 363, 368, 378, 379, 385, 387, 390,
    397, 405, 409, 413, 424, 428, 430, 432, 439, 442, 448, 455, 456, 460, 464, 468, 470, 473,
    474, 478, 480, 483, 491, 495,
)
# fmt: on


def simulation_config(seed: int, rounds: int) -> RunConfig:
    """Simulation 1's run config (as ``benchmarks/ctl.py``'s)."""
    return parse_run_config(
        resolve_run_config(
            {
                "strategy": "ctl",
                "dataset": "breast-cancer-shifted",
                "sim-shifts": SHIFTS,
                "partitioner": "kmeans-pca",
                "num-server-rounds": rounds,
                "ctl-alpha": 0.85,
                "seed": seed,
            }
        )
    )


def usable_nodes(
    config: RunConfig, splits: tuple[str, ...] = ("training", "test")
) -> tuple[list[NodeData] | None, str]:
    """The simulation's nodes, or None and why it is discarded (the authors' rule: a k-means
    cluster is empty, or a node lacks a class in one of ``splits`` of its data: training or
    test in Simulation 1, training in Simulation 2)."""
    try:
        nodes = nodes_for(config, NUM_NODES)
    except ValueError as error:  # an empty cluster
        return None, str(error)
    reason = lacking_class(nodes, splits)
    return (None, reason) if reason else (nodes, "")


def lacking_class(nodes: list[NodeData], splits: tuple[str, ...] = ("training", "test")) -> str:
    """Why the authors' rule discards these nodes (the first node lacking a class in one of
    ``splits`` of its data), or "" when none does."""
    for k, node in enumerate(nodes):
        for split, labels in (("training", node.y_train), ("test", node.y_test)):
            if split in splits and len(np.unique(labels)) != 2:
                return f"node {k} lacks a class in its {split} data"
    return ""


def first_round_above(curve: np.ndarray, target: float) -> int | None:
    """The first round at which ``curve`` exceeds ``target``; None if it never does."""
    above = np.flatnonzero(np.asarray(curve) > target)
    return int(above[0]) if len(above) else None


def non_local_curve(accuracy: np.ndarray) -> np.ndarray:
    """Per round, the mean accuracy over nodes on their other tasks (``simulate``'s accuracy
    is (rounds + 1, nodes, 1 + tasks), own task first)."""
    return accuracy[:, :, 1:].mean(axis=(1, 2))


def simulation_2_seconds(rounds: int) -> float:
    """Seconds a simulation of Simulation 2 takes on one core here (``SECONDS_2_*``)."""
    return SECONDS_2_FOR_NODES + SECONDS_2_PER_100_ROUNDS * rounds / 100


def all_tasks_final(accuracy: np.ndarray) -> float:
    """The mean accuracy over nodes and all their tasks after the last round (``simulate``'s
    accuracy is (rounds + 1, nodes, 1 + tasks))."""
    return float(accuracy[-1].mean())


def simulation_2(settings: dict, seed: int) -> dict[str, Value]:
    """One simulation of Simulation 2 (``ctl_gaussian``): each rule's final accuracy on all
    tasks, or ``discarded`` where a node lacks a class in its training data."""
    spread, dispersion = settings["spread"], settings["dispersion"]
    config = ctl_gaussian.gaussian_config(seed, settings["rounds"], spread, dispersion)
    nodes, reason = usable_nodes(config, ctl_gaussian.TRAINING_ONLY)
    if nodes is None:
        return {"discarded": reason}
    return {
        final_key(label): all_tasks_final(
            simulate(nodes, replace(params_for(config), guests=guests))["accuracy"]
        )
        for label, guests in ctl_gaussian.RULES
    }


def final_text(finals: list[float]) -> str:
    """Final accuracies over simulations: mean ± std ("–" for none)."""
    spread = f" ± {statistics.stdev(finals):.4f}" if len(finals) > 1 else ""
    return f"{statistics.mean(finals):.4f}{spread}" if finals else "–"


class Simulations:
    """The study (``driver.Study``): Simulation 1's point, one run per kept seed, and
    Simulation 2's two points on their own seeds (module docstring)."""

    name = "ctl-simulations"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        if budget not in BUDGETS:
            raise BudgetError(f"CTL has no budget {budget!r}; one of: {', '.join(BUDGETS)}")
        simulations, rounds = BUDGETS[budget]
        first = Point(f"simulation-1-r{rounds}", {"simulation": 1, "rounds": rounds})
        points = [first, *ctl_gaussian.points(simulations, rounds)]
        return points, list(KEPT_SEEDS[:simulations])

    def estimate(self, budget: str) -> float:
        """Seconds the budget's runs take on one worker here (``SECONDS_*``)."""
        simulations, rounds = BUDGETS[budget]
        first = simulations * (SECONDS_FOR_NODES + SECONDS_PER_100_ROUNDS * rounds / 100)
        return first + len(ctl_gaussian.SETTINGS) * simulations * simulation_2_seconds(rounds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        if point.settings["simulation"] == 2:
            return simulation_2(point.settings, seed)
        config = simulation_config(seed, point.settings["rounds"])
        nodes, reason = usable_nodes(config)
        if nodes is None:
            return {"discarded": reason}
        values: dict[str, Value] = {}
        for label, guests in RULES:
            curve = non_local_curve(
                simulate(nodes, replace(params_for(config), guests=guests))["accuracy"]
            )
            first = first_round_above(curve, TARGET)
            values[f"first {label}"] = NEVER if first is None else first
            values[f"final {label}"] = float(curve[-1])
        return values

    def report(self, rows: list[dict[str, Value]]) -> dict[str, str]:
        """``simulations.md``: Simulation 1's table (``simulation_1_lines``), then Simulation
        2's (``simulation_2_lines``)."""
        first = [row for row in rows if not ctl_gaussian.measures(row)]
        second = [row for row in rows if ctl_gaussian.measures(row)]
        lines = simulation_1_lines(first) + [""] + simulation_2_lines(second)
        return {"simulations.md": "\n".join(lines) + "\n"}


def simulation_1_lines(rows: list[dict[str, Value]]) -> list[str]:
    """Simulation 1, per rule: the simulations kept, how many exceed the target within the
    rounds, and the final non-local accuracy (mean ± std)."""
    kept = [row for row in rows if "discarded" not in row]
    lines = [
        f"{len(kept)} simulations kept, {len(rows) - len(kept)} discarded"
        + " (a node lacked a class in its training or test data).",
        "",
        f"| guests | simulations exceeding {TARGET} | final non-local accuracy |",
        "|---|---|---|",
    ]
    for label, _ in RULES:
        reached = sum(row[f"first {label}"] != NEVER for row in kept)
        finals = [float(row[f"final {label}"]) for row in kept]
        lines.append(f"| {label} | {reached} of {len(kept)} | {final_text(finals)} |")
    return lines


def simulation_2_lines(rows: list[dict[str, Value]]) -> list[str]:
    """Simulation 2, per setting: the simulations kept and discarded, and each rule's final
    accuracy on all tasks (mean ± std)."""
    labels = [label for label, _ in ctl_gaussian.RULES]
    lines = [
        "Simulation 2: final accuracy on all tasks (mean ± std over the simulations kept; a"
        + " simulation is discarded where a node lacked a class in its training data).",
        "",
        f"| setting | simulations kept (discarded) | {' | '.join(labels)} |",
        "|---|---|" + "---|" * len(labels),
    ]
    for setting in ctl_gaussian.SETTINGS:
        name = ctl_gaussian.setting_name(*setting)
        mine = [row for row in rows if ctl_gaussian.row_setting(row) == name]
        kept = [row for row in mine if "discarded" not in row]
        finals = [final_text([float(row[final_key(label)]) for row in kept]) for label in labels]
        lines.append(f"| {name} | {len(kept)} ({len(mine) - len(kept)}) | {' | '.join(finals)} |")
    return lines


def cells(rows: list[dict[str, Value]]) -> list[Cell]:
    """Five cells per kept simulation: the first round above the target, ``math.inf`` for
    "never" (as the paper's Local)."""
    return [
        Cell(
            label,
            "",
            int(row["seed"]),
            math.inf if row[f"first {label}"] == NEVER else float(row[f"first {label}"]),
        )
        for row in rows
        if "discarded" not in row and "failed" not in row
        for label, _ in RULES
    ]


def regime(budget: str) -> list[RegimeDifference]:
    """How ``budget`` differs from the paper's Simulation 1."""
    simulations, rounds = BUDGETS[budget]
    differences = [
        RegimeDifference(
            "statistic",
            "the iteration at which the mean curve over 100 simulations exceeds 0.85",
            "per simulation, the first round its own non-local curve exceeds 0.85; mean ± std over"
            " simulations (∞ where it never does within the rounds)",
            "a claim is tested by paired per-seed differences, which need a value per seed; the"
            " mean of first crossings is not the first crossing of the mean curve",
        ),
        RegimeDifference(
            "simulations",
            "100 simulations, those kept by the authors' discard rule",
            f"the first {simulations} seeds from 1 that the same rule keeps (seeds 1 to"
            f" {KEPT_SEEDS[simulations - 1]} tried)",
            "the rule (a node without a class in its training or test data) is the authors' code's;"
            " 395 of the first 495 seeds are discarded",
        ),
        RegimeDifference(
            "simulator",
            "the authors' notebook (simulation_main.ipynb)",
            "flowerbed's NumPy reference simulator, identical to its Flower protocol (a test)",
            "accuracy measured after both of a round's steps (the code: after the first);"
            " feature importance in standardised units; a true argmax for Worst; scores not clipped",
        ),
        RegimeDifference(
            "settings",
            "none given (alpha, step, steps per round, initial models)",
            "the authors' code's: alpha 0.85, step 0.5, 2 full-batch steps, models at zero",
            "the paper does not state them",
        ),
    ]
    if budget in ("cpu", "paper"):
        differences.append(
            RegimeDifference(
                "budget",
                "100 simulations of 100 iterations",
                f"the same in the {budget} budget: cpu and paper are one regime",
                "a simulation of the five rules took 27 s (seed 1, the first in its process)"
                " and 14 s (seed 2) on one core of the 2-core development machine, measured"
                " before choosing: 100 take about 25 min, inside the cpu budget's 2 hours (with"
                " the machine shared by other work, load 7 to 8, a simulation took about 75 s)",
            )
        )
    if rounds != 100:
        differences.append(
            RegimeDifference("rounds", "100", str(rounds), f"the {budget} budget is a quick check")
        )
    return differences


def simulation_2_regime(budget: str) -> list[RegimeDifference]:
    """How ``budget`` differs from the paper's Simulation 2 (``ctl_gaussian.regime``)."""
    simulations, rounds = BUDGETS[budget]
    return ctl_gaussian.regime(budget, simulations, rounds, simulation_2_seconds(100))


SIMULATION_2 = FigureReproduction(
    CTL_FIGURE_4, ctl_gaussian.measures, ctl_gaussian.cells, simulation_2_regime
)
REPRODUCTION = Reproduction("ctl", Simulations(), cells, regime, (SIMULATION_2,))
