"""FL rounds' hooks (flowerbed/protocols/rounds_hook.py) through a fake hook beside the catalog's
own: it wraps the algorithm's strategy, its columns reach every history row, its state the
checkpoint and back on resume, its ``StopRounds`` ends the run cleanly, and it hears how the
rounds ended. Differential privacy's hook: tests/test_privacy.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from flwr.app import Context, Message, MessageType
from flwr.serverapp.strategy import FedAvg

from flowerbed import catalog
from flowerbed.client_app import app as client_app
from flowerbed.inprocess import run_in_process
from flowerbed.privacy.server import PrivacyHook
from flowerbed.protocols.rounds_hook import Delegating, RoundsHook, StopRounds
from flowerbed.runtime.checkpoint import read_checkpoint

STOP = "fake hook: stopped before round"
MADE: list[FakeHook] = []  # every fake hook the catalog built, in order


class CountingRounds(Delegating):
    """Counts the rounds whose training went out; raises ``StopRounds`` before ``stop_at``."""

    def __init__(self, strategy, hook: FakeHook) -> None:
        super().__init__(strategy)
        self.hook = hook

    def configure_train(self, server_round, arrays, config, grid):
        if server_round == self.hook.stop_at:
            raise StopRounds(f"{STOP} {server_round}")
        self.hook.trained += 1
        return self.strategy.configure_train(server_round, arrays, config, grid)


class FakeHook(RoundsHook):
    STATE_KEY = "test-fake-hook"
    STOP_AT = 0  # the round it stops before (0: none)

    def __init__(self) -> None:
        self.stop_at, self.trained = self.STOP_AT, 0
        self.wrapped = None  # the strategy it was given
        self.restored: list = []  # (state, where) of every restore
        self.finished: list = []  # (run_dir, stopped) of every finish
        MADE.append(self)

    def wrap(self, strategy, run):
        self.wrapped = strategy
        return CountingRounds(strategy, self)

    def columns(self):
        return {"hook_trained": float(self.trained)}

    def state(self):
        return {"trained": self.trained}

    def restore(self, state, where):
        self.restored.append((state, where))
        self.trained = state["trained"]

    def finish(self, run_dir, stopped):
        self.finished.append((run_dir, stopped))


@pytest.fixture
def fake_hook(monkeypatch):
    """The catalog's hooks (differential privacy's) and a fake one after them."""
    assert catalog.ROUNDS_HOOKS == (PrivacyHook,)
    MADE.clear()
    monkeypatch.setattr(catalog, "ROUNDS_HOOKS", (PrivacyHook, FakeHook))


def overrides(tmp_path: Path, **more) -> dict:
    return {  # the smallest bundled data set: each run takes a second or two
        "dataset": "breast-cancer",
        "model": "mlp",
        "num-server-rounds": 5,
        "local-epochs": 1,
        "fraction-evaluate": 0.0,
        "output-dir": str(tmp_path / "runs"),
        **more,
    }


def ran() -> list[FakeHook]:
    """The fake hooks of phases that ran (the catalog also builds phases to check a config)."""
    return [hook for hook in MADE if hook.wrapped is not None]


def history(run_dir: Path) -> list[dict]:
    return json.loads((run_dir / "history.json").read_text())


def test_a_hook_wraps_the_strategy_adds_columns_keeps_state_and_stops_the_run_cleanly(
    tmp_path, one_thread, fake_hook, monkeypatch
):
    monkeypatch.setattr(FakeHook, "STOP_AT", 3)
    run_dir = run_in_process(overrides(tmp_path), num_clients=2)
    (hook,) = ran()
    assert type(hook.wrapped) is FedAvg  # the algorithm's strategy (dp='none' wraps nothing)
    rows = history(run_dir)
    assert [row["round"] for row in rows] == [0, 1, 2]
    assert [row["hook_trained"] for row in rows] == [0.0, 1.0, 2.0]
    status = json.loads((run_dir / "status.json").read_text())
    assert status["status"] == "completed" and status["reason"] == f"{STOP} 3"
    assert hook.finished == [(run_dir, f"{STOP} 3")]
    checkpoint = read_checkpoint(run_dir)
    assert checkpoint.round == 2 and checkpoint.strategy[FakeHook.STATE_KEY] == {"trained": 2}
    assert hook.restored == [] and (run_dir / "model.pt").is_file()
    assert not (run_dir / "privacy.json").exists()  # the privacy hook, without dp, writes none


def test_a_resumed_run_gives_each_hook_its_state_back(tmp_path, one_thread, fake_hook):
    def interrupted_in_round_3(msg: Message, context: Context) -> Message:
        if (
            msg.metadata.message_type == MessageType.TRAIN
            and msg.content["config"]["server-round"] == 3
        ):
            raise KeyboardInterrupt
        return client_app(msg, context)

    config = overrides(tmp_path, **{"num-server-rounds": 4})
    with pytest.raises(KeyboardInterrupt):
        run_in_process(config, num_clients=2, app=interrupted_in_round_3)
    (run_dir,) = Path(config["output-dir"]).iterdir()
    resumed = run_in_process({**config, "resume": str(run_dir)}, num_clients=2)
    interrupted, hook = ran()  # the interrupted run's, the resumed run's
    assert interrupted.restored == [] and interrupted.finished == []
    assert hook.restored == [({"trained": 2}, f"resume={str(run_dir)!r}")]  # after round 2
    assert [row["hook_trained"] for row in history(resumed)] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert hook.finished == [(resumed, "")]
