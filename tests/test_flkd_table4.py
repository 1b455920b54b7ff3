"""Table 4 of the FL + KD benchmark's reproduction (``flowerbed.experiments.flkd_table4`` and
``flkd_table4_report``) on hand-made rows: the weakest and the strongest teacher, the range,
r per seed and of the means, the cells, the verdicts on the paper's claims, what is shown and
not judged, and the objectives' CE weights against the paper's."""

import math
import statistics

import pytest

from flowerbed.experiments.document import markdown
from flowerbed.experiments.flkd import FlkdStudy
from flowerbed.experiments.flkd_stage2 import params_for
from flowerbed.experiments.flkd_table4 import (
    OBJECTIVES,
    RESULT,
    cells,
    grid_table,
    grids,
    objective_results,
    pearson,
)
from flowerbed.experiments.flkd_table4_report import SummaryReproduction
from flowerbed.experiments.papers import BEHIND_WEAKEST, FLKD_TABLE_4, R
from flowerbed.experiments.reproduction import Cell
from flowerbed.kd.objectives import get_objective

CRANIO = "Craniosynostosis"
SEEDS = (7, 42, 123)
# per teacher and seed, the teacher's accuracy: FedAvgM the weakest, FedProx the strongest
TEACHERS = {
    "FedProx": (90.0, 92.0, 91.0),
    "FedAvg": (80.0, 79.0, 83.0),
    "FedMedian": (60.0, 64.0, 61.0),
    "FedAvgM": (30.0, 35.0, 31.0),
}
# per objective, a student behind each teacher and seed: the hard-label ones near the ceiling
# whatever the teacher, the pure-transfer ones near the teacher, with noise that differs by seed
NOISE = {"FedProx": (1.0, -2.0, 0.5), "FedAvg": (-1.0, 1.5, 0.0), "FedMedian": (0.5, 0.0, -1.5)}


def student(objective: str, teacher: str, i: int) -> float:
    accuracy = TEACHERS[teacher][i]
    noise = NOISE.get(teacher, (0.0, 0.0, 0.0))[i]
    if objective == "vanilla":
        return 97.0 + noise / 2 + (i if teacher == "FedAvgM" else 0)
    if objective == "crd":
        return 98.0  # the same behind every teacher: r = 0
    if objective == "attention":
        return accuracy + noise
    return accuracy + 2 * noise  # sp


def row(seed_index: int, setting: str = CRANIO, objectives=("vanilla", "crd", "attention", "sp")):
    values = {
        "result": RESULT,
        "setting": setting,
        "data": "breast-cancer",
        "model": "mlp",
        "student": "mlp-small",
        "point": "table4-breast-cancer",
        "seed": SEEDS[seed_index],
        "seconds": 10.0,
    }
    for teacher, accuracies in TEACHERS.items():
        values[f"teacher/{teacher}"] = accuracies[seed_index]
        values[f"teacher-round/{teacher}"] = 3
        for objective in objectives:
            values[f"student/{teacher}/{objective}"] = student(objective, teacher, seed_index)
    return values


ROWS = [row(i) for i in range(3)]


def results_by_key(rows=ROWS):
    return {result.key: result for result in objective_results(grids(rows)[0])}


def test_the_weakest_and_the_strongest_teacher_are_those_of_lowest_and_highest_mean():
    (grid,) = grids(ROWS)
    assert grid.setting == CRANIO and grid.seeds == list(SEEDS)
    assert (grid.weakest, grid.strongest) == ("FedAvgM", "FedProx")
    assert list(grid.teachers) == ["FedProx", "FedAvg", "FedMedian", "FedAvgM"]  # Table 1's
    assert grid.objectives == ["vanilla", "crd", "attention", "sp"]  # Table 4's order


def test_a_tie_goes_to_the_first_teacher_in_table_1s_order():
    rows = [r | {"teacher/FedAvg": r["teacher/FedProx"]} for r in ROWS]
    assert grids(rows)[0].strongest == "FedProx"  # FedProx comes before FedAvg in Table 1
    rows = [r | {"teacher/FedMedian": r["teacher/FedAvgM"]} for r in ROWS]
    assert grids(rows)[0].weakest == "FedMedian"


def test_behind_each_teacher_range_and_r_per_seed_and_of_the_means():
    results = results_by_key()
    attention = results["attention"]
    assert attention.weakest == {7: 30.0, 42: 35.0, 123: 31.0}
    assert attention.strongest == {7: 91.0, 42: 90.0, 123: 91.5}
    means = {t: statistics.mean(student("attention", t, i) for i in range(3)) for t in TEACHERS}
    assert attention.range == pytest.approx(max(means.values()) - min(means.values()))
    for i, seed in enumerate(SEEDS):
        teachers = [TEACHERS[t][i] for t in TEACHERS]
        students = [student("attention", t, i) for t in TEACHERS]
        assert attention.r_per_seed[seed] == pytest.approx(
            statistics.correlation(teachers, students)
        )
    teacher_means = [statistics.mean(v) for v in TEACHERS.values()]
    assert attention.r_of_means == pytest.approx(
        statistics.correlation(teacher_means, list(means.values()))
    )
    assert 0.98 < attention.r_of_means < 1.0
    crd = results["crd"]
    assert crd.range == 0.0 and set(crd.r_per_seed.values()) == {0.0} and crd.r_of_means == 0.0
    assert results["vanilla"].ce_weight == 0.5 and attention.ce_weight == 0.0


