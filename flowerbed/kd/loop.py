"""The one distillation loop: any registered objective, any student module.

``distill`` trains ``model`` on ``inputs`` with labels and the teachers' predictions
precomputed once (teachers are fixed). It runs the shared training loop
(``training.loops.train_local``) over *sample indices*: ``train_local`` shuffles and batches
its ``x``, so passing ``torch.arange(N)`` lets each batch index the inputs, the teachers'
predictions and their taps alike.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..training.loops import train_local
from .objectives import KDBatch, KDParams, Objective, get_objective


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
) -> float:
    """``epochs`` passes of ``objective`` over (``inputs``, ``labels``); returns the mean
    batch loss. ``teacher_probs``: (T, N, C) or None (objectives that read only taps);
    ``teacher_taps``: (N, ...) tensors by name."""
    objective = get_objective(objective) if isinstance(objective, str) else objective
    teacher_taps = teacher_taps or {}

    indices = torch.arange(len(inputs))

    def loss_fn(module: nn.Module, idx: Tensor, _: Tensor) -> Tensor:
        x = inputs[idx]
        if objective.taps:
            taps = module.taps(x)
            logits = taps.pop("logits")
        else:
            taps, logits = {}, module(x)
        batch = KDBatch(
            logits=logits,
            labels=None if labels is None else labels[idx],
            teacher_probs=None if teacher_probs is None else teacher_probs[:, idx],
            taps=taps,
            teacher_taps={name: value[idx] for name, value in teacher_taps.items()},
        )
        return objective.loss(batch, params)

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
    return result.mean_loss
