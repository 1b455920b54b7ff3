"""Distillation objectives, registered by name.

An objective maps one mini-batch (``KDBatch``: the student's logits and the taps it asked
for, the labels, the teachers' precomputed predictions and taps) and its parameters
(``KDParams``) to a scalar loss. ``kd.loop.distill`` runs any registered objective; a new
objective is a function and one ``register`` call, not a new loop. Feature-based and
relational objectives name the student taps they read (``Objective.taps``, e.g.
``("features",)``, from ``Classifier.taps``) and receive the teachers' taps computed once.

Registered here, from the QKT paper ("Query-based Knowledge Transfer", ICLR 2025):

* ``kd``: naive knowledge distillation (Hinton et al., 2015), QKT's Eq. (1):
  CE(f_s(x), y) + alpha * sum_t KL(p_t, p_s);
* ``masked-kd``: QKT's Eq. (4): CE(f_s(x), y) + alpha * sum_t <M, KL(p_t, p_s)> with the class
  mask M of Eq. (3) (``KDParams.mask``).

From "FitNets: Hints for Thin Deep Nets" (Romero et al., ICLR 2015), as FedSA uses it (Eq. 4 of
"Federated Selective Aggregation for Knowledge Amalgamation"):

* ``hint``: mean over elements of (translator(f_s(x)) - f_t(x))^2, the student's feature through
  its translator (``kd.translator.Translated``, tap ``hint``) against the teacher's feature
  (teacher tap ``features``). Eq. 4's 1/2 ||.||^2 up to the constant factor 1/(2 numel), as
  the authors' code (``F.mse_loss``). Label-free: it never reads ``labels``.

KL is element-wise, KL_j = p_t[j] (log p_t[j] - log p_s[j]); it differs from the paper's
"p_t log p_s" by the teachers' entropy, a constant: same gradients, and >= 0. With a
temperature T the logits are divided by T in both distributions and the term is multiplied
by T^2 (Hinton et al., 2015); with T = 1 both are no-ops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch.nn.functional as F
from torch import Tensor


@dataclass(frozen=True)
class KDParams:
    """Weights of an objective: alpha (distillation term), temperature, class mask (C,)."""

    alpha: float = 1.0
    temperature: float = 1.0
    mask: Tensor | None = None


@dataclass(frozen=True)
class KDBatch:
    """One mini-batch as an objective sees it."""

    logits: Tensor  # the student's, (B, C)
    labels: Tensor | None  # (B,); None when the labels are withheld
    teacher_probs: Tensor | None  # (T, B, C): softmax(f_t(x) / T) of every teacher
    taps: dict[str, Tensor] = field(default_factory=dict)  # the student's requested taps
    teacher_taps: dict[str, Tensor] = field(default_factory=dict)  # precomputed, (B, ...)


@dataclass(frozen=True)
class Objective:
    name: str
    loss: Callable[[KDBatch, KDParams], Tensor]
    taps: tuple[str, ...] = ()  # student taps besides the logits


OBJECTIVES: dict[str, Objective] = {}


def register(name: str, taps: tuple[str, ...] = ()):
    """Decorator: register ``loss(batch, params) -> Tensor`` as objective ``name``."""

    def add(loss: Callable[[KDBatch, KDParams], Tensor]):
        if name in OBJECTIVES:
            raise ValueError(f"distillation objective {name!r} is registered twice")
        OBJECTIVES[name] = Objective(name, loss, taps)
        return loss

    return add


def get_objective(name: str) -> Objective:
    if name not in OBJECTIVES:
        raise ValueError(
            f"unknown distillation objective {name!r}; valid choices: {', '.join(OBJECTIVES)}"
        )
    return OBJECTIVES[name]


def distillation_term(
    student_logits: Tensor,
    teacher_probs: Tensor,
    mask: Tensor | None = None,
    temperature: float = 1.0,
) -> Tensor:
    """sum_t <M, KL(p_t, p_s)>, averaged over the batch (M = 1 when ``mask`` is None).

    ``student_logits``: (B, C); ``teacher_probs``: (T, B, C), the teachers' softmax at the same
    temperature. Element-wise KL via ``F.kl_div(log p_s, p_t, reduction="none")``.
    """
    if teacher_probs.shape[0] == 0:
        return student_logits.new_zeros(())
    log_ps = F.log_softmax(student_logits / temperature, dim=1)
    kl = F.kl_div(log_ps.unsqueeze(0).expand_as(teacher_probs), teacher_probs, reduction="none")
    if mask is not None:
        kl = kl * mask
    return kl.sum(dim=(0, 2)).mean() * temperature**2


@register("kd")
def naive_kd(batch: KDBatch, params: KDParams) -> Tensor:
    """QKT's Eq. (1): CE + alpha * sum over every teacher of KL(p_t, p_s)."""
    return F.cross_entropy(batch.logits, batch.labels) + params.alpha * distillation_term(
        batch.logits, batch.teacher_probs, None, params.temperature
    )


@register("masked-kd")
def masked_kd(batch: KDBatch, params: KDParams) -> Tensor:
    """QKT's Eq. (4): CE + alpha * sum over the teachers of <M, KL(p_t, p_s)>."""
    return F.cross_entropy(batch.logits, batch.labels) + params.alpha * distillation_term(
        batch.logits, batch.teacher_probs, params.mask, params.temperature
    )


@register("hint", taps=("hint",))
def hint(batch: KDBatch, params: KDParams) -> Tensor:
    """FitNets' hint loss: MSE between the translated student feature and the teacher's."""
    return F.mse_loss(batch.taps["hint"], batch.teacher_taps["features"])
