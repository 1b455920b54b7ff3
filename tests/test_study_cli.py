"""The command line every study gets (``experiments.study_cli``): bad input refused in one line
with exit status 2 before anything runs, an alternating study run seed-major and one at a time,
a killed study resumed with only its missing runs, ``--report-only`` running nothing, the other
budgets kept out of the default folder, and the tables made by the writer it is given, each
from the folder of its rows."""

import argparse
import json

import pytest

from flowerbed.experiments import study_cli
from flowerbed.experiments.driver import ROWS, Point, budget_of, read_rows

BUDGETS = {"full": 3, "quick": 2}  # seeds


class Toy:
    """value = 10 x + seed over points a, b, c, recording the order its runs happen in."""

    name = "toy"
    budgets = BUDGETS
    default_budget = "full"

    def __init__(self):
        self.ran = []

    def grid(self, budget):
        seeds = budget_of(BUDGETS, budget)
        return [Point(n, {"x": x}) for n, x in (("a", 1), ("b", 2), ("c", 3))], list(range(seeds))

    def run(self, point, seed):
        self.ran.append((point.name, seed))
        return {"value": 10 * point.settings["x"] + seed}

    def report(self, rows):
        cells = sorted((row["point"], row["seed"], row["value"]) for row in rows)
        return {"table.md": "".join(f"| {p} | {s} | {v} |\n" for p, s, v in cells)}


class Alternating(Toy):
    alternate = True


class RunsNothing(Toy):
    def run(self, point, seed):
        raise AssertionError("--report-only ran something")


class FailsOnB(Toy):
    def run(self, point, seed):
        if point.name == "b":
            raise ValueError("out of luck")
        return super().run(point, seed)


class WithItsFolder(Toy):
    """A table made from its rows' folder (as a benchmark names its provenance files)."""

    def report(self, rows):
        return {"table.md": lambda folder: f"{len(rows)} rows in {folder.name}\n"}


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    return err


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--budget", "paper"], "unknown budget 'paper'; one of: full, quick"),
        (["--workers", "0"], "workers must be at least 1, got 0"),
    ],
)
def test_bad_input_is_one_line_naming_the_value_and_the_choices_and_runs_nothing(
    tmp_path, capsys, argv, said
):
    study = Toy()
    assert study_cli.main(study, tmp_path / "out", argv=argv) == 2
    assert said in one_line_error(capsys)
    assert study.ran == [] and not (tmp_path / "out").exists()


def test_an_alternating_study_refuses_more_than_one_worker(tmp_path, capsys):
    study = Alternating()
    assert study_cli.main(study, tmp_path / "out", argv=["--workers", "2"]) == 2
    assert "workers must be 1 for toy, got 2" in one_line_error(capsys)
    assert study.ran == [] and not (tmp_path / "out").exists()
    assert study_cli.main(Toy(), tmp_path / "plain", argv=["--workers", "2"]) == 0


def test_an_alternating_study_runs_its_variants_in_turn_within_each_seed(tmp_path):
    study = Alternating()
    assert study_cli.main(study, tmp_path, argv=[]) == 0
    assert study.ran == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("c", 1)] + [
        ("a", 2),
        ("b", 2),
        ("c", 2),
    ]
    plain = Toy()  # without ``alternate``: every seed of a point, then the next point
    study_cli.main(plain, tmp_path / "plain", argv=[])
    assert plain.ran == [(p, s) for p in "abc" for s in range(3)]


def test_a_killed_study_runs_only_its_missing_runs(tmp_path):
    done = [{"point": "a", "seed": 0, "value": 10}, {"point": "b", "seed": 1, "value": 21}]
    lines = [json.dumps(row) for row in done] + ['{"point": "c", "se']  # the kill cut the last
    (tmp_path / ROWS).write_text("\n".join(lines))
    study = Alternating()
    assert study_cli.main(study, tmp_path, argv=[]) == 0
    every = [(p, s) for s in range(3) for p in "abc"]
    assert study.ran == [run for run in every if run not in {("a", 0), ("b", 1)}]
    rows = sorted((r["point"], r["seed"], r["value"]) for r in read_rows(tmp_path))
    assert rows == [(p, s, 10 * x + s) for p, x in (("a", 1), ("b", 2), ("c", 3)) for s in range(3)]


