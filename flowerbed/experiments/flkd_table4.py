"""Table 4 of the FL + KD benchmark (``papers.FLKD_TABLE_4``) in its reproduction
(``experiments.flkd``): a row's measurement, and what its rows give.

A Table 4 point is one data set (a column of Table 1, ``setting``) and a run is one seed of
it (``table4_row``): every teacher of the point is trained as Table 1 trains it (the paper's
settings for its strategy, ``flkd_stage1.method_config``) and kept at its best round
(``flkd_stage2.fl_teacher``, as the paper keeps its teachers), and a student is distilled from
it with every objective of the point in ``labeled`` mode (the paper's Table 4), on the whole
training split (``flkd_stage2.distill``), before the next teacher is trained. A row holds, in
%, per teacher ``teacher/<method>`` (its best round's test accuracy), ``teacher-final/...``
and ``teacher-round/...``, and per teacher and objective ``student/<method>/<objective>``
(the student's best epoch, the paper's metric), ``student-final/...`` and
``student-epoch/...``; ``seconds/<method>`` (the teacher and its students); ``result``
(``RESULT``: what sets the row apart from Table 1's, ``measures``).

From the rows (``grids``: one ``Grid`` per setting), per objective (``objective_results``):

* the weakest and the strongest teacher: of lowest and of highest mean accuracy over seeds
  (ties: the first in Table 1's order); the paper's are FedAvgM (at chance) and FedProx, but a
  teacher at chance need not exist here (``flowerbed``'s server optimisers do not always
  collapse);
* the student behind each, per seed;
* the range: max - min over the teachers of the student's mean over seeds, as the paper's;
* Pearson's r between the student's and the teacher's accuracy over the teachers: per seed,
  and of the means over seeds (the paper's). A student that is the same behind every teacher
  has r = 0 (no covariance: it does not move with the teacher), not an undefined value;
  teachers that are all the same give NaN (``pearson``).

``cells`` turns them into ``Cell``s (the paper's objective name; setting ``"<setting>, <column>"``
with the column ``papers.BEHIND_WEAKEST``, ``BEHIND_STRONGEST`` or ``R``), which the claims of
``papers.FLKD_TABLE_4`` are judged on (``flkd_table4_report``); ``grid_table`` is the
``table4.md`` of the study: per setting the student's accuracy behind every teacher, by
objective (the paper's Table A8).
"""

from __future__ import annotations

import math
import statistics
import tempfile
import time
from dataclasses import dataclass

from ..catalog import parse_run_config
from ..data.federation import load_splits
from ..inprocess import resolve_run_config
from ..kd.objectives import get_objective
from .driver import Value
from .flkd_stage1 import METHODS, method_config
from .flkd_stage2 import distill, fl_teacher, params_for, teacher_model
from .flkd_table import SETTINGS
from .papers import BEHIND_STRONGEST, BEHIND_WEAKEST, R
from .reproduction import Cell, Row
from .stats import same_within
from .study_runs import mean_std_cell

RESULT = "Table 4"
# the paper's name -> flowerbed's objective, in Table 4's order
OBJECTIVES = {
    "Vanilla KD": "vanilla",
    "Self-Distillation": "self",
    "Cosine Similarity": "cosine",
    "Contrastive (CRD)": "crd",
    "Logit-MSE": "logit-mse",
    "Decoupled KD": "dkd",
    "Feature KD": "feature",
    "Attention Transfer": "attention",
    "Relational KD": "rkd",
    "Similarity-Preserving": "sp",
}
PAPER_NAME = {key: name for name, key in OBJECTIVES.items()}
METHOD_ORDER = [name for name, _ in METHODS]


def measures(row: Row) -> bool:
    """Whether ``row`` is a Table 4 row (not Table 1's)."""
    return row.get("result") == RESULT


