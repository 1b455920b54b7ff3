"""Federated then distilled: what is a federated teacher worth to a compact student? The
offline replication of "Benchmarking Federated Learning & Knowledge Distillation
for Point Cloud Classification", with the two label-free controls the paper recommends but
never reports.

Stage 1 (through the real ServerApp/ClientApp handlers, in this process): the 13 FL
strategies on 5 ``label-sorted`` clients, 20 rounds, 5 local epochs, the paper's client
optimiser (Adam, lr 1e-3, weight decay 1e-4, batch 24; FedNova SGD with momentum 0.9 and
SCAFFOLD plain SGD, lr 1e-3) and server keys; the teacher is the best round's
global model (``model_best.pt``, selected on the test set, as the paper). A teacher-quality
sweep adds FedAvg's final global model after 0, 1, 2, 3, 5, 10 and 20 rounds (round 0 = the
random initial model, a chance-level teacher), and a centrally trained teacher (the whole
training split, the same optimiser, best epoch on the test set).

Stage 2 (``experiments.flkd_stage2``, which the reproduction of the paper's Table 4 runs
too: ``kd.student.distill_student``, the code behind the ``distill-*`` run-config keys):
every teacher distilled into ``mlp-small`` (about a quarter of ``mlp``) on the whole training
split (the paper's proxy), 10 epochs (the paper's StepLR x0.7 every E/10 epochs at E = 10),
with each of the eleven objectives in each mode (``labeled``, ``no-ce``, ``unlabeled``).
Modes that are the same computation are run once and reported for each (an objective with CE
weight 0 and label-free terms: all three; a "(1-a) CE + a x" objective: ``no-ce`` =
``unlabeled``). Student accuracy = best test epoch (the paper); the final epoch's is in the
rows. Beside them, the student trained alone with cross-entropy on the proxy, with the same
schedule: what the labels give without any teacher.

The long experiment: Stage 2 at 10 epochs is shorter than the replication plan suggests
(30-50), so on digits, 3 seeds, the student is distilled for 50 epochs behind three teachers
(the chance teacher, FedAvg's best round, the central teacher) with every objective in labeled
mode, and in no-ce mode behind the central teacher for the four objectives whose no-ce run is
soft-target matching alone (vanilla, logit-MSE, cosine, basic); the student alone with
cross-entropy is measured at 50 and at 10 epochs. Its teachers are trained as the grid's (the
same seeds: the same models); ``long.md`` pairs every run by seed with the student alone and
with the same run at 10 epochs in the grid.

A study of the study driver (``flowerbed.experiments.study_cli``): a point is one data set,
one teacher (or the student alone) and a number of student epochs, and a run is one seed of
it: the teacher is trained (in a temporary folder) and every student of the point distilled
from it. Its row holds the teacher's accuracy (best round or epoch: ``teacher_accuracy``;
final: ``teacher_final``; ``teacher_round``) and per objective and mode the student's
(``best/<objective>/<mode>``, ``best_epoch/...``, ``final/...``, ``seconds/...``,
``ce_weight/...``, ``label_free/...``, and ``same_as/...``: the mode whose run it repeats,
empty where it ran); the student alone's row holds its accuracies and both models' footprint
(parameters, KiB, CPU milliseconds per batch of 24 test images, one thread). Budgets:

* ``full`` (the default): the grid (digits and breast-cancer, seeds 7, 42, 123, the 21
  teachers and the student alone, every objective and mode, 10 epochs: ~50 min per digits
  seed and ~15 per breast-cancer seed on one core of a busy 2-core machine) and the long
  experiment (~15-20 min);
* ``quick``: digits, seed 42, the seven sweep teachers and the student alone, five objectives,
  5 epochs: a check that the measuring path works, into ``results/flkd/quick``.

    python benchmarks/flkd.py                  # what rows.jsonl lacks of the full budget
    python benchmarks/flkd.py --workers 2      # two runs at a time
    python benchmarks/flkd.py --quick          # the quick budget, into results/flkd/quick
    python benchmarks/flkd.py --report-only    # the tables, CSVs and plots from rows.jsonl

Writes into ``benchmarks/results/flkd``: ``rows.jsonl`` (one row per run: the committed
record), ``measured.jsonl`` (one line per invocation that measured), and, made from the rows
and the provenance beside them alone: ``table.md`` (per data set, objective and mode, the
student behind the chance teacher, behind the best FL or sweep teacher and r20; labeled minus
no-ce paired by seed behind the chance, the best and the central teacher; each FL teacher minus
FedAvg) and ``long.md`` (the long experiment), which ``docs/studies-distillation.md`` includes
(``tests/test_published_tables.py`` checks both); ``flkd.md`` (every table of the grid: the
teachers, the student alone, the students behind the central teacher, the Table 4 analogue and
the teacher x objective grid per mode), ``grid-<data>.csv`` (mean and std per teacher,
objective and mode), ``table4-<data>.csv``, and the plots drawn with ``flkd.md``:
``grid-<data>.png`` (a heat map of the grid per mode) and ``scatter-<data>.png`` (student
against teacher accuracy per objective).

The committed rows were measured before the script became a study, into ``runs.csv`` (the grid;
its provenance was not recorded) and ``long.csv`` (the long experiment; its provenance is
``long-measured.json``, kept), and converted once into ``rows.jsonl`` (the tables' captions
still name ``runs.csv``, the grid's rows). What those files did not hold (the teachers' final
accuracy, the models' footprint, the student alone on breast-cancer) ``flkd.md`` shows as "-"
or leaves out until it is measured: ``python benchmarks/flkd.py`` runs the three missing runs
of the student alone.
"""

