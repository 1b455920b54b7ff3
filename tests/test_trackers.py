"""Trackers: real in-process runs whose TensorBoard event files and MLflow store are read back
with the trackers' own readers and compared with ``history.json`` round by round; a tracker
that fails or cannot reach its server leaves the run and its files whole; a missing package
stops the run before anything, naming the key, the value and the pip command."""

from __future__ import annotations

import json
import math
import socket
import sys
from logging import WARNING
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from flowerbed.catalog import parse_run_config
from flowerbed.core.results import round_seconds
from flowerbed.inprocess import resolve_run_config, run_in_process
from flowerbed.runtime import trackers
from flowerbed.runtime.outcome import RunFailed
from flowerbed.settings import ConfigError

ROUNDS = 2


def quick_run(output_dir: Path, **overrides) -> dict:
    return {
        "num-server-rounds": ROUNDS,
        "local-epochs": 1,
        "model": "mlp",
        "output-dir": str(output_dir),
        "data-dir": str(output_dir / "data"),
        **overrides,
    }


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    """One output folder (and so one MLflow SQLite store, made once) for the module's runs."""
    return tmp_path_factory.mktemp("runs")


@pytest.fixture(scope="module")
def tracked_run(store) -> Path:
    """A 2-client, 2-round run with both trackers on; its run folder."""
    return run_in_process(quick_run(store, tracker="tensorboard,mlflow"), num_clients=2)


def history(run_dir: Path) -> list[dict]:
    """The rows as the trackers see them: history.json's, with each round's wall-clock seconds
    (which the run keeps apart, in timings.csv, because no seed reproduces them)."""
    rows = json.loads((run_dir / "history.json").read_text())
    for row, seconds in zip(rows[1:], round_seconds(run_dir), strict=True):
        row["seconds"] = seconds
    return rows


def expected_curves(rows: list[dict]) -> dict[str, dict[int, float]]:
    """Column -> {round: value} for the columns that are finite numbers, by hand."""
    curves: dict[str, dict[int, float]] = {}
    for row in rows:
        for key, value in row.items():
            if key == "round" or isinstance(value, (bool, str, list, dict)) or value is None:
                continue
            if math.isfinite(value):
                curves.setdefault(key, {})[row["round"]] = value
    return curves


def tensorboard_curves(run_dir: Path) -> dict[str, dict[int, float]]:
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    return {
        tag: {event.step: event.value for event in events.Scalars(tag)}
        for tag in events.Tags()["scalars"]
    }


def mlflow_run(store: Path, run_dir: Path):
    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("flowerbed")
    (run,) = client.search_runs(
        [experiment.experiment_id], filter_string=f"attributes.run_name = '{run_dir.name}'"
    )
    return client, run


def test_tensorboard_holds_every_numeric_history_column_round_by_round(tracked_run):
    rows = history(tracked_run)
    expected = expected_curves(rows)
    assert {"central_accuracy", "train_loss", "bytes_sent", "client_accuracy"} <= set(expected)
    curves = tensorboard_curves(tracked_run)
    assert set(curves) == set(expected)  # per-client dicts and failure lists are not curves
    for key, by_round in expected.items():
        # TensorBoard stores float32
        assert curves[key] == {r: float(np.float32(v)) for r, v in by_round.items()}, key
    assert set(curves["central_accuracy"]) == set(range(ROUNDS + 1))  # round 0 included


def test_mlflow_holds_the_history_the_config_and_a_finished_status(store, tracked_run):
    client, run = mlflow_run(store, tracked_run)
    assert run.info.status == "FINISHED"
    assert run.data.tags["flowerbed.run-dir"] == str(tracked_run)
    config = json.loads((tracked_run / "config.json").read_text())
    assert run.data.params == {key: str(value) for key, value in config.items()}
    expected = expected_curves(history(tracked_run))
    assert set(run.data.metrics) == set(expected)
    for key, by_round in expected.items():
        logged = {m.step: m.value for m in client.get_metric_history(run.info.run_id, key)}
        assert logged == by_round, key


def test_a_failed_run_ends_its_mlflow_run_failed(store, tracked_run):
    # every client fails in round 1: the run fails after writing round 1's row
    overrides = quick_run(store, tracker="mlflow", **{"failing-partitions": "0,1"})
    with pytest.raises(RunFailed, match="no client succeeded"):
        run_in_process(overrides, num_clients=2)
    (run_dir,) = [d for d in store.glob("*-fedavg-digits-seed42*") if d != tracked_run]
    assert json.loads((run_dir / "status.json").read_text())["status"] == "failed"
    client, run = mlflow_run(store, run_dir)
    assert run.info.status == "FAILED"
    logged = client.get_metric_history(run.info.run_id, "clients_failed")
    assert [(m.step, m.value) for m in logged] == [(1, 2.0)]


