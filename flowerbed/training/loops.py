"""The shared local training and evaluation loops.

Every algorithm trains through ``train_local``; what makes it particular goes in small hooks:

* ``extra_loss(model) -> Tensor``: a term added to the cross-entropy (FedProx's proximal term,
  FedDyn's linear and quadratic terms, ...);
* ``after_backward(model)``: runs between ``backward()`` and ``optimizer.step()`` (SCAFFOLD's
  gradient correction).
* ``loss_fn(model, x, y) -> Tensor``: replaces the whole loss (MOON, knowledge distillation).

The run-config keys of local training (epochs, batch size, optimiser) are declared here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import Tensor, nn

from ..core.device import to_device_of
from ..core.stages import CLINICAL_METRICS, stage
from ..evaluation.metrics import clinical_metrics, confusion_matrix
from ..settings import RunConfig, Setting

OPTIMIZERS = ("sgd", "adam")


def _check_local_epochs_max(value: int, config: RunConfig) -> str | None:
    if value != 0 and value < config["local-epochs"]:
        return (
            f"local-epochs-max must be 0 (off) or at least local-epochs={config['local-epochs']},"
            f" got {value}"
        )
    return None


SETTINGS = (
    Setting("local-epochs", 2, "local epochs per round", low=1),
    Setting(
        "local-epochs-max",
        0,
        "heterogeneous local work, for every strategy: if > 0, each client draws its epochs"
        " uniformly from [`local-epochs`, `local-epochs-max`] afresh every round, seeded by (seed,"
        " partition id, round); 0 = off (every client runs `local-epochs`)",
        low=0,
        check=_check_local_epochs_max,
    ),
    Setting("batch-size", 32, "local mini-batch size", low=1),
    Setting("learning-rate", 0.05, "client learning rate", low=0, low_open=True),
    Setting("optimizer", "sgd", "client optimizer: `sgd` or `adam`", choices=OPTIMIZERS),
    Setting("momentum", 0.9, "SGD momentum", low=0, high=1, high_open=True),
    Setting("weight-decay", 0.0, "client weight decay", low=0),
)

LossFn = Callable[[nn.Module, Tensor, Tensor], Tensor]


@dataclass(frozen=True)
class TrainResult:
    mean_loss: float
    num_steps: int
    num_examples: int


def minibatches(
    x: Tensor, y: Tensor, batch_size: int, generator: torch.Generator | None = None
) -> Iterator[tuple[Tensor, Tensor]]:
    """Shuffled mini-batches of in-memory tensors (a DataLoader would only add overhead)."""
    order = (
        torch.randperm(len(x), generator=generator)
        if generator is not None
        else torch.arange(len(x))
    )
    for start in range(0, len(x), batch_size):
        idx = order[start : start + batch_size]
        yield x[idx], y[idx]


def build_optimizer(params, config: RunConfig) -> torch.optim.Optimizer:
    if config.optimizer == "adam":
        return torch.optim.Adam(params, lr=config.learning_rate, weight_decay=config.weight_decay)
    return torch.optim.SGD(
        params, lr=config.learning_rate, momentum=config.momentum, weight_decay=config.weight_decay
    )


def cross_entropy(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    return nn.functional.cross_entropy(model(x), y)


def train_local(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    epochs: int,
    batch_size: int,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    loss_fn: LossFn = cross_entropy,
    extra_loss: Callable[[nn.Module], Tensor] | None = None,
    after_backward: Callable[[nn.Module], None] | None = None,
    augment: Callable[[Tensor, torch.Generator], Tensor] | None = None,
) -> TrainResult:
    """Run ``epochs`` passes of mini-batch training; returns the mean batch loss.
    ``augment(batch, generator)`` transforms every input batch (the data set's training
    augmentation, ``DatasetSplits.augment``), on the host, before the batch moves to the
    model's device."""
    model.train()
    losses = []
    for _ in range(epochs):
        for xb, yb in minibatches(x, y, batch_size, generator):
            if augment is not None:
                xb = augment(xb, generator)
            xb, yb = to_device_of(model, xb, yb)
            optimizer.zero_grad()
            loss = loss_fn(model, xb, yb)
            if extra_loss is not None:
                loss = loss + extra_loss(model)
            loss.backward()
            if after_backward is not None:
                after_backward(model)
            optimizer.step()
            losses.append(loss.item())
    return TrainResult(
        mean_loss=float(np.mean(losses)) if losses else float("nan"),
        num_steps=len(losses),
        num_examples=len(x),
    )


