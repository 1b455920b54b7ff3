"""QFedFisher's reproduction study (``flowerbed.experiments.qfedfisher``): its grid per budget,
the cells it makes of rows, its regime, and the smoke budget end to end through the driver and
the reproduction report."""

import math

import pytest

from flowerbed.catalog import parse_run_config
from flowerbed.experiments import qfedfisher
from flowerbed.experiments.driver import BudgetError, read_rows, run_study
from flowerbed.experiments.reproduce import write_reproduction
from flowerbed.experiments.reproduction import Cell
from flowerbed.inprocess import resolve_run_config

METHODS = ("QFedAvg", "QFedAdam", "QFedFisher")


@pytest.mark.parametrize(
    ("budget", "data", "clients", "seeds"),
    [
        ("smoke", "digits", 10, [0, 1]),
        ("cpu", "mnist-5k", 100, [0, 1, 2, 3]),
        ("paper", "mnist", 100, [0, 1, 2]),
    ],
)
def test_the_grid_has_one_point_per_data_set(budget, data, clients, seeds):
    points, grid_seeds = qfedfisher.QFedFisherStudy().grid(budget)
    assert grid_seeds == seeds
    assert [p.name for p in points] == [data]
    settings = points[0].settings
    assert settings["setting"] == "MNIST" and settings["clients"] == clients
    config = settings["config"]
    assert config["dataset"] == data and config["model"] == "vqc"
    assert "strategy" not in config and "seed" not in config  # run sets them
    for _, strategy in qfedfisher.METHODS:  # every key is a run-config key, every value valid
        parse_run_config(resolve_run_config({**config, "strategy": strategy, "seed": 0}))


def test_the_cpu_and_paper_budgets_sample_the_papers_five_clients_a_round():
    study = qfedfisher.QFedFisherStudy()
    cpu = study.grid("cpu")[0][0].settings
    paper = study.grid("paper")[0][0].settings
    for settings in (cpu, paper):
        assert settings["config"]["fraction-train"] * settings["clients"] == pytest.approx(5)
    assert cpu["config"]["num-server-rounds"] == qfedfisher.CPU_ROUNDS
    assert cpu["config"]["vqc-layers"] == 20 and cpu["config"]["learning-rate"] == 0.01
    assert paper["config"]["num-server-rounds"] == 300
    assert paper["config"]["vqc-layers"] == 60
    assert paper["config"]["learning-rate"] == 1e-3
    assert paper["config"]["samples-per-client"] == 500
    assert paper["config"]["partitioner"] == "dirichlet-sized"
    assert paper["config"]["dirichlet-alpha"] == 0.5 and paper["config"]["qfedfisher-delta"] == 0.01
    assert paper["config"]["local-epochs"] == 1 and paper["config"]["batch-size"] == 32
    assert paper["config"]["vqc-init"] == "kaiming-uniform"
    # QFedAdam's server lr is ten times the clients': the default 0.01 at the paper's 1e-3
    assert cpu["config"]["adaptive-eta"] == pytest.approx(0.1)
    assert paper["config"]["adaptive-eta"] == pytest.approx(0.01)


def test_the_regimes_list_their_differences_from_the_paper():
    aspects = {b: {d.aspect for d in qfedfisher.regime(b)} for b in qfedfisher.BUDGETS}
    always = {"data", "QFedAdam's server optimiser", "seeds"}
    assert aspects["paper"] == always  # the paper's own MNIST setting otherwise
    assert aspects["cpu"] == always | {
        "samples per client",
        "VQC layers",
        "learning rate",
        "rounds",
    }
    assert {"clients", "participation"} <= aspects["smoke"]
    assert all(d.reason for b in qfedfisher.BUDGETS for d in qfedfisher.regime(b))
    data = next(d for d in qfedfisher.regime("cpu") if d.aspect == "data")
    assert "ADNI" in data.paper and "mnist-5k" in data.ours
    adam = next(d for d in qfedfisher.regime("cpu") if d.aspect == "QFedAdam's server optimiser")
    assert "server lr 0.1 " in adam.ours and "(defaults)" in adam.ours
    # the betas and tau are the defaults: no budget sets them
    assert not [k for b in qfedfisher.BUDGETS.values() for k in b.config if "adaptive" in k]
    rounds = next(d for d in qfedfisher.regime("cpu") if d.aspect == "rounds")
    assert (rounds.paper, rounds.ours) == ("300", str(qfedfisher.CPU_ROUNDS))


@pytest.mark.parametrize(
    "call",
    [qfedfisher.QFedFisherStudy().grid, qfedfisher.regime, qfedfisher.QFedFisherStudy().estimate],
)
def test_an_unknown_budget_is_a_budget_error(call):
    with pytest.raises(BudgetError, match="unknown budget 'huge'"):
        call("huge")


