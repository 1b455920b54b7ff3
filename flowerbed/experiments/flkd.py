"""The FL + KD benchmark's reproduction: Table 1 (standalone FL) of "Benchmarking Federated
Learning & Knowledge Distillation for Point Cloud Classification" (``papers.PAPERS["flkd"]``)
as a study. Its Table 4 (the student-teacher correlations of Stage 2) is a later step, not
measured here; ``benchmarks/flkd.py`` measures it offline.

A point is one data set (one column of Table 1). Its run (one seed) runs every method on the
same ``label-sorted`` partition of 5 clients (the paper's Algorithm A1: sorted by label, cut
into 5 contiguous slices, the same for every seed), one after the other through the real
ServerApp/ClientApp handlers in this process (``run_in_process``): the 13 FL strategies of
Table A2 with the paper's settings (``flkd_stage1.STRATEGIES``, ``ADAM``, batch 24, 20 rounds
of 5 local epochs, every client every round) and the Centralized reference
(``flkd_stage1.train_central``). The paired per-seed differences of the report then compare
methods alone.

Metric (the paper's "best per run"): the best round's central test accuracy of the global
model over rounds 1..R, in % (``history.json``'s ``central_accuracy``; round 0, the initial
model, excluded), and for Centralized the best epoch's. A row holds per method its best
(``acc/FedAvg``), its final round's (``final/FedAvg``), the round of the best
(``best-round/FedAvg``) and its seconds.

The server optimisers (FedAvgM, FedAdam, FedYogi, FedAdagrad) run as the paper's code runs
them, on every float entry of the model, batch-norm running statistics included
(``server-optimizer-buffers='optimize'``): the paper's collapse of these methods is tied to
that (``docs/studies-distillation.md``, "The server optimisers' collapse"). On a batch-norm
model the study also runs them with flowerbed's rule (``average``: the statistics are averaged,
outside the pseudo-gradient), as the methods "FedAvgM (BN averaged)", ...: a reference beside
the cells, not a cell of the paper's table.

Budgets (``BUDGETS``; how each differs from the paper: ``regime``):

* ``smoke``: digits and ``mlp``, 2 seeds, 1 round of 1 local epoch, Centralized 1 epoch, the
  table's nine FL methods: the whole pipeline in about 20 s of CPU;
* ``cpu``: digits with ``cnn-bn`` (batch norm) for the ModelNet40 column and breast-cancer with
  ``mlp`` for the Craniosynostosis column (``DataChoice``), the paper's seeds, rounds, epochs
  and all 13 strategies, Centralized 40 epochs: about 35 min with ``--workers 2`` on two free
  cores (measured: ``SECONDS_PER_RUN``);
* ``paper``: ModelNet40 from ``data-dir`` with PointNet++ SSG (``pointnet2``) and the paper's
  augmentation, Centralized 200 epochs; a run whose files are missing fails at once, naming
  the path. The craniosynostosis shapes have no loader: that column is not measured.
"""

from __future__ import annotations

import json
import math
import tempfile
import time
from dataclasses import dataclass

from ..catalog import parse_run_config
from ..data.federation import load_splits
from ..inprocess import resolve_run_config, run_in_process
from .driver import BudgetError, Point, Value
from .flkd_stage1 import (
    ADAM,
    BN_AVERAGED,
    CENTRALIZED,
    METHODS,
    SERVER_OPTIMIZERS,
    STRATEGIES,
    train_central,
)
from .flkd_table import accuracies, accuracy_table
from .papers import PAPERS
from .reproduction import Cell, RegimeDifference, Reproduction
from .study_runs import one_thread_quietly, seeded_config

PAPER = PAPERS["flkd"]
NUM_CLIENTS, ROUNDS, LOCAL_EPOCHS, BATCH_SIZE = 5, 20, 5, 24  # Sec. 4.1, Table A2
PAPER_SEEDS = [7, 42, 123]  # the paper's multi-seed protocol
TABLE_METHODS = tuple(m for m, _ in METHODS if any(row.method == m for row in PAPER.rows))
BATCH_NORM_MODELS = ("cnn-bn", "pointnet2")  # the models of BUDGETS that have batch norm


@dataclass(frozen=True)
class DataChoice:
    """One point: the flowerbed data set, the column of Table 1 it stands for, its model."""

    data: str
    setting: str
    model: str


