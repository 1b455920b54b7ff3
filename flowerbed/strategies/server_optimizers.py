"""Server-side optimisers on the FedAvg pseudo-gradient: FedAvgM, FedAdam, FedYogi, FedAdagrad.

With Delta_t = sum_i (n_i / n) y_i - x_t (the FedAvg step, a "pseudo-gradient"):

* FedAvgM (Hsu et al., 2019): v <- beta v + Delta_t;  x <- x + eta v.
* FedAdagrad / FedYogi / FedAdam (Reddi et al., ICLR 2021, "Adaptive Federated Optimization"):
  m <- beta1 m + (1 - beta1) Delta_t;  v <- v + Delta_t^2 (Adagrad),
  v <- v - (1 - beta2) Delta_t^2 sign(v - Delta_t^2) (Yogi), v <- beta2 v + (1 - beta2) Delta_t^2
  (Adam);  x <- x + eta m / (sqrt(v) + tau).

All four are Flower's own strategies, subclassed only so that the pseudo-gradient covers the
*trainable parameters*: batch-norm running statistics (running_mean, running_var,
num_batches_tracked) are not gradients, so they are simply averaged (the FedAvg value,
sample-weighted) and never enter Delta_t, the momentum or the moments.

``server-optimizer-buffers`` (default ``average``: the rule above) has a diagnostic value,
``optimize``: the code of "Benchmarking Federated Learning & Knowledge Distillation for Point
Cloud Classification" runs these optimisers on every float entry of the state dict, running
statistics included, and the paper reports them collapsing under label skew; ``optimize`` does
the same (running_mean and running_var enter Delta_t, the momentum and the moments; the integer
num_batches_tracked is still averaged), to measure whether that is what makes them collapse
(``benchmarks/bn_collapse.py``).

Clients run plain local training (``fedavg.train_plain``). Hyperparameters come from the run
config: ``server-learning-rate``, ``server-momentum`` (FedAvgM); ``adaptive-eta``,
``adaptive-beta-1``, ``adaptive-beta-2``, ``adaptive-tau`` (FedAdam, FedYogi, FedAdagrad).
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MetricRecord
from flwr.serverapp import Grid
from flwr.serverapp.strategy import FedAdagrad, FedAdam, FedAvgM, FedYogi

from ..settings import RunConfig, Setting
from .common import StrategySpec, as_arrayrecord, mean_of_replies, sample_weights, trainable_keys
from .fedavg import train_plain

BUFFER_RULES = ("average", "optimize")
BUFFERS = Setting(  # one object, declared by all four optimisers (and qfedadam)
    "server-optimizer-buffers",
    "average",
    "FedAvgM / FedAdam / FedYogi / FedAdagrad: `average` = batch-norm running statistics take"
    " the FedAvg value and stay out of the pseudo-gradient (default); `optimize` = a diagnostic"
    " reproducing the point-cloud FL + KD benchmark's code: every float state entry, running"
    " statistics included, goes through the server optimiser (integer counters are still"
    " averaged)",
    choices=BUFFER_RULES,
)
FEDAVGM_SETTINGS = (
    Setting("server-learning-rate", 1.0, "FedAvgM: server learning rate", low=0, low_open=True),
    Setting("server-momentum", 0.9, "FedAvgM: server momentum", low=0, high=1, high_open=True),
    BUFFERS,
)
ADAPTIVE_SETTINGS = (
    Setting(
        "adaptive-eta",
        0.01,
        "FedAdam / FedYogi / FedAdagrad: server learning rate",
        low=0,
        low_open=True,
    ),
    Setting(
        "adaptive-beta-1",
        0.9,
        "FedAdam / FedYogi: first-moment decay",
        low=0,
        high=1,
        high_open=True,
    ),
    Setting(
        "adaptive-beta-2",
        0.99,
        "FedAdam / FedYogi: second-moment decay",
        low=0,
        high=1,
        high_open=True,
    ),
    Setting(
        "adaptive-tau",
        0.001,
        "FedAdam / FedYogi / FedAdagrad: adaptivity (epsilon)",
        low=0,
        low_open=True,
    ),
    BUFFERS,
)


class TrainableOnly:
    """Mixin for Flower's server optimisers: optimise trainable parameters, average buffers.

    The Flower class sees only the optimised entries: its remembered current model
    (``current_arrays``, set in ``configure_train``) and the clients' replies are restricted to
    them before it runs; the other entries' FedAvg value is merged back into the result.
    The optimised entries are the ``trainable`` keys (``buffers="average"``) or, with
    ``buffers="optimize"``, every floating-point entry of the global model (batch-norm
    running_mean / running_var included; integer counters stay averaged).
    """

    def __init__(self, *, trainable: Iterable[str], buffers: str = "average", **kwargs) -> None:
        if buffers not in BUFFER_RULES:
            raise ValueError(f"buffers must be one of {BUFFER_RULES}, got {buffers!r}")
        super().__init__(**kwargs)
        self.trainable = frozenset(trainable)
        self.buffers = buffers
        self.optimised = self.trainable

    def _restrict_current(self) -> None:
        current = self.current_arrays
        if isinstance(current, ArrayRecord):  # FedAvgM
            self.current_arrays = ArrayRecord(
                {k: current[k] for k in current if k in self.optimised}
            )
        elif isinstance(current, dict):  # FedOpt: {key: ndarray}
            self.current_arrays = {k: v for k, v in current.items() if k in self.optimised}

    def configure_train(
        self, server_round: int, arrays: ArrayRecord, config: ConfigRecord, grid: Grid
    ) -> Iterable[Message]:
        self._global = {k: v.numpy() for k, v in arrays.items()}  # key order and dtypes
        if self.buffers == "optimize":
            floats = {k for k, v in self._global.items() if np.issubdtype(v.dtype, np.floating)}
            self.optimised = self.trainable | floats
        messages = super().configure_train(server_round, arrays, config, grid)
        self._restrict_current()
        return messages

    def aggregate_train(
        self, server_round: int, replies: Iterable[Message]
    ) -> tuple[ArrayRecord | None, MetricRecord | None]:
        replies = list(replies)
        valid = [msg.content for msg in replies if not msg.has_error()]
        averaged_keys = [k for k in self._global if k not in self.optimised]
        averaged = {}
        if valid:
            weights = sample_weights(valid, self.weighted_by_key)
            averaged = mean_of_replies(valid, averaged_keys, weights)
            for content in valid:  # what the Flower optimiser sees: optimised entries only
                arrays = content[self.arrayrecord_key]
                content[self.arrayrecord_key] = ArrayRecord(
                    {k: arrays[k] for k in arrays if k in self.optimised}
                )
        aggregated, metrics = super().aggregate_train(server_round, replies)
        if aggregated is None:
            return None, metrics
        averaged.update({k: v.numpy() for k, v in aggregated.items()})
        return as_arrayrecord(averaged, self._global), metrics


class FedAvgMTrainable(TrainableOnly, FedAvgM):
    """Flower's FedAvgM on trainable parameters; buffers averaged (by default)."""


