"""Teachers as black boxes: their predictions, and the noise filter of the QKT paper's Eq. (2).

Teachers are only queried, in eval mode; nothing here reads their parameters, so their
architectures may differ from the student's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..training.loops import predict


def teacher_probabilities(
    teachers: Sequence[nn.Module], x: Tensor, num_classes: int, temperature: float = 1.0
) -> Tensor:
    """(T, N, C) softmax(f_t(x) / T) of every teacher, in eval mode (black boxes)."""
    if not teachers:
        return torch.zeros(0, len(x), num_classes)
    return torch.stack([F.softmax(predict(t, x) / temperature, dim=1) for t in teachers])


def filter_teachers(
    teachers: Sequence[nn.Module],
    query: Sequence[int],
    input_shape: Sequence[int],
    num_noise: int,
    tau: float,
    generator: torch.Generator,
) -> tuple[list[int], Tensor]:
    """QKT's Eq. (2): indices of the teachers whose mean probability on B Gaussian inputs
    x' ~ N(0, 1) (shaped like the model input) reaches tau for some query class, and the
    (T, C) mean probabilities."""
    noise = torch.randn((num_noise, *input_shape), generator=generator)
    if not teachers:
        return [], torch.zeros(0, 0)
    mean = torch.stack([F.softmax(predict(t, noise), dim=1).mean(dim=0) for t in teachers])
    kept = [i for i in range(len(teachers)) if bool((mean[i, list(query)] >= tau).any())]
    return kept, mean
