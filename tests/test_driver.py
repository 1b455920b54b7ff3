"""The study driver: every (point, seed) run once, a killed study resumed to the same tables as an
uninterrupted one, spawned workers giving the same rows, failures recorded and run again, an
unknown budget refused before anything runs."""

import json

import pytest

from flowerbed.experiments import provenance
from flowerbed.experiments.driver import (
    ROWS,
    BudgetError,
    Point,
    missing_runs,
    progress_line,
    read_rows,
    run_order,
    run_study,
)
from flowerbed.experiments.provenance import (
    INVOCATIONS,
    commit_text,
    git,
    measurement_lines,
    provenance_line,
    provenance_lines,
    record_provenance,
    recorded_runs,
)


class Toy:
    """value = 10 x + seed: a study whose every row is known by hand."""

    name = "toy"

    def grid(self, budget):
        if budget != "smoke":
            raise BudgetError(f"budget={budget!r}: choose from smoke")
        return [Point("a", {"x": 1}), Point("b", {"x": 2})], [0, 1, 2]

    def run(self, point, seed):
        return {"value": 10 * point.settings["x"] + seed}

    def report(self, rows):
        cells = sorted((row["point"], row["seed"], row["value"]) for row in rows)
        return {"table.md": "".join(f"| {p} | {s} | {v} |\n" for p, s, v in cells)}


class Killed(BaseException):
    """What a kill looks like from inside: nothing after it runs."""


class KilledAfter(Toy):
    def __init__(self, runs):
        self.left = runs

    def run(self, point, seed):
        if self.left == 0:
            raise Killed
        self.left -= 1
        return super().run(point, seed)


class FailsOnce(Toy):
    def __init__(self):
        self.failed = False

    def run(self, point, seed):
        if (point.name, seed) == ("b", 1) and not self.failed:
            self.failed = True
            raise ValueError("out of luck")
        return super().run(point, seed)


def values(folder):
    return sorted((r["point"], r["seed"], r["value"]) for r in read_rows(folder) if "value" in r)


EVERY_ROW = [("a", 0, 10), ("a", 1, 11), ("a", 2, 12), ("b", 0, 20), ("b", 1, 21), ("b", 2, 22)]


def test_every_point_and_seed_runs_once_and_the_tables_come_from_the_rows(tmp_path):
    said = []
    tables = run_study(Toy(), tmp_path, "smoke", say=said.append)
    assert values(tmp_path) == EVERY_ROW
    assert (tmp_path / "table.md").read_text() == tables["table.md"]
    assert tables["table.md"].splitlines()[0] == "| a | 0 | 10 |"
    assert said[0] == "toy (smoke): 0 of 6 runs already done" and said[-1] == "6 of 6 runs done"
    run_study(Toy(), tmp_path, "smoke", say=said.append)  # nothing left to run
    assert said[-1] == "toy (smoke): 6 of 6 runs already done"
    assert len(read_rows(tmp_path)) == 6


class OwnSeeds(Toy):
    """Toy's grid with point b on its own seeds, 5 and 7, instead of the grid's 0, 1, 2."""

    def grid(self, budget):
        (a, b), seeds = super().grid(budget)
        return [a, Point("b", b.settings, seeds=(5, 7))], seeds


def test_a_point_with_its_own_seeds_runs_those_instead_of_the_grids(tmp_path):
    said = []
    run_study(OwnSeeds(), tmp_path, "smoke", say=said.append)
    assert values(tmp_path) == EVERY_ROW[:3] + [("b", 5, 25), ("b", 7, 27)]
    assert said[0] == "toy (smoke): 0 of 5 runs already done" and said[-1] == "5 of 5 runs done"
    assert missing_runs(OwnSeeds(), tmp_path, "smoke") == set()
    assert missing_runs(Toy(), tmp_path, "smoke") == {("b", 0), ("b", 1), ("b", 2)}
    study = OwnSeeds()
    study.alternate = True  # seed-major: every point's first seed, then every point's second...
    order = [(point.name, seed) for point, seed in run_order(study, *study.grid("smoke"))]
    assert order == [("a", 0), ("b", 5), ("a", 1), ("b", 7), ("a", 2)]


def test_a_killed_study_resumes_to_the_tables_of_an_uninterrupted_one(tmp_path):
    whole = run_study(Toy(), tmp_path / "whole", "smoke", say=lambda _: None)
    with pytest.raises(Killed):
        run_study(KilledAfter(4), tmp_path / "killed", "smoke", say=lambda _: None)
    assert len(read_rows(tmp_path / "killed")) == 4
    with open(tmp_path / "killed" / ROWS, "a") as f:
        f.write('{"point": "b", "se')  # a line the kill cut short
    said = []
    resumed = run_study(Toy(), tmp_path / "killed", "smoke", say=said.append)
    assert said[0] == "toy (smoke): 4 of 6 runs already done"
    assert resumed == whole and values(tmp_path / "killed") == EVERY_ROW


def test_spawned_workers_give_the_rows_of_one_process(tmp_path):
    run_study(Toy(), tmp_path / "one", "smoke", say=lambda _: None)
    run_study(Toy(), tmp_path / "two", "smoke", workers=2, say=lambda _: None)
    assert values(tmp_path / "two") == values(tmp_path / "one") == EVERY_ROW