class FedAdamTrainable(TrainableOnly, FedAdam):
    """Flower's FedAdam on trainable parameters; buffers averaged (by default)."""


class FedYogiTrainable(TrainableOnly, FedYogi):
    """Flower's FedYogi on trainable parameters; buffers averaged (by default)."""


class FedAdagradTrainable(TrainableOnly, FedAdagrad):
    """Flower's FedAdagrad on trainable parameters; buffers averaged (by default)."""


def _keys(config: RunConfig) -> dict:
    """What the optimiser acts on: the run's trainable keys and the buffer rule."""
    return {"trainable": trainable_keys(config), "buffers": config["server-optimizer-buffers"]}


def build_fedavgm(config: RunConfig, **kwargs) -> FedAvgM:
    return FedAvgMTrainable(
        **_keys(config),
        server_learning_rate=config["server-learning-rate"],
        server_momentum=config["server-momentum"],
        **kwargs,
    )


def _adaptive_kwargs(config: RunConfig, with_betas: bool = True) -> dict:
    kwargs = {
        "eta": config["adaptive-eta"],
        "eta_l": config.learning_rate,  # Flower only records the client learning rate
        "tau": config["adaptive-tau"],
    }
    if with_betas:
        kwargs["beta_1"] = config["adaptive-beta-1"]
        kwargs["beta_2"] = config["adaptive-beta-2"]
    return kwargs


def build_fedadam(config: RunConfig, **kwargs) -> FedAdam:
    return FedAdamTrainable(**_keys(config), **_adaptive_kwargs(config), **kwargs)


def build_fedyogi(config: RunConfig, **kwargs) -> FedYogi:
    return FedYogiTrainable(**_keys(config), **_adaptive_kwargs(config), **kwargs)


def build_fedadagrad(config: RunConfig, **kwargs) -> FedAdagrad:
    return FedAdagradTrainable(
        **_keys(config), **_adaptive_kwargs(config, with_betas=False), **kwargs
    )


_REDDI = "Reddi et al., ICLR 2021"

SPECS = (
    StrategySpec(
        "fedavgm",
        "FedAvg step applied with server momentum (Flower's `FedAvgM`) on trainable parameters;"
        " batch-norm statistics take the FedAvg value",
        "Hsu et al., 2019",
        build_fedavgm,
        train_plain,
        settings=FEDAVGM_SETTINGS,
    ),
    StrategySpec(
        "fedadam",
        "Adam on the FedAvg pseudo-gradient (Flower's `FedAdam`) of the trainable parameters;"
        " batch-norm statistics take the FedAvg value",
        _REDDI,
        build_fedadam,
        train_plain,
        settings=ADAPTIVE_SETTINGS,
    ),
    StrategySpec(
        "fedyogi",
        "Yogi on the FedAvg pseudo-gradient (Flower's `FedYogi`) of the trainable parameters;"
        " batch-norm statistics take the FedAvg value",
        _REDDI,
        build_fedyogi,
        train_plain,
        settings=ADAPTIVE_SETTINGS,
    ),
    StrategySpec(
        "fedadagrad",
        "Adagrad on the FedAvg pseudo-gradient (Flower's `FedAdagrad`) of the trainable"
        " parameters; batch-norm statistics take the FedAvg value",
        _REDDI,
        build_fedadagrad,
        train_plain,
        settings=(ADAPTIVE_SETTINGS[0], ADAPTIVE_SETTINGS[3], BUFFERS),
    ),
)
