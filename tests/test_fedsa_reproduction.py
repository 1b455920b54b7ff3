"""FedSA's reproduction study (``flowerbed.experiments.fedsa``): its grid per budget, the cells
it makes of rows, its regime, and the smoke budget end to end through the driver and the
report."""

import math

import pytest

from flowerbed.catalog import parse_run_config
from flowerbed.experiments import fedsa
from flowerbed.experiments.driver import BudgetError, read_rows, run_study
from flowerbed.experiments.papers import PAPERS
from flowerbed.experiments.reproduce import write_reproduction
from flowerbed.experiments.reproduction import Cell
from flowerbed.inprocess import resolve_run_config

MEASURED = {"Scratch Training", "Transfer", "FedAvg+", "FedSA"}  # FedMD+ is not in flowerbed


@pytest.mark.parametrize(
    ("budget", "data", "settings", "seeds", "clients"),
    [
        ("smoke", "digits", ["1%", "100%"], [0, 1], 4),
        ("cpu", "mnist-5k", ["1%", "5%", "10%", "100%"], [0, 1, 2], 10),
        ("paper", "cifar10", ["1%", "5%", "10%", "100%"], [0, 1, 2], 10),
    ],
)
def test_the_grid_has_one_point_per_labelled_share(budget, data, settings, seeds, clients):
    points, grid_seeds = fedsa.FedsaStudy().grid(budget)
    assert grid_seeds == seeds
    assert [p.name for p in points] == [f"{data}-{s}" for s in settings]
    for point in points:
        config = point.settings["config"]
        assert config["dataset"] == data and config["strategy"] == "fedsa"
        assert config["partitioner"] == "iid" and config["server-fraction"] == 0.5
        assert point.settings["share"] == fedsa.SHARES[point.settings["setting"]]
        assert point.settings["clients"] == clients
        assert 0 < config["fedsa-foreign-teachers"] < clients


def test_the_budgets_differ_as_their_regimes_say():
    study = fedsa.FedsaStudy()
    smoke, cpu, paper = (study.grid(b)[0][0].settings for b in ("smoke", "cpu", "paper"))
    assert smoke["config"]["num-server-rounds"] == 1 and smoke["config"]["model"] == "mlp"
    assert cpu["config"]["num-server-rounds"] == fedsa.CPU_ROUNDS
    assert cpu["config"]["model"] == "cnn" and cpu["adapt-steps"] == fedsa.CPU_ADAPT_STEPS
    assert paper["config"]["num-server-rounds"] == 50 and paper["config"]["model"] == "resnet18"
    assert paper["config"]["fedsa-local-epochs"] == 10 and paper["adapt-steps"] is None
    aspects = {budget: {d.aspect for d in fedsa.regime(budget)} for budget in fedsa.BUDGETS}
    shared = {"teachers' data", "labelled share", "task adaptation", "methods", "model", "rounds"}
    assert shared | {"data", "seeds"} <= aspects["cpu"]
    assert shared <= aspects["paper"] and shared <= aspects["smoke"]
    paper_data = next(d for d in fedsa.regime("paper") if d.aspect == "data")
    assert "CIFAR-10" in paper_data.ours
    assert all(d.reason for budget in fedsa.BUDGETS for d in fedsa.regime(budget))


def test_the_cpu_budget_is_estimated_to_fit_two_hours_with_two_workers():
    study = fedsa.FedsaStudy()
    assert 0 < study.estimate("cpu") / 2 <= 2 * 3600
    assert 0 < study.estimate("smoke") < 60
    assert math.isnan(study.estimate("paper"))  # never measured


@pytest.mark.parametrize("call", ["grid", "regime", "estimate"])
def test_an_unknown_budget_is_a_budget_error(call):
    function = {
        "grid": fedsa.FedsaStudy().grid,
        "regime": fedsa.regime,
        "estimate": fedsa.FedsaStudy().estimate,
    }[call]
    with pytest.raises(BudgetError, match="unknown budget 'huge'"):
        function("huge")