def test_a_failed_run_is_recorded_said_left_out_of_the_tables_and_run_again(tmp_path):
    study, said = FailsOnce(), []
    tables = run_study(study, tmp_path, "smoke", say=said.append)
    failed = [row for row in read_rows(tmp_path) if "failed" in row]
    assert [(r["point"], r["seed"], r["failed"]) for r in failed] == [
        ("b", 1, "ValueError: out of luck")
    ]
    assert "ValueError" in failed[0]["traceback"]
    assert "b seed 1 failed: ValueError: out of luck" in said
    assert "| b | 1 |" not in tables["table.md"] and said[-1] == "5 of 6 runs done"
    tables = run_study(study, tmp_path, "smoke", say=said.append)  # the next start runs it
    assert said[-2] == "toy (smoke): 5 of 6 runs already done"
    assert "| b | 1 | 21 |" in tables["table.md"] and values(tmp_path) == EVERY_ROW


def test_an_unknown_budget_or_no_workers_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(BudgetError, match="budget='paper'"):
        run_study(Toy(), tmp_path / "out", "paper")
    with pytest.raises(ValueError, match="workers must be at least 1, got 0"):
        run_study(Toy(), tmp_path / "out", "smoke", workers=0)
    assert not (tmp_path / "out").exists()


def test_report_only_reads_the_rows_and_runs_nothing(tmp_path):
    (tmp_path / ROWS).write_text(json.dumps({"point": "a", "seed": 0, "value": 99}) + "\n")
    tables = run_study(Toy(), tmp_path, "smoke", report_only=True, say=lambda _: None)
    assert tables == {"table.md": "| a | 0 | 99 |\n"} and len(read_rows(tmp_path)) == 1


def test_the_time_left_is_the_mean_run_times_the_runs_left_over_the_workers():
    # 4 runs left, 30 s a run on average (20 and 40), 2 workers: 4 x 30 / 2 = 60 s
    line = progress_line(6, 10, [20.0, 40.0], workers=2, to_run=4)
    assert line == "6 of 10 runs done, about 1.0 min left"
    # 1 left, 12 s a run, 1 worker
    assert progress_line(9, 10, [12.0], 1, to_run=1) == "9 of 10 runs done, about 12 s left"
    # none left to run (the last one failed): no time left to wait
    assert progress_line(9, 10, [12.0], 1, to_run=0) == "9 of 10 runs done"


def test_each_invocation_that_measured_records_where_and_what_it_ran(tmp_path):
    killed = KilledAfter(4)
    with pytest.raises(Killed):
        run_study(killed, tmp_path, "smoke", say=lambda _: None, command="first")
    assert not (tmp_path / INVOCATIONS).exists()  # killed before the end: nothing claimed
    run_study(FailsOnce(), tmp_path, "smoke", say=lambda _: None, command="second")
    run_study(Toy(), tmp_path, "smoke", say=lambda _: None, command="third")  # (b, 1) again
    run_study(Toy(), tmp_path, "smoke", say=lambda _: None, command="nothing left")
    run_study(Toy(), tmp_path, "smoke", report_only=True, say=lambda _: None)
    records = [json.loads(line) for line in (tmp_path / INVOCATIONS).read_text().splitlines()]
    assert [(r["command"], r["runs"]) for r in records] == [("second", 1), ("third", 1)]
    assert records[0]["commit"] == git("rev-parse", "HEAD")  # empty outside a git checkout
    assert set(records[0]["versions"]) == {"flowerbed", "flwr", "torch", "numpy"}
    lines = provenance_lines(tmp_path)
    assert lines[1].startswith(f"1 run on {records[1]['date']} {commit_text(records[1])}, on ")
    assert lines[1].endswith("by `third`.")
    # 6 rows, 2 of them recorded: the killed invocation's 4 are in no record
    assert recorded_runs(tmp_path) == 2 and len(read_rows(tmp_path)) == 7  # with the failed one


def test_a_record_without_a_commit_names_the_installed_version():
    record = {"commit": "", "uncommitted_changes": False, "versions": {"flowerbed": "0.1.0"}}
    assert commit_text(record) == "with flowerbed 0.1.0 (no git checkout)"
    dirty = {"commit": "a" * 40, "uncommitted_changes": True}
    assert commit_text(dirty) == "at commit aaaaaaaaaa with uncommitted changes"


def test_an_invocation_records_the_commit_it_started_at(tmp_path, monkeypatch):
    commit = {"now": "a" * 40}
    monkeypatch.setattr(
        provenance, "git", lambda *args: commit["now"] if args[0] == "rev-parse" else ""
    )

    class CommitsWhileRunning(Toy):
        def run(self, point, seed):
            commit["now"] = "b" * 40  # someone commits while the study runs
            return super().run(point, seed)

    run_study(CommitsWhileRunning(), tmp_path, "smoke", say=lambda _: None, command="x")
    (record,) = [json.loads(line) for line in (tmp_path / INVOCATIONS).read_text().splitlines()]
    assert record["commit"] == "a" * 40 and record["runs"] == 6


def test_a_benchmark_measured_before_and_by_the_driver_says_both(tmp_path):
    """``measured.json`` (a script's measurement, before the driver) first, then each
    invocation of the driver that measured; nothing where neither was recorded."""
    assert measurement_lines(tmp_path) == []
    run_study(Toy(), tmp_path / "driver", "smoke", say=lambda _: None, command="by the driver")
    (line,) = measurement_lines(tmp_path / "driver")
    assert line.startswith("Measured: 6 runs on ") and line.endswith("by `by the driver`.")
    record_provenance(tmp_path / "driver", ["benchmarks/x.py"])
    before, after = measurement_lines(tmp_path / "driver")
    assert before == provenance_line(tmp_path / "driver") and after == line
    assert before.startswith("Measured on ") and before.endswith("by `python benchmarks/x.py`.")
