"""Every registered strategy runs two rounds of a federation: 1 local epoch, 4 clients, digits.

The parameters are read from the registry at import time, so strategies added later are
covered without editing this file. Strategies that cannot run on the classical default get
their settings from the explicit tables below (never skipped): the quantum ones train the
variational quantum classifier; the one-shot knowledge-transfer ones (their own two-round
protocol, ``StrategySpec.run_server``) train locally with early stopping, then transfer once.

All strategies run through ``run_in_process``: the real ServerApp job and ClientApp handlers,
with per-node contexts, messages delivered as copies and errors turned into error replies, but
without Ray (a ``flwr run`` costs 30-60 s of start-up here; 22 of them took 19 minutes, over
the CI budget). The stateful strategies whose client state must survive between rounds inside
Ray actors (SCAFFOLD's c_i, Ditto's personal model) also run through the real ``flwr run``;
FedAvg, QFedFisher and QKT do in their own end-to-end tests.
"""

from __future__ import annotations

import json
import math

import pytest

from flowerbed.simulation import local_superlink_pids, run_in_process, simulate
from flowerbed.strategies import STRATEGIES

COMMON = {"dataset": "digits", "num-server-rounds": 2, "local-epochs": 1}

# strategies that need a non-default model: name -> run-config overrides
SPECIAL_MODEL = {
    name: {"model": "vqc", "vqc-layers": 1, "optimizer": "adam"}
    for name in ("qfedavg", "qfedadam", "qfedfisher")
}
# one-shot knowledge transfer (StrategySpec.run_server): short local training and transfer
ONE_SHOT = {
    "kt-local-max-epochs": 1,
    "kt-local-patience": 1,
    "kt-epochs": 1,
    "kt-light-head-epochs": 1,
}


def is_one_shot(name: str) -> bool:
    return STRATEGIES[name].run_server is not None


def overrides_for(name: str, tmp_path) -> dict:
    extra = ONE_SHOT if is_one_shot(name) else {}
    return {**COMMON, **SPECIAL_MODEL.get(name, {}), **extra, "strategy": name,
            "output-dir": str(tmp_path / "runs"), "data-dir": str(tmp_path / "data")}


def check_two_rounds(name: str, history: list[dict]) -> None:
    rows = {row["round"]: row for row in history}
    assert {1, 2} <= set(rows)
    for r in (1, 2):
        assert rows[r]["clients_trained"] == 4 and rows[r]["clients_failed"] == 0, rows[r]
    # one-shot methods have no global model after round 1 (local training only)
    for r in (2,) if is_one_shot(name) else (1, 2):
        assert math.isfinite(rows[r]["central_accuracy"]), rows[r]
        assert 0.0 <= rows[r]["central_accuracy"] <= 1.0


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_strategy_runs_two_rounds(name, tmp_path):
    run_dir = run_in_process(overrides_for(name, tmp_path), num_clients=4)
    check_two_rounds(name, json.loads((run_dir / "history.json").read_text()))


@pytest.mark.e2e
@pytest.mark.parametrize("name", ["scaffold", "ditto"])
def test_stateful_strategy_runs_two_rounds_with_flwr_run(name, tmp_path):
    home = tmp_path / "flwr-home"
    result = simulate(overrides_for(name, tmp_path), num_supernodes=4, flwr_home=home)
    assert result.returncode == 0, result.log[-3000:]
    assert local_superlink_pids(home) == [], "the local SuperLink is still running"
    check_two_rounds(name, result.history)