@torch.no_grad()
def predict(model: nn.Module, x: Tensor, batch_size: int = 512) -> Tensor:
    """Logits for ``x`` in eval mode, on the host (each batch runs on the model's device)."""
    return _batched(model, model, x, batch_size)


@torch.no_grad()
def features_of(model: nn.Module, x: Tensor, batch_size: int = 512) -> Tensor:
    """``model.features(x)`` in eval mode (a frozen feature extractor), on the host."""
    return _batched(model, model.features, x, batch_size)


def _batched(model: nn.Module, function, x: Tensor, batch_size: int) -> Tensor:
    model.eval()
    outputs = [
        function(to_device_of(model, x[i : i + batch_size])).cpu()
        for i in range(0, len(x), batch_size)
    ]
    return torch.cat(outputs)


def evaluate(model: nn.Module, x: Tensor, y: Tensor, batch_size: int = 512) -> tuple[float, float]:
    """(mean cross-entropy, accuracy) of ``model`` on ``(x, y)``."""
    if len(x) == 0:
        return float("nan"), float("nan")
    return _loss_and_accuracy(predict(model, x, batch_size), y)


def _loss_and_accuracy(logits: Tensor, y: Tensor) -> tuple[float, float]:
    loss = nn.functional.cross_entropy(logits, y).item()
    accuracy = (logits.argmax(dim=1) == y).float().mean().item()
    return loss, accuracy


@dataclass(frozen=True)
class Evaluation:
    """A model on a test set: loss, accuracy and the clinical metrics
    (``evaluation.metrics.clinical_metrics``: balanced accuracy, macro AUROC; for two classes
    with a positive class sensitivity, specificity, AUROC of the positive class), all from one
    pass over the data; ``probabilities`` (N, C) and ``labels`` (N,) are that pass's
    predictions, for the summaries with intervals (``evaluation.clinical.clinical_summary``)
    and the per-class counts."""

    loss: float
    accuracy: float
    clinical: dict[str, float]
    probabilities: np.ndarray = field(repr=False, compare=False, default=None)
    labels: np.ndarray = field(repr=False, compare=False, default=None)

    def columns(self, prefix: str) -> dict[str, float]:
        """The clinical metrics as history columns ``<prefix>_<name>``."""
        return {f"{prefix}_{name}": value for name, value in self.clinical.items()}

    def class_counts(self) -> tuple[list[int], list[int]]:
        """Samples of each true class and, of them, those predicted right (the confusion
        matrix's row sums and diagonal)."""
        matrix = confusion_matrix(
            self.labels, self.probabilities.argmax(axis=1), self.probabilities.shape[1]
        )
        return matrix.sum(axis=1).tolist(), np.diag(matrix).tolist()


def evaluate_clinical(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    num_classes: int,
    positive: int | None,
    batch_size: int = 512,
) -> Evaluation:
    """``evaluate``'s loss and accuracy (the same numbers) and the clinical metrics, from the
    same logits: the model runs once. ``positive``: the positive class of a binary task
    (``data.classes.positive_class``)."""
    if len(x) == 0:
        nan = float("nan")
        empty = np.zeros((0, num_classes))
        return Evaluation(
            nan,
            nan,
            clinical_metrics(empty, [], num_classes, positive),
            empty,
            np.zeros(0, dtype=np.int64),
        )
    logits = predict(model, x, batch_size)
    loss, accuracy = _loss_and_accuracy(logits, y)
    probabilities = torch.softmax(logits.double(), dim=1).numpy()
    labels = y.numpy()
    with stage(CLINICAL_METRICS):
        clinical = clinical_metrics(probabilities, labels, num_classes, positive)
    return Evaluation(loss, accuracy, clinical, probabilities, labels)
