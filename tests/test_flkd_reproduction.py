"""The FL + KD benchmark's reproduction (``flowerbed.experiments.flkd``), Table 1 and Table 4:
its grid per budget, the cells it makes of rows, the best round of a history, its regimes, a
missing data set, and the smoke budget (both tables) end to end through the driver and the
report."""

import math
from pathlib import Path

import pytest
import torch

from flowerbed.experiments import flkd
from flowerbed.experiments.driver import BudgetError, missing_runs, read_rows, run_study
from flowerbed.experiments.flkd_table4 import OBJECTIVES, RESULT
from flowerbed.experiments.papers import FLKD_TABLE_4, PAPERS
from flowerbed.experiments.reproduce import write_reproduction
from flowerbed.experiments.reproduction import Cell
from flowerbed.models import build_model
from flowerbed.models.classifier import parameter_count

PAPER = PAPERS["flkd"]
TABLE_METHODS = {row.method for row in PAPER.rows}


@pytest.mark.parametrize(
    ("budget", "points", "seeds", "models"),
    [
        ("smoke", ["digits"], [7, 42], ["mlp"]),
        ("cpu", ["digits", "breast-cancer"], [7, 42, 123], ["cnn-bn", "mlp"]),
        ("paper", ["modelnet40"], [7, 42, 123], ["pointnet2"]),
    ],
)
def test_the_grid_has_two_points_per_data_set_on_five_label_sorted_clients(
    budget, points, seeds, models
):
    grid, grid_seeds = flkd.FlkdStudy().grid(budget)
    assert [p.name for p in grid] == points + [f"table4-{p}" for p in points]
    assert grid_seeds == seeds
    assert [p.settings["config"]["model"] for p in grid] == models * 2  # the same teachers
    for point in grid:
        config = point.settings["config"]
        assert config["dataset"] == point.name.removeprefix("table4-")
        assert config["partitioner"] == "label-sorted" and config["batch-size"] == 24
        assert config["optimizer"] == "adam" and config["learning-rate"] == 1e-3
        assert (point.settings.get("result") == RESULT) == point.name.startswith("table4-")


@pytest.mark.parametrize(
    ("budget", "students", "epochs", "teachers", "objectives"),
    [
        ("smoke", ["mlp-small"], 2, 3, 4),
        ("cpu", ["cnn-small", "mlp-small"], flkd.CPU_DISTILL_EPOCHS, 13, 10),
        ("paper", ["pointnet2-small"], 200, 13, 10),
    ],
)
def test_a_table_4_point_distils_a_student_behind_every_teacher_with_every_objective(
    budget, students, epochs, teachers, objectives
):
    table4 = [p.settings for p in flkd.FlkdStudy().grid(budget)[0] if "result" in p.settings]
    assert [s["student"] for s in table4] == students
    for settings in table4:
        assert settings["epochs"] == epochs
        assert len(settings["teachers"]) == teachers and len(settings["objectives"]) == objectives
        assert set(settings["objectives"]) <= set(OBJECTIVES.values())
        named = dict(settings["teachers"])  # Table 1's names and strategies
        assert {"FedProx", "FedAvgM"} <= set(named) and named["FedAvgM"] == "fedavgm"
    smoke = table4[0] if budget == "smoke" else None
    if smoke is not None:  # the objectives of every judged claim, behind the paper's teachers
        claimed = {o for b, w, _ in FLKD_TABLE_4.claims for o in (b, w)}
        assert {OBJECTIVES[name] for name in claimed} == set(smoke["objectives"])


@pytest.mark.parametrize(("model", "student"), [("cnn-bn", "cnn-small"), ("mlp", "mlp-small")])
def test_the_cpu_students_are_about_a_quarter_of_their_teachers(model, student):
    shape = (1, 8, 8) if model == "cnn-bn" else (30,)
    teacher, small = (parameter_count(build_model(m, shape, 10)) for m in (model, student))
    assert 0.2 < small / teacher < 0.3