@dataclass(frozen=True)
class Budget:
    """A budget's points, seeds, rounds, local epochs, Centralized epochs and FL methods."""

    data: tuple[DataChoice, ...]
    seeds: list[int]
    rounds: int = ROUNDS
    local_epochs: int = LOCAL_EPOCHS
    central_epochs: int = 40
    methods: tuple[str, ...] = tuple(m for m, _ in METHODS)


BUDGETS = {
    "smoke": Budget(
        (DataChoice("digits", "ModelNet40", "mlp"),),
        seeds=[7, 42],
        rounds=1,
        local_epochs=1,
        central_epochs=1,
        methods=TABLE_METHODS,
    ),
    "cpu": Budget(
        (
            DataChoice("digits", "ModelNet40", "cnn-bn"),
            DataChoice("breast-cancer", "Craniosynostosis", "mlp"),
        ),
        seeds=PAPER_SEEDS,
    ),
    "paper": Budget(
        (DataChoice("modelnet40", "ModelNet40", "pointnet2"),),
        seeds=PAPER_SEEDS,
        central_epochs=200,  # the paper's: the rate x0.7 every 20 epochs (train_central)
    ),
}


def budget_of(name: str) -> Budget:
    if name not in BUDGETS:
        raise BudgetError(f"unknown budget {name!r}; valid: {', '.join(BUDGETS)}")
    return BUDGETS[name]


def methods_of(budget: Budget, model: str) -> list[tuple[str, str, str]]:
    """(name, strategy, buffer rule) of every FL method a point of ``model`` runs: the budget's
    methods with the paper code's rule, and on a batch-norm model the server optimisers again
    with flowerbed's (module docstring)."""
    strategy = dict(METHODS)
    chosen = [(name, strategy[name], "optimize") for name in budget.methods]
    if model in BATCH_NORM_MODELS:
        chosen += [
            (name + BN_AVERAGED, s, "average") for name, s, _ in chosen if s in SERVER_OPTIMIZERS
        ]
    return chosen


