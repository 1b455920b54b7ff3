"""Stage 1 of "Benchmarking Federated Learning & Knowledge Distillation for Point Cloud
Classification": the 13 FL strategies' settings (its Table A2 and Sec. 4.1) and its
"Centralized" reference, shared by ``benchmarks/flkd.py`` (the offline FL + KD replication) and
the reproduction of its Tables 1 and 4 (``experiments.flkd``).

* ``ADAM``: every client's optimiser, Adam at learning rate 1e-3 and weight decay 1e-4 (batch 24
  is the caller's);
* ``STRATEGIES``: flowerbed strategy -> the run-config keys the paper sets for it: FedProx
  mu = 0.01; SCAFFOLD plain SGD (lr 1e-3, no momentum, no weight decay: the paper's code);
  FedNova SGD with momentum 0.9 and no weight decay (its code forces it); FedDyn alpha = 0.01;
  MOON mu = 1, temperature 0.5; Ditto lambda = 0.1; FedAvgM server learning rate 1, momentum
  0.9; FedAdam / FedYogi eta_s = 0.05, beta1 0.9, beta2 0.999, tau 1e-3; FedAdagrad eta_s 0.05,
  tau 1e-3;
* ``METHODS``: the names Table 1 gives the 13 strategies, in its order, and ``CENTRALIZED``,
  its reference's; ``BN_AVERAGED`` marks a server optimiser run with flowerbed's batch-norm
  rule instead of the paper code's (``experiments.flkd``);
* ``method_config``: a run config with a strategy and the paper's keys for it (and the
  batch-norm rule of a server optimiser);
* ``train_central``: the model trained with cross-entropy on the whole training split, Adam
  (``ADAM``), StepLR x0.7 every E/10 epochs (the paper: 200 epochs, every 20), the data set's
  training augmentation (the point clouds' dropout, scaling and translation; none for images or
  tables), and the best epoch on the test set, as the paper selects it.
"""

from __future__ import annotations

import math

import torch

from ..models import build_model
from ..training.loops import evaluate, train_local

ADAM = {"optimizer": "adam", "learning-rate": 1e-3, "weight-decay": 1e-4}
ADAPTIVE = {
    "adaptive-eta": 0.05,
    "adaptive-beta-1": 0.9,
    "adaptive-beta-2": 0.999,
    "adaptive-tau": 1e-3,
}
STRATEGIES = {
    "fedavg": {},
    "fedprox": {"proximal-mu": 0.01},
    "scaffold": {"optimizer": "sgd", "momentum": 0.0, "weight-decay": 0.0},
    "fednova": {"optimizer": "sgd", "momentum": 0.9, "weight-decay": 0.0},
    "feddyn": {"feddyn-alpha": 0.01},
    "moon": {"moon-mu": 1.0, "moon-temperature": 0.5},
    "ditto": {"ditto-lambda": 0.1},
    "fedbn": {},
    "fedmedian": {},
    "fedavgm": {"server-learning-rate": 1.0, "server-momentum": 0.9},
    "fedadam": ADAPTIVE,
    "fedyogi": ADAPTIVE,
    "fedadagrad": {"adaptive-eta": 0.05, "adaptive-tau": 1e-3},
}
SERVER_OPTIMIZERS = ("fedavgm", "fedadam", "fedyogi", "fedadagrad")
CENTRALIZED = "Centralized"
# (name in Table 1, flowerbed strategy), in Table 1's order (ModelNet40's ranking)
METHODS = (
    ("FedNova", "fednova"),
    ("FedProx", "fedprox"),
    ("FedDyn", "feddyn"),
    ("SCAFFOLD", "scaffold"),
    ("Ditto", "ditto"),
    ("FedAvg", "fedavg"),
    ("FedBN", "fedbn"),
    ("MOON", "moon"),
    ("FedMedian", "fedmedian"),
    ("FedAdagrad", "fedadagrad"),
    ("FedAdam", "fedadam"),
    ("FedAvgM", "fedavgm"),
    ("FedYogi", "fedyogi"),
)
BN_AVERAGED = " (BN averaged)"  # the server optimisers with flowerbed's buffer rule
CENTRAL_BATCH_SIZE = 24


def method_config(config: dict, strategy: str, buffers: str = "optimize") -> dict:
    """The run config ``config`` with ``strategy`` and the keys the paper sets for it
    (``STRATEGIES``); a server optimiser's batch-norm running statistics by ``buffers``
    (``server-optimizer-buffers``): ``optimize``, the paper's code's rule, or ``average``,
    flowerbed's."""
    overrides = {**config, "strategy": strategy, **STRATEGIES[strategy]}
    if strategy in SERVER_OPTIMIZERS:
        overrides["server-optimizer-buffers"] = buffers
    return overrides


def train_central(config, data, model_name: str, epochs: int = 40) -> tuple[dict, dict]:
    """``model_name`` trained with cross-entropy on the whole training split of ``data`` (module
    docstring): (the best epoch's state dict, ``{"test_accuracy": best, "round": its epoch,
    "final_accuracy": the last epoch's}``), accuracies as fractions."""
    torch.manual_seed(config.seed)
    model = build_model(model_name, data.input_shape, data.num_classes, config=config)
    optimizer = torch.optim.Adam(
        model.parameters(), lr=ADAM["learning-rate"], weight_decay=ADAM["weight-decay"]
    )
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=max(1, epochs // 10), gamma=0.7
    )
    generator = torch.Generator().manual_seed(config.seed)
    best, accuracy = (-1.0, 0, None), math.nan
    for epoch in range(1, epochs + 1):
        train_local(
            model,
            data.x_train,
            data.y_train,
            epochs=1,
            batch_size=CENTRAL_BATCH_SIZE,
            optimizer=optimizer,
            generator=generator,
            augment=data.augment,
        )
        scheduler.step()
        accuracy = evaluate(model, data.x_test, data.y_test)[1]
        if accuracy > best[0]:
            best = (accuracy, epoch, {k: v.clone() for k, v in model.state_dict().items()})
    return best[2], {"test_accuracy": best[0], "round": best[1], "final_accuracy": accuracy}