def test_a_tracker_that_fails_mid_run_is_dropped_with_one_warning(tmp_path, monkeypatch, caplog):
    calls = []

    def broken_log(self, step, metrics):
        calls.append(step)
        if step >= 1:
            raise OSError("tracking disk full")
        self.writer.add_scalar("central_accuracy", metrics["central_accuracy"], step)
        self.writer.flush()

    monkeypatch.setattr(trackers.TensorBoardTracker, "log", broken_log)
    with caplog.at_level(WARNING, logger="flwr"):
        run_dir = run_in_process(quick_run(tmp_path, tracker="tensorboard"), num_clients=2)
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"
    assert [row["round"] for row in history(run_dir)] == list(range(ROUNDS + 1))
    assert calls == [0, 1]  # dropped after its failure: round 2 never reached it
    warnings = [r.getMessage() for r in caplog.records if "tracker" in r.getMessage()]
    assert len(warnings) == 1
    assert "tracker tensorboard failed at round 1 (OSError: tracking disk full)" in warnings[0]
    assert tensorboard_curves(run_dir) == {
        "central_accuracy": {0: float(np.float32(history(run_dir)[0]["central_accuracy"]))}
    }


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_tracking_server_that_is_not_there_leaves_the_run_whole(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")  # refused at once, no back-off
    overrides = quick_run(
        tmp_path, tracker="mlflow", **{"mlflow-tracking-uri": f"http://127.0.0.1:{free_port()}"}
    )
    with caplog.at_level(WARNING, logger="flwr"):
        run_dir = run_in_process(overrides, num_clients=2)
    assert json.loads((run_dir / "status.json").read_text())["status"] == "completed"
    assert [row["round"] for row in history(run_dir)] == list(range(ROUNDS + 1))
    warnings = [r.getMessage() for r in caplog.records if "tracker" in r.getMessage()]
    assert len(warnings) == 1 and "tracker mlflow failed at its start" in warnings[0]


@pytest.mark.parametrize(
    "value, missing", [("tensorboard", "tensorboard"), ("tensorboard,mlflow", "mlflow")]
)
def test_a_missing_package_stops_the_run_before_anything(value, missing, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, missing, None)  # import and find_spec now fail
    with pytest.raises(ConfigError) as caught:
        run_in_process(quick_run(tmp_path, tracker=value), num_clients=2)
    assert str(caught.value) == (
        f"tracker={value!r} needs the {missing} package, which is not installed:"
        " pip install 'flowerbed[trackers]'"
    )
    assert not (tmp_path / "data").exists() and not list(tmp_path.glob("*/config.json"))


@pytest.mark.parametrize("value", ["wandb", "none,mlflow", "", " , "])
def test_an_unknown_tracker_is_refused_with_the_choices(value):
    with pytest.raises(ConfigError) as caught:
        parse_run_config(resolve_run_config({"tracker": value}))
    assert str(caught.value) == (
        f"tracker={value!r} is not valid; valid choices: none, tensorboard, mlflow"
        " (several comma-separated, e.g. 'tensorboard,mlflow')"
    )


def test_only_finite_numbers_become_metrics():
    row = {
        "round": 3,
        "central_accuracy": np.float64(0.25),
        "clients_trained": np.int64(4),
        "bytes_sent": 1200,
        "client_accuracy": math.nan,
        "train_loss": math.inf,
        "client_accuracies": {0: 0.5, 1: 0.75},
        "failures": ["partition 2: boom"],
        "flag": True,
        "note": "text",
    }
    assert trackers.scalar_metrics(row) == {
        "central_accuracy": 0.25,
        "clients_trained": 4.0,
        "bytes_sent": 1200.0,
    }


def test_trackers_are_read_from_a_comma_list_in_a_fixed_order():
    def chosen(value):
        return trackers.chosen_trackers(parse_run_config(resolve_run_config({"tracker": value})))

    assert chosen("none") == []
    assert chosen("mlflow, tensorboard,") == ["tensorboard", "mlflow"]
    assert chosen("mlflow mlflow") == ["mlflow"]


def test_the_default_mlflow_store_is_a_sqlite_file_in_the_output_folder(tmp_path):
    config = parse_run_config(resolve_run_config({"output-dir": str(tmp_path)}))
    assert trackers.mlflow_uri(config) == f"sqlite:///{tmp_path.resolve()}/mlflow.db"
    chosen = config.replace(mlflow_tracking_uri="http://mlflow.example:5000")
    assert trackers.mlflow_uri(chosen) == "http://mlflow.example:5000"