def test_the_estimates_grow_from_smoke_to_paper_and_the_cpu_budget_fits_two_hours():
    study = qfedfisher.QFedFisherStudy()
    smoke, cpu, paper = (study.estimate(b) for b in ("smoke", "cpu", "paper"))
    assert 0 < smoke < 60 < cpu < paper
    seeds = len(study.grid("cpu")[1])
    turns = math.ceil(seeds / 2)  # a run is one seed: 2 workers run them two at a time
    assert turns * cpu / seeds <= 2 * 3600
    # the arithmetic written down is the budget's
    assert f"({qfedfisher.CPU_ROUNDS} + 1) x 73 s" in qfedfisher.CPU_MEASUREMENT
    assert turns == 2 and f"{seeds} seeds take two turns" in qfedfisher.CPU_MEASUREMENT


def row(seed, setting="MNIST", **accuracies):
    return {"data": "mnist-5k", "setting": setting, "seed": seed, "point": "mnist-5k"} | {
        f"acc/{method}": value for method, value in accuracies.items()
    }


def test_cells_are_final_accuracies_in_percent_per_rule_and_seed():
    rows = [
        row(0, QFedAvg=0.5, QFedAdam=0.25, QFedFisher=0.125),
        row(1, QFedAvg=0.75, QFedFisher=0.375),
    ]
    assert qfedfisher.cells(rows) == [
        Cell("QFedAdam", "MNIST", 0, pytest.approx(25.0)),
        Cell("QFedAvg", "MNIST", 0, pytest.approx(50.0)),
        Cell("QFedAvg", "MNIST", 1, pytest.approx(75.0)),
        Cell("QFedFisher", "MNIST", 0, pytest.approx(12.5)),
        Cell("QFedFisher", "MNIST", 1, pytest.approx(37.5)),
    ]


def test_the_report_gives_mean_std_and_n_per_rule():
    rows = [
        row(0, QFedAvg=0.5) | {"loss/QFedAvg": 2.0, "kept/QFedFisher": 0.8},
        row(1, QFedAvg=0.7) | {"loss/QFedAvg": 1.0},
    ]
    table = qfedfisher.QFedFisherStudy().report(rows)["table.md"]
    assert "| QFedAvg | 60.0 ± 14.1 (n=2) | 1.500 ± 0.707 (n=2) | – | – |" in table
    assert "| QFedAdam | – | – | – | – |" in table
    assert "| QFedFisher | – | – | 80.0 | – |" in table


def test_the_kept_share_leaves_out_round_one_and_runs_without_the_rule():
    history = [{"round": 0}] + [
        {"round": r, "client_fisher_kept_fraction_mean": share}
        for r, share in ((1, 0.0), (2, 0.5), (3, 0.7))
    ]
    assert qfedfisher.kept_share(history) == pytest.approx(0.6)
    assert qfedfisher.kept_share([{"round": 0}, {"round": 1}, {"round": 2}]) is None


def test_a_missing_data_set_fails_naming_its_path(tmp_path):
    point = qfedfisher.QFedFisherStudy().grid("paper")[0][0]
    point.settings["config"]["data-dir"] = str(tmp_path)
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        qfedfisher.QFedFisherStudy().run(point, 0)


def test_the_smoke_budget_runs_end_to_end_through_the_driver_and_the_report(tmp_path):
    tables = run_study(qfedfisher.REPRODUCTION.study, tmp_path, "smoke", say=lambda line: None)
    rows = read_rows(tmp_path)
    assert not [r for r in rows if "failed" in r]
    assert sorted((r["point"], r["seed"]) for r in rows) == [("digits", 0), ("digits", 1)]
    for r in rows:  # the three rules start from one initial model
        assert len({r[f"initial-acc/{method}"] for method in METHODS}) == 1
        assert 0 <= r["kept/QFedFisher"] <= 1
    cells = qfedfisher.REPRODUCTION.cells(rows)
    assert {(c.method, c.setting, c.seed) for c in cells} == {
        (method, "MNIST", seed) for method in METHODS for seed in (0, 1)
    }
    assert all(0 <= c.value <= 100 for c in cells)
    assert (tmp_path / "table.md").read_text() == tables["table.md"]
    lines = write_reproduction(qfedfisher.REPRODUCTION, tmp_path, "smoke")
    assert [line.split(":")[0] for line in lines] == [
        "QFedFisher ahead of QFedAvg (ADNI)",
        "QFedFisher ahead of QFedAdam (ADNI)",
        "QFedFisher ahead of QFedAvg (MNIST)",
        "QFedFisher ahead of QFedAdam (MNIST)",
    ]
    assert "order holds in 0 of 0 seeds" in lines[0]  # ADNI: not measured
    assert "of 2 seeds" in lines[2] and "of 2 seeds" in lines[3]
    page = (tmp_path / "reproduction.md").read_text()
    for method, number in (("QFedAvg", "84.8"), ("QFedAdam", "86.3"), ("QFedFisher", "91.2")):
        assert f"| {method} | MNIST | {number} | " in page
        assert f"| {method} | ADNI |" in page and "| not measured |" in page
    assert "scikit-learn digits" in page
