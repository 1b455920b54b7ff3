"""``flowerbed reproduce``: the list, bad input, the dry run, CTL's smoke budget end to end (both
simulations), the report rewritten from the rows alone, a resumed run, a failed run's exit
status, CTL's kept seeds against its discard rules, and the committed CTL rows still read as
they are."""

import math
import shutil
from pathlib import Path

import pytest

from flowerbed import cli
from flowerbed.experiments import ctl, ctl_gaussian, reproduce
from flowerbed.experiments.driver import ROWS, missing_runs, read_rows
from flowerbed.experiments.figure_report import FigureReproduction
from flowerbed.experiments.flkd_table4_report import SummaryReproduction
from flowerbed.experiments.papers import FIGURES, PAPERS, SUMMARIES
from flowerbed.experiments.provenance import INVOCATIONS
from flowerbed.experiments.reproduction_report import HTML, MARKDOWN

SMOKE_SEEDS = ctl.KEPT_SEEDS[: ctl.BUDGETS["smoke"][0]]
HIGH_SPREAD, LOW_SPREAD = ctl_gaussian.SETTINGS
SIMULATION_2 = "## Simulation 2 (spread and dispersion)"
CTL_CPU = Path(__file__).resolve().parent.parent / "reproductions" / "ctl-cpu"
PAPER_LIST = ", ".join(reproduce.REPRODUCTIONS)