from __future__ import annotations

import csv
import io
import math
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import numpy as np
import torch
from matplotlib.figure import Figure
from result_tables import (
    paired_cell,
    provenance_line,
    table_head,
    unrecorded_provenance_line,
    write_table,
)

from flowerbed.catalog import parse_run_config
from flowerbed.data.federation import load_splits
from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, Value, budget_of, measured_rows
from flowerbed.experiments.flkd_stage1 import ADAM, STRATEGIES, train_central
from flowerbed.experiments.flkd_stage2 import fl_teacher, params_for, students_of, teacher_model
from flowerbed.experiments.provenance import measurement_lines
from flowerbed.experiments.study_runs import one_thread_quietly
from flowerbed.inprocess import resolve_run_config
from flowerbed.kd.classic_objectives import NAMES as OBJECTIVES
from flowerbed.kd.objectives import MODES, get_objective
from flowerbed.kd.student import cpu_latency_ms
from flowerbed.models import build_model
from flowerbed.models.classifier import parameter_count, size_bytes
from flowerbed.training.loops import evaluate

SWEEP = (0, 1, 2, 3, 5, 10, 20)
SWEEP_TEACHERS = tuple(f"fedavg-r{r}" for r in SWEEP)
TEACHERS = (*STRATEGIES, *SWEEP_TEACHERS, "central")  # the grid's, in the report's order
DATASETS = ("digits", "breast-cancer")
SEEDS = (7, 42, 123)
TEACHER_MODEL, STUDENT_MODEL = "mlp", "mlp-small"
NUM_CLIENTS, ROUNDS, LOCAL_EPOCHS = 5, 20, 5
QUICK_OBJECTIVES = ("vanilla", "logit-mse", "feature", "crd", "dkd")
ALONE = "alone"  # the point, and the objective column, of the student trained alone
NO_TEACHER = "none"  # the student alone's teacher
# the long experiment: on digits, behind the chance teacher, FedAvg's best round and the
# central model; no-ce runs (the student following the teacher's function alone) behind these
# teachers
LONG_DATASET = "digits"
LONG_TEACHERS = ("fedavg-r0", "fedavg", "central")
LONG_OBJECTIVES = OBJECTIVES
LONG_NO_CE = {"central": ("vanilla", "logit-mse", "cosine", "basic")}
LONG_EPOCHS, SHORT_EPOCHS = 50, 10  # SHORT_EPOCHS: the grid's, the long experiment's pairing
RESULTS = Path(__file__).parent / "results" / "flkd"
DATA = RESULTS / ROWS
TABLE, LONG_TABLE, GRID_TABLES = RESULTS / "table.md", RESULTS / "long.md", RESULTS / "flkd.md"
LONG_PROVENANCE = "long-measured.json"  # the long experiment's, measured before the port
# what long.md is made of: the long experiment's runs of the same rows (report's argument)
LONG_RUNS = f"{ROWS}:long"
PUBLISHED = [(DATA, TABLE), (RESULTS / LONG_RUNS, LONG_TABLE)]
# the page that includes table.md and long.md
DOCS = Path(__file__).resolve().parent.parent / "docs" / "studies-distillation.md"


@dataclass(frozen=True)
class Budget:
    """A budget's data sets, seeds, teachers, objectives and student epochs, and whether the
    long experiment is part of it."""

    datasets: tuple[str, ...]
    seeds: tuple[int, ...]
    teachers: tuple[str, ...]
    objectives: tuple[str, ...]
    epochs: int
    long: bool = False


BUDGETS = {
    "full": Budget(DATASETS, SEEDS, TEACHERS, OBJECTIVES, SHORT_EPOCHS, long=True),
    "quick": Budget(("digits",), (42,), SWEEP_TEACHERS, QUICK_OBJECTIVES, 5),
}


def point(dataset: str, teacher: str, epochs: int, runs: tuple = ()) -> Point:
    """The point of ``teacher`` (or ``ALONE``) on ``dataset`` at ``epochs`` student epochs,
    with its students' (objective, mode) pairs."""
    settings = {"dataset": dataset, "teacher": teacher, "epochs": epochs, "runs": runs}
    return Point(f"{dataset}/{teacher}/{epochs}", settings)


