"""Resume: a run killed at any point goes on from its last checkpoint and writes the history an
uninterrupted run writes; bad resumes stop with one line and change nothing."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import (
    Array,
    ArrayRecord,
    ConfigRecord,
    Context,
    Message,
    MessageType,
    MetricRecord,
    RecordDict,
)

from flowerbed.catalog import parse_run_config
from flowerbed.client_app import app as client_app
from flowerbed.core.results import round_seconds
from flowerbed.inprocess import (
    InProcessGrid,
    resolve_run_config,
    run_in_process,
    use_server_identity,
)
from flowerbed.runtime.checkpoint import (
    NotData,
    checkpointed_round,
    decode,
    encode,
    read_checkpoint,
    restore_rng_states,
    restore_strategy_state,
    rng_states,
    strategy_state,
    versions,
    write_checkpoint,
)
from flowerbed.runtime.client_state import (
    RECORD,
    RUN_DIR_KEY,
    keep_client_state,
    load_state,
    save_state,
    saved_rounds,
    state_key,
)
from flowerbed.runtime.resume import (
    RUN_ID_KEY,
    VERSIONS_FILE,
    config_digest,
    digested_config,
    new_run_id,
)
from flowerbed.runtime.run_lock import LOCK_FILE, hold, holder, lock_record, settled_status
from flowerbed.server_app import run_protocol
from flowerbed.settings import ConfigError
from flowerbed.strategies import STRATEGIES

REPO = Path(__file__).resolve().parent.parent
ROUNDS = 4
TINY = {"dataset": "digits", "model": "mlp", "local-epochs": 1, "num-server-rounds": ROUNDS}
# scaffold samples half the clients: c's |S|/N and clients that skip rounds are exercised
KILLED = {
    "fedavg": {},
    "scaffold": {"fraction-train": 0.5},
    "fedadam": {},
    "ditto": {},
}


def overrides(name: str, out: Path, **extra) -> dict:
    return {
        **TINY,
        **KILLED.get(name, {}),
        "strategy": name,
        "output-dir": str(out / "runs"),
        "data-dir": str(out.parent / "data"),
        **extra,
    }


def only_run_folder(out: Path) -> Path:
    (folder,) = (out / "runs").iterdir()
    return folder


def run_checkpointed_round(out: Path) -> int:
    """The round of the checkpoint of the one run under ``out`` (-1 while there is none)."""
    folders = list((out / "runs").glob("*")) if (out / "runs").is_dir() else []
    return checkpointed_round(folders[0]) if folders else -1


def run_and_kill_after(run_config: dict, out: Path, after_round: int) -> Path:
    """Run in a subprocess; SIGKILL it as soon as its checkpoint reports ``after_round``."""
    code = (
        "import json, sys, torch; torch.set_num_threads(1);"
        " from flowerbed.inprocess import run_in_process;"
        " run_in_process(json.loads(sys.argv[1]), num_clients=4)"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-c", code, json.dumps(run_config)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 600
        while run_checkpointed_round(out) < after_round:
            assert proc.poll() is None, "the run ended before it could be killed"
            assert time.monotonic() < deadline, "no checkpoint of round 2 within 600 s"
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    return only_run_folder(out)


def status(run_dir: Path) -> str:
    return json.loads((run_dir / "status.json").read_text())["status"]


@pytest.mark.parametrize("name", list(KILLED))
def test_a_killed_run_resumes_to_the_history_of_an_uninterrupted_run(name, tmp_path, one_thread):
    reference = run_in_process(overrides(name, tmp_path / "reference"), num_clients=4)

    killed = run_and_kill_after(overrides(name, tmp_path / "killed"), tmp_path / "killed", 2)
    assert status(killed) == "running"  # SIGKILL: nothing could write "interrupted"
    done = read_checkpoint(killed).round
    assert 2 <= done < ROUNDS
    assert not (killed / "model.pt").exists()
    assert not holder(killed).alive  # its lock is left behind, its process gone
    assert settled_status(killed)["reason"].startswith(  # whoever looks sees it interrupted
        "the run stopped without a word: its process (PID "
    )
    assert status(killed) == "interrupted"

    resumed = run_in_process(
        overrides(name, tmp_path / "killed", resume=str(killed)), num_clients=4
    )
    assert resumed == killed  # the same folder, never a new one
    assert not (resumed / LOCK_FILE).exists()
    assert [p.name for p in (tmp_path / "killed" / "runs").iterdir()] == [killed.name]
    assert status(resumed) == "completed"
    assert (resumed / "history.json").read_bytes() == (reference / "history.json").read_bytes()
    assert (resumed / "history.csv").read_bytes() == (reference / "history.csv").read_bytes()
    assert len(round_seconds(resumed)) == ROUNDS
    for model in ("model.pt", "model_best.pt"):
        ours = torch.load(resumed / model, weights_only=True)
        theirs = torch.load(reference / model, weights_only=True)
        assert ours.keys() == theirs.keys()
        for key in ours:
            assert torch.equal(ours[key], theirs[key]), (model, key)
    assert (resumed / "model_best.json").read_text() == (reference / "model_best.json").read_text()
    # the config.json of the run is the one it started with
    assert json.loads((resumed / "config.json").read_text())["resume"] == ""


def test_a_killed_run_of_virtual_clients_resumes_to_the_uninterrupted_history(tmp_path, one_thread):
    """8 SCAFFOLD clients carried by 4 nodes, half of them sampled a round: each client's c_i
    lives only in the run folder, so the resumed run must find it there."""
    virtual = {"virtual-clients": 8}
    reference = run_in_process(overrides("scaffold", tmp_path / "reference", **virtual), 4)
    killed = run_and_kill_after(
        overrides("scaffold", tmp_path / "killed", **virtual), tmp_path / "killed", 2
    )
    assert 2 <= read_checkpoint(killed).round < ROUNDS
    resumed = run_in_process(
        overrides("scaffold", tmp_path / "killed", resume=str(killed), **virtual), 4
    )
    assert status(resumed) == "completed"
    assert (resumed / "history.json").read_bytes() == (reference / "history.json").read_bytes()


class LateNodesGrid(InProcessGrid):
    """A federation whose last nodes connect late: the first listing shows ``early`` nodes
    (enough for min-available-clients), every later one all of them, as SuperNodes still
    coming up when a resumed run starts."""

    def __init__(self, *args, early: int = 2, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.early = early
        self.listings = 0

    def get_node_ids(self) -> list[int]:
        self.listings += 1
        nodes = super().get_node_ids()
        return nodes[: self.early] if self.listings == 1 else nodes


def test_a_resume_whose_nodes_connect_late_waits_for_the_run_s_federation(tmp_path, one_thread):
    """A run "killed" as round 3 starts (its folder copied when the first round-3 message
    arrives: the checkpoint of round 2 and the clients' saved state) resumes on a federation
    whose last two nodes connect after the first listing. The handshake asks the nodes
    connected when min-available-clients are; the resumed run must wait for the run's
    partitions, else it samples from two nodes and its history differs."""
    run_config = overrides("scaffold", tmp_path / "reference", **{"fraction-train": 0.75})
    copied = tmp_path / "killed" / "runs"

    def copying_at_round_3(msg: Message, context: Context) -> Message:
        record = msg.content.config_records.get(RECORD)
        config = msg.content.config_records.get("config")
        if record and config and config.get("server-round") == 3 and not copied.exists():
            shutil.copytree(str(record[RUN_DIR_KEY]), copied / "run")
        return client_app(msg, context)

    reference = run_in_process(run_config, num_clients=4, app=copying_at_round_3)
    killed = copied / "run"
    assert read_checkpoint(killed).round == 2
    (killed / LOCK_FILE).unlink()  # this process holds the reference's: the copy's is dead
    (killed / "status.json").write_text(json.dumps({"status": "interrupted", "reason": ""}))

    resumed_config = {**run_config, "output-dir": str(copied), "resume": str(killed)}
    resumed_config = resolve_run_config(resumed_config)
    grid = LateNodesGrid(client_app, resumed_config, 4)
    assert run_protocol(grid, parse_run_config(resumed_config)) == killed
    assert status(killed) == "completed"
    assert (killed / "history.json").read_bytes() == (reference / "history.json").read_bytes()


def test_the_stateful_strategies_keep_what_they_should_in_the_checkpoint(tmp_path, one_thread):
    """The attributes the module docstring names carry state, and a restored strategy holds
    exactly the saved values (a round trip through the file)."""
    expected = {
        "scaffold": {"c"},
        "fedadam": {"m_t", "v_t", "current_arrays"},
        "fedavgm": {"momentum_vector", "current_arrays"},
        "feddyn": {"h"},
    }
    for name, attributes in expected.items():
        out = tmp_path / name
        run_dir = run_in_process(overrides(name, out, **{"num-server-rounds": 2}), num_clients=4)
        checkpoint = read_checkpoint(run_dir)
        assert checkpoint.round == 2
        for attribute in attributes:
            assert decode(checkpoint.strategy[attribute]) is not None, (name, attribute)
        config = parse_run_config(resolve_run_config(overrides(name, out)))
        fresh = STRATEGIES[name].build_server(config)
        restore_strategy_state(fresh, checkpoint.strategy)
        assert_same(strategy_state(fresh), checkpoint.strategy)


def assert_same(a, b) -> None:
    """Equal encoded trees (tensors by value)."""
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    else:
        assert a == b


def test_encode_round_trips_arrays_records_and_numbers():
    value = {
        "a": np.arange(6, dtype=np.int16).reshape(2, 3),
        "b": ArrayRecord({"w": Array(np.ones((2, 2), np.float32))}),
        "c": [np.float64(0.1), 3, None, "x", (1, 2.5)],
        7: frozenset({"k", "j"}),
    }
    back = decode(encode(value))
    assert back["a"].dtype == np.int16 and np.array_equal(back["a"], value["a"])
    assert np.array_equal(back["b"]["w"].numpy(), np.ones((2, 2), np.float32))
    assert back["c"] == [0.1, 3, None, "x", (1, 2.5)] and isinstance(back["c"][0], np.float64)
    assert back[7] == frozenset({"j", "k"})
    with pytest.raises(NotData, match="object"):
        encode({"x": object()})


def test_restored_random_states_repeat_the_same_draws():
    import random

    states = rng_states()
    first = (random.random(), np.random.rand(), torch.rand(1).item())
    random.random(), np.random.rand(), torch.rand(3)  # move on
    restore_rng_states(decode(encode(states)))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == first


def test_a_strategy_attribute_that_is_not_data_is_named():
    class Odd:
        def __init__(self):
            self.weights = np.zeros(2)
            self.rule = lambda x: x  # code: skipped
            self.cache = object()  # neither: refused

    with pytest.raises(NotData, match=r"Odd\.cache"):
        strategy_state(Odd())


# --- the clients' state -----------------------------------------------------------------------


def test_client_state_round_trips_every_record_kind(tmp_path):
    state = RecordDict(
        {
            "w": ArrayRecord(
                {"a": Array(np.arange(4, dtype=np.float32)), "n": Array(np.array([3], np.int64))}
            ),
            "c": ConfigRecord({"s": "x", "i": 2, "f": 0.1, "b": True, "raw": b"\x00\xff"}),
            "m": MetricRecord({"loss": 0.25, "steps": [1, 2]}),
        }
    )
    save_state(tmp_path / "round-3.npz", state)
    back = load_state(tmp_path / "round-3.npz")
    assert list(back.keys()) == ["w", "c", "m"]
    assert back["w"]["a"].numpy().dtype == np.float32
    assert np.array_equal(back["w"]["n"].numpy(), [3])
    assert dict(back["c"]) == {"s": "x", "i": 2, "f": 0.1, "b": True, "raw": b"\x00\xff"}
    assert isinstance(back["m"], MetricRecord) and dict(back["m"]) == {
        "loss": 0.25,
        "steps": [1, 2],
    }


def client_message(
    server_round: int, run_dir: Path | None, message_type: str = MessageType.TRAIN
) -> Message:
    use_server_identity()
    content = RecordDict({"config": ConfigRecord({"server-round": server_round})})
    if run_dir is not None:
        content[RECORD] = ConfigRecord({RUN_DIR_KEY: str(run_dir)})
    return Message(content=content, message_type=message_type, dst_node_id=1)


def reading_step(msg: Message, context: Context) -> Message:
    """An evaluation that reads the state and changes nothing."""
    assert "seen" in context.state
    return Message(RecordDict(), reply_to=msg)


def test_an_evaluation_that_changes_no_record_writes_nothing(tmp_path):
    context = node()
    keep_client_state(client_message(1, tmp_path), context, counting_step)
    keep_client_state(client_message(2, tmp_path, MessageType.EVALUATE), context, reading_step)
    assert sorted(saved_rounds(tmp_path / "client-state" / "partition-1")) == [1]
    # one that replaces a record is saved
    keep_client_state(client_message(2, tmp_path, MessageType.EVALUATE), context, counting_step)
    assert sorted(saved_rounds(tmp_path / "client-state" / "partition-1")) == [1, 2]
    # a fresh process evaluating at round 3 finds round 2's state
    fresh = node()
    keep_client_state(client_message(3, tmp_path, MessageType.EVALUATE), fresh, reading_step)
    assert fresh.state["seen"]["n"] == 2


def node(partition: int = 1, **node_config) -> Context:
    config = {"partition-id": partition, "num-partitions": 4, **node_config}
    return Context(run_id=1, node_id=1, node_config=config, state=RecordDict(), run_config={})


def counting_step(msg: Message, context: Context) -> Message:
    """A client step whose state counts the rounds it saw: (last round, number of rounds)."""
    seen = context.state["seen"]["n"] if "seen" in context.state else 0
    round_ = msg.content["config"]["server-round"]
    context.state["seen"] = MetricRecord({"n": seen + 1, "last": round_})
    return Message(RecordDict(), reply_to=msg)


def test_the_mod_keeps_two_rounds_and_a_fresh_node_loads_the_latest_before_its_round(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    context = node()
    for r in (1, 2, 3, 5):
        keep_client_state(client_message(r, run_dir), context, counting_step)
    folder = run_dir / "client-state" / "partition-1"
    assert sorted(saved_rounds(folder)) == [3, 5]
    # a fresh process (empty state) at round 5 takes round 3's file, not round 5's own
    fresh = node()
    keep_client_state(client_message(5, run_dir), fresh, counting_step)
    assert dict(fresh.state["seen"]) == {"n": 4, "last": 5}  # 3 messages before, then this one
    # a node that has state in memory keeps it
    keep_client_state(client_message(6, run_dir), context, counting_step)
    assert context.state["seen"]["n"] == 5


def test_the_mod_does_nothing_without_the_run_folder_and_uses_the_site_folder(tmp_path):
    context = node()
    keep_client_state(client_message(1, None), context, counting_step)
    assert context.state["seen"]["n"] == 1 and not any(tmp_path.iterdir())
    # a server path absent here and no state-dir: nothing written
    keep_client_state(client_message(1, tmp_path / "elsewhere" / "run-a"), node(), counting_step)
    assert not any(tmp_path.iterdir())
    site = tmp_path / "site"
    keep_client_state(
        client_message(1, tmp_path / "elsewhere" / "run-a"),
        node(2, **{"state-dir": str(site)}),
        counting_step,
    )
    key = state_key(str(tmp_path / "elsewhere" / "run-a"))
    assert sorted(saved_rounds(site / key / "partition-2")) == [1]
    with pytest.raises(ConfigError, match="state-dir='relative' on node 1 must be an absolute"):
        keep_client_state(
            client_message(1, tmp_path), node(**{"state-dir": "relative"}), counting_step
        )


# --- bad resumes: one line, nothing changed -----------------------------------------------------


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def interrupted(tmp_path, one_thread) -> Path:
    """A two-round fedavg run whose status says it was interrupted (its checkpoint: round 2)."""
    run_dir = run_in_process(
        overrides("fedavg", tmp_path / "first", **{"num-server-rounds": 2}), num_clients=4
    )
    (run_dir / "status.json").write_text(json.dumps({"status": "interrupted", "reason": ""}))
    return run_dir


def resume_fails(run_config: dict, match: str, folder: Path, num_clients: int = 4) -> None:
    before = snapshot(folder)
    with pytest.raises(ConfigError, match=match):
        run_in_process(run_config, num_clients=num_clients)
    assert snapshot(folder) == before


def test_bad_resumes_stop_with_one_line_and_change_nothing(interrupted, tmp_path):
    base = overrides("fedavg", tmp_path / "first", **{"num-server-rounds": 2})
    parent = interrupted.parent
    # a differing key that changes results is named, with both values
    resume_fails(
        {**base, "resume": str(interrupted), "learning-rate": 0.5},
        r"differs from the run's config.json in 1 key\(s\): learning-rate=\S+ \(given 0.5\)",
        parent,
    )
    # another federation size: stopped after the handshake, before anything is written
    resume_fails(  # (after waiting wait-timeout for the run's fourth node)
        {**base, "resume": str(interrupted), "wait-timeout": 1},
        "the run had 4 partitions, this federation has 3",
        parent,
        num_clients=3,
    )
    # not a folder; a folder without checkpoint
    resume_fails({**base, "resume": str(tmp_path / "nowhere")}, "no such run folder", parent)
    no_checkpoint = run_in_process({**base, "checkpoint": False}, num_clients=4)
    (no_checkpoint / "status.json").write_text(json.dumps({"status": "failed", "reason": ""}))
    resume_fails({**base, "resume": str(no_checkpoint)}, "holds no checkpoint", parent)
    # a protocol that is not FL rounds: at parse time, naming the ones that resume
    resume_fails(
        {**base, "strategy": "ensemble", "resume": str(interrupted)},
        "strategy='ensemble' cannot resume; only runs made of FL rounds do",
        parent,
    )
    resume_fails({**base, "kt-metrics": True, "resume": str(interrupted)}, "cannot resume", parent)
    # checkpoint=false would leave the clients without their saved state
    resume_fails(
        {**base, "checkpoint": False, "resume": str(interrupted)},
        r"checkpoint=True \(given False\)",
        parent,
    )


def test_a_completed_run_has_nothing_to_resume(tmp_path, one_thread):
    base = overrides("fedavg", tmp_path / "done", **{"num-server-rounds": 1})
    run_dir = run_in_process(base, num_clients=4)
    resume_fails({**base, "resume": str(run_dir)}, "that run completed", run_dir.parent)


def test_a_resume_at_the_last_checkpoint_only_finishes_the_run(interrupted, tmp_path):
    """Killed after the last round's checkpoint (before status completed): the resume runs no
    round, writes model.pt and completes, with the same history."""
    before = (interrupted / "history.json").read_bytes()
    (interrupted / "model.pt").unlink()
    base = overrides("fedavg", tmp_path / "first", **{"num-server-rounds": 2})
    # the keys that only name a new run's folder may differ: no new folder is made
    elsewhere = {"output-dir": str(tmp_path / "elsewhere"), "run-name": "other"}
    resumed = run_in_process({**base, **elsewhere, "resume": str(interrupted)}, num_clients=4)
    assert resumed == interrupted and not (tmp_path / "elsewhere").exists()
    assert (interrupted / "history.json").read_bytes() == before
    assert (interrupted / "model.pt").is_file() and status(interrupted) == "completed"


# --- whose checkpoint, which versions, who holds the folder -------------------------------------


def test_a_checkpoint_of_another_run_or_another_config_is_refused(interrupted, tmp_path):
    base = overrides("fedavg", tmp_path / "first", **{"num-server-rounds": 2})
    resume = {**base, "resume": str(interrupted)}
    config = json.loads((interrupted / "config.json").read_text())
    ours, lr = read_checkpoint(interrupted), config["learning-rate"]
    assert ours.run_id == config[RUN_ID_KEY] and len(ours.run_id) == 32 and lr != 0.5
    assert ours.config_digest == config_digest(digested_config(config))

    # another run's checkpoint (same settings) copied into the folder: its run id differs
    other = read_checkpoint(interrupted)
    other.run_id = new_run_id()
    write_checkpoint(interrupted, other)
    resume_fails(
        resume,
        f"is not this run's: it is run {other.run_id}'s, the folder's config.json says run"
        f" {ours.run_id}; was it copied",
        interrupted.parent,
    )
    # a checkpoint of this run id but other settings: the differing key is named
    other.run_id = ours.run_id
    other.run_config = digested_config({**config, "learning-rate": 0.5})
    other.config_digest = config_digest(other.run_config)
    write_checkpoint(interrupted, other)
    resume_fails(
        resume,
        rf"its run config differs from config.json in learning-rate=0.5 \(config.json {lr}\)",
        interrupted.parent,
    )
    # this run's checkpoint, but config.json edited since (and the run config given to match)
    write_checkpoint(interrupted, ours)
    (interrupted / "config.json").write_text(json.dumps({**config, "learning-rate": 0.5}))
    resume_fails(
        {**resume, "learning-rate": 0.5},
        rf"differs from config.json in learning-rate={lr} \(config.json 0.5\)",
        interrupted.parent,
    )


def set_versions(run_dir: Path, **changed: str) -> dict:
    checkpoint = read_checkpoint(run_dir)
    checkpoint.versions = {**versions(), **changed}
    write_checkpoint(run_dir, checkpoint)
    (run_dir / "status.json").write_text(json.dumps({"status": "interrupted", "reason": ""}))
    return checkpoint.versions


def test_a_minor_version_change_warns_a_major_one_refuses_unless_overridden(
    interrupted, tmp_path, caplog
):
    base = overrides("fedavg", tmp_path / "first", **{"num-server-rounds": 2})
    resume = {**base, "resume": str(interrupted)}
    torch_major = int(versions()["torch"].split(".")[0])
    old = set_versions(interrupted, torch=f"{torch_major - 1}.9.0")
    resume_fails(
        resume,
        rf"another major version \(torch {torch_major - 1}.9.0 -> \S+\), which may compute other"
        r" numbers; resume with the versions that wrote it, or set resume-any-version=true",
        interrupted.parent,
    )
    run_in_process({**resume, "resume-any-version": True}, num_clients=4)
    assert status(interrupted) == "completed"
    minor = set_versions(interrupted, torch=f"{torch_major}.0.0", flwr="1.0.0")
    caplog.clear()
    run_in_process(resume, num_clients=4)
    assert status(interrupted) == "completed"
    assert "checkpoint was written under other versions (" in caplog.text
    assert f"torch {torch_major}.0.0 -> {versions()['torch']}" in caplog.text
    # versions.json keeps both, for every resume under other versions
    record = json.loads((interrupted / VERSIONS_FILE).read_text())
    assert [(r["after_round"], r["checkpoint"], r["now"]) for r in record] == [
        (2, old, versions()),
        (2, minor, versions()),
    ]


def test_a_checkpoint_of_another_format_needs_the_override(interrupted, tmp_path, caplog):
    """A format-1 checkpoint (before run identities) of a folder of that time."""
    base = overrides("fedavg", tmp_path / "first", **{"num-server-rounds": 2})
    resume = {**base, "resume": str(interrupted)}
    path = interrupted / "checkpoint" / "server.pt"
    content = torch.load(path, weights_only=True)
    for key in ("run_id", "config_digest", "run_config"):
        del content[key]
    torch.save({**content, "format": 1}, path)
    config = json.loads((interrupted / "config.json").read_text())
    del config[RUN_ID_KEY]
    (interrupted / "config.json").write_text(json.dumps(config))
    resume_fails(
        resume,
        r"the checkpoint has format 1, this flowerbed reads format 2; resume with the flowerbed"
        " that wrote it, or set resume-any-version=true",
        interrupted.parent,
    )
    run_in_process({**resume, "resume-any-version": True}, num_clients=4)
    assert status(interrupted) == "completed"
    assert "predates run identities (format 1)" in caplog.text


def test_a_live_run_refuses_a_resume_and_a_second_writer_and_a_dead_one_is_resumed(
    interrupted, tmp_path
):
    base = overrides("fedavg", tmp_path / "first", **{"num-server-rounds": 2})
    resume = {**base, "resume": str(interrupted)}
    pid, host = os.getpid(), socket.gethostname()
    (interrupted / "status.json").write_text(json.dumps({"status": "running", "reason": ""}))
    # a live run (this process) holds the folder: refused by name, nothing touched
    with hold(interrupted, "a live run"):
        resume_fails(resume, rf"a live run holds this run folder \(PID {pid} on host", interrupted)

    # no lock any more: whoever looks marks the run interrupted
    assert settled_status(interrupted)["status"] == "interrupted"
    # a second process takes the folder while this resume waits for its nodes: refused when
    # this one comes to hold it, before it writes anything
    second = []

    def taking_the_folder_during_the_handshake(msg, context):
        if not second:
            second.append(hold(interrupted, "another resume"))
        return client_app(msg, context)

    before = snapshot(interrupted)
    with pytest.raises(ConfigError, match=rf"a live run holds this run folder \(PID {pid} on"):
        run_in_process(resume, num_clients=4, app=taking_the_folder_during_the_handshake)
    second[0].release()
    assert snapshot(interrupted) == before

    # a dead run's lock (its process gone): marked interrupted, then resumed
    (interrupted / "status.json").write_text(json.dumps({"status": "running", "reason": ""}))
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    lock = {**lock_record("dead"), "pid": child.pid, "host": host}
    (interrupted / LOCK_FILE).write_text(json.dumps(lock))
    assert run_in_process(resume, num_clients=4) == interrupted
    assert status(interrupted) == "completed" and not (interrupted / LOCK_FILE).exists()


def test_a_key_declared_since_the_run_started_counts_as_equal_at_its_default():
    """A newer flowerbed declares a key that the run's config.json lacks: at its default it
    is no difference (the run goes on as it would have); set otherwise it is one."""
    from flowerbed.catalog import parse_run_config
    from flowerbed.inprocess import resolve_run_config
    from flowerbed.runtime.resume import differing_keys

    config = parse_run_config(resolve_run_config({}))
    stored = {k: v for k, v in config.to_dict().items() if k != "max-update-norm"}
    assert differing_keys(stored, config) == []
    changed = parse_run_config(resolve_run_config({"max-update-norm": 1.0}))
    assert differing_keys(stored, changed) == ["max-update-norm"]
