"""A study's runs as Ray tasks (``experiments.ray_runs``, ``flowerbed reproduce --ray-address``
and ``--gpus-per-client``), and the memory line of ``--dry-run``."""

import os
import sys

import pytest
import ray

from flowerbed.cli import main as cli_main
from flowerbed.experiments import reproduce
from flowerbed.experiments.driver import Point, measured, one_run, read_rows, run_study
from flowerbed.experiments.ray_runs import RayPlacement, rows_on_ray
from flowerbed.ray_cluster import OBJECT_STORE_BYTES
from flowerbed.runtime.needs import GIB
from flowerbed.settings import ConfigError


class SquareStudy:
    """Each run: the square of its point's number plus its seed, and where it ran."""

    name = "square"

    def grid(self, budget):
        return [Point("two", {"x": 2}), Point("three", {"x": 3})], [0, 1]

    def run(self, point, seed):
        if point.settings["x"] == 3 and seed == 1:
            raise ValueError("three and one do not mix")
        return {"value": point.settings["x"] ** 2 + seed, "ray": int(ray.is_initialized())}

    def report(self, rows):
        return {}


@pytest.fixture(scope="module")
def local_ray():
    """A private Ray instance for the module (``joined_ray`` uses it and leaves it running);
    the toy study travels to the workers by value (tests/ is not on their path)."""
    os.environ.setdefault("RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO", "0")  # as joined_ray sets it
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=OBJECT_STORE_BYTES,
    )
    yield
    ray.shutdown()


def test_rows_on_ray_are_the_rows_of_the_same_runs_in_process(local_ray):
    study = SquareStudy()
    points, seeds = study.grid("any")
    todo = [(p, s) for p in points for s in seeds]
    rows = list(rows_on_ray(one_run, study, todo, 2, RayPlacement("local")))
    by_run = {(row["point"], row["seed"]): row for row in rows}
    assert set(by_run) == {(p.name, s) for p, s in todo}
    assert {key: row["value"] for key, row in by_run.items() if "failed" not in row} == {
        ("two", 0): 4,
        ("two", 1): 5,
        ("three", 0): 9,
    }
    # each ran in a Ray worker, and the run that raised is a failed row, not a lost one
    assert all(row["ray"] == 1 for row in rows if "failed" not in row)
    assert by_run[("three", 1)]["failed"] == "ValueError: three and one do not mix"


def test_run_study_with_a_placement_records_every_run_and_retries_the_failed_one(
    local_ray, tmp_path
):
    study = SquareStudy()
    run_study(
        study, tmp_path, "any", workers=2, say=lambda line: None, placement=RayPlacement("local")
    )
    assert measured(read_rows(tmp_path)) == {("two", 0), ("two", 1), ("three", 0)}
    said = []
    run_study(study, tmp_path, "any", say=said.append, placement=RayPlacement("local"))
    assert said[0] == "square (any): 3 of 4 runs already done"  # only the failed one again
    assert len(read_rows(tmp_path)) == 5


def test_more_gpus_than_the_cluster_has_is_refused_before_any_task(local_ray):
    more = ray.cluster_resources().get("GPU", 0) + 1
    study = SquareStudy()
    todo = [(study.grid("any")[0][0], 0)]
    with pytest.raises(ConfigError, match=rf"--gpus-per-client {more:g} asks for more GPUs"):
        next(rows_on_ray(one_run, study, todo, 1, RayPlacement("local", more)))


def test_negative_gpus_are_refused():
    with pytest.raises(ConfigError, match="--gpus-per-client must be at least 0, got -1"):
        RayPlacement("local", -1)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--gpus-per-client", "-1"], "--gpus-per-client must be at least 0, got -1"),
        (["--ray-address", "127.0.0.1:1"], "no Ray cluster answers at 127.0.0.1:1"),
    ],
)
def test_bad_placement_is_one_line_and_exit_2(flags, message, tmp_path, capsys):
    status = cli_main(["reproduce", "ctl", "--budget", "smoke", "--out", str(tmp_path), *flags])
    err = capsys.readouterr().err
    assert status == 2
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "rows.jsonl").exists()


def test_the_dry_run_says_the_memory_of_the_largest_point(capsys):
    reproduction = reproduce.REPRODUCTIONS["qkt"]
    points, _ = reproduction.study.grid("cpu")
    largest = max(reproduce.run_memory(point) for point in points)
    assert largest > GIB // 2  # at least Python with torch and Flower
    line = reproduce.memory_line(points, 2)
    assert f"{largest / GIB:.1f} GiB per run" in line
    assert f"{2 * largest / GIB:.1f} GiB with 2 workers" in line
    # CTL's simulator has no run config to size: said, not guessed
    ctl_points, _ = reproduce.REPRODUCTIONS["ctl"].study.grid("cpu")
    assert "not known" in reproduce.memory_line(ctl_points, 1)
