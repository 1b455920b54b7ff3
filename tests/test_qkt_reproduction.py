"""QKT's reproduction study (``flowerbed.experiments.qkt``): its grid per budget, the cells it
makes of rows, its regime, and the smoke budget end to end through the driver."""

import logging
import os

import pytest
import torch

from flowerbed.experiments import qkt, study_runs
from flowerbed.experiments.driver import BudgetError, read_rows, run_study
from flowerbed.experiments.papers import PAPERS
from flowerbed.experiments.reproduction import Cell

SETTINGS = ["single-class, Path", "multi-class, Path", "single-class, Dir", "multi-class, Dir"]
PAPER_METHODS = {row.method for row in PAPERS["qkt"].rows}


@pytest.mark.parametrize(
    ("budget", "data", "seeds"),
    [
        ("smoke", ["digits"], [0, 1]),
        ("cpu", ["mnist-5k"], [0, 1, 2]),
        ("paper", ["cifar10", "bloodmnist", "pathmnist"], [0, 1, 2]),
    ],
)
def test_the_grid_has_one_point_per_data_set_partition_and_query(budget, data, seeds):
    points, grid_seeds = qkt.QktStudy().grid(budget)
    assert grid_seeds == seeds
    assert [p.name for p in points] == [
        f"{d}-{partition}-{query}"
        for d in data
        for partition in ("Path", "Dir")
        for query in ("single", "multi")
    ]
    for point in points:
        config = point.settings["config"]
        assert config["dataset"] == point.settings["data"]
        assert config["kt-query"] == point.settings["query"]
        assert (
            config["partitioner"]
            == {"Path": "pathological", "Dir": "dirichlet"}[point.settings["partition"]]
        )
        assert config["optimizer"] == "adam" and config["batch-size"] == 32


def test_the_budgets_differ_as_their_regimes_say():
    study = qkt.QktStudy()
    smoke = study.grid("smoke")[0][0].settings
    cpu = study.grid("cpu")[0][0].settings
    paper = {p.settings["data"]: p.settings for p in study.grid("paper")[0]}
    assert smoke["fedavg-rounds"] == 2 and smoke["config"]["kt-local-max-epochs"] == 2
    assert cpu["fedavg-rounds"] == qkt.CPU_FEDAVG_ROUNDS
    assert cpu["config"]["kt-local-max-epochs"] == 100 and cpu["config"]["kt-epochs"] == 10
    assert paper["cifar10"]["fedavg-rounds"] == 100
    assert paper["cifar10"]["config"]["kt-epochs"] == 25
    assert paper["pathmnist"]["config"]["kt-epochs"] == 10
    assert paper["bloodmnist"]["config"]["model"] == "resnet18"
    assert "model" not in cpu["config"]  # the data set's own (cnn), a regime difference
    aspects = {budget: {d.aspect for d in qkt.regime(budget)} for budget in qkt.BUDGETS}
    assert {"data", "model", "FedAvg rounds", "seeds"} <= aspects["cpu"]
    assert {"local training", "epochs"} <= aspects["smoke"]
    assert "model" not in aspects["paper"] and "FedAvg rounds" not in aspects["paper"]


@pytest.mark.parametrize("call", ["grid", "regime"])
def test_an_unknown_budget_is_a_budget_error(call):
    function = qkt.QktStudy().grid if call == "grid" else qkt.regime
    with pytest.raises(BudgetError, match="unknown budget 'huge'"):
        function("huge")


def row(data, setting, seed, **accuracies):
    return {"data": data, "setting": setting, "seed": seed, "point": f"{data}-x"} | {
        f"acc/{method}": value for method, value in accuracies.items()
    }


def test_cells_are_accuracies_in_percent_averaged_over_data_sets_within_a_seed():
    rows = [
        row("a", "single-class, Path", 0, QKT=0.5, KD=0.25, Local=0.1),
        row("b", "single-class, Path", 0, QKT=0.7, KD=0.35, Local=0.3),
        row("a", "single-class, Path", 1, QKT=0.9, KD=0.45),
        row("a", "multi-class, Dir", 0, QKT=0.125),
    ]
    assert sorted(qkt.cells(rows), key=lambda c: (c.setting, c.method, c.seed)) == [
        Cell("QKT", "multi-class, Dir", 0, pytest.approx(12.5)),
        Cell("KD", "single-class, Path", 0, pytest.approx(30.0)),
        Cell("KD", "single-class, Path", 1, pytest.approx(45.0)),
        Cell("QKT", "single-class, Path", 0, pytest.approx(60.0)),
        Cell("QKT", "single-class, Path", 1, pytest.approx(90.0)),
    ]  # Local is the study's reference, not a cell of the paper's table


def test_the_report_gives_mean_std_and_n_per_method_and_setting():
    rows = [
        row("a", "single-class, Path", 0, QKT=0.5),
        row("a", "single-class, Path", 1, QKT=0.7),
    ]
    table = qkt.QktStudy().report(rows)["table.md"]
    assert "| QKT | 60.0 ± 14.1 (n=2) | – | – | – |" in table
    assert "| KD | – | – | – | – |" in table


def test_a_missing_data_set_fails_naming_its_path(tmp_path):
    point = next(p for p in qkt.QktStudy().grid("paper")[0] if p.settings["data"] == "bloodmnist")
    point.settings["config"]["data-dir"] = str(tmp_path)
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "bloodmnist.npz")):
        qkt.QktStudy().run(point, 0)


def test_the_smoke_budget_runs_end_to_end_through_the_driver(tmp_path):
    tables = run_study(qkt.REPRODUCTION.study, tmp_path, "smoke", say=lambda line: None)
    rows = read_rows(tmp_path)
    assert not [r for r in rows if "failed" in r]
    cells = qkt.REPRODUCTION.cells(rows)
    assert {(c.method, c.setting, c.seed) for c in cells} == {
        (method, setting, seed)
        for method in PAPER_METHODS
        for setting in SETTINGS
        for seed in (0, 1)
    }
    assert all(0 <= c.value <= 100 for c in cells)
    assert len({c.value for c in cells}) > 1  # not one constant
    assert (tmp_path / "table.md").read_text() == tables["table.md"]
    assert "(n=2)" in tables["table.md"]


def test_runs_use_one_thread_no_report_and_few_log_lines_and_leave_all_as_they_were(monkeypatch):
    monkeypatch.delenv(study_runs.REPORT_SWITCH, raising=False)
    threads, level = torch.get_num_threads(), study_runs.FLOWER_LOGGER.level
    with study_runs.one_thread_quietly():
        assert torch.get_num_threads() == 1
        assert os.environ[study_runs.REPORT_SWITCH] == "0"
        assert not study_runs.FLOWER_LOGGER.isEnabledFor(logging.INFO)  # the rounds' lines
        assert study_runs.FLOWER_LOGGER.isEnabledFor(logging.WARNING)
    assert torch.get_num_threads() == threads
    assert study_runs.REPORT_SWITCH not in os.environ
    assert study_runs.FLOWER_LOGGER.level == level