class Flkd:
    """The study (module docstring): a row per data set, teacher (or the student alone),
    student epochs and seed, what ``teacher_row`` or ``alone_row`` measures."""

    name = "flkd"
    budgets = BUDGETS
    default_budget = "full"

    def grid(self, budget: str) -> tuple[list[Point], list[int]]:
        chosen = budget_of(BUDGETS, budget)
        every = tuple((o, m) for o in chosen.objectives for m in MODES)
        points = []
        for dataset in chosen.datasets:
            points.append(point(dataset, ALONE, chosen.epochs))
            points += [point(dataset, name, chosen.epochs, every) for name in chosen.teachers]
        if chosen.long:
            points.append(point(LONG_DATASET, ALONE, LONG_EPOCHS))
            for name in LONG_TEACHERS:
                runs = [(o, "labeled") for o in LONG_OBJECTIVES]
                runs += [(o, "no-ce") for o in LONG_NO_CE.get(name, ())]
                points.append(point(LONG_DATASET, name, LONG_EPOCHS, tuple(runs)))
        return points, list(chosen.seeds)

    def run(self, point: Point, seed: int) -> dict[str, Value]:
        settings = point.settings
        dataset, name, epochs = settings["dataset"], settings["teacher"], settings["epochs"]
        with one_thread_quietly():
            if name == ALONE:
                return alone_row(dataset, seed, epochs)
            return teacher_row(dataset, name, seed, epochs, settings["runs"])

    def report(self, rows: list[dict[str, Value]]) -> dict:
        if not rows:  # nothing measured yet: no table
            return {}
        students = student_rows(rows)
        tables = {TABLE.name: partial(table, students)}
        if long_students(students):
            tables[LONG_TABLE.name] = partial(long_table, students)
        grids = [grid_of(rows, students, dataset) for dataset in DATASETS]
        grids = [grid for grid in grids if grid.names]
        tables[GRID_TABLES.name] = partial(grid_tables, grids)
        for grid in grids:
            tables[f"grid-{grid.dataset}.csv"] = csv_text(grid_rows(grid))
            tables[f"table4-{grid.dataset}.csv"] = csv_text(table4_rows(grid))
        return tables


# --- Stage 1: teachers ---------------------------------------------------------------------


def fl_overrides(dataset: str, strategy: str, rounds: int, seed: int) -> dict:
    return {
        "strategy": strategy,
        "dataset": dataset,
        "model": TEACHER_MODEL,
        "partitioner": "label-sorted",
        "num-server-rounds": rounds,
        "local-epochs": LOCAL_EPOCHS,
        "batch-size": 24,
        "seed": seed,
        **ADAM,
        **STRATEGIES[strategy],
    }


def config_of(dataset: str, seed: int, strategy: str = "fedavg"):
    return parse_run_config(resolve_run_config(fl_overrides(dataset, strategy, 1, seed)))


def train_teacher(name: str, dataset: str, seed: int, out: Path) -> tuple[dict, dict]:
    """(state dict, record) of teacher ``name``: an FL strategy's best round, FedAvg after r
    rounds, or the central model; the record's accuracies (``test_accuracy``: the teacher's,
    ``final_accuracy``: the last round's or epoch's) and ``round`` (of the teacher). FL runs
    write into ``out``."""
    config = config_of(dataset, seed)
    data = load_splits(config)
    if name == "central":
        return train_central(config, data, TEACHER_MODEL)
    if name == "fedavg-r0":  # the initial global model, as start_run builds it
        torch.manual_seed(seed)
        model = build_model(TEACHER_MODEL, data.input_shape, data.num_classes)
        accuracy = evaluate(model, data.x_test, data.y_test)[1]
        return model.state_dict(), {
            "test_accuracy": accuracy,
            "final_accuracy": accuracy,
            "round": 0,
        }
    strategy, rounds = "fedavg", ROUNDS
    if name in SWEEP_TEACHERS:
        rounds = int(name.removeprefix("fedavg-r"))
    else:
        strategy = name
    overrides = {**fl_overrides(dataset, strategy, rounds, seed), "output-dir": str(out)}
    # the sweep's teachers: the final global model; the FL strategies': the best round's
    return fl_teacher(overrides, NUM_CLIENTS, final=name in SWEEP_TEACHERS)


def teacher_of(name: str, dataset: str, seed: int, state: dict) -> torch.nn.Module:
    """Teacher ``name`` with ``state``, as its protocol builds its global model (MOON's has a
    projection head; the sweep's and the central teacher: FedAvg's)."""
    config = config_of(dataset, seed, name if name in STRATEGIES else "fedavg")
    return teacher_model(config, load_splits(config), state)


def teacher_row(
    dataset: str, name: str, seed: int, epochs: int, runs: tuple[tuple[str, str], ...]
) -> dict[str, Value]:
    """The row of a teacher's point (module docstring): the teacher trained in a temporary
    folder, then every (objective, mode) of ``runs`` distilled from it."""
    with tempfile.TemporaryDirectory(prefix="flowerbed-flkd-") as out:
        state, record = train_teacher(name, dataset, seed, Path(out))
    model = teacher_of(name, dataset, seed, state)
    row: dict[str, Value] = {
        "dataset": dataset,
        "teacher": name,
        "epochs": epochs,
        "teacher_accuracy": record["test_accuracy"],
        "teacher_final": record["final_accuracy"],
        "teacher_round": record["round"],
    }
    data = load_splits(config_of(dataset, seed))
    return row | students_of(model, data, seed, runs, epochs, STUDENT_MODEL)


# --- Stage 2: students ---------------------------------------------------------------------


def alone_row(dataset: str, seed: int, epochs: int) -> dict[str, Value]:
    """The student trained alone with cross-entropy on the proxy, the students' schedule, and
    the two models' footprint (``footprints``)."""
    config = config_of(dataset, seed)
    data = load_splits(config)
    _, record = train_central(config, data, STUDENT_MODEL, epochs)
    return {
        "dataset": dataset,
        "teacher": NO_TEACHER,
        "epochs": epochs,
        "best": record["test_accuracy"],
        "best_epoch": record["round"],
        "final": record["final_accuracy"],
        **footprints(data),
    }


