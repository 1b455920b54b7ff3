"""Where a node keeps its state under node-config ``state-dir``: a folder named by a digest of
the run folder's path, never by a part of it; the same for a resumed run (a new Flower run id),
another for another run; a link out of ``state-dir`` and a folder of another run refused."""

from __future__ import annotations

import json

import pytest
from flwr.app import ConfigRecord, Context, Message, MessageType, MetricRecord, RecordDict

from flowerbed.inprocess import use_server_identity
from flowerbed.runtime.client_state import (
    RECORD,
    RUN_DIR_KEY,
    RUN_FILE,
    keep_client_state,
    saved_rounds,
    state_key,
)
from flowerbed.settings import ConfigError


def message(server_round: int, run_dir: str) -> Message:
    use_server_identity()
    content = RecordDict(
        {
            "config": ConfigRecord({"server-round": server_round}),
            RECORD: ConfigRecord({RUN_DIR_KEY: run_dir}),
        }
    )
    return Message(content=content, message_type=MessageType.TRAIN, dst_node_id=1)


def node(site, run_id: int = 1) -> Context:
    config = {"partition-id": 2, "num-partitions": 4, "state-dir": str(site)}
    return Context(run_id=run_id, node_id=1, node_config=config, state=RecordDict(), run_config={})


def counting(msg: Message, context: Context) -> Message:
    seen = context.state["seen"]["n"] if "seen" in context.state else 0
    context.state["seen"] = MetricRecord({"n": seen + 1})
    return Message(RecordDict(), reply_to=msg)


def stateless(msg: Message, context: Context) -> Message:
    return Message(RecordDict(), reply_to=msg)


def test_a_run_folder_named_dot_dot_stays_inside_state_dir(tmp_path):
    site = tmp_path / "sites" / "a"
    for run_dir in ("/srv/runs/..", "..", "/srv/runs/x/../../../../etc"):
        keep_client_state(message(1, run_dir), node(site), counting)
    folders = sorted(path.name for path in site.iterdir())
    assert folders == sorted(
        state_key(r) for r in ("/srv/runs/..", "..", "/srv/runs/x/../../../../etc")
    )
    assert all(name.startswith("run-") and len(name) == 20 for name in folders)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sites"]


def test_runs_whose_folders_share_a_name_keep_their_own_state(tmp_path):
    first, second = "/srv/a/20250101-120000-fedavg", "/srv/b/20250101-120000-fedavg"
    keep_client_state(message(1, first), node(tmp_path), counting)
    fresh = node(tmp_path, run_id=2)
    keep_client_state(message(2, second), fresh, counting)
    assert fresh.state["seen"]["n"] == 1  # nothing of the first run loaded
    assert state_key(first) != state_key(second)
    record = json.loads((tmp_path / state_key(second) / RUN_FILE).read_text())
    assert record == {RUN_DIR_KEY: second}


def test_a_resumed_run_with_a_new_flower_run_id_finds_its_state(tmp_path):
    run_dir = "/srv/runs/20250101-120000-scaffold-digits-seed42"
    context = node(tmp_path, run_id=7)
    for server_round in (1, 2):
        keep_client_state(message(server_round, run_dir), context, counting)
    folder = tmp_path / state_key(run_dir) / "partition-2"
    assert sorted(saved_rounds(folder)) == [1, 2]
    resumed = node(tmp_path, run_id=8)  # a restarted SuperNode, a resumed run: a new run id
    keep_client_state(message(3, run_dir), resumed, counting)
    assert resumed.state["seen"]["n"] == 3


def test_a_stateless_client_writes_nothing(tmp_path):
    keep_client_state(message(1, "/srv/runs/r"), node(tmp_path), stateless)
    assert list(tmp_path.iterdir()) == []


def test_a_link_out_of_state_dir_and_another_runs_folder_are_refused(tmp_path):
    site, outside = tmp_path / "site", tmp_path / "outside"
    site.mkdir()
    outside.mkdir()
    (site / state_key("/srv/runs/r")).symlink_to(outside)
    with pytest.raises(
        ConfigError, match=r"resolves to .*outside/partition-2, outside .*site; remove that link"
    ):
        keep_client_state(message(1, "/srv/runs/r"), node(site), counting)
    assert list(outside.iterdir()) == []
    taken = site / state_key("/srv/runs/s")
    taken.mkdir()
    (taken / RUN_FILE).write_text(json.dumps({RUN_DIR_KEY: "/srv/runs/other"}))
    with pytest.raises(ConfigError, match="holds the state of the run folder '/srv/runs/other'"):
        keep_client_state(message(1, "/srv/runs/s"), node(site), counting)