def test_list_names_each_paper_its_budgets_and_results(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["reproduce", "--list"]) == 0
    lines = [
        f"{paper}: {PAPERS[paper].title} (budgets smoke, cpu, paper; no results yet)"
        for paper in reproduce.REPRODUCTIONS
    ]
    assert capsys.readouterr().out.splitlines() == lines
    (tmp_path / "reproductions" / "ctl-smoke").mkdir(parents=True)
    (tmp_path / "reproductions" / "ctl-smoke" / ROWS).write_text("")
    assert cli.main(["reproduce", "--list"]) == 0
    ctl_line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("ctl:"))
    assert ctl_line.endswith("(budgets smoke, cpu, paper; results: smoke)")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["reproduce", "nope"], f"unknown paper 'nope'; one of: {PAPER_LIST}"),
        (["reproduce"], f"name a paper; one of: {PAPER_LIST}"),
        (["reproduce", "ctl", "--workers", "0"], "--workers must be at least 1, not 0"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"flowerbed reproduce: error: {message}\n"


def test_dry_run_prints_the_grid_and_runs_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["reproduce", "ctl", "--budget", "cpu", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "ctl-simulations (cpu): 3 points, 300 runs" in out
    assert (
        "  point simulation-1-r100: {'simulation': 1, 'rounds': 100}\n    seeds: 1, 15, 19," in out
    )
    assert "  point simulation-2-r100-spread3-dispersion0.5: " in out
    assert "\n    seeds: 13, 15, 17, 32," in out and "\n    seeds: 1, 2, 3, 4," in out
    first = 100 * (ctl.SECONDS_FOR_NODES + ctl.SECONDS_PER_100_ROUNDS)
    second = 2 * 100 * (ctl.SECONDS_2_FOR_NODES + ctl.SECONDS_2_PER_100_ROUNDS)
    assert f"estimated time: {(first + second) / 60:.1f} min on one worker" in out
    assert list(tmp_path.iterdir()) == []


def test_kept_seeds_are_those_the_discard_rule_keeps():
    assert len(ctl.KEPT_SEEDS) == 100 and list(ctl.KEPT_SEEDS) == sorted(set(ctl.KEPT_SEEDS))
    first, second = ctl.KEPT_SEEDS[:2]
    assert ctl.usable_nodes(ctl.simulation_config(first, 1))[0] is not None
    assert ctl.usable_nodes(ctl.simulation_config(first + 1, 1))[0] is None  # not listed
    assert first + 1 < second


def kept(setting: tuple[float, float], seed: int) -> bool:
    """Whether Simulation 2's discard rule keeps ``seed`` at ``setting``."""
    config = ctl_gaussian.gaussian_config(seed, 1, *setting)
    return ctl.usable_nodes(config, ctl_gaussian.TRAINING_ONLY)[0] is not None


def test_simulation_2s_kept_seeds_are_those_its_discard_rule_keeps():
    for setting, seeds in ctl_gaussian.KEPT_SEEDS.items():
        assert len(seeds) == 100 and list(seeds) == sorted(set(seeds))
        assert kept(setting, seeds[0]) and kept(setting, seeds[-1])
    high = ctl_gaussian.KEPT_SEEDS[HIGH_SPREAD]
    # a sample: every seed up to the second kept one, and the one before the last
    assert [seed for seed in range(1, high[1] + 1) if kept(HIGH_SPREAD, seed)] == list(high[:2])
    assert high[-2] < high[-1] - 1 and not kept(HIGH_SPREAD, high[-1] - 1)
    assert ctl_gaussian.KEPT_SEEDS[LOW_SPREAD] == tuple(range(1, 101))  # none discarded


def simulation_1_part(text: str) -> str:
    """A CTL page up to Simulation 2's part (all of it where it has none)."""
    return text[: text.index(SIMULATION_2)] if SIMULATION_2 in text else text + "\n"


def test_the_committed_rows_are_read_as_they_are(tmp_path):
    """Simulation 1's 100 committed rows keep their point and seeds: the cpu budget lacks no
    run of Simulation 1, and its report shows Simulation 1 as the committed page does."""
    missing = missing_runs(ctl.Simulations(), CTL_CPU, "cpu")
    assert {point for point, _ in missing} <= {p.name for p in ctl_gaussian.points(100, 100)}
    for name in (ROWS, INVOCATIONS):
        if (CTL_CPU / name).is_file():
            shutil.copy(CTL_CPU / name, tmp_path / name)
    argv = ["reproduce", "ctl", "--budget", "cpu", "--out", str(tmp_path), "--report-only"]
    assert cli.main(argv) == (1 if missing else 0)
    text = (tmp_path / MARKDOWN).read_text()
    assert SIMULATION_2 in text
    assert simulation_1_part(text) == simulation_1_part((CTL_CPU / MARKDOWN).read_text())


def test_cells_of_simulation_2s_rows_are_percent_per_setting():
    point = ctl_gaussian.points(3, 20)[1].name  # spread 0.5, dispersion 3
    rows = [
        {"point": point, "seed": 2, "discarded": "node 1 lacks a class in its training data"},
        {"point": point, "seed": 4, "final all tasks Best": 0.9, "final all tasks All": 0.875}
        | {"final all tasks Local": 0.5},
    ]
    cells = {(c.method, c.setting, c.seed): c.value for c in ctl_gaussian.cells(rows)}
    setting = "spread 0.5, dispersion 3"
    assert cells == {
        ("Best", setting, 4): 90.0,
        ("All", setting, 4): 87.5,
        ("Local", setting, 4): 50.0,
    }
    assert ctl_gaussian.measures(rows[0]) and not ctl_gaussian.measures(
        {"point": "simulation-1-r20"}
    )


def test_cells_of_ctl_rows():
    rows = [
        {"point": "p", "seed": 3, "discarded": "node 1 lacks a class in its test data"},
        {"point": "p", "seed": 4}
        | {f"first {label}": 7 for label, _ in ctl.RULES}
        | {"first Local": ctl.NEVER},
    ]
    cells = {(c.method, c.seed): c.value for c in ctl.cells(rows)}
    assert cells == {("Best", 4): 7, ("All", 4): 7, ("Random", 4): 7, ("Worst", 4): 7,
                     ("Local", 4): math.inf}  # fmt: skip


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    """CTL's smoke budget run once into a folder: (folder, exit status, stdout)."""
    folder = tmp_path_factory.mktemp("ctl-smoke")
    status = cli.main(["reproduce", "ctl", "--budget", "smoke", "--out", str(folder)])
    return folder, status


def test_smoke_budget_end_to_end(smoke):
    folder, status = smoke
    assert status == 0
    text = (folder / MARKDOWN).read_text()
    assert text.startswith(f"# Reproduction: {PAPERS['ctl'].title}")
    for label, _ in ctl.RULES:
        assert f"\n| {label} | " in text
    for better, worse, _ in PAPERS["ctl"].claims:
        assert f"| {better} ahead of {worse} | {len(SMOKE_SEEDS)} |" in text
    assert (folder / HTML).read_text().startswith("<!DOCTYPE html>")
    seeds = {}
    for row in read_rows(folder):
        seeds.setdefault(row["point"], []).append(row["seed"])
    high, low = (point.name for point in ctl_gaussian.points(3, 20))
    assert seeds == {
        "simulation-1-r20": list(SMOKE_SEEDS),
        high: list(ctl_gaussian.KEPT_SEEDS[HIGH_SPREAD][:3]),
        low: [1, 2, 3],
    }


def test_smoke_budget_reports_simulation_2_after_simulation_1(smoke):
    folder, _ = smoke
    text = (folder / MARKDOWN).read_text()
    assert text.index("## Regime") < text.index(f"{SIMULATION_2}: the paper's figure and ours")
    for setting in ("spread 3, dispersion 0.5", "spread 0.5, dispersion 3"):
        for method in ("Best", "All", "Local"):
            assert f"| {method} | {setting} | no number: figure only | " in text
    assert "| Best ahead of Local (spread 3, dispersion 0.5) | 3 | mean " in text
    contrast = (
        "| (Best - Local) larger at spread 3, dispersion 0.5 than at spread 0.5, dispersion 3 |"
    )
    assert (
        contrast + " " in text and "| Best and Local (spread 0.5, dispersion 3) | 3 | mean " in text
    )
    assert "| simulations | not stated for Simulation 2" in text
    simulations = (folder / "simulations.md").read_text()
    assert "| spread 3, dispersion 0.5 | 3 (0) | " in simulations


def test_report_only_rewrites_the_same_bytes(smoke):
    folder, _ = smoke
    before = {name: (folder / name).read_bytes() for name in (MARKDOWN, HTML)}
    (folder / MARKDOWN).unlink()
    argv = ["reproduce", "ctl", "--budget", "smoke", "--out", str(folder), "--report-only"]
    assert cli.main(argv) == 0
    assert {name: (folder / name).read_bytes() for name in (MARKDOWN, HTML)} == before


def without_time(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "Measured time" not in line)


def test_a_killed_run_resumes_to_the_same_result(smoke, tmp_path):
    folder, _ = smoke
    lines = (folder / ROWS).read_text().splitlines(keepends=True)
    # killed after 2 rows, in the middle of writing the third
    (tmp_path / ROWS).write_text("".join(lines[:2]) + lines[2][:40])
    argv = ["reproduce", "ctl", "--budget", "smoke", "--out", str(tmp_path)]
    assert cli.main(argv) == 0

    def results(where):
        return sorted(
            ({k: v for k, v in row.items() if k != "seconds"} for row in read_rows(where)),
            key=lambda row: row["seed"],
        )

    assert results(tmp_path) == results(folder)
    assert without_time((tmp_path / MARKDOWN).read_text()) == without_time(
        (folder / MARKDOWN).read_text()
    )


def test_a_failed_run_gives_exit_1(tmp_path, monkeypatch, capsys):
    def broken(config, *splits):
        raise RuntimeError("no data")

    monkeypatch.setattr(ctl, "usable_nodes", broken)
    argv = ["reproduce", "ctl", "--budget", "smoke", "--out", str(tmp_path)]
    assert cli.main(argv) == 1
    assert "9 of 9 runs have no result" in capsys.readouterr().err
    assert all(row["failed"] == "RuntimeError: no data" for row in read_rows(tmp_path))
    assert (tmp_path / MARKDOWN).is_file()


def test_registry_holds_ctl():
    assert reproduce.REPRODUCTIONS["ctl"] is ctl.REPRODUCTION


def test_a_dry_run_without_a_timed_estimate_says_so_instead_of_a_number(capsys):
    assert cli.main(["reproduce", "fedsa", "--budget", "paper", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "estimated time: not known (this budget's runs were never timed)" in out
    assert "nan" not in out


def test_every_paper_with_a_headline_table_has_a_reproduction():
    assert sorted(reproduce.REPRODUCTIONS) == sorted(PAPERS)


def test_every_figure_of_a_paper_is_reproduced_by_its_papers_reproduction():
    for paper, reproduction in reproduce.REPRODUCTIONS.items():
        figures = [part for part in reproduction.parts if isinstance(part, FigureReproduction)]
        assert tuple(part.figure for part in figures) == FIGURES.get(paper, ())


def test_every_summary_of_a_paper_is_reproduced_by_its_papers_reproduction():
    for paper, reproduction in reproduce.REPRODUCTIONS.items():
        parts = [part for part in reproduction.parts if isinstance(part, SummaryReproduction)]
        assert tuple(part.summary for part in parts) == SUMMARIES.get(paper, ())