def footprints(data) -> dict[str, Value]:
    """Teacher and student: parameters, KiB, CPU milliseconds of one batch of 24 test images."""
    values: dict[str, Value] = {}
    for name in (TEACHER_MODEL, STUDENT_MODEL):
        model = build_model(name, data.input_shape, data.num_classes)
        values[f"parameters/{name}"] = parameter_count(model)
        values[f"kib/{name}"] = size_bytes(model) / 1024
        values[f"latency_ms/{name}"] = cpu_latency_ms(model, data.x_test[:24])
    return values


# --- the rows as student runs --------------------------------------------------------------

STUDENT_VALUES = ("best", "best_epoch", "final", "seconds", "ce_weight", "label_free", "same_as")


def student_rows(rows: list[dict[str, Value]]) -> list[dict]:
    """One dict per student run of ``rows``, in their order: data set, seed, teacher
    (``NO_TEACHER`` for the student alone, whose objective is ``ALONE``), the teacher's
    accuracy (NaN for none), objective, mode, epochs and the values the row holds of it."""
    students = []
    for row in rows:
        labels = {key: row[key] for key in ("dataset", "seed", "teacher", "epochs")}
        if row["teacher"] == NO_TEACHER:
            values = {key: row[key] for key in ("best", "best_epoch", "final")}
            labels |= {"teacher_accuracy": math.nan, "objective": ALONE, "mode": "labeled"}
            students.append(labels | values)
            continue
        labels["teacher_accuracy"] = row["teacher_accuracy"]
        for key in row:
            kind, _, run = key.partition("/")
            if kind != "best":
                continue
            objective, mode = run.split("/")
            values = {k: row[f"{k}/{run}"] for k in STUDENT_VALUES if f"{k}/{run}" in row}
            students.append(labels | {"objective": objective, "mode": mode} | values)
    return students


def grid_students(students: list[dict]) -> list[dict]:
    """The grid's students: behind a teacher, at the grid's epochs (not the long
    experiment's)."""
    return [s for s in students if s["teacher"] != NO_TEACHER and s["epochs"] != LONG_EPOCHS]


def long_students(students: list[dict]) -> list[dict]:
    """The long experiment's runs, in their order: behind a teacher at ``LONG_EPOCHS``, and on
    their data sets the student alone at ``LONG_EPOCHS`` and ``SHORT_EPOCHS``."""
    long = [s for s in students if s["teacher"] != NO_TEACHER and s["epochs"] == LONG_EPOCHS]
    datasets = {s["dataset"] for s in long}
    return [
        s
        for s in students
        if s["dataset"] in datasets
        and (s in long or s["objective"] == ALONE and s["epochs"] in (LONG_EPOCHS, SHORT_EPOCHS))
    ]


def measured_where(folder: Path, *recorded: str) -> str:
    """Where the rows in ``folder`` were measured: the sentence of each of the ``recorded``
    provenance files there (a measurement before the port), then ``measurement_lines``'; the
    unrecorded provenance's sentence when there is none."""
    lines = [provenance_line(folder, name) for name in recorded if (folder / name).is_file()]
    return " ".join(lines + measurement_lines(folder)) or unrecorded_provenance_line(folder)


# --- table.md -------------------------------------------------------------------------------


def mean_std(values: list[float]) -> tuple[float, float]:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return math.nan, math.nan
    return float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0


def cell(values: list[float]) -> str:
    mean, std = mean_std(values)
    if math.isnan(mean):
        return "-"
    return f"{100 * mean:.1f}" if len(values) == 1 else f"{100 * mean:.1f} ± {100 * std:.1f}"


def signed(r: float) -> str:
    return "-" if math.isnan(r) else f"{r:+.2f}"


def spread(values: list[float]) -> str:
    mean, std = mean_std(values)
    return "-" if math.isnan(mean) else f"{mean:+.2f} ± {std:.2f}"


def pearson(x: list[float], y: list[float]) -> float:
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return math.nan
    return float(np.corrcoef(x, y)[0, 1])


def report(data: Path) -> str:
    """The table made from the rows in ``data``'s folder (and the provenance beside them)
    alone: ``long.md`` for their long experiment (``LONG_RUNS``), else ``table.md``."""
    students = student_rows(measured_rows(data.parent))
    make = long_table if data.name == LONG_RUNS else table
    return make(students, data.parent)


