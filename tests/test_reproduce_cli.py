"""``flowerbed reproduce``: the list, bad input, the dry run, CTL's smoke budget end to end, the
report rewritten from the rows alone, a resumed run, and a failed run's exit status."""

import math

import pytest

from flowerbed import cli
from flowerbed.experiments import ctl, reproduce
from flowerbed.experiments.driver import ROWS, read_rows
from flowerbed.experiments.papers import PAPERS
from flowerbed.experiments.reproduction_report import HTML, MARKDOWN

SMOKE_SEEDS = ctl.KEPT_SEEDS[: ctl.BUDGETS["smoke"][0]]
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
    assert "ctl-simulation-1 (cpu): 1 points x 100 seeds = 100 runs" in out
    minutes = 100 * (ctl.SECONDS_FOR_NODES + ctl.SECONDS_PER_100_ROUNDS) / 60
    assert f"estimated time: {minutes:.1f} min on one worker" in out
    assert list(tmp_path.iterdir()) == []


def test_kept_seeds_are_those_the_discard_rule_keeps():
    assert len(ctl.KEPT_SEEDS) == 100 and list(ctl.KEPT_SEEDS) == sorted(set(ctl.KEPT_SEEDS))
    first, second = ctl.KEPT_SEEDS[:2]
    assert ctl.usable_nodes(ctl.simulation_config(first, 1))[0] is not None
    assert ctl.usable_nodes(ctl.simulation_config(first + 1, 1))[0] is None  # not listed
    assert first + 1 < second


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
    assert sorted(row["seed"] for row in read_rows(folder)) == sorted(SMOKE_SEEDS)


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
    def broken(config):
        raise RuntimeError("no data")

    monkeypatch.setattr(ctl, "usable_nodes", broken)
    argv = ["reproduce", "ctl", "--budget", "smoke", "--out", str(tmp_path)]
    assert cli.main(argv) == 1
    assert "3 of 3 runs have no result" in capsys.readouterr().err
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
