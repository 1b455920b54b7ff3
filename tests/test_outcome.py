"""How a run ends (``runtime.outcome``): status.json, a round with no successful client, a
stopped process, errors before training, bounded waits, and one-line error logs."""

import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest
import torch

from flowerbed.inprocess import run_in_process
from flowerbed.runtime.outcome import (
    MAX_REASON_CHARS,
    OneLineErrors,
    RunFailed,
    recorded_outcome,
    write_status,
)
from flowerbed.settings import ConfigError


def status(run_dir):
    return json.loads((run_dir / "status.json").read_text())


def only_run_dir(root):
    (run_dir,) = [p for p in root.iterdir() if p.is_dir()]
    return run_dir


def test_a_finished_run_says_completed(fast_run):
    run_dir = run_in_process({**fast_run, "model": "mlp"}, num_clients=2)
    assert status(run_dir)["status"] == "completed" and (run_dir / "model.pt").exists()


def test_a_round_without_any_successful_client_fails_the_run_and_saves_no_model(fast_run):
    overrides = {**fast_run, "model": "mlp", "failing-partitions": "0,1"}
    with pytest.raises(RunFailed, match="round 1: no client succeeded .2 failed; partition 0: "):
        run_in_process(overrides, num_clients=2)
    run_dir = only_run_dir(fast_run_root(fast_run))
    assert status(run_dir)["status"] == "failed"
    assert "round 1: no client succeeded" in status(run_dir)["reason"]
    assert "Traceback" in (run_dir / "error.log").read_text()
    assert not (run_dir / "model.pt").exists()


def fast_run_root(fast_run):
    return Path(fast_run["output-dir"])


def test_failed_rounds_can_be_allowed(fast_run):
    overrides = {**fast_run, "model": "mlp", "failing-partitions": "0,1", "max-failed-rounds": 2}
    run_dir = run_in_process(overrides, num_clients=2)
    history = json.loads((run_dir / "history.json").read_text())
    assert [r.get("clients_failed") for r in history[1:]] == [2, 2]
    assert status(run_dir)["status"] == "completed"
    # nothing was aggregated: the saved global model is the initial one, not an empty one
    assert [r["central_accuracy"] for r in history] == [history[0]["central_accuracy"]] * 3
    assert len(torch.load(run_dir / "model.pt")) > 0


def test_an_interrupted_block_says_interrupted(tmp_path):
    with pytest.raises(KeyboardInterrupt), recorded_outcome(tmp_path):
        assert status(tmp_path)["status"] == "running"
        os.kill(os.getpid(), signal.SIGTERM)  # what stopping the ServerApp process sends
    assert status(tmp_path) | {"time": None} == {
        "status": "interrupted",
        "reason": "stopped by signal SIGTERM",
        "time": None,
    }
    with pytest.raises(ValueError, match="valid choices: running, completed"):
        write_status(tmp_path, "done")


def test_a_failed_runs_reason_is_its_whole_message_on_one_line_and_bounded(tmp_path):
    with pytest.raises(ValueError), recorded_outcome(tmp_path):
        raise ValueError("bad shard:\n  expected 3 columns,   got 2\n\n  (file a.csv)\n")
    assert status(tmp_path)["status"] == "failed"
    assert status(tmp_path)["reason"] == "bad shard: | expected 3 columns, got 2 | (file a.csv)"
    with pytest.raises(RuntimeError), recorded_outcome(tmp_path):
        raise RuntimeError("\n".join(f"line {i}" for i in range(1000)))
    reason = status(tmp_path)["reason"]
    assert len(reason) == MAX_REASON_CHARS and reason.startswith("line 0 | line 1 | ")
    assert reason.endswith(" [...]") and "\n" not in reason


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            {"failing-partitions": "1,99"},
            r"names partitions \[99\] that do not exist; valid ids: 0 to 1",
        ),
        (
            {"output-dir": "/proc/flowerbed-runs"},
            "output-dir='/proc/flowerbed-runs': cannot make a run folder",
        ),
    ],
)
def test_settings_that_need_the_federation_are_checked_before_training(
    fast_run, overrides, message
):
    with pytest.raises(ConfigError, match=message):
        run_in_process({**fast_run, **overrides}, num_clients=2)


def test_too_few_nodes_ends_after_the_wait_timeout(fast_run):
    overrides = {**fast_run, "min-available-clients": 3, "wait-timeout": 1.0}
    with pytest.raises(
        RunFailed, match="only 2 of min-available-clients=3 nodes connected within wait-timeout=1 s"
    ):
        run_in_process(overrides, num_clients=2)


def record_with(error):
    try:
        raise error
    except (ConfigError, KeyError, RunFailed):
        return logging.LogRecord(
            "flwr", logging.ERROR, __file__, 1, "ServerApp raised", None, sys.exc_info()
        )


def test_flowerbeds_errors_are_logged_without_traceback_unless_asked(monkeypatch):
    clear, other = record_with(ConfigError("bad key")), record_with(KeyError("bug"))
    assert OneLineErrors().filter(clear) and clear.exc_info is None
    assert OneLineErrors().filter(other) and other.exc_info is not None
    monkeypatch.setenv("FLOWERBED_TRACEBACK", "1")
    kept = record_with(RunFailed("no client"))
    OneLineErrors().filter(kept)
    assert kept.exc_info is not None