def table(students: list[dict], folder: Path) -> str:
    """``table.md``: per data set, objective and mode, the student's mean accuracy behind the
    chance teacher (``fedavg-r0``) and behind the FL or sweep teacher of highest mean accuracy,
    and r20 (Pearson between the student's and the teacher's mean accuracy over the FL and
    sweep teachers); then labeled minus no-ce, paired by seed; each FL teacher minus FedAvg."""
    runs = grid_students(students)
    lines = []
    for dataset in [d for d in DATASETS if any(r["dataset"] == d for r in runs)]:
        rows = [r for r in runs if r["dataset"] == dataset]
        seeds = sorted({r["seed"] for r in rows})
        teachers = list(dict.fromkeys(r["teacher"] for r in rows))
        accuracy = {
            n: np.mean(
                list({r["seed"]: r["teacher_accuracy"] for r in rows if r["teacher"] == n}.values())
            )
            for n in teachers
        }
        graded = [n for n in teachers if n != "central"]
        best_teacher = max(graded, key=lambda n: accuracy[n])
        student: dict[tuple, list[float]] = {}
        for r in rows:
            student.setdefault((r["teacher"], r["objective"], r["mode"]), []).append(r["best"])
        objectives = [o for o in OBJECTIVES if any(r["objective"] == o for r in rows)]

        def mean(teacher: str, objective: str, mode: str, student=student) -> float:
            return float(np.mean(student.get((teacher, objective, mode), [math.nan])))

        lines += table_head(
            f"{dataset}, seeds {', '.join(map(str, seeds))}: student accuracy % behind the chance"
            f" teacher (fedavg-r0, {100 * accuracy['fedavg-r0']:.1f} %) / behind the best FL or"
            f" sweep teacher ({best_teacher}, {100 * accuracy[best_teacher]:.1f} %) / r20 over"
            f" the {len(graded)} FL and sweep teachers; means over seeds (`runs.csv`).",
            "objective",
            ["CE weight (labeled)", *MODES],
        )
        for o in objectives:
            cells = []
            for m in MODES:
                means = [mean(n, o, m) for n in graded]
                r20 = pearson(means, [accuracy[n] for n in graded])
                cells.append(
                    f"{100 * mean('fedavg-r0', o, m):.1f} / {100 * mean(best_teacher, o, m):.1f}"
                    f" / {signed(r20)}"
                )
            ce = next(
                r["ce_weight"] for r in rows if r["objective"] == o and r["mode"] == "labeled"
            )
            lines.append(f"| {o} | {ce:g} | " + " | ".join(cells) + " |")
        behind = {
            "fedavg-r0": "chance teacher",
            best_teacher: "best teacher",
            "central": "central teacher",
        }
        lines += [""] + table_head(
            f"{dataset}: labeled minus no-ce, paired by seed, in points: mean [95 % t interval],"
            " bold where the interval excludes 0.",
            "objective",
            [f"behind the {what}" for what in behind.values()],
        )
        for o in objectives:
            cells = [
                paired_cell(
                    rows,
                    {"teacher": n, "objective": o, "mode": "labeled"},
                    {"teacher": n, "objective": o, "mode": "no-ce"},
                    "best",
                )
                for n in behind
            ]
            lines.append(f"| {o} | " + " | ".join(cells) + " |")
        fl = [n for n in teachers if n in STRATEGIES and n != "fedavg"]
        taught = list({(r["seed"], r["teacher"]): r for r in rows}.values())
        lines += [""] + table_head(
            f"{dataset}: FL teacher accuracy (best round) minus FedAvg's, paired by seed, in"
            " points: mean [95 % t interval], bold where the interval excludes 0.",
            "teacher",
            ["teacher %", "− fedavg"],
        )
        for n in sorted(fl, key=lambda n: -accuracy[n]):
            gap = paired_cell(taught, {"teacher": n}, {"teacher": "fedavg"}, "teacher_accuracy")
            lines.append(f"| {n} | {100 * accuracy[n]:.1f} | {gap} |")
        lines.append("")
    lines.append(measured_where(folder))
    return "\n".join(lines) + "\n"


# --- long.md --------------------------------------------------------------------------------