def test_the_budgets_differ_as_their_regimes_say():
    study = flkd.FlkdStudy()
    smoke = study.grid("smoke")[0][0].settings
    cpu = {p.name: p.settings for p in study.grid("cpu")[0]}
    paper = study.grid("paper")[0][0].settings
    assert smoke["config"]["num-server-rounds"] == 1 and smoke["central-epochs"] == 1
    assert {name for name, _, _ in smoke["methods"]} == TABLE_METHODS - {"Centralized"}
    for settings in (cpu["digits"], paper):
        assert settings["config"]["num-server-rounds"] == 20
        assert settings["config"]["local-epochs"] == 5
        assert len(settings["methods"]) == 13 + 4  # the server optimisers twice: batch norm
    assert len(cpu["breast-cancer"]["methods"]) == 13  # mlp: no batch norm, no second rule
    assert cpu["digits"]["central-epochs"] == 40 and paper["central-epochs"] == 200
    settings = ["ModelNet40", "Craniosynostosis"]
    assert [p.settings["setting"] for p in study.grid("cpu")[0]] == settings * 2  # Table 4 too
    aspects = {budget: {d.aspect for d in flkd.regime(budget)} for budget in flkd.BUDGETS}
    assert {"data", "model", "rounds", "methods", "seeds", "augmentation"} <= aspects["smoke"]
    assert {"data", "model", "Centralized epochs", "augmentation"} <= aspects["cpu"]
    assert not {"rounds", "methods", "seeds"} & aspects["cpu"]
    assert not {"rounds", "Centralized epochs", "augmentation"} & aspects["paper"]
    assert {"server optimisers", "MOON"} <= aspects["paper"]


def test_table_4s_regime_says_how_each_budget_differs():
    aspects = {b: [d.aspect for d in flkd.table4_regime(b)] for b in flkd.BUDGETS}
    always = {"data", "student", "teacher kept", "weakest and strongest teacher", "r"}
    always |= {"Self-Distillation", "server optimisers", "MOON", "teachers' model"}
    for budget, found in aspects.items():
        assert len(found) == len(set(found)) and always <= set(found), budget
    smoke_only = {"teachers", "objectives", "rounds", "seeds"}
    assert smoke_only <= set(aspects["smoke"])
    assert not smoke_only & set(aspects["cpu"]) and not smoke_only & set(aspects["paper"])
    assert "distillation epochs" in aspects["cpu"] and "distillation epochs" not in aspects["paper"]
    assert "augmentation" in aspects["cpu"] and "augmentation" not in aspects["paper"]


def test_the_server_optimisers_run_with_both_buffer_rules_on_a_batch_norm_model():
    settings = flkd.FlkdStudy().grid("cpu")[0][0].settings
    methods = {name: (strategy, buffers) for name, strategy, buffers in settings["methods"]}
    assert methods["FedAvgM"] == ("fedavgm", "optimize")  # the paper's code
    assert methods["FedAvgM (BN averaged)"] == ("fedavgm", "average")  # flowerbed's
    assert methods["FedYogi (BN averaged)"] == ("fedyogi", "average")
    assert "FedAvg (BN averaged)" not in methods


@pytest.mark.parametrize(("model", "has"), [("cnn-bn", True), ("pointnet2", True), ("mlp", False)])
def test_the_batch_norm_models_are_those_with_batch_norm(model, has):
    shape = (16, 3) if model == "pointnet2" else (1, 8, 8)
    built = build_model(model, shape, 4)
    assert any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in built.modules()) == has
    assert (model in flkd.BATCH_NORM_MODELS) == has


@pytest.mark.parametrize(("call", "budget"), [("grid", "huge"), ("regime", "huge")])
def test_an_unknown_budget_is_a_budget_error(call, budget):
    function = flkd.FlkdStudy().grid if call == "grid" else flkd.regime
    with pytest.raises(BudgetError, match="unknown budget 'huge'; valid: smoke, cpu, paper"):
        function(budget)


def history(*accuracies):
    return [{"round": r, "central_accuracy": a} for r, a in enumerate(accuracies)]


def test_the_best_round_leaves_out_round_zero_and_rounds_without_a_finite_accuracy():
    assert flkd.best_of(history(0.9, 0.5, 0.7, math.nan, 0.1)) == (2, pytest.approx(70.0), 10.0)
    assert flkd.best_of(history(0.1, 0.6, 0.6)) == (1, pytest.approx(60.0), 60.0)  # the earliest
    round_, best, final = flkd.best_of(history(0.1, math.nan))
    assert round_ == 0 and math.isnan(best) and math.isnan(final)


def row(setting, seed, **accuracies):
    return {"setting": setting, "seed": seed, "data": "d", "model": "m", "point": "d"} | {
        f"acc/{method}": value for method, value in accuracies.items()
    }


def test_cells_are_the_table_methods_best_round_accuracies_per_setting_and_seed():
    rows = [
        row("ModelNet40", 7, FedAvg=50.0, FedNova=60.0, Ditto=55.0, Centralized=90.0),
        row("ModelNet40", 42, FedAvg=52.0),
        row("Craniosynostosis", 7, FedAvg=70.0) | {"acc/FedAvgM (BN averaged)": 1.0},
    ]
    assert flkd.cells(rows) == [
        Cell("Centralized", "ModelNet40", 7, 90.0),
        Cell("FedAvg", "Craniosynostosis", 7, 70.0),
        Cell("FedAvg", "ModelNet40", 7, 50.0),
        Cell("FedAvg", "ModelNet40", 42, 52.0),
        Cell("FedNova", "ModelNet40", 7, 60.0),
    ]  # Ditto and the (BN averaged) reference are not cells of the paper's table


