"""Sweeps (``flowerbed.sweep``): grid expansion and names, the TOML file, the summary's numbers
against hand computations on fake run folders, which points a rerun skips, bad input, and one
real sweep through Ray with two workers."""

from __future__ import annotations

import csv
import io
import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from flowerbed import cli
from flowerbed.core.results import write_json
from flowerbed.report import REPORT_FILE
from flowerbed.report.plots import pyplot
from flowerbed.runtime.outcome import write_status
from flowerbed.settings import ConfigError
from flowerbed.simulation import free_port
from flowerbed.sweep import (
    Axis,
    PointState,
    SweepSpec,
    check_grid,
    grid_from_cli,
    grid_from_toml,
    load_spec,
    mean_std,
    point_state,
    run_sweep,
    write_summary,
)
from flowerbed.sweep import command as sweep_command
from flowerbed.sweep import execute as sweep_execute
from flowerbed.sweep import progress as sweep_progress
from flowerbed.sweep import report as sweep_report
from flowerbed.sweep.folder import ERROR_FILE, point_dir, prepare, render_spec
from flowerbed.sweep.grid import MAX_NAME, point_name
from flowerbed.sweep.report import write_sweep_files, write_sweep_report
from flowerbed.sweep.summary import draw_bands

STRATEGY_SEED = SweepSpec(
    (Axis.of_key("strategy", ["fedavg", "fedprox"]), Axis.of_key("seed", [0, 1, 2])),
    fixed={"num-server-rounds": 3},
    num_clients=4,
)


# grid and names


def test_the_grid_crosses_its_axes_in_order_with_typed_values_and_readable_names():
    axes, fixed = grid_from_cli(
        ["strategy=fedavg,fedprox", "learning-rate=0.1,1", "seed=0,1"],
        ["num-server-rounds=5", "download=false", "model='mlp'"],
    )
    spec = SweepSpec(tuple(axes), fixed)
    points = check_grid(spec)
    assert len(points) == 2 * 2 * 2
    first, last = points[0], points[-1]
    assert first.name == "strategy-fedavg_learning-rate-0.1_seed-0"
    assert last.name == "strategy-fedprox_learning-rate-1.0_seed-1"
    assert last.overrides == {
        "num-server-rounds": 5,
        "download": False,
        "model": "mlp",
        "strategy": "fedprox",
        "learning-rate": 1.0,
        "seed": 1,
    }
    assert type(last.overrides["learning-rate"]) is float and type(first.overrides["seed"]) is int
    assert last.configuration() == (("strategy", "fedprox"), ("learning-rate", "1.0"))
    assert [p.name for p in spec.points()] == [p.name for p in points]  # deterministic


def test_bundled_axes_are_named_by_their_labels():
    partition = Axis.of_bundles(
        "partition",
        {
            "dir01": {"partitioner": "dirichlet", "dirichlet-alpha": 0.1},
            "sorted": {"partitioner": "label-sorted"},
        },
    )
    points = check_grid(SweepSpec((partition, Axis.of_key("seed", [3]))))
    assert [p.name for p in points] == ["partition-dir01_seed-3", "partition-sorted_seed-3"]
    assert points[0].overrides == {"partitioner": "dirichlet", "dirichlet-alpha": 0.1, "seed": 3}


def test_long_or_unsafe_names_get_a_stable_hash():
    long = {"kt-client-models": "cnn,mlp,cnn-small,mlp-small," * 4, "seed": "0"}
    name = point_name(long)
    assert len(name) <= MAX_NAME and name == point_name(dict(long))
    assert name != point_name({**long, "seed": "1"})
    slash = point_name({"data-dir": "/a b"})
    assert "/" not in slash and " " not in slash and slash != point_name({"data-dir": "/a-b"})