def long_table(students: list[dict], folder: Path) -> str:
    """``long.md``: per teacher, objective and mode of the long experiment, the best and the
    final epoch's accuracy, the epoch of the best, and paired per-seed differences against the
    student alone and against the same run at ``SHORT_EPOCHS`` epochs in the grid."""
    long = long_students(students)
    epochs = max(r["epochs"] for r in long if r["objective"] != ALONE)
    keys = {(r["dataset"], r["teacher"], r["objective"], r["mode"]) for r in long}
    short = [
        r
        for r in grid_students(students)
        if r["epochs"] == SHORT_EPOCHS
        and (r["dataset"], r["teacher"], r["objective"], r["mode"]) in keys
    ]
    rows = long + short
    lines = []
    for dataset in [d for d in DATASETS if any(r["dataset"] == d for r in long)]:
        mine = [r for r in rows if r["dataset"] == dataset]
        seeds = sorted({r["seed"] for r in mine if r["epochs"] == epochs})
        teacher_accuracy = {
            (r["seed"], r["teacher"], r["epochs"] == epochs): r["teacher_accuracy"]
            for r in mine
            if r["teacher"] != NO_TEACHER
        }
        differing = sorted(
            f"{teacher} seed {seed}"
            for (seed, teacher, is_long), value in teacher_accuracy.items()
            if is_long and teacher_accuracy.get((seed, teacher, False), value) != value
        )
        if not any(key[2] is False for key in teacher_accuracy):
            same = "no run is there to pair with"
        elif differing:
            same = f"the teachers differ from those of `runs.csv` for {', '.join(differing)}"
        else:
            same = "the teachers are those of `runs.csv`: the same test accuracy on every seed"
        alone = {"objective": ALONE, "epochs": epochs}
        lines += table_head(
            f"{dataset}, seeds {', '.join(map(str, seeds))}: the student (`{STUDENT_MODEL}`)"
            f" distilled for {epochs} epochs (StepLR x0.7 every {max(1, epochs // 10)}), test"
            " accuracy % (mean ± sample std over seeds): best epoch (the paper's metric), final"
            " epoch, the epoch of the best (mean, min–max); then paired per-seed differences in"
            f" points, mean [95 % t interval], bold where it excludes 0: against the student"
            f" trained alone with cross-entropy for {epochs} epochs (best and final), and"
            f" against the same run at {SHORT_EPOCHS} epochs (best; `runs.csv`, where {same}).",
            "teacher (acc %)",
            [
                "objective",
                "mode",
                "best",
                "final",
                "epoch of best",
                "− alone (best)",
                "− alone (final)",
                f"− {SHORT_EPOCHS} epochs (best)",
            ],
        )
        order = [(NO_TEACHER, ALONE, "labeled")] + sorted(
            {(r["teacher"], r["objective"], r["mode"]) for r in mine if r["teacher"] != NO_TEACHER},
            key=lambda k: (
                LONG_TEACHERS.index(k[0]) if k[0] in LONG_TEACHERS else len(LONG_TEACHERS),
                MODES.index(k[2]),
                OBJECTIVES.index(k[1]),
            ),
        )
        for teacher_name, objective, mode in order:
            labels = {"teacher": teacher_name, "objective": objective, "mode": mode}
            runs = [r for r in mine if r["epochs"] == epochs and column_match(r, labels)]
            if not runs:
                continue
            first = epochs_cell([r["best_epoch"] for r in runs])
            at_epochs = {**labels, "epochs": epochs}
            short_cell = paired_cell(mine, at_epochs, {**labels, "epochs": SHORT_EPOCHS}, "best")
            if objective == ALONE:
                name, versus_alone = f"none (student alone, {epochs} epochs)", ["–", "–"]
            else:
                accuracy = np.mean([r["teacher_accuracy"] for r in runs])
                name = f"{teacher_name} ({100 * accuracy:.1f})"
                versus_alone = [paired_cell(mine, at_epochs, alone, k) for k in ("best", "final")]
            cells = [objective, mode, cell([r["best"] for r in runs])]
            cells += [cell([r["final"] for r in runs]), first, *versus_alone, short_cell]
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
            alone_short = [
                r for r in mine if r["epochs"] == SHORT_EPOCHS and r["objective"] == ALONE
            ]
            if objective == ALONE and alone_short and SHORT_EPOCHS != epochs:
                cells = [objective, mode, cell([r["best"] for r in alone_short])]
                cells += [
                    cell([r["final"] for r in alone_short]),
                    epochs_cell([r["best_epoch"] for r in alone_short]),
                ]
                lines.append(
                    f"| none (student alone, {SHORT_EPOCHS} epochs) | "
                    + " | ".join(cells + ["–"] * 3)
                    + " |"
                )
        lines.append("")
    lines.append(measured_where(folder, LONG_PROVENANCE))
    return "\n".join(lines) + "\n"


def column_match(row: dict, labels: dict) -> bool:
    return all(row[key] == value for key, value in labels.items())


def epochs_cell(values: list[int]) -> str:
    """``"31 (12–48)"``: mean, min–max of the epochs of the best."""
    return f"{np.mean(values):.0f} ({min(values)}–{max(values)})"


# --- flkd.md, the grid's CSVs and plots ------------------------------------------------------


@dataclass
class Grid:
    """One data set's grid, as ``flkd.md``, its CSVs and its plots show it: the teachers (in
    ``TEACHERS``' order), objectives, student epochs, seeds; per teacher its accuracy and final
    accuracy per seed; per (teacher, objective, mode) the student's best accuracy per seed; per
    (objective, mode, seed) the (teacher, student) accuracy pairs; the student alone's best
    accuracy per seed and its rows (the models' footprint)."""

    dataset: str
    names: list[str]
    objectives: list[str]
    epochs: int
    seeds: list[int]
    acc: dict[str, list[float]]
    final: dict[str, list[float]]
    student: dict[tuple[str, str, str], list[float]] = field(default_factory=dict)
    per_seed: dict[tuple[str, str, int], list[tuple[float, float]]] = field(default_factory=dict)
    alone: list[dict] = field(default_factory=list)

    @property
    def graded(self) -> list[str]:
        """The FL and sweep teachers (the central one aside)."""
        return [n for n in self.names if n != "central"]


def grid_of(rows: list[dict[str, Value]], students: list[dict], dataset: str) -> Grid:
    """``dataset``'s grid (``Grid``) from the rows and their student runs."""
    teachers = [
        r
        for r in rows
        if r["dataset"] == dataset and r["teacher"] != NO_TEACHER and r["epochs"] != LONG_EPOCHS
    ]
    names = [n for n in TEACHERS if any(r["teacher"] == n for r in teachers)]
    runs = [s for s in grid_students(students) if s["dataset"] == dataset]
    epochs = int(teachers[0]["epochs"]) if teachers else SHORT_EPOCHS
    grid = Grid(
        dataset,
        names,
        [o for o in OBJECTIVES if any(s["objective"] == o for s in runs)],
        epochs,
        sorted({r["seed"] for r in teachers}),
        {n: [r["teacher_accuracy"] for r in teachers if r["teacher"] == n] for n in names},
        {
            n: [r["teacher_final"] for r in teachers if r["teacher"] == n and "teacher_final" in r]
            for n in names
        },
    )
    for s in runs:
        grid.student.setdefault((s["teacher"], s["objective"], s["mode"]), []).append(s["best"])
        grid.per_seed.setdefault((s["objective"], s["mode"], s["seed"]), []).append(
            (s["teacher_accuracy"], s["best"])
        )
    grid.alone = [
        r
        for r in rows
        if r["dataset"] == dataset and r["teacher"] == NO_TEACHER and r["epochs"] == epochs
    ]
    return grid


