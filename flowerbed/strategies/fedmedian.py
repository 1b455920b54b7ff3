"""FedMedian (Yin et al., ICML 2018, "Byzantine-Robust Distributed Learning").

Server: x <- coordinate-wise median of the clients' models (Flower's ``FedMedian``).
Client: plain local training (``fedavg.train_plain``).
"""

from __future__ import annotations

from flwr.serverapp.strategy import FedMedian

from ..settings import RunConfig
from .common import StrategySpec
from .fedavg import train_plain


def build_fedmedian(config: RunConfig, **kwargs) -> FedMedian:
    return FedMedian(**kwargs)


SPEC = StrategySpec(
    name="fedmedian",
    summary="coordinate-wise median of the clients' models (Flower's `FedMedian`)",
    paper="Yin et al., ICML 2018",
    build_server=build_fedmedian,
    client_train=train_plain,
    kind="multi-round FL, robust aggregation",
)
