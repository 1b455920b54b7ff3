"""A learnable map from a student's feature to a teacher's: FitNets' regressor, FedSA's translator.

"FitNets: Hints for Thin Deep Nets" (Romero et al., ICLR 2015) trains the student's
intermediate output, through a small regressor, towards the teacher's ("hint"); FedSA
("Federated Selective Aggregation for Knowledge Amalgamation", Xie et al., 2022) calls that
regressor the *translator* and keeps it with the teacher's owner. flowerbed's features are flat
vectors, so the authors' three 1x1 convolutions become three linear layers:

    translator(f) = g3(g2(g1(f))),  g_i(v) = LeakyReLU_0.1(BatchNorm(W_i v + b_i))

with widths d_s -> d_s -> d_t -> d_t (the authors' width factor 1), Kaiming-initialised.
``Translated`` wraps a student and a translator into one module to train: its ``taps`` add
``hint`` (the translated feature) to the student's own taps, which the ``hint`` objective
(``kd.objectives``) compares with the teacher's ``features``.
"""

from __future__ import annotations

from itertools import pairwise

import torch.nn.functional as F
from torch import Tensor, nn


class Translator(nn.Module):
    """Three (Linear, BatchNorm1d, LeakyReLU 0.1) blocks from ``in_dim`` to ``out_dim``."""

    def __init__(self, in_dim: int, out_dim: int) -> None:
        super().__init__()
        widths = (in_dim, in_dim, out_dim, out_dim)
        self.linears = nn.ModuleList(nn.Linear(a, b) for a, b in pairwise(widths))
        self.norms = nn.ModuleList(nn.BatchNorm1d(b) for b in widths[1:])
        for linear in self.linears:
            nn.init.kaiming_normal_(linear.weight, a=0.1, nonlinearity="leaky_relu")
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        # A batch of one sample has no batch statistics: it is normalised with the running
        # ones (as in eval mode) instead of failing, so no mini-batch size is refused.
        batch_stats = self.training and len(x) > 1
        for linear, norm in zip(self.linears, self.norms):
            x = F.batch_norm(
                linear(x),
                norm.running_mean,
                norm.running_var,
                norm.weight,
                norm.bias,
                training=batch_stats,
                momentum=norm.momentum,
                eps=norm.eps,
            )
            x = F.leaky_relu(x, 0.1)
        return x


class Translated(nn.Module):
    """A student and its translator, trained together; ``forward`` is the student's."""

    def __init__(self, student: nn.Module, translator: Translator) -> None:
        super().__init__()
        self.student = student
        self.translator = translator

    def forward(self, x: Tensor) -> Tensor:
        return self.student(x)

    def taps(self, x: Tensor) -> dict[str, Tensor]:
        taps = self.student.taps(x)
        taps["hint"] = self.translator(taps["features"])
        return taps
