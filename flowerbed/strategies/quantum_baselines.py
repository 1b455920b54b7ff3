"""The quantum baselines of the QFedFisher paper (Bhatia & Kais, 2025): QFedAvg and QFedAdam.

* ``qfedavg``: FedAvg (McMahan et al., 2017) on the variational quantum classifier:
  theta <- sum_i (n_i / n) theta_i.
* ``qfedadam``: FedAdam (Reddi et al., ICLR 2021) on the VQC: Adam on the FedAvg
  pseudo-gradient, with the ``adaptive-*`` run-config keys.

They are names, not copies: the server rules are Flower's ``FedAvg`` / ``FedAdam`` (built by
``fedavg.build_fedavg`` / ``server_optimizers.build_fedadam``) and the client step is plain local
training (``fedavg.train_plain``). What makes them "quantum" is the model, so ``model='vqc'``
is their own default (``StrategySpec.defaults``: applied while ``model`` holds its global
default) and another model stops them with a ``ConfigError`` (use ``fedavg`` / ``fedadam``
for classical models).

Not Flower's ``QFedAvg``, which is q-FFL (q-Fair Federated Learning, Li et al., ICLR 2020).
"""

from __future__ import annotations

from ..settings import ConfigError, RunConfig
from .common import StrategySpec
from .fedavg import build_fedavg, train_plain
from .server_optimizers import ADAPTIVE_SETTINGS, build_fedadam


def require_vqc(config: RunConfig) -> None:
    if config.model != "vqc":
        raise ConfigError(
            f"strategy {config.strategy!r} is a quantum baseline and trains model 'vqc', but"
            f" model is {config.model!r}; set model='vqc' (or use "
            f"{config.strategy[1:]!r} for classical models)"
        )


def build_qfedavg(config: RunConfig, **kwargs):
    require_vqc(config)
    return build_fedavg(config, **kwargs)


def build_qfedadam(config: RunConfig, **kwargs):
    require_vqc(config)
    return build_fedadam(config, **kwargs)


_PAPER = "Bhatia & Kais, 2025 (baseline of QFedFisher)"
VQC_DEFAULTS = {"model": "vqc"}  # what makes them quantum (``StrategySpec.defaults``)
VQC_EXCHANGED = "the VQC's parameters (rotation angles, readout), both ways, every round"

SPECS = (
    StrategySpec(
        "qfedavg",
        "FedAvg on the VQC (Flower's `FedAvg`; requires `model='vqc'`). Not Flower's `QFedAvg`,"
        " which is q-FFL",
        _PAPER,
        build_qfedavg,
        train_plain,
        defaults=VQC_DEFAULTS,
        kind="multi-round FL (quantum)",
        exchanged=VQC_EXCHANGED,
    ),
    StrategySpec(
        "qfedadam",
        "FedAdam on the VQC (Flower's `FedAdam`, `adaptive-*` keys; requires `model='vqc'`)",
        _PAPER,
        build_qfedadam,
        train_plain,
        defaults=VQC_DEFAULTS,
        settings=ADAPTIVE_SETTINGS,
        kind="multi-round FL (quantum)",
        exchanged=VQC_EXCHANGED,
    ),
)
