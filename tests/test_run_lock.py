"""A live run holds its folder (``runtime.run_lock``): the lock and its heartbeat, a live holder
refused by name, a dead one (its process gone, a reused PID, a stale heartbeat) read as
``interrupted`` wherever status is read, and its folder taken over."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flowerbed.client_app import app as client_app
from flowerbed.inprocess import run_in_process
from flowerbed.runtime import run_lock
from flowerbed.runtime.client_state import RECORD, RUN_DIR_KEY
from flowerbed.runtime.run_lock import (
    LOCK_FILE,
    FolderBusy,
    hold,
    holder,
    lock_record,
    process_start,
    read_lock,
    settled_status,
)
from flowerbed.sweep.folder import PointState, point_state

HOST = socket.gethostname()


def test_a_run_holds_its_folder_with_its_pid_while_it_runs_and_lets_go_at_the_end(
    fast_run, one_thread
):
    seen = []

    def watching(msg, context):
        if RECORD in msg.content:  # checkpointing messages carry the run folder
            seen.append(read_lock(Path(msg.content[RECORD][RUN_DIR_KEY])))
        return client_app(msg, context)

    run_dir = run_in_process(
        {**fast_run, "model": "mlp", "num-server-rounds": 1}, num_clients=2, app=watching
    )
    assert seen and {(lock["pid"], lock["host"], lock["token"]) for lock in seen} == {
        (os.getpid(), HOST, seen[0]["token"])
    }
    assert seen[0]["process_start"] == process_start(os.getpid())
    assert not (run_dir / LOCK_FILE).exists()


def test_a_live_lock_refuses_a_second_holder_naming_its_pid_and_host(tmp_path):
    lock = hold(tmp_path, "first")
    try:
        assert holder(tmp_path).alive
        with pytest.raises(FolderBusy, match=f"second: a live run holds .*PID {os.getpid()} on"):
            hold(tmp_path, "second")
        # whoever looks at its status sees it running
        (tmp_path / "status.json").write_text(json.dumps({"status": "running", "reason": ""}))
        assert settled_status(tmp_path)["status"] == "running"
    finally:
        lock.release()
    assert not (tmp_path / LOCK_FILE).exists()
    hold(tmp_path, "again").release()


def test_the_heartbeat_refreshes_the_lock_until_the_run_ends(tmp_path, monkeypatch):
    monkeypatch.setattr(run_lock, "HEARTBEAT_SECONDS", 0.05)
    lock = hold(tmp_path, "run")
    first = read_lock(tmp_path)["heartbeat"]
    deadline = time.monotonic() + 5
    while read_lock(tmp_path)["heartbeat"] == first and time.monotonic() < deadline:
        time.sleep(0.02)
    assert read_lock(tmp_path)["heartbeat"] > first
    assert read_lock(tmp_path)["token"] == lock.record["token"]
    lock.release()
    assert not lock._thread.is_alive() and not (tmp_path / LOCK_FILE).exists()


def gone_pid() -> int:
    """The PID of a process that ran and was reaped."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def write_lock(run_dir: Path, age: float = 0.0, **fields) -> None:
    record = {**lock_record("feed"), "heartbeat": time.time() - age, **fields}
    (run_dir / LOCK_FILE).write_text(json.dumps(record))
    os.utime(run_dir / LOCK_FILE, (time.time() - age, time.time() - age))


DEAD = {
    "its process is gone": ({"pid": gone_pid}, 0.0, r"its process \(PID \d+ on host .*\) is gone"),
    "a reused PID": ({"process_start": lambda: process_start(os.getpid()) + 1}, 0.0, "is gone"),
    "a stale heartbeat": ({"host": lambda: "elsewhere"}, 75.0, "heartbeat .* stopped 7\\d s ago"),
}


@pytest.mark.parametrize("case", list(DEAD))
def test_a_running_status_whose_lock_is_dead_reads_as_interrupted_and_can_be_taken(tmp_path, case):
    fields, age, why = DEAD[case]
    run_dir = tmp_path / "point" / "20250101-120000-run"
    run_dir.mkdir(parents=True)
    (run_dir / "status.json").write_text(json.dumps({"status": "running", "reason": ""}))
    write_lock(run_dir, age, **{key: make() for key, make in fields.items()})
    state = point_state(tmp_path / "point")
    assert (state.status, state.run_dir) == ("interrupted", run_dir)
    assert state.reason.startswith("the run stopped without a word: ")
    assert re.search(why, state.reason), state.reason
    on_disk = json.loads((run_dir / "status.json").read_text())
    assert (on_disk["status"], on_disk["reason"]) == ("interrupted", state.reason)
    lock = hold(run_dir, "resume")  # the dead lock is broken, the folder taken
    assert read_lock(run_dir)["pid"] == os.getpid()
    lock.release()


def test_a_fresh_heartbeat_from_another_host_is_alive(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "status.json").write_text(json.dumps({"status": "running"}))
    write_lock(tmp_path / "run", 20.0, host="elsewhere", pid=4242)
    assert point_state(tmp_path) == PointState("running", tmp_path / "run", "")
    with pytest.raises(FolderBusy, match="PID 4242 on host elsewhere, heartbeat 2\\d s ago"):
        hold(tmp_path / "run", "resume")


def test_a_running_status_without_any_lock_reads_as_interrupted(tmp_path):
    (tmp_path / "status.json").write_text(json.dumps({"status": "running", "reason": ""}))
    assert settled_status(tmp_path)["reason"] == (
        f"the run stopped without a word: it holds no {LOCK_FILE} (a run of an older flowerbed,"
        " or the lock was deleted)"
    )
    assert json.loads((tmp_path / "status.json").read_text())["status"] == "interrupted"