def test_pearson_is_nan_without_three_pairs_or_varying_teachers_and_zero_for_a_fixed_student():
    assert math.isnan(pearson([1.0, 2.0], [3.0, 4.0]))
    assert math.isnan(pearson([5.0, 5.0, 5.0], [1.0, 2.0, 3.0]))
    assert pearson([1.0, 2.0, 3.0], [7.0, 7.0, 7.0]) == 0.0
    assert pearson([1.0, 2.0, 3.0], [2.0, 4.0, 6.5]) == pytest.approx(
        statistics.correlation([1.0, 2.0, 3.0], [2.0, 4.0, 6.5])
    )


def test_cells_name_the_papers_objectives_and_the_setting_and_column():
    found = cells(ROWS)
    weakest = f"{CRANIO}, {BEHIND_WEAKEST}"
    assert Cell("Attention Transfer", weakest, 42, 35.0) in found
    assert Cell("Contrastive (CRD)", f"{CRANIO}, {R}", 7, 0.0) in found
    assert {c.method for c in found} == {
        "Vanilla KD",
        "Contrastive (CRD)",
        "Attention Transfer",
        "Similarity-Preserving",
    }
    assert len(found) == 4 * 3 * 3  # objectives x columns x seeds


def lines_of(rows):
    part = SummaryReproduction(FLKD_TABLE_4, lambda budget: [])
    return dict(line.split(": ", 1) for line in part.lines(rows))


def test_the_claims_are_judged_by_paired_differences_in_the_papers_setting():
    lines = lines_of(ROWS)
    name = f"Vanilla KD ahead of Attention Transfer ({CRANIO}, {BEHIND_WEAKEST})"
    assert lines[name].startswith("reproduced (mean 66.00")  # 97 - 30, 98 - 35, 99 - 31
    name = f"Contrastive (CRD) ahead of Similarity-Preserving ({CRANIO}, {BEHIND_WEAKEST})"
    assert lines[name].startswith("reproduced")
    name = f"Attention Transfer ahead of Vanilla KD ({CRANIO}, {R})"
    assert lines[name].startswith("reproduced")  # r near 1 against r near 0, per seed
    name = f"Similarity-Preserving ahead of Contrastive (CRD) ({CRANIO}, {R})"
    assert lines[name].startswith("reproduced")


def test_a_claim_is_reversed_or_within_noise_as_the_students_are():
    name = f"Contrastive (CRD) ahead of Similarity-Preserving ({CRANIO}, {BEHIND_WEAKEST})"
    lower = [r | {"student/FedAvgM/crd": 10.0 + i} for i, r in enumerate(ROWS)]
    assert lines_of(lower)[name].startswith("reversed")  # 10, 11, 12 behind 30, 35, 31
    close = [
        r | {"student/FedAvgM/crd": r["student/FedAvgM/sp"] + d}
        for r, d in zip(ROWS, (1.0, -1.0, 0.5), strict=True)
    ]
    assert lines_of(close)[name].startswith("within noise")


def test_another_setting_is_shown_and_not_judged():
    rows = [row(i, "ModelNet40") for i in range(3)]
    assert cells(rows)  # measured
    lines = lines_of(rows)
    assert all(text.startswith("not judged") for text in lines.values())
    assert all("not measured here" in text for text in lines.values())
    part = SummaryReproduction(FLKD_TABLE_4, lambda budget: [])
    text = markdown("t", part.blocks(rows, "smoke"))
    assert f"{CRANIO}: not measured in this budget." in text
    assert "ModelNet40 (breast-cancer: `mlp` teachers, `mlp-small` student" in text
    assert "(Table 4 has no other): shown for reading, not judged" in text


def test_the_report_names_the_teachers_and_shows_the_papers_numbers_and_the_unjudged():
    part = SummaryReproduction(FLKD_TABLE_4, lambda budget: [])
    text = markdown("t", part.blocks(ROWS, "cpu"))
    assert "weakest teacher FedAvgM (32.0 %), strongest FedProx (91.0 %), of 4 teachers" in text
    assert "behind FedAvgM (25 %) as the weakest teacher and FedProx (75.83 %)" in text
    vanilla = next(line for line in text.splitlines() if line.startswith("| Vanilla KD |"))
    assert "| 0.5 / 0.5 | 97.5 |" in vanilla and "+0.37" in vanilla
    feature = next(line for line in text.splitlines() if line.startswith("| Feature KD |"))
    assert feature.count("not measured") == 5  # no row measures it
    unjudged = [line for line in text.splitlines() if "recover the student regardless" in line]
    assert len(unjudged) == 2  # Vanilla KD and CRD measured among the six
    assert "| track the teacher | Attention Transfer | Craniosynostosis | 3 |" in text
    assert "intervals exclude 0; about 0.2 would by chance alone" in text  # 4 judged claims


def test_the_study_writes_table4_md_only_from_table_4_rows():
    table1 = {"setting": "ModelNet40", "seed": 7, "data": "d", "model": "m", "acc/FedAvg": 50.0}
    tables = FlkdStudy().report([table1, *ROWS])
    assert "| FedAvg | 50.0 ± 0.0 (n=1) |" in tables["table.md"]
    assert "Craniosynostosis" not in tables["table.md"]  # Table 4's rows are not Table 1's
    assert tables["table4.md"] == grid_table(ROWS)
    assert "| FedAvgM | 32.0 ± 2.6 (n=3) |" in tables["table4.md"]
    assert set(FlkdStudy().report([table1])) == {"table.md"}


@pytest.mark.parametrize(("name", "key"), OBJECTIVES.items())
def test_each_objectives_ce_weight_is_the_papers(name, key):
    assert get_objective(key).ce_weight(params_for("labeled")) == FLKD_TABLE_4.row(name).ce_weight