def test_the_toml_file_and_sweep_toml_describe_the_same_grid(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text(
        """
num-clients = 6
[set]
num-server-rounds = 2
learning-rate = 1
[grid]
strategy = ["fedavg", "fedadam"]
partition = {iid = {partitioner = "iid"}, "dir0.1" = {partitioner = "dirichlet", dirichlet-alpha = 0.1}}
seed = [0, 1]
"""
    )
    axes, fixed, num_clients = grid_from_toml(path)
    spec = SweepSpec(tuple(axes), fixed, num_clients)
    assert fixed == {"num-server-rounds": 2, "learning-rate": 1.0} and num_clients == 6
    assert [a.name for a in spec.axes] == ["strategy", "partition", "seed"]
    names = [p.name for p in check_grid(spec)]
    assert names[:3] == [
        "strategy-fedavg_partition-iid_seed-0",
        "strategy-fedavg_partition-iid_seed-1",
        "strategy-fedavg_partition-dir0.1_seed-0",
    ]
    prepare(tmp_path / "sweep", spec)
    stored = load_spec(tmp_path / "sweep")
    assert render_spec(stored) == render_spec(spec)
    assert [p.overrides for p in stored.points()] == [p.overrides for p in spec.points()]


# bad input


@pytest.mark.parametrize(
    ("grid", "fixed", "message"),
    [
        ([], [], "empty grid"),
        (["seed="], [], "--grid seed: no values"),
        (["lerning-rate=0.1,0.2"], [], "unknown run-config key 'lerning-rate'; did you mean"),
        (["learning-rate=0.1,-1"], [], "learning-rate must be > 0, got -1.0"),
        (["seed=0,x"], [], "run-config seed='x' is not a valid int"),
        (["strategy=fedavg,fedmagic"], [], "unknown strategy 'fedmagic'; valid choices: fedavg"),
        (["seed=0,1"], ["seed=2"], "run-config seed is in grid seed and in \\[set\\]"),
        (["seed=0,0"], [], "grid seed: '0' is listed twice"),
        (["seed=0"], ["output-dir=/tmp/x"], "output-dir is set by the sweep"),
        (  # a data file that is not there, said in the sweep's own syntax
            ["seed=0"],
            ["dataset=bloodmnist", "data-dir=/nonexistent"],
            (
                "dataset='bloodmnist': MedMNIST file /nonexistent/bloodmnist.npz not found: .*, or"
                " add --set download=true on a machine with internet"
            ),
        ),
        (  # a model set by the user that cannot take one of the grid's data sets
            ["dataset=digits,breast-cancer"],
            ["model=cnn"],
            "model='cnn' cannot take dataset='breast-cancer'.*takes model='mlp'",
        ),
    ],
)
def test_bad_grids_are_refused_before_anything_runs(tmp_path, grid, fixed, message):
    with pytest.raises(ConfigError, match=message):
        axes, sets = grid_from_cli(grid, fixed)
        run_sweep(SweepSpec(tuple(axes), sets), tmp_path / "sweep")
    assert not (tmp_path / "sweep").exists()


def test_the_command_line_reports_bad_input_in_one_line_with_status_2(tmp_path, capsys):
    out = tmp_path / "sweep"
    status = cli.main(
        ["sweep", "--out", str(out), "--grid", "lerning-rate=0.1", "--grid", "seed=0"]
    )
    error = capsys.readouterr().err
    assert status == 2 and error.count("\n") == 1
    assert error.startswith(
        "flowerbed sweep: error: unknown run-config key 'lerning-rate'; did you mean"
        " 'learning-rate'"
    )
    assert not out.exists()


def test_a_folder_holding_another_grid_is_refused_and_left_as_it_was(tmp_path):
    sweep = tmp_path / "sweep"
    prepare(sweep, STRATEGY_SEED)
    before = (sweep / "sweep.toml").read_bytes()
    other = SweepSpec(
        (Axis.of_key("strategy", ["fedavg"]), Axis.of_key("seed", [0, 1, 2])),
        {"num-server-rounds": 4},
        4,
    )
    with pytest.raises(
        ConfigError, match="holds another sweep .set num-server-rounds 3 -> 4; grid strategy"
    ):
        run_sweep(other, sweep)
    assert (sweep / "sweep.toml").read_bytes() == before
    assert [p.name for p in sweep.iterdir()] == ["sweep.toml"]
    with pytest.raises(ConfigError, match="--extend adds values .* set num-server-rounds 3 -> 4"):
        run_sweep(other, sweep, extend=True)
    assert (sweep / "sweep.toml").read_bytes() == before


def test_the_order_of_fixed_keys_and_bundle_keys_does_not_make_another_grid(tmp_path):
    bundle = {"partitioner": "dirichlet", "dirichlet-alpha": 0.1}
    first = SweepSpec(
        (Axis.of_bundles("partition", {"d": bundle}),), {"local-epochs": 1, "batch-size": 8}
    )
    reordered = SweepSpec(
        (Axis.of_bundles("partition", {"d": dict(reversed(bundle.items()))}),),
        {"batch-size": 8, "local-epochs": 1},
    )
    prepare(tmp_path, first)
    assert render_spec(prepare(tmp_path, reordered)) == render_spec(first)


def test_extend_adds_values_and_keeps_the_grid_a_cross_product(tmp_path):
    sweep = tmp_path / "sweep"
    prepare(sweep, STRATEGY_SEED)
    more = SweepSpec(
        (Axis.of_key("strategy", ["fedadam"]), Axis.of_key("seed", [1, 5])),
        {"num-server-rounds": 3},
        4,
    )
    spec = prepare(sweep, more, extend=True)
    assert spec.axis("strategy").labels == ("fedavg", "fedprox", "fedadam")
    assert spec.axis("seed").labels == ("0", "1", "2", "5")
    assert len(load_spec(sweep).points()) == 12


def test_a_non_empty_folder_without_sweep_toml_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not empty and holds no sweep.toml"):
        prepare(tmp_path, STRATEGY_SEED)


def test_bad_workers_via_and_ray_address_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="workers must be an integer, at least 1, got 0"):
        run_sweep(STRATEGY_SEED, tmp_path / "a", workers=0)
    with pytest.raises(ConfigError, match="unknown via 'grpc'; valid choices: inprocess, flwr"):
        run_sweep(STRATEGY_SEED, tmp_path / "a", via="grpc")
    with pytest.raises(ConfigError, match="no Ray cluster answers"):
        run_sweep(STRATEGY_SEED, tmp_path / "a", ray_address=f"127.0.0.1:{free_port()}")
    assert not (tmp_path / "a").exists()