def table4_row(settings: dict, config: dict, clients: int) -> dict[str, Value]:
    """One seed of a Table 4 point (module docstring): ``config`` is its run config with the
    seed; ``settings`` name its ``teachers`` ((method, strategy) pairs), ``objectives``,
    ``student`` model, distillation ``epochs`` and ``setting``."""
    seed, student, epochs = config["seed"], settings["student"], settings["epochs"]
    data = load_splits(parse_run_config(resolve_run_config(config)))
    row: dict[str, Value] = {
        "result": RESULT,
        "setting": settings["setting"],
        "data": config["dataset"],
        "model": config["model"],
        "student": student,
        "epochs": epochs,
    }
    for name, strategy in settings["teachers"]:
        started = time.perf_counter()
        overrides = method_config(config, strategy)
        with tempfile.TemporaryDirectory(prefix="flowerbed-flkd-") as out:
            state, record = fl_teacher({**overrides, "output-dir": out}, clients)
        teacher = teacher_model(parse_run_config(resolve_run_config(overrides)), data, state)
        row |= {
            f"teacher/{name}": 100 * record["test_accuracy"],
            f"teacher-final/{name}": 100 * record["final_accuracy"],
            f"teacher-round/{name}": record["round"],
        }
        for objective in settings["objectives"]:
            spec = get_objective(objective)
            result = distill(teacher, data, spec, "labeled", epochs, seed, student)
            row |= {
                f"student/{name}/{objective}": 100 * result["best"],
                f"student-final/{name}/{objective}": 100 * result["final"],
                f"student-epoch/{name}/{objective}": result["best_epoch"],
            }
        row[f"seconds/{name}"] = time.perf_counter() - started
    return row


@dataclass(frozen=True)
class Grid:
    """One setting's Table 4 rows: the data set, teacher and student models they ran, the
    teachers' accuracy per seed (method -> {seed: %}, in Table 1's order) and the students'
    ((method, objective) -> {seed: %})."""

    setting: str
    ran_on: str
    teachers: dict[str, dict[int, float]]
    students: dict[tuple[str, str], dict[int, float]]

    def teacher_mean(self, method: str) -> float:
        return statistics.mean(self.teachers[method].values())

    @property
    def weakest(self) -> str:
        """The teacher of lowest mean accuracy (the first in Table 1's order on a tie)."""
        return min(self.teachers, key=self.teacher_mean)

    @property
    def strongest(self) -> str:
        """The teacher of highest mean accuracy (the first in Table 1's order on a tie)."""
        return max(self.teachers, key=self.teacher_mean)

    @property
    def objectives(self) -> list[str]:
        """flowerbed's objectives measured, in Table 4's order."""
        return [key for key in OBJECTIVES.values() if any(o == key for _, o in self.students)]

    @property
    def seeds(self) -> list[int]:
        return sorted({seed for by_seed in self.teachers.values() for seed in by_seed})


def grids(rows: list[Row]) -> list[Grid]:
    """One ``Grid`` per setting that Table 4 rows measure, in Table 1's order of settings."""
    found = []
    for setting in SETTINGS:
        mine = [row for row in rows if measures(row) and row["setting"] == setting]
        if not mine:
            continue
        teachers: dict[str, dict[int, float]] = {}
        students: dict[tuple[str, str], dict[int, float]] = {}
        for row in mine:
            seed = int(row["seed"])
            for key, value in row.items():
                kind, slash, rest = key.partition("/")
                if not slash:  # "student": the student's model
                    continue
                if kind == "teacher":
                    teachers.setdefault(rest, {})[seed] = float(value)
                elif kind == "student":
                    method, objective = rest.split("/")
                    students.setdefault((method, objective), {})[seed] = float(value)
        order = sorted(teachers, key=lambda m: METHOD_ORDER.index(m) if m in METHOD_ORDER else 99)
        first = mine[0]
        ran_on = f"{first['data']}: `{first['model']}` teachers, `{first['student']}` student"
        found.append(Grid(setting, ran_on, {m: teachers[m] for m in order}, students))
    return found