class FlkdStudy:
    """Table 1: one point per data set, every method on its partition (module docstring)."""

    name = "flkd"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(budget)
        points = [
            Point(
                choice.data,
                {
                    "setting": choice.setting,
                    "methods": methods_of(chosen, choice.model),
                    "central-epochs": chosen.central_epochs,
                    "config": {
                        "dataset": choice.data,
                        "model": choice.model,
                        "partitioner": "label-sorted",
                        "num-server-rounds": chosen.rounds,
                        "local-epochs": chosen.local_epochs,
                        "batch-size": BATCH_SIZE,
                        **ADAM,
                    },
                },
            )
            for choice in chosen.data
        ]
        return points, list(chosen.seeds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        """Centralized and every FL method of the point with ``seed``
        (``one_thread_quietly``)."""
        config = seeded_config(point, seed)
        row: dict[str, Value] = {
            "data": config["dataset"],
            "model": config["model"],
            "setting": point.settings["setting"],
        }
        with one_thread_quietly():
            row |= run_centralized(config, point.settings["central-epochs"])
            for name, strategy, buffers in point.settings["methods"]:
                overrides = {**config, "strategy": strategy, **STRATEGIES[strategy]}
                if strategy in SERVER_OPTIMIZERS:
                    overrides["server-optimizer-buffers"] = buffers
                row |= run_fl(name, overrides)
        return row

    def report(self, rows: list[dict[str, Value]]) -> dict[str, str]:
        return {"table.md": accuracy_table(rows)}

    def estimate(self, budget: str) -> float:
        """Seconds on one worker: the grid's runs at the measured seconds per run of each
        point (``SECONDS_PER_RUN``); NaN where a point was not measured."""
        points, seeds = self.grid(budget)
        measured = SECONDS_PER_RUN.get(budget, {})
        return len(seeds) * sum(measured.get(p.name, math.nan) for p in points)


def run_centralized(config: dict, epochs: int) -> dict[str, Value]:
    """The Centralized reference: its best and final epoch's accuracy in %, the best epoch."""
    started = time.perf_counter()
    run_config = parse_run_config(resolve_run_config(config))
    _, record = train_central(run_config, load_splits(run_config), config["model"], epochs)
    return {
        f"acc/{CENTRALIZED}": 100 * record["test_accuracy"],
        f"final/{CENTRALIZED}": 100 * record["final_accuracy"],
        f"best-round/{CENTRALIZED}": record["round"],
        f"seconds/{CENTRALIZED}": time.perf_counter() - started,
    }


def run_fl(name: str, overrides: dict) -> dict[str, Value]:
    """One FL method's run in a folder deleted afterwards: its best round's and final round's
    central accuracy in %, the best round, its seconds."""
    with tempfile.TemporaryDirectory(prefix="flowerbed-flkd-") as out:
        started = time.perf_counter()
        run_dir = run_in_process({**overrides, "output-dir": out}, NUM_CLIENTS)
        seconds = time.perf_counter() - started
        history = json.loads((run_dir / "history.json").read_text())
    best_round, best, final = best_of(history)
    return {
        f"acc/{name}": best,
        f"final/{name}": final,
        f"best-round/{name}": best_round,
        f"seconds/{name}": seconds,
    }


def best_of(history: list[dict]) -> tuple[int, float, float]:
    """(the round of the best, its accuracy in %, the last round's in %) over rounds 1..R of a
    ``history.json``; a round without a finite accuracy never is the best (NaN when none is)."""
    rounds = [(int(r["round"]), float(r.get("central_accuracy", math.nan))) for r in history]
    rounds = [(n, 100 * a) for n, a in rounds if n >= 1]
    finite = [(a, -n) for n, a in rounds if math.isfinite(a)]
    if not finite:
        return 0, math.nan, rounds[-1][1] if rounds else math.nan
    accuracy, minus_round = max(finite)  # ties: the earliest round
    return -minus_round, accuracy, rounds[-1][1]


def cells(rows: list[dict[str, Value]]) -> list[Cell]:
    """One ``Cell`` per (method of the paper's table, setting, seed): the best round's accuracy
    in % (the "(BN averaged)" references and the four strategies outside the table: none)."""
    methods = {row.method for row in PAPER.rows}
    return [
        Cell(method, setting, seed, value)
        for (method, setting), by_seed in sorted(accuracies(rows).items())
        if method in methods
        for seed, value in sorted(by_seed.items())
    ]


def regime(budget: str) -> list[RegimeDifference]:
    """Every way ``budget``'s regime differs from the paper's (Sec. 4.1, Tables A1, A2)."""
    chosen = budget_of(budget)
    differences = [DATA[budget], MODEL[budget]]
    if (chosen.rounds, chosen.local_epochs) != (ROUNDS, LOCAL_EPOCHS):
        differences.append(
            RegimeDifference(
                "rounds",
                f"{ROUNDS} rounds of {LOCAL_EPOCHS} local epochs",
                f"{chosen.rounds} round(s) of {chosen.local_epochs} local epoch(s)",
                SMOKE,
            )
        )
    if chosen.central_epochs != 200:
        differences.append(
            RegimeDifference(
                "Centralized epochs",
                "200 epochs, StepLR x0.7 every 20",
                f"{chosen.central_epochs} epoch(s), StepLR x0.7 every"
                f" {max(1, chosen.central_epochs // 10)}",
                SMOKE if budget == "smoke" else CENTRAL_REASON,
            )
        )
    if len(chosen.methods) != len(METHODS):
        differences.append(
            RegimeDifference(
                "methods",
                "the 13 FL strategies of Table A2",
                f"the {len(chosen.methods)} of Table 1's headline cells",
                SMOKE,
            )
        )
    if chosen.seeds != PAPER_SEEDS:
        differences.append(RegimeDifference("seeds", "7, 42, 123", "7, 42", SMOKE))
    if budget != "paper":
        differences.append(
            RegimeDifference(
                "augmentation",
                "training batches: random point dropout, scaling, translation",
                "none",
                "transforms of point clouds: images and table rows have none",
            )
        )
    return differences + ALWAYS


SMOKE = "smoke: the pipeline, not the numbers"
CENTRAL_REASON = (
    "the paper's schedule scaled to E = 40 (StepLR every E/10), as the offline benchmark's"
    " central teacher: digits and breast-cancer converge in a few epochs, not 200"
)
PAPER_DATA = (
    "ModelNet40 (40 classes, 9,843 / 2,468 point clouds) and craniosynostosis (4 classes, 320 /"
    " 80 synthetic head shapes), 5 label-sorted clients"
)
OFFLINE = "offline: neither ModelNet40 nor the craniosynostosis shapes are on this machine"
DIGITS = (
    "digits for the ModelNet40 column, the multi-class one (10 classes, 1,437 / 360 8x8 images;"
    " label-sorted: 2 adjacent classes per client, as ModelNet40's ~8 of 40)"
)
BREAST_CANCER = (
    "breast-cancer for the Craniosynostosis column (2 classes, 455 / 114 clinical rows;"
    " label-sorted: 1 client malignant, 1 mixed, 3 benign)"
)
BREAST_CANCER_REASON = (
    "; breast-cancer is, as the paper's clinical data, small, label-skewed and near its"
    " centralised ceiling, but binary, not 4 classes (one class predicted is 36.8 or 63.2 % of"
    " its test rows, not 25 %)"
)
CRANIO_MISSING = (
    "the craniosynostosis shapes (samples of a statistical shape model) have no loader and no"
    " public source: the Craniosynostosis column is not measured"
)
DATA = {
    "smoke": RegimeDifference("data", PAPER_DATA, DIGITS + "; no Craniosynostosis column", OFFLINE),
    "cpu": RegimeDifference(
        "data", PAPER_DATA, f"{DIGITS}; {BREAST_CANCER}", OFFLINE + BREAST_CANCER_REASON
    ),
    "paper": RegimeDifference("data", PAPER_DATA, "ModelNet40 from data-dir", CRANIO_MISSING),
}
POINTNET2 = "PointNet++ SSG (batch norm, 1.4M parameters)"
MODEL = {
    "smoke": RegimeDifference(
        "model",
        POINTNET2,
        "`mlp` (no batch norm)",
        SMOKE + "; a smoke run of `cnn-bn` took 1.5 times one of `mlp` (2.4 s against 1.6 s)",
    ),
    "cpu": RegimeDifference(
        "model",
        POINTNET2,
        "`cnn-bn` on digits (two convolutions with batch norm); `mlp` on breast-cancer (rows,"
        " no batch norm: there the server optimisers' batch-norm statistics play no part)",
        "PointNet++ reads point clouds; `cnn-bn` keeps what the server optimisers' collapse"
        " is tied to, batch norm",
    ),
    "paper": RegimeDifference(
        "model",
        POINTNET2,
        "`pointnet2` (flowerbed's PointNet++ SSG)",
        "the same architecture, flowerbed's implementation (not the paper's code)",
    ),
}
ALWAYS = [
    RegimeDifference(
        "server optimisers",
        "the paper's code: FedAdam / FedYogi without bias correction, FedAdagrad with beta1 0.9",
        "Flower's FedAdam / FedYogi (bias-corrected), FedAdagrad without a first moment",
        "flowerbed runs Flower's strategies; bias correction makes the first rounds' steps"
        " smaller. Batch-norm statistics go through the optimiser as in the paper's code",
    ),
    RegimeDifference(
        "MOON",
        "the paper's code: contrastive term on the global feature, no projection head",
        "the MOON paper's 2-layer projection head (flowerbed's `moon`)",
        "flowerbed's MOON follows its own paper",
    ),
]


# Measured (one torch thread, nice'd, on the 2-core machine beside other jobs at load 2 to 11,
# 2026-11-28), CPU seconds of one seed (7) of each point, method by method: digits with cnn-bn,
# Centralized 24 s (40 epochs), the FL runs 40 to 94 s each (SCAFFOLD 40, FedAvg 51, FedProx
# 64, FedDyn 69, MOON 82, Ditto 94: it trains two models), 17 runs 912 s in all: 936 s;
# breast-cancer with mlp, Centralized 4 s, the 13 FL runs 6 to 15 s: 109 s (85 s again at
# load 2: a busy machine costs CPU time too). The cpu grid's 3 seeds take 3 x (936 + 109) s =
# 52 min on one worker; with --workers 2 the three digits runs (16 min each) take 32 min and
# the breast-cancer runs fit beside the third: about 35 min on 2 free cores. The wall clock of
# this measurement was 1.0 to 6.5 times its CPU time (the load), so 2 hours hold up to a load
# that slows it 3.4 times. The smoke budget: 18 s of CPU for both seeds (the test process,
# imports included: 25 s).
SECONDS_PER_RUN = {  # one (point, seed), CPU seconds (above)
    "smoke": {"digits": 9.0},
    "cpu": {"digits": 936.0, "breast-cancer": 109.0},
    # paper: not measured (no ModelNet40 here): the estimate is NaN
}

REPRODUCTION = Reproduction(paper="flkd", study=FlkdStudy(), cells=cells, regime=regime)