# fake run folders: states, skipping, the summary


def fake_run(sweep: Path, point, status: str, history: list[dict] | None = None) -> Path:
    run_dir = (
        point_dir(sweep, point)
        / f"20250101-00000{len(list(point_dir(sweep, point).glob('2*')))}-{point.name}"
    )
    run_dir.mkdir(parents=True)
    if history is not None:
        write_json(run_dir / "history.json", history)
    write_status(run_dir, status, "" if status == "completed" else f"it {status}")
    return run_dir


def rows(
    accuracies: list[float], losses: list[float], column: str = "central_accuracy"
) -> list[dict]:
    """A history: round 0 (initial model), then one row per accuracy."""
    out = [{"round": 0, column: 0.99}]
    for r, (accuracy, loss) in enumerate(zip(accuracies, losses), start=1):
        out.append(
            {
                "round": r,
                column: accuracy,
                "train_loss": loss,
                "failures": [],
                "client_accuracies": {"0": 1.0},
            }
        )
    return out


def test_mean_std_is_the_sample_std_and_none_for_one_value():
    # 0.2, 0.4, 0.9: mean 0.5; squared deviations 0.09 + 0.01 + 0.16 = 0.26, / (3 - 1) = 0.13
    mean, std = mean_std([0.2, 0.4, 0.9])
    assert mean == pytest.approx(0.5)
    assert std == pytest.approx(math.sqrt(0.13))
    assert mean_std([0.7]) == (0.7, None)


def test_point_states_come_from_the_run_folders(tmp_path):
    sweep = tmp_path / "sweep"
    a, b, c, d, e, _ = STRATEGY_SEED.points()
    fake_run(sweep, a, "failed")
    done = fake_run(sweep, a, "completed", rows([0.5], [1.0]))
    fake_run(sweep, b, "completed", rows([0.5], [1.0]))
    fake_run(sweep, b, "failed")  # a later failed attempt does not undo a completed one
    fake_run(sweep, c, "running")  # a sweep that died
    point_dir(sweep, d).mkdir(parents=True)
    (point_dir(sweep, d) / ERROR_FILE).write_text("data file missing\n\ntraceback")
    assert point_state(point_dir(sweep, a)) == PointState("completed", done)
    assert point_state(point_dir(sweep, b)).finished
    # running, but its process left no lock: it died without a word
    assert point_state(point_dir(sweep, c)).status == "interrupted"
    assert point_state(point_dir(sweep, d)) == PointState("failed", None, "data file missing")
    assert point_state(point_dir(sweep, e)) == PointState("pending")