def pearson(teacher: list[float], student: list[float]) -> float:
    """Pearson's r of paired values: NaN under 3 pairs or where the teachers' values are all
    the same; 0 where the students' are (within ``stats.same_within(1)``: no covariance)."""
    if len(teacher) < 3 or max(teacher) - min(teacher) <= same_within(1):
        return math.nan
    if max(student) - min(student) <= same_within(1):
        return 0.0
    return statistics.correlation(teacher, student)


@dataclass(frozen=True)
class ObjectiveResult:
    """One objective's Table 4 numbers in one setting (module docstring): the paper's name and
    flowerbed's, the CE weight of its ``labeled`` mode, the student per seed behind the weakest
    and the strongest teacher, the range of the student's means, r per seed and of the
    means."""

    objective: str
    key: str
    ce_weight: float
    weakest: dict[int, float]
    strongest: dict[int, float]
    range: float
    r_per_seed: dict[int, float]
    r_of_means: float


def objective_results(grid: Grid) -> list[ObjectiveResult]:
    """Every objective's numbers in ``grid`` (module docstring)."""
    results = []
    for key in grid.objectives:
        by_teacher = {m: grid.students.get((m, key), {}) for m in grid.teachers}
        by_teacher = {m: by_seed for m, by_seed in by_teacher.items() if by_seed}
        means = {m: statistics.mean(by_seed.values()) for m, by_seed in by_teacher.items()}
        per_seed = {}
        for seed in grid.seeds:
            paired = [(grid.teachers[m][seed], s[seed]) for m, s in by_teacher.items() if seed in s]
            per_seed[seed] = pearson([t for t, _ in paired], [s for _, s in paired])
        results.append(
            ObjectiveResult(
                PAPER_NAME[key],
                key,
                get_objective(key).ce_weight(params_for("labeled")),
                dict(by_teacher.get(grid.weakest, {})),
                dict(by_teacher.get(grid.strongest, {})),
                max(means.values()) - min(means.values()),
                per_seed,
                pearson([grid.teacher_mean(m) for m in means], list(means.values())),
            )
        )
    return results


def column_setting(setting: str, column: str) -> str:
    """The setting of a Table 4 cell: the data setting and the column (``"Craniosynostosis,
    r"``)."""
    return f"{setting}, {column}"


def cells(rows: list[Row]) -> list[Cell]:
    """Per setting, objective and seed: the student behind the weakest and behind the
    strongest teacher, and r over the teachers of that seed (module docstring)."""
    found = []
    for grid in grids(rows):
        for result in objective_results(grid):
            for column, by_seed in (
                (BEHIND_WEAKEST, result.weakest),
                (BEHIND_STRONGEST, result.strongest),
                (R, result.r_per_seed),
            ):
                setting = column_setting(grid.setting, column)
                found += [Cell(result.objective, setting, s, v) for s, v in sorted(by_seed.items())]
    return found


def grid_table(rows: list[Row]) -> str:
    """``table4.md``: per setting, the teachers' best-round accuracy and the student's best
    epoch behind each, by objective, in %, mean ± sample std over seeds (n)."""
    lines = []
    for grid in grids(rows):
        seeds = ", ".join(map(str, grid.seeds))
        names = [PAPER_NAME[key] for key in grid.objectives]
        caption = (
            f"{grid.setting} ({grid.ran_on}; seeds {seeds}): the teacher's accuracy (%, its best"
            " round) and the student's behind it, by objective (%, its best epoch; `labeled`"
            " mode), mean ± sample std over seeds (n)."
        )
        lines += [
            caption,
            "",
            "| teacher | teacher % | " + " | ".join(names) + " |",
            "|---|---|" + "---|" * len(names),
        ]
        for method, by_seed in grid.teachers.items():
            students = [
                mean_std_cell(list(grid.students.get((method, key), {}).values()))
                for key in grid.objectives
            ]
            teacher = mean_std_cell(list(by_seed.values()))
            lines.append(f"| {method} | {teacher} | " + " | ".join(students) + " |")
        lines.append("")
    return "\n".join(lines)
