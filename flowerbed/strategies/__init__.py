"""Strategy registry: run-config name -> ``StrategySpec`` (server rule + client step).

To add an algorithm, write ``strategies/<name>.py`` holding its Flower strategy, its client
step and a ``SPEC`` (or ``SPECS``), and list it below.
"""

from __future__ import annotations

from . import fednova  # issue 3a
from . import scaffold  # issue 3a
from . import feddyn  # issue 3a
from . import fedavg, fedmedian, fedprox, server_optimizers
from . import ditto, fedbn, moon  # issue 3b
from . import qfedfisher, quantum_baselines  # issue 4
from . import one_shot_baselines, qkt  # issue 5
from .common import StrategySpec

STRATEGIES: dict[str, StrategySpec] = {
    spec.name: spec
    for spec in (
        fedavg.SPEC,
        fedprox.SPEC,
        *server_optimizers.SPECS,
        fedmedian.SPEC,
        # --- classic strategy suite (issue 3) ---
        fedbn.SPEC,  # issue 3b
        moon.SPEC,  # issue 3b
        ditto.SPEC,  # issue 3b
        fednova.SPEC,  # issue 3a
        scaffold.SPEC,  # issue 3a
        feddyn.SPEC,  # issue 3a
        # --- quantum FL (issue 4) ---
        *quantum_baselines.SPECS,  # issue 4
        qfedfisher.SPEC,  # issue 4
        # --- knowledge transfer (issue 5) ---
        *qkt.SPECS,  # issue 5
        *one_shot_baselines.SPECS,  # issue 5
    )
}


def get_strategy(name: str) -> StrategySpec:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; valid choices: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


__all__ = ["STRATEGIES", "StrategySpec", "get_strategy"]