def test_a_rerun_runs_only_the_points_not_completed(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    prepare(sweep, STRATEGY_SEED)
    points = STRATEGY_SEED.points()
    for point in points[:2]:
        fake_run(sweep, point, "completed", rows([0.5], [1.0]))
    fake_run(sweep, points[2], "failed")
    fake_run(sweep, points[3], "interrupted")
    asked = []

    def execute(sweep_dir, todo, *args):
        asked.extend(p.name for p in todo)
        return {p.name: PointState("failed", None, "not run in this test") for p in todo}

    monkeypatch.setattr(sweep_execute, "execute", execute)
    results = run_sweep(STRATEGY_SEED, sweep, progress=False)
    assert asked == [p.name for p in points[2:]]
    assert [r.state.finished for r in results] == [True, True, False, False, False, False]
    assert "Not completed (4)" in (sweep / "summary.md").read_text()


def test_the_summary_matches_hand_computed_means_and_sample_stds(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    spec = SweepSpec(
        (Axis.of_key("strategy", ["fedavg", "local"]), Axis.of_key("seed", [0, 1, 2])), {}, 2
    )
    prepare(sweep, spec)
    a0, a1, a2, l0, l1, _ = spec.points()
    fake_run(sweep, a0, "completed", rows([0.4, 0.5], [9.0, 1.0]))
    fake_run(sweep, a1, "completed", rows([0.8, 0.7], [9.0, 2.0]))
    fake_run(sweep, a2, "completed", rows([0.6, 0.9], [9.0, 4.0]))
    # a one-shot protocol: no central_accuracy; one seed completed, one failed, one pending
    fake_run(
        sweep, l0, "completed", rows([0.3, 0.2], [5.0, 6.0], "client_models_test_accuracy_mean")
    )
    fake_run(sweep, l1, "failed")
    summary = write_summary(sweep, spec)
    fedavg, local = summary
    # finals 0.5, 0.7, 0.9: mean 0.7, sample std sqrt((0.04 + 0 + 0.04) / 2) = 0.2
    assert fedavg["final"] == pytest.approx((0.7, 0.2))
    # bests (round 0's 0.99 left out) 0.5, 0.8, 0.9: mean 2.2 / 3, std sqrt(((0.5-m)^2 + ...) / 2)
    m = 2.2 / 3
    assert fedavg["best"] == pytest.approx(
        (m, math.sqrt(((0.5 - m) ** 2 + (0.8 - m) ** 2 + (0.9 - m) ** 2) / 2))
    )
    # final train losses 1, 2, 4: mean 7/3, std sqrt((16/9 + 1/9 + 25/9) / 2) = sqrt(7/3)
    assert fedavg["metrics"]["train_loss"] == pytest.approx((7 / 3, math.sqrt(7 / 3)))
    assert (fedavg["seeds"], fedavg["runs"], fedavg["accuracy"]) == (3, 3, "central_accuracy")
    assert local["accuracy"] == "client_models_test_accuracy_mean" and local["seeds"] == 1
    assert local["final"] == (0.2, None) and local["best"] == (0.3, None)

    with open(sweep / "summary.csv") as f:
        table = list(csv.DictReader(f))
    assert [r["strategy"] for r in table] == ["fedavg", "local"]
    assert float(table[0]["final_mean"]) == pytest.approx(0.7)
    assert float(table[0]["final_std"]) == pytest.approx(0.2)
    assert table[1]["final_std"] == "" and float(table[1]["best_mean"]) == pytest.approx(0.3)
    text = (sweep / "summary.md").read_text()
    assert (
        "| fedavg | 3/3 | central_accuracy | 0.7000 ± 0.2000 | 0.7333 ± 0.2082 | 2.333 ± 1.528 |"
        in text
    )
    # one seed: its value alone (its n is in the seeds column), never "± -"
    assert "| local | 1/3 | client_models_test_accuracy_mean | 0.2000 | 0.3000 | 6 |" in text
    assert "± -" not in text and "nan" not in text
    assert (
        "strategy-local_seed-1 (failed: it failed)" in text
        and "strategy-local_seed-2 (pending)" in text
    )
    assert (sweep / "accuracy.png").stat().st_size > 1000
    # --report-only rewrites the same summary from the folder, and the report
    (sweep / "summary.md").unlink()
    assert not (sweep / REPORT_FILE).exists()
    assert cli.main(["sweep", "--out", str(sweep), "--report-only"]) == 0
    assert (sweep / "summary.md").read_text() == text
    page = (sweep / REPORT_FILE).read_text()
    assert "± -" not in page and "± nan" not in page
    # the terminal: the short table, the other accuracy column marked
    out = capsys.readouterr().out
    assert "\nstrategy=fedavg  3/3    0.7000 ± 0.2000  0.7333 ± 0.2082\n" in out
    assert "\nstrategy=local   1/3*   0.2000           0.3000\n" in out
    assert "* client_models_test_accuracy_mean instead" in out
    assert "train_loss" in text and "train_loss" not in out  # the files keep every column


def history_of(values: list[float], column: str = "central_accuracy") -> list[dict]:
    """Round 0, then one row per value of ``column`` (and a loss going down)."""
    return [{"round": r, column: v, "train_loss": 2.0 - v} for r, v in enumerate(values)]


def test_the_sweep_report_shows_one_seed_alone_and_a_title_said_once(tmp_path):
    spec = SweepSpec(
        (Axis.of_key("strategy", ["fedavg", "fedprox"]), Axis.of_key("seed", [0, 1])), {}, 2
    )
    for name, title in (
        ("sweep", "sweep: strategy × seed"),
        ("demo", "Sweep demo: strategy × seed"),
    ):
        sweep = tmp_path / name
        prepare(sweep, spec)
        a0, a1, b0, _ = spec.points()
        fake_run(sweep, a0, "completed", history_of([0.1, 0.6]))
        fake_run(sweep, a1, "completed", history_of([0.1, 0.8]))
        fake_run(sweep, b0, "completed", history_of([0.1, 0.7]))  # its seed 1 is pending
        page = write_sweep_report(sweep).read_text()
        assert f"<title>{title}</title>" in page and f"<h1>{title}</h1>" in page
        assert not re.search(r"\b(\w+)\W+\1\b", title, re.IGNORECASE)  # no "Sweep sweep"
    # fedavg: finals 0.6 and 0.8, mean 0.7, sample std sqrt(2 x 0.01 / 1) = 0.1414
    assert (
        '<td class="text">strategy=fedavg</td><td>2/2</td><td class="text">0.7000 ± 0.1414' in page
    )
    # fedprox: one seed of two: its value alone, n in the seeds column
    assert '<td class="text">strategy=fedprox</td><td>1/2</td><td class="text">0.7000</td>' in page
    assert "± -" not in page and "nan" not in page.lower()


def test_bands_are_mean_plus_minus_std_of_any_history_column_and_none_for_one_seed(tmp_path):
    sweep = tmp_path / "sweep"
    spec = SweepSpec(
        (Axis.of_key("strategy", ["fedavg", "fedprox"]), Axis.of_key("seed", [0, 1, 2])), {}, 2
    )
    prepare(sweep, spec)
    a0, a1, a2, b0, _, _ = spec.points()
    for point, values in ((a0, [0.1, 0.5]), (a1, [0.1, 0.6]), (a2, [0.4, 0.9]), (b0, [0.2, 0.3])):
        fake_run(sweep, point, "completed", history_of(values))
    table, metric = sweep_report.configuration_rows(spec, sweep, "train_loss")
    plt = pyplot()
    fig, ax = plt.subplots()
    draw_bands(ax, table, [r["label"] for r in table], {r["label"]: i for i, r in enumerate(table)})
    assert len(ax.lines) == 2 and len(ax.collections) == 1  # fedprox has one seed: no band
    band = ax.collections[0].get_paths()[0].vertices
    # train_loss in round 1: 1.5, 1.4, 1.1: mean 4 / 3, sample std sqrt((1/36 + 1/225 + ...) / 2)
    losses = [1.5, 1.4, 1.1]
    mean, std = sum(losses) / 3, math.sqrt(sum((x - 4 / 3) ** 2 for x in losses) / 2)
    at_1 = {round(y, 9) for y in band[np.isclose(band[:, 0], 1.0), 1]}  # the path may close there
    assert sorted(at_1) == pytest.approx([mean - std, mean + std])
    assert metric == "train_loss"
    plt.close(fig)


LONG = "cnn,mlp,cnn-small,mlp-small," * 4  # a long grid value; two of them differ at the end


def test_the_terminal_summary_fits_100_columns_with_long_grid_values(tmp_path, capsys):
    sweep = tmp_path / "a-sweep-folder-with-a-rather-long-name-for-its-title"
    spec = SweepSpec(
        (
            Axis.of_key("strategy", ["fedavg", "fedprox"]),
            Axis.of_key("kt-client-models", [LONG + "cnn", LONG + "mlp"]),
            Axis.of_key("model", ["mlp"]),  # one value: not a column of the table
            Axis.of_key("seed", [0, 1]),
        ),
        {"num-server-rounds": 2},
        2,
    )
    prepare(sweep, spec)
    points = spec.points()
    for i, point in enumerate(points[:-1]):
        fake_run(sweep, point, "completed", history_of([0.1, 0.5 + i / 100]))
    fake_run(sweep, points[-1], "failed")  # its reason in the list below the table
    assert cli.main(["sweep", "--out", str(sweep), "--report-only"]) == 0
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if not line.startswith("written in ")]
    assert max(map(len, lines)) <= 100, max(lines, key=len)
    table = lines[lines.index("") + 1 :][:5]
    assert table[0].split() == ["configuration", "seeds", "final", "best"]
    assert len(set(table)) == 5 and all("model=mlp" not in line for line in table)
    assert table[1].startswith("strategy=fedavg, kt-client-mo") and "…" in table[1]
    assert table[1].split("…")[1].split()[0].endswith("mlp-small,cnn")  # the end kept
    assert "2/2    0.5050 ± 0.0071  0.5050 ± 0.0071" in table[1]
    assert "1/2    0.5600           0.5600" in table[4]  # one seed: its value alone
    assert "Not completed (1):" in out
    header = (sweep / "summary.md").read_text().splitlines()[2]
    assert "kt-client-models" in header and "model" in header and "final train_loss" in header


def test_an_interrupted_sweep_has_its_report_from_the_points_done(tmp_path, monkeypatch, capsys):
    sweep = tmp_path / "sweep"
    points = STRATEGY_SEED.points()

    def execute(sweep_dir, todo, num_clients, workers, via, address, bar, after_point):
        for i, point in enumerate(todo):
            if i == 2:
                raise KeyboardInterrupt
            fake_run(sweep_dir, point, "completed", history_of([0.1, 0.5]))
            after_point()
        return {}

    monkeypatch.setattr(sweep_execute, "execute", execute)
    grid = ["--grid", "strategy=fedavg,fedprox", "--grid", "seed=0,1,2", "--num-clients", "4"]
    status = cli.main(["sweep", "--out", str(sweep), *grid, "--set", "num-server-rounds=3"])
    assert status == 130
    assert (
        f"interrupted; {sweep / REPORT_FILE} shows the points completed" in capsys.readouterr().err
    )
    page = (sweep / REPORT_FILE).read_text()
    for point, status in zip(points, ["completed"] * 2 + ["pending"] * 4):
        assert f"<td class='text'>{point.name}</td><td class='text'>{status}</td>" in page
    assert "Not completed (4)" in (sweep / "summary.md").read_text()


# a real sweep


def test_a_tiny_sweep_runs_in_process_through_ray_with_two_workers(tmp_path, monkeypatch):
    spec = SweepSpec(
        (Axis.of_key("strategy", ["fedavg", "fedprox"]), Axis.of_key("seed", [0, 1])),
        {
            "num-server-rounds": 1,
            "local-epochs": 1,
            "model": "mlp",
            "data-dir": str(tmp_path / "data"),
        },
        num_clients=2,
    )
    sweep = tmp_path / "sweep"
    completed_at_writes = []  # points completed when the sweep wrote its files

    def write_files(sweep_dir, spec):
        if not completed_at_writes:  # a failed write: a line, and the sweep goes on
            completed_at_writes.append(None)
            raise OSError("disk full")
        write_sweep_files(sweep_dir, spec)
        page = (sweep_dir / REPORT_FILE).read_text()
        completed_at_writes.append(page.count("<td class='text'>completed</td>"))

    monkeypatch.setattr(sweep_execute, "write_sweep_files", write_files)
    results = run_sweep(spec, sweep, workers=2, progress=False)
    # after the first point (that write failed), the second (the third may have completed
    # too) and the third (the fourth may have), while points still ran; then at the end
    assert len(completed_at_writes) == 4 and completed_at_writes[-1] == 4
    assert 2 <= completed_at_writes[1] <= 3 and completed_at_writes[1] <= completed_at_writes[2]
    assert [r.point.name for r in results] == [
        "strategy-fedavg_seed-0",
        "strategy-fedavg_seed-1",
        "strategy-fedprox_seed-0",
        "strategy-fedprox_seed-1",
    ]
    for result in results:
        assert result.state.status == "completed", result.state
        assert result.run_dir.parent == point_dir(sweep, result.point)
        assert json.loads((result.run_dir / "status.json").read_text())["status"] == "completed"
        config = json.loads((result.run_dir / "config.json").read_text())
        assert (config["strategy"], config["seed"]) == (
            result.point.overrides["strategy"],
            result.point.overrides["seed"],
        )
        assert config["num-partitions"] == 2
        assert "flowerbed: results go to" in (result.run_dir.parent / "point.log").read_text()
    with open(sweep / "summary.csv") as f:
        table = list(csv.DictReader(f))
    assert [(r["strategy"], r["seeds"]) for r in table] == [("fedavg", "2"), ("fedprox", "2")]
    for row, strategy in zip(table, ("fedavg", "fedprox")):
        finals = [
            json.loads((r.run_dir / "history.json").read_text())[-1]["central_accuracy"]
            for r in results
            if r.point.labels["strategy"] == strategy
        ]
        assert float(row["final_mean"]) == pytest.approx(sum(finals) / 2)
    # a rerun finds everything completed: no new run folder, nothing started
    again = run_sweep(spec, sweep, workers=2, progress=False)
    assert [r.run_dir for r in again] == [r.run_dir for r in results]
    assert all(len(list(point_dir(sweep, r.point).glob("2*"))) == 1 for r in results)


def test_the_command_line_joins_file_grid_and_set_with_set_winning(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text("num-clients = 3\n[set]\nnum-server-rounds = 2\n[grid]\nseed = [0, 1]\n")
    args = cli.parser().parse_args(
        ["sweep", "--out", str(tmp_path / "s"), "--file", str(path), "--grid", "model=mlp,cnn"]
        + ["--set", "num-server-rounds=4"]
    )
    spec = sweep_command.spec_from_args(args)
    assert [a.name for a in spec.axes] == ["seed", "model"] and spec.num_clients == 3
    assert spec.fixed == {"num-server-rounds": 4}
    args.num_clients = 5
    assert sweep_command.spec_from_args(args).num_clients == 5


def test_the_progress_line_counts_points_and_estimates_from_the_median(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(sweep_progress.time, "monotonic", lambda: clock[0])
    stream = io.StringIO()
    bar = sweep_progress.Progress(total=10, skipped=2, workers=2, stream=stream)
    for name, seconds, ok in (("a", 10, True), ("b", 30, False), ("c", 20, True)):
        bar.start(name)
        clock[0] += seconds
        bar.finish(name, ok)
    bar.start("d")
    clock[0] += 5
    # 10 - 2 before - 2 done - 1 failed - 1 running = 4 queued; median 20 s:
    # (4 x 20 s + the 15 s d has left of it) over 2 workers = 47.5 s
    assert bar.eta() == pytest.approx(47.5)
    assert bar.line() == "sweep: 4/10 done (2 before), 1 running, 1 failed, 4 left, about 48s to go"
    bar.show()
    clock[0] += 1
    bar.show()  # only the clock moved: no second line when the output is not a terminal
    assert stream.getvalue().count("\n") == 1


def test_a_failing_point_is_recorded_and_never_raises(tmp_path):
    """The Ray task's body, called here directly: a run that fails in round 1 leaves its run
    folder saying so; one that fails before it has a run folder leaves sweep_error.log."""
    base = {"num-server-rounds": 1, "local-epochs": 1, "model": "mlp"}
    folder = tmp_path / "points" / "p"
    failing = {**base, "failing-partitions": "0,1", "data-dir": str(tmp_path / "data")}
    state = sweep_execute.run_point(str(folder), "p", failing, "inprocess", 2)
    assert state["status"] == "failed" and state["reason"].startswith(
        "round 1: no client succeeded"
    )
    assert state["run_dir"].parent == folder and not (folder / ERROR_FILE).exists()

    no_data = {**base, "dataset": "bloodmnist", "data-dir": str(tmp_path / "empty")}
    other = tmp_path / "points" / "q"
    state = sweep_execute.run_point(str(other), "q", no_data, "inprocess", 2)
    assert state["status"] == "failed" and state["run_dir"] is None
    assert "bloodmnist.npz" in state["reason"]
    assert (other / ERROR_FILE).read_text().startswith(state["reason"] + "\n\nTraceback")
    assert point_state(other) == PointState("failed", None, state["reason"])
