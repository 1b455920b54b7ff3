"""The one distillation loop: any registered objective, any student module.

``distill`` trains ``model`` on ``inputs`` with labels and the teachers' predictions
precomputed once (teachers are fixed). It runs the shared training loop
(``training.loops.train_local``) over *sample indices*: ``train_local`` shuffles and batches
its ``x``, so passing ``torch.arange(N)`` lets each batch index the inputs, the teachers'
predictions and their taps alike.

In mode ``unlabeled`` (``KDParams.mode``) the labels are withheld here, before any objective
sees a batch. A student with learnable adapters (a projection, contrastive heads) is wrapped
in ``WithAdapters`` so that one optimiser trains both; the objective finds them in
``KDBatch.adapters``. The result holds the mean of every weighted loss term over the
batches, so that a term too small to matter is visible.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..core.device import device_of
from ..training.loops import train_local
from .objectives import KDBatch, KDParams, Objective, get_objective


class WithAdapters(nn.Module):
    """A student and an objective's adapters, trained together; ``forward`` is the
    student's."""

    def __init__(self, student: nn.Module, adapters: dict[str, nn.Module]) -> None:
        super().__init__()
        self.student = student
        self.adapters = nn.ModuleDict(adapters)

    def forward(self, x: Tensor) -> Tensor:
        return self.student(x)

    def taps(self, x: Tensor) -> dict[str, Tensor]:
        return self.student.taps(x)


@dataclass(frozen=True)
class DistillResult:
    mean_loss: float  # over the batches
    terms: dict[str, float]  # each weighted term's mean over the batches


def distill(
    model: nn.Module,
    inputs: Tensor,
    labels: Tensor | None,
    teacher_probs: Tensor | None,
    objective: str | Objective,
    params: KDParams,
    *,
    epochs: int,
    batch_size: int,
    optimizer: torch.optim.Optimizer,
    generator: torch.Generator,
    teacher_taps: dict[str, Tensor] | None = None,
) -> DistillResult:
    """``epochs`` passes of ``objective`` over (``inputs``, ``labels``). ``teacher_probs``:
    (T, N, C) or None (objectives that read only taps); ``teacher_taps``: (N, ...) tensors
    by name."""
    objective = get_objective(objective) if isinstance(objective, str) else objective
    teacher_taps = teacher_taps or {}
    if params.mode == "unlabeled":
        labels = None  # withheld: no objective receives them
    adapters = model.adapters if isinstance(model, WithAdapters) else {}
    sums: dict[str, float] = defaultdict(float)

    indices = torch.arange(len(inputs))
    device = device_of(model)  # the data stays on the host; each batch moves there

    def batch_of(values: Tensor | None, idx: Tensor) -> Tensor | None:
        return None if values is None else values[idx].to(device)

    def loss_fn(module: nn.Module, idx: Tensor, _: Tensor) -> Tensor:
        idx = idx.cpu()  # train_local moved the batch of indices to the model's device
        x = batch_of(inputs, idx)
        if objective.taps:
            taps = module.taps(x)
            logits = taps.pop("logits")
        else:
            taps, logits = {}, module(x)
        batch = KDBatch(
            logits=logits,
            labels=batch_of(labels, idx),
            teacher_probs=None if teacher_probs is None else teacher_probs[:, idx].to(device),
            taps=taps,
            teacher_taps={name: batch_of(value, idx) for name, value in teacher_taps.items()},
            adapters=adapters,
        )
        terms = objective.weighted_terms(batch, params)
        for name, value in terms.items():
            sums[name] += value.item()
        return sum(terms.values())

    result = train_local(
        model,
        indices,
        indices,  # the loop's "labels" are the indices too: labels are read through them
        epochs=epochs,
        batch_size=batch_size,
        optimizer=optimizer,
        generator=generator,
        loss_fn=loss_fn,
    )
    steps = max(result.num_steps, 1)
    return DistillResult(result.mean_loss, {name: total / steps for name, total in sums.items()})