def table4_rows(grid: Grid) -> list[dict]:
    """Per objective and mode (Table 4 analogue): CE weight, label-free, the student behind
    the chance teacher and the best FL or sweep teacher, its range over them, and Pearson's r
    between student and teacher mean accuracy over the 13 FL teachers (r13), the FL and sweep
    teachers (r20), and within each seed."""
    graded = [n for n in grid.graded if grid.acc[n]]
    fl = [n for n in graded if n in STRATEGIES]
    best_teacher = max(graded, key=lambda n: mean_std(grid.acc[n])[0]) if graded else None
    summary = []
    for o in grid.objectives:
        for m in MODES:
            means = {n: mean_std(grid.student.get((n, o, m), []))[0] for n in graded}
            have = [n for n in graded if math.isfinite(means[n])]
            if not have:
                continue
            spec, params = get_objective(o), params_for(m)
            values = [means[n] for n in have]
            summary.append(
                {
                    "objective": o,
                    "mode": m,
                    "ce_weight": spec.ce_weight(params),
                    "label_free": spec.label_free(params),
                    "chance": means.get("fedavg-r0", math.nan),
                    "best": means.get(best_teacher, math.nan),
                    "range": max(values) - min(values),
                    "r13": pearson(
                        [means[n] for n in fl if n in have],
                        [mean_std(grid.acc[n])[0] for n in fl if n in have],
                    ),
                    "r20": pearson(values, [mean_std(grid.acc[n])[0] for n in have]),
                    "r20_per_seed": [
                        pearson([t for t, _ in pairs], [v for _, v in pairs])
                        for (o_, m_, _), pairs in sorted(grid.per_seed.items())
                        if (o_, m_) == (o, m) and len(pairs) >= 3
                    ],
                }
            )
    return summary


def grid_rows(grid: Grid) -> list[dict]:
    """``grid-<data>.csv``: per teacher, objective and mode, the teacher's mean accuracy and
    the student's mean and std over seeds."""
    return [
        {
            "teacher": n,
            "teacher_accuracy": mean_std(grid.acc[n])[0],
            "objective": o,
            "mode": m,
            "student_mean": mean_std(values)[0],
            "student_std": mean_std(values)[1],
            "seeds": len(values),
        }
        for (n, o, m), values in sorted(grid.student.items())
    ]


