"""Strategy registry: run-config name -> ``StrategySpec`` (server rule + client step).

Every algorithm here is one Flower strategy; ``flowerbed.catalog`` runs each as a protocol of
FL rounds. To add an algorithm, write ``strategies/<name>.py`` holding its Flower strategy, its
client step, its settings and a ``SPEC`` (or ``SPECS``), list it below, then run ``python -m
flowerbed.catalog --write`` (the documentation's tables come from the specs).
"""

from __future__ import annotations

from . import (
    ditto,
    fedavg,
    fedbn,
    feddyn,
    fedmedian,
    fednova,
    fedprox,
    krum,
    moon,
    qfedfisher,
    quantum_baselines,
    scaffold,
    server_optimizers,
    trimmed_mean,
)
from .common import StrategySpec

STRATEGIES: dict[str, StrategySpec] = {
    spec.name: spec
    for spec in (
        fedavg.SPEC,
        fedprox.SPEC,
        *server_optimizers.SPECS,
        fedmedian.SPEC,
        *krum.SPECS,
        trimmed_mean.SPEC,
        fednova.SPEC,
        scaffold.SPEC,
        feddyn.SPEC,
        fedbn.SPEC,
        moon.SPEC,
        ditto.SPEC,
        # quantum FL (variational quantum classifier)
        *quantum_baselines.SPECS,
        qfedfisher.SPEC,
    )
}


def get_strategy(name: str) -> StrategySpec:
    if name not in STRATEGIES:
        raise ValueError(f"unknown strategy {name!r}; valid choices: {', '.join(STRATEGIES)}")
    return STRATEGIES[name]


__all__ = ["STRATEGIES", "StrategySpec", "get_strategy"]