def test_report_only_writes_the_tables_from_the_rows_and_runs_nothing(tmp_path, capsys):
    (tmp_path / ROWS).write_text(json.dumps({"point": "a", "seed": 0, "value": 99}) + "\n")
    study = RunsNothing()
    # 8 of the 9 runs have no row: the tables are written, and the exit status says so
    assert study_cli.main(study, tmp_path, argv=["--report-only"]) == 1
    assert (tmp_path / "table.md").read_text() == "| a | 0 | 99 |\n"
    assert "8 runs of toy (full) have no row" in capsys.readouterr().err
    assert len(read_rows(tmp_path)) == 1 and not (tmp_path / "measured.jsonl").exists()


def test_a_failed_run_gives_exit_status_1_and_runs_again_next_time(tmp_path):
    assert study_cli.main(FailsOnB(), tmp_path, argv=["--quick"]) == 1
    study = Toy()
    assert study_cli.main(study, tmp_path, argv=["--quick"]) == 0
    assert study.ran == [("b", 0), ("b", 1)]


def test_another_budget_runs_into_its_own_folder_unless_out_names_one(tmp_path):
    assert study_cli.main(Toy(), tmp_path, argv=["--quick"]) == 0
    assert not (tmp_path / ROWS).exists() and len(read_rows(tmp_path / "quick")) == 6
    assert study_cli.main(Toy(), tmp_path, argv=["--budget", "quick"]) == 0  # the same budget
    assert len(read_rows(tmp_path / "quick")) == 6
    assert study_cli.main(Toy(), tmp_path, argv=["--quick", "--out", str(tmp_path / "o")]) == 0
    assert len(read_rows(tmp_path / "o")) == 6
    assert study_cli.main(Toy(), tmp_path, argv=[]) == 0
    assert len(read_rows(tmp_path)) == 9


def test_the_tables_are_made_by_the_writer_it_is_given_from_their_folder(tmp_path):
    written = []

    def write(path, make):
        written.append((path, make()))
        return written[-1][1]

    assert study_cli.main(WithItsFolder(), tmp_path / "here", argv=[], write=write) == 0
    assert written == [(tmp_path / "here" / "table.md", "9 rows in here\n")]
    assert not (tmp_path / "here" / "table.md").exists()  # the writer decides what is written


class Scaled(Toy):
    """value = factor x (10 x + seed): a study made from a script option's value."""

    def __init__(self, own):
        super().__init__()
        self.factor = own.factor

    def run(self, point, seed):
        return {"value": self.factor * super().run(point, seed)["value"]}


def scale_option():
    own = argparse.ArgumentParser(add_help=False)
    own.add_argument("--factor", type=int, default=1, help="what every value is multiplied by")
    return own


def test_a_scripts_own_option_makes_its_study_is_listed_and_is_recorded(tmp_path, capsys):
    argv = ["--quick", "--factor", "3"]
    assert study_cli.main(Scaled, tmp_path, argv=argv, options=scale_option()) == 0
    assert sorted(row["value"] for row in read_rows(tmp_path / "quick")) == [30, 33, 60, 63, 90, 93]
    measured = json.loads((tmp_path / "quick" / "measured.jsonl").read_text().splitlines()[-1])
    assert measured["command"].endswith("--quick --factor 3")
    with pytest.raises(SystemExit):
        study_cli.main(Scaled, tmp_path, argv=["--help"], options=scale_option())
    assert "--factor FACTOR" in capsys.readouterr().out
    # a mistyped option of the study's is still refused in one line
    assert (
        study_cli.main(
            Scaled, tmp_path, argv=["--factor", "2", "--workers", "0"], options=scale_option()
        )
        == 2
    )
