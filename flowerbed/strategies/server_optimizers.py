"""Server-side optimisers on the FedAvg pseudo-gradient: FedAvgM, FedAdam, FedYogi, FedAdagrad.

With Delta_t = sum_i (n_i / n) y_i - x_t (the FedAvg step, a "pseudo-gradient"):

* FedAvgM (Hsu et al., 2019): v <- beta v + Delta_t;  x <- x + eta v.
* FedAdagrad / FedYogi / FedAdam (Reddi et al., ICLR 2021, "Adaptive Federated Optimization"):
  m <- beta1 m + (1 - beta1) Delta_t;  v <- v + Delta_t^2 (Adagrad),
  v <- v - (1 - beta2) Delta_t^2 sign(v - Delta_t^2) (Yogi), v <- beta2 v + (1 - beta2) Delta_t^2
  (Adam);  x <- x + eta m / (sqrt(v) + tau).

All four are Flower's own strategies; clients run plain local training (``fedavg.train_plain``).
"""

from __future__ import annotations

from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvgM, FedYogi

from ..config import RunConfig
from .common import StrategySpec
from .fedavg import train_plain


def build_fedavgm(config: RunConfig, **kwargs) -> FedAvgM:
    return FedAvgM(
        server_learning_rate=config.get("server-learning-rate", 1.0),
        server_momentum=config.get("server-momentum", 0.9),
        **kwargs,
    )


def _adaptive_kwargs(config: RunConfig, with_betas: bool = True) -> dict:
    kwargs = {
        "eta": config.get("adaptive-eta", 0.01),
        "eta_l": config.learning_rate,  # Flower only records the client learning rate
        "tau": config.get("adaptive-tau", 0.001),
    }
    if with_betas:
        kwargs["beta_1"] = config.get("adaptive-beta-1", 0.9)
        kwargs["beta_2"] = config.get("adaptive-beta-2", 0.99)
    return kwargs


def build_fedadam(config: RunConfig, **kwargs) -> FedAdam:
    return FedAdam(**_adaptive_kwargs(config), **kwargs)


def build_fedyogi(config: RunConfig, **kwargs) -> FedYogi:
    return FedYogi(**_adaptive_kwargs(config), **kwargs)


def build_fedadagrad(config: RunConfig, **kwargs) -> FedAdagrad:
    return FedAdagrad(**_adaptive_kwargs(config, with_betas=False), **kwargs)


_ADAPTIVE_KEYS = ("adaptive-eta", "adaptive-beta-1", "adaptive-beta-2", "adaptive-tau")
_REDDI = "Reddi et al., ICLR 2021"

SPECS = (
    StrategySpec("fedavgm", "FedAvg step applied with server momentum", "Hsu et al., 2019",
                 build_fedavgm, train_plain, config_keys=("server-learning-rate", "server-momentum")),
    StrategySpec("fedadam", "Adam on the FedAvg pseudo-gradient", _REDDI, build_fedadam,
                 train_plain, config_keys=_ADAPTIVE_KEYS),
    StrategySpec("fedyogi", "Yogi on the FedAvg pseudo-gradient", _REDDI, build_fedyogi,
                 train_plain, config_keys=_ADAPTIVE_KEYS),
    StrategySpec("fedadagrad", "Adagrad on the FedAvg pseudo-gradient", _REDDI, build_fedadagrad,
                 train_plain, config_keys=("adaptive-eta", "adaptive-tau")),
)