def test_the_table_gives_best_and_final_mean_std_and_n():
    rows = [
        row("ModelNet40", 7, FedAvg=50.0) | {"final/FedAvg": 40.0},
        row("ModelNet40", 42, FedAvg=60.0) | {"final/FedAvg": 40.0},
    ]
    table = flkd.FlkdStudy().report(rows)["table.md"]
    assert "| ModelNet40 (d, m): best | final |" in table
    assert "| FedAvg | 55.0 ± 7.1 (n=2) | 40.0 ± 0.0 (n=2) |" in table
    assert "MOON" not in table  # no row of it anywhere


def test_a_missing_data_set_fails_naming_its_path(tmp_path):
    point = flkd.FlkdStudy().grid("paper")[0][0]
    point.settings["config"]["data-dir"] = str(tmp_path)
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "modelnet40_normal_resampled")):
        flkd.FlkdStudy().run(point, 7)


def test_the_estimate_is_the_measured_seconds_per_run_over_the_grid():
    study = flkd.FlkdStudy()
    per_run = flkd.SECONDS_PER_RUN["cpu"]
    points = ["digits", "breast-cancer", "table4-digits", "table4-breast-cancer"]
    assert study.estimate("cpu") == 3 * sum(per_run[p] for p in points)
    assert math.isnan(study.estimate("paper"))  # not measured: no ModelNet40 here


def test_the_committed_table_1_rows_stay_valid_and_a_resumed_cpu_run_adds_only_table_4():
    folder = Path(__file__).resolve().parent.parent / "reproductions" / "flkd-cpu"
    rows = read_rows(folder)
    assert flkd.FlkdStudy().report(rows)["table.md"] == (folder / "table.md").read_text()
    assert missing_runs(flkd.FlkdStudy(), folder, "cpu") == {
        (f"table4-{data}", seed) for data in ("digits", "breast-cancer") for seed in (7, 42, 123)
    }


def test_the_smoke_budget_runs_end_to_end_through_the_driver_and_the_report(tmp_path):
    tables = run_study(flkd.REPRODUCTION.study, tmp_path, "smoke", say=lambda line: None)
    rows = read_rows(tmp_path)
    assert not [r for r in rows if "failed" in r]
    assert sorted((r["point"], r["seed"]) for r in rows) == [
        ("digits", 7),
        ("digits", 42),
        ("table4-digits", 7),
        ("table4-digits", 42),
    ]
    table1, (table4,) = flkd.REPRODUCTION.rows_of(rows)
    assert {r["point"] for r in table1} == {"digits"} and len(table4) == 2
    cells = flkd.REPRODUCTION.cells(table1)
    assert {(c.method, c.setting, c.seed) for c in cells} == {
        (method, "ModelNet40", seed) for method in TABLE_METHODS for seed in (7, 42)
    }
    assert all(0 <= c.value <= 100 for c in cells)
    assert len({c.value for c in cells}) > 1  # not one constant
    assert "(n=2)" in tables["table.md"]
    for row in table4:  # 3 teachers and a student behind each with each of 4 objectives
        teachers = [k for k in row if k.startswith("teacher/")]
        students = [k for k in row if k.startswith("student/")]
        assert len(teachers) == 3 and len(students) == 3 * 4
        assert all(0 <= row[k] <= 100 for k in teachers + students)
        assert len({row[k] for k in students}) > 1
    assert "| FedAvgM |" in tables["table4.md"] and "Attention Transfer" in tables["table4.md"]
    lines = write_reproduction(flkd.REPRODUCTION, tmp_path, "smoke")
    text = (tmp_path / "reproduction.md").read_text()
    assert "92.26" in text and "76.32" in text  # the paper's ModelNet40 numbers
    measured = [c for c in PAPER.claims if c[2] == "ModelNet40"]
    for better, worse, setting in measured:
        name = f"{better} ahead of {worse} ({setting})"
        assert any(line.startswith(name + ": ") for line in lines)
        assert name in text
    title = FLKD_TABLE_4.title
    assert text.index("## The paper's claims") < text.index(f"## {title}: the paper's numbers")
    assert "| Similarity-Preserving | 0 / 0 | 25 |" in text  # the paper's row, ours beside
    assert "ModelNet40 (digits: `mlp` teachers, `mlp-small` student; seeds 7, 42)" in text
    for better, worse, column in FLKD_TABLE_4.claims:  # Table 4's column is not measured
        name = f"{better} ahead of {worse} (Craniosynostosis, {column})"
        assert any(line.startswith(name + ": not judged") for line in lines)
    assert f"## {title}: regime" in (tmp_path / "reproduction.md").read_text()
    assert title in (tmp_path / "report.html").read_text()