def csv_text(rows: list[dict]) -> str:
    """``rows`` as CSV text, every key a column (in order of first appearance)."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(dict.fromkeys(k for row in rows for k in row)))
    writer.writeheader()
    writer.writerows(rows)
    return out.getvalue()


def footprint_line(alone: list[dict]) -> list[str]:
    """The models' footprint as the student alone's runs measured it (the median latency
    over them); none where no run measured it."""
    measured = [r for r in alone if f"parameters/{TEACHER_MODEL}" in r]
    if not measured:
        return []
    text = []
    for name in (TEACHER_MODEL, STUDENT_MODEL):
        latency = float(np.median([r[f"latency_ms/{name}"] for r in measured]))
        text.append(
            f"`{name}` {measured[0][f'parameters/{name}']:,} parameters,"
            f" {measured[0][f'kib/{name}']:.1f} KiB, {latency:.3f} ms per batch of 24"
        )
    return ["Models: " + "; ".join(text) + " (CPU, one thread).", ""]


def grid_tables(grids: list[Grid], folder: Path) -> str:
    """``flkd.md``: per data set the teachers, the student alone, the students behind the
    central teacher, the Table 4 analogue and the grid per mode; its plots are drawn into
    ``folder`` beside it (``plot_grid``, ``plot_scatter``)."""
    epochs = ", ".join(map(str, dict.fromkeys(grid.epochs for grid in grids))) or SHORT_EPOCHS
    lines = [
        "# Federated then distilled (benchmarks/flkd.py)",
        "",
        (
            f"Stage 1: {NUM_CLIENTS} label-sorted clients, {ROUNDS} rounds, {LOCAL_EPOCHS} local"
            f" epochs, {TEACHER_MODEL}; Stage 2: {STUDENT_MODEL}, {epochs} epochs, proxy = the"
            " whole training split. Accuracy % (best on the test set, as the paper), mean ±"
            " sample std over seeds."
        ),
    ]
    for grid in grids:
        acc = grid.acc
        lines += ["", f"## {grid.dataset} (seeds {', '.join(map(str, grid.seeds))})", ""]
        lines += footprint_line(grid.alone)
        lines += ["### Standalone FL (Table 1 analogue) and the teachers", ""]
        lines += ["| teacher | best round % | final % | seeds |", "|---|---|---|---|"]
        for n in sorted(grid.names, key=lambda n: -mean_std(acc[n])[0] if acc[n] else 1):
            lines.append(f"| {n} | {cell(acc[n])} | {cell(grid.final[n])} | {len(acc[n])} |")
        lines += [
            "",
            (
                f"The student trained alone with cross-entropy on the proxy (no teacher, the same"
                f" schedule): {cell([r['best'] for r in grid.alone])} %."
            ),
        ]
        if "central" in grid.names:
            lines += ["", "### Standalone KD from the central teacher", ""]
            lines += ["| objective | " + " | ".join(MODES) + " |", "|---|---|---|---|"]
            for o in grid.objectives:
                cells = [cell(grid.student.get(("central", o, m), [])) for m in MODES]
                lines.append(f"| {o} | " + " | ".join(cells) + " |")
        lines += [
            "",
            "### Per objective and mode (Table 4 analogue)",
            "",
            (
                "chance = FedAvg after 0 rounds (the initial model); best = the FL or sweep"
                " teacher with the highest mean accuracy; range = max - min of the student over"
                " the FL and sweep teachers; r = Pearson between the student's and the teacher's"
                " mean accuracy over the 13 FL teachers (r13) and the 20 FL and sweep teachers"
                " (r20), and r20 within each seed (mean ± std over seeds)."
            ),
            "",
            (
                "| objective | mode | CE weight | label-free | chance teacher | best teacher | range |"
                " r13 | r20 | r20 per seed |"
            ),
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for row in table4_rows(grid):
            lines.append(
                f"| {row['objective']} | {row['mode']} | {row['ce_weight']:g}"
                f" | {'yes' if row['label_free'] else 'no'}"
                f" | {100 * row['chance']:.1f} | {100 * row['best']:.1f}"
                f" | {100 * row['range']:.1f} | {signed(row['r13'])} | {signed(row['r20'])}"
                f" | {spread(row['r20_per_seed'])} |"
            )
        for m in MODES:
            lines += ["", f"### Grid, mode {m}: student % by teacher (rows) and objective", ""]
            lines += ["| teacher (acc %) | " + " | ".join(grid.objectives) + " |"]
            lines += ["|---" * (len(grid.objectives) + 1) + "|"]
            for n in grid.names:
                if not acc[n]:
                    continue
                cells = [cell(grid.student.get((n, o, m), [])) for o in grid.objectives]
                lines.append(
                    f"| {n} ({100 * mean_std(acc[n])[0]:.1f}) | " + " | ".join(cells) + " |"
                )
        plot_grid(folder / f"grid-{grid.dataset}.png", grid)
        plot_scatter(folder / f"scatter-{grid.dataset}.png", grid)
    lines += ["", measured_where(folder)]
    return "\n".join(lines) + "\n"


def plot_grid(path: Path, grid: Grid) -> None:
    """A heat map of the student's mean accuracy by teacher and objective, one per mode."""
    rows = [n for n in grid.names if grid.acc[n]]
    objectives = grid.objectives
    fig = Figure(figsize=(6 * len(MODES), 0.35 * len(rows) + 2))
    axes = fig.subplots(1, len(MODES))
    for ax, m in zip(axes, MODES):
        means = [
            [100 * mean_std(grid.student.get((n, o, m), []))[0] for o in objectives] for n in rows
        ]
        values = np.array(means)
        image = ax.imshow(values, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(objectives)), objectives, rotation=60, ha="right")
        labels = [f"{n} ({100 * mean_std(grid.acc[n])[0]:.0f})" for n in rows]
        ax.set_yticks(range(len(rows)), labels)
        ax.set_title(f"student accuracy %, mode {m}")
        for i in range(len(rows)):
            for j in range(len(objectives)):
                if math.isfinite(values[i, j]):
                    ax.text(j, i, f"{values[i, j]:.0f}", ha="center", va="center", fontsize=6)
    fig.colorbar(image, ax=axes, shrink=0.6)
    fig.savefig(path, dpi=110, bbox_inches="tight")


def plot_scatter(path: Path, grid: Grid) -> None:
    """Student against teacher mean accuracy over the FL and sweep teachers, per objective,
    one marker per mode."""
    teachers = [n for n in grid.graded if grid.acc[n]]
    objectives = grid.objectives
    columns = 4
    rows = math.ceil(len(objectives) / columns)
    fig = Figure(figsize=(4 * columns, 3.6 * rows))
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, o in zip(axes.flat, objectives):
        for m, marker in zip(MODES, "os^"):
            points = [
                (
                    100 * mean_std(grid.acc[n])[0],
                    100 * mean_std(grid.student.get((n, o, m), []))[0],
                )
                for n in teachers
            ]
            points = [(x, y) for x, y in points if math.isfinite(y)]
            if points:
                ax.scatter(*zip(*points), marker=marker, label=m, alpha=0.7)
        ax.plot([0, 100], [0, 100], "k:", linewidth=0.8)
        ax.set_title(o)
        ax.set_xlabel("teacher %")
        ax.set_ylabel("student %")
        ax.set_xlim(0, 100)
        ax.set_ylim(0, 100)
    for ax in list(axes.flat)[len(objectives) :]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    return study_cli.main(Flkd(), RESULTS, __doc__, argv, write=write_table)


if __name__ == "__main__":
    raise SystemExit(main())