def test_labelled_shares_of_the_servers_half_of_mnist_5k():
    point = fedsa.FedsaStudy().grid("cpu")[0][0]
    config = parse_run_config(resolve_run_config({**point.settings["config"], "seed": 0}))
    ks = [fedsa.labels_per_class(config, share) for share in fedsa.SHARES.values()]
    assert ks == [2, 10, 20, 200]  # 200 images per class in the server's half
    # the adaptation's 30 epochs, at most CPU_ADAPT_STEPS steps: 63 batches of 32 at 100 %
    assert fedsa.adapt_epochs(config, 20, 250) == 30
    assert fedsa.adapt_epochs(config, 2000, 250) == 4
    assert fedsa.adapt_epochs(config, 2000, 10) == 1


def row(setting, seed, accuracies):
    return {"setting": setting, "seed": seed, "point": f"x-{setting}"} | {
        f"acc/{method}": value for method, value in accuracies.items()
    }


def test_cells_are_accuracies_in_percent_per_method_share_and_seed():
    rows = [
        row("1%", 0, {"FedSA": 0.5, "Transfer": 0.25, "Scratch Training": 0.125}),
        row("1%", 1, {"FedSA": 0.75}),
        row("100%", 0, {"FedAvg+": 0.9}),
    ]
    assert sorted(fedsa.cells(rows), key=lambda c: (c.setting, c.method, c.seed)) == [
        Cell("FedSA", "1%", 0, pytest.approx(50.0)),
        Cell("FedSA", "1%", 1, pytest.approx(75.0)),
        Cell("Scratch Training", "1%", 0, pytest.approx(12.5)),
        Cell("Transfer", "1%", 0, pytest.approx(25.0)),
        Cell("FedAvg+", "100%", 0, pytest.approx(90.0)),
    ]


def test_the_foreign_share_counts_multiplicities_over_selections():
    log = {
        "teachers": [{"partition": p, "foreign": p >= 2} for p in range(4)],
        "selections": [{"selected": {"0": 1, "3": 2}}, {"selected": {"2": 1, "1": 2}}],
    }
    assert fedsa.foreign_share(log) == pytest.approx(3 / 6)


def test_a_missing_data_set_fails_naming_its_path(tmp_path):
    point = fedsa.FedsaStudy().grid("paper")[0][0]
    point.settings["config"] = {**point.settings["config"], "data-dir": str(tmp_path)}
    with pytest.raises(FileNotFoundError, match=str(tmp_path)):
        fedsa.FedsaStudy().run(point, 0)


def test_the_smoke_budget_runs_end_to_end_through_the_driver_and_the_report(tmp_path):
    tables = run_study(fedsa.REPRODUCTION.study, tmp_path, "smoke", say=lambda line: None)
    rows = read_rows(tmp_path)
    assert not [r for r in rows if "failed" in r]
    assert {(r["point"], r["seed"]) for r in rows} == {
        (f"digits-{s}", seed) for s in ("1%", "100%") for seed in (0, 1)
    }
    cells = fedsa.REPRODUCTION.cells(rows)
    assert {(c.method, c.setting, c.seed) for c in cells} == {
        (m, s, seed) for m in MEASURED for s in ("1%", "100%") for seed in (0, 1)
    }
    assert all(0 <= c.value <= 100 for c in cells)
    assert len({c.value for c in cells}) > 1  # not one constant
    assert all(0 <= r["foreign/FedSA"] <= 1 for r in rows)
    assert (tmp_path / "table.md").read_text() == tables["table.md"]
    assert "(n=2)" in tables["table.md"]

    lines = write_reproduction(fedsa.REPRODUCTION, tmp_path, "smoke")
    page = (tmp_path / "reproduction.md").read_text()
    for paper_row in PAPERS["fedsa"].rows:
        assert f"| {paper_row.value:g} |" in page
    measured_claims = [c for c in PAPERS["fedsa"].claims if c[2] in ("1%", "100%")]
    for better, worse, setting in measured_claims:
        if worse in MEASURED:
            assert any(
                line.startswith(f"{better} ahead of {worse} ({setting}): ") for line in lines
            )
    assert "FedMD+" in page  # in the paper's table, not measured
