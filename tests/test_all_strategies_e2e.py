"""Every registered strategy end to end through `flwr run .` (Flower's Ray backend): 2 rounds,
1 local epoch, 4 SuperNodes, digits.

The parameters are read from the registry at import time, so strategies added later are
covered without editing this file. Strategies that cannot run on the classical default get
their settings from the explicit tables below (never skipped): the quantum ones train the
variational quantum classifier; the one-shot knowledge-transfer ones (their own two-round
protocol, ``StrategySpec.run_server``) train locally with early stopping, then transfer once.
All runs share one Flower home. Each run's SuperLink is stopped by PID after the run: under
pytest, ``ps`` cuts its lines at 80 columns (its output is not a terminal), so
``simulation.local_superlink_pids`` (plain ``ps -eo``) finds no SuperLink there and ``simulate``
leaves it running; ``superlinks`` below asks ``ps -ww`` for full lines.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path

import pytest

from flowerbed.simulation import simulate, stop_pids
from flowerbed.strategies import STRATEGIES

pytestmark = pytest.mark.e2e

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
    return getattr(STRATEGIES[name], "run_server", None) is not None


def overrides_for(name: str) -> dict:
    extra = ONE_SHOT if is_one_shot(name) else {}
    return {**COMMON, **SPECIAL_MODEL.get(name, {}), **extra, "strategy": name}


def superlinks(home: Path) -> list[int]:
    """PIDs of the local SuperLinks of Flower home ``home`` (full command lines: ``ps -ww``)."""
    out = subprocess.run(
        ["ps", "-ww", "-eo", "pid=,args="], check=True, capture_output=True, text=True
    ).stdout
    marker = str(home / "local-superlink")
    return [
        int(line.split(None, 1)[0])
        for line in out.splitlines()
        if "flower-superlink" in line and marker in line
    ]


@pytest.fixture(scope="module")
def flwr_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("flwr-home")
    yield home
    stop_pids(superlinks(home))


@pytest.fixture
def stop_superlink(flwr_home):
    """After each run: stop the SuperLink that run started (see the module docstring)."""
    yield
    stop_pids(superlinks(flwr_home))
    assert superlinks(flwr_home) == [], "a local SuperLink is still running"


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_strategy_runs_two_rounds_with_flwr_run(name, flwr_home, stop_superlink, tmp_path):
    result = simulate(
        {
            **overrides_for(name),
            "output-dir": str(tmp_path / "runs"),
            "data-dir": str(tmp_path / "data"),
        },
        num_supernodes=4,
        flwr_home=flwr_home,
    )
    assert result.returncode == 0, result.log[-3000:]
    rows = {row["round"]: row for row in result.history}
    assert {1, 2} <= set(rows), result.log[-3000:]
    for r in (1, 2):
        assert rows[r]["clients_trained"] == 4 and rows[r]["clients_failed"] == 0, rows[r]
    # one-shot methods have no global model after round 1 (local training only)
    checked = (2,) if is_one_shot(name) else (1, 2)
    for r in checked:
        assert math.isfinite(rows[r]["central_accuracy"]), rows[r]
        assert 0.0 <= rows[r]["central_accuracy"] <= 1.0
