"""Coordinate-wise trimmed mean (Yin et al., ICML 2018, "Byzantine-Robust Distributed
Learning: Towards Optimal Statistical Rates").

Server: for every coordinate of the model, sort the n replies' values, drop the k largest and
the k smallest, k = int(beta * n) (``trim-fraction`` = beta, in [0, 0.5)), and average the
n - 2k values left (Flower's ``FedTrimmedAvg``, used as it is). The mean is uniform: the
replies' ``num-examples`` do not weigh it. Every entry of the state dict is trimmed and
averaged this way, batch-norm running statistics and ``num_batches_tracked`` included.

k is rounded down, so beta > 0 trims nothing when beta * n < 1 (4 sampled clients and
Flower's default beta = 0.2): the run is then an unweighted FedAvg. ``warn_if_nothing_trimmed``
says so in a WARNING before any training, with n the clients sampled per round
(``krum.clients_per_round``); the run goes on, so that ``trimmedavg`` runs from its name on a
federation of any size. Fewer replies than sampled (failed clients) lower k at run
time, to 0 if few enough: Flower then trims nothing that round.

Client: plain local training (``fedavg.train_plain``).
"""

from __future__ import annotations

import math
from logging import WARNING

from flwr.common.logger import log
from flwr.serverapp.strategy import FedTrimmedAvg

from ..settings import RunConfig, Setting
from .common import StrategySpec
from .fedavg import train_plain
from .krum import clients_per_round, sampled_text

SETTINGS = (
    Setting(
        "trim-fraction",
        0.25,
        "FedTrimmedAvg: beta, the fraction of the largest and of the smallest values dropped"
        " per coordinate (int(beta * n) each side of n sampled clients), the mean of the rest."
        " Default 0.25, the interquartile mean: it trims one value each side from 4 sampled"
        " clients on (Flower's 0.2 trims none below 5); 0 is the unweighted mean",
        low=0,
        high=0.5,
        high_open=True,
    ),
)


def nothing_trimmed(config: RunConfig, num_clients: int) -> str | None:
    """What is wrong when a positive trim-fraction trims no value (int(beta * n) = 0)."""
    beta, n = config["trim-fraction"], clients_per_round(config, num_clients)
    if beta == 0 or int(beta * n) >= 1:
        return None
    smallest = math.ceil(1000 / n) / 1000  # the smallest beta (3 decimals) with beta * n >= 1
    fix = (
        f"set trim-fraction in [{smallest}, 0.5), or 0"
        if n >= 3
        else "set trim-fraction=0 or sample at least 3 clients"
    )
    return (
        f"strategy='trimmedavg' with trim-fraction={beta} trims int({beta} * {n}) = 0 values"
        f" each side ({sampled_text(config, num_clients)}), an unweighted mean: {fix}"
    )


def warn_if_nothing_trimmed(config: RunConfig, num_clients: int) -> None:
    """A WARNING when the trimmed mean would trim nothing (``nothing_trimmed``); never fatal."""
    message = nothing_trimmed(config, num_clients)
    if message:
        log(WARNING, "flowerbed: %s", message)


def build_trimmedavg(config: RunConfig, **kwargs) -> FedTrimmedAvg:
    return FedTrimmedAvg(beta=config["trim-fraction"], **kwargs)


SPEC = StrategySpec(
    name="trimmedavg",
    summary="coordinate-wise trimmed mean: per coordinate the int(β·n) largest and smallest values"
    " dropped, the uniform mean of the rest (Flower's `FedTrimmedAvg`; key `trim-fraction`"
    " = β; a β that trims nothing on the sampled clients is named in a warning)",
    paper="Yin et al., ICML 2018",
    build_server=build_trimmedavg,
    client_train=train_plain,
    settings=SETTINGS,
    check_federation=warn_if_nothing_trimmed,
    kind="multi-round FL, robust aggregation",
)
