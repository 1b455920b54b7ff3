"""Distillation objectives, registered by name, as named loss terms with weights.

An objective maps one mini-batch (``KDBatch``: the student's logits and the taps it asked
for, the labels or ``None``, the teachers' precomputed predictions and taps, the learnable
adapters) and its parameters (``KDParams``) to named, *unweighted* loss terms
(``Objective.terms``), and the parameters to the terms' weights (``Objective.weights``). The
total is sum_k w_k * term_k; the hard-label cross-entropy is the term ``"ce"``, computed here
from the labels whenever its weight is not zero, so no objective writes it twice and
``kd.loop.distill`` can trace every term's magnitude. ``kd.loop.distill`` runs any registered
objective; a new objective is a terms function, a weights function and one ``register`` call.
Feature-based and relational objectives name the student taps they read (``Objective.taps``,
e.g. ``("features",)``, from ``Classifier.taps``) and receive the teachers' taps computed once;
objectives with learnable parts (a projection of the student's feature, contrastive heads)
build them with ``Objective.adapters`` and find them in ``KDBatch.adapters``.

Modes (``KDParams.mode``), the label-free controls of "Benchmarking Federated Learning &
Knowledge Distillation for Point Cloud Classification": ``labeled`` (the objective as
published), ``no-ce`` (the hard-label term removed: each objective's weights say what its
other terms then weigh) and ``unlabeled`` (``kd.loop.distill`` withholds the labels: no
function here receives them).

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

The ten objectives of the point-cloud benchmark and Basic KD are in ``kd.classic_objectives``.

KL is element-wise, KL_j = p_t[j] (log p_t[j] - log p_s[j]); it differs from the paper's
"p_t log p_s" by the teachers' entropy, a constant: same gradients, and >= 0. With a
temperature T the logits are divided by T in both distributions and the term is multiplied
by T^2 (Hinton et al., 2015); with T = 1 both are no-ops.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import torch.nn.functional as F
from torch import Tensor, nn

MODES = ("labeled", "no-ce", "unlabeled")
CE = "ce"


@dataclass(frozen=True)
class KDParams:
    """An objective's parameters: alpha (distillation weight), temperature, class mask (C,);
    beta (intermediate-representation weight), DKD's alpha_D and beta_D, CRD's temperature
    and head width; the mode (``MODES``)."""

    alpha: float = 1.0
    temperature: float = 1.0
    mask: Tensor | None = None
    beta: float = 0.5
    dkd_alpha: float = 1.0
    dkd_beta: float = 8.0
    crd_temperature: float = 0.07
    crd_dim: int = 128
    mode: str = "labeled"


@dataclass(frozen=True)
class KDBatch:
    """One mini-batch as an objective sees it."""

    logits: Tensor  # the student's, (B, C)
    labels: Tensor | None  # (B,); None when the labels are withheld
    teacher_probs: Tensor | None  # (T, B, C): softmax(f_t(x) / T) of every teacher
    taps: dict[str, Tensor] = field(default_factory=dict)  # the student's requested taps
    teacher_taps: dict[str, Tensor] = field(default_factory=dict)  # precomputed, (B, ...)
    adapters: Mapping[str, nn.Module] = field(default_factory=dict)  # learnable, trained along


Terms = Callable[[KDBatch, KDParams], dict[str, Tensor]]
Weights = Callable[[KDParams], dict[str, float]]
Adapters = Callable[[int, int, KDParams], dict[str, nn.Module]]


@dataclass(frozen=True)
class Objective:
    """A registered objective: unweighted ``terms`` (without CE), their ``weights`` (with
    ``"ce"``), the student taps it reads besides the logits, the learnable ``adapters`` it
    needs (from the student's and the teacher's feature widths), the number of student
    generations (Born-Again self-distillation: 2), whether its terms read the labels (DKD)."""

    name: str
    terms: Terms
    weights: Weights
    taps: tuple[str, ...] = ()
    adapters: Adapters | None = None
    generations: int = 1
    terms_read_labels: bool = False

    def weighted_terms(self, batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
        """{name: w * term}, CE first when its weight is not zero."""
        weights = self.weights(params)
        if weights.get(CE, 0.0) < 0:
            raise ValueError(
                f"objective {self.name!r}: the cross-entropy weight is {weights[CE]} < 0 with"
                f" alpha={params.alpha}, beta={params.beta}"
            )
        out = {}
        if weights.get(CE, 0.0) != 0.0:
            if batch.labels is None:
                raise ValueError(
                    f"objective {self.name!r} in mode {params.mode!r} has a cross-entropy term"
                    " but the labels are withheld"
                )
            out[CE] = weights[CE] * F.cross_entropy(batch.logits, batch.labels)
        for name, value in self.terms(batch, params).items():
            out[name] = weights[name] * value
        return out

    def loss(self, batch: KDBatch, params: KDParams) -> Tensor:
        return sum(self.weighted_terms(batch, params).values())

    def ce_weight(self, params: KDParams) -> float:
        return self.weights(params).get(CE, 0.0)

    def label_free(self, params: KDParams) -> bool:
        """Whether the loss can be computed without labels in this mode (DKD's ``no-ce``
        is not: its terms split the classes by the label)."""
        if params.mode == "unlabeled":
            return True
        return self.ce_weight(params) == 0.0 and not self.terms_read_labels


OBJECTIVES: dict[str, Objective] = {}


def register(
    name: str,
    weights: Weights,
    taps: tuple[str, ...] = (),
    adapters: Adapters | None = None,
    generations: int = 1,
    terms_read_labels: bool = False,
):
    """Decorator: register ``terms(batch, params) -> {name: Tensor}`` as objective ``name``."""

    def add(terms: Terms):
        if name in OBJECTIVES:
            raise ValueError(f"distillation objective {name!r} is registered twice")
        OBJECTIVES[name] = Objective(
            name, terms, weights, taps, adapters, generations, terms_read_labels
        )
        return terms

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
        kl = kl * mask.to(kl.device)
    return kl.sum(dim=(0, 2)).mean() * temperature**2


def qkt_weights(params: KDParams) -> dict[str, float]:
    """QKT's Eqs. (1) and (4): CE at full weight, the distillation term at alpha."""
    return {CE: 1.0, "kl": params.alpha}


@register("kd", qkt_weights)
def naive_kd(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    """QKT's Eq. (1): CE + alpha * sum over every teacher of KL(p_t, p_s)."""
    return {"kl": distillation_term(batch.logits, batch.teacher_probs, None, params.temperature)}


@register("masked-kd", qkt_weights)
def masked_kd(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    """QKT's Eq. (4): CE + alpha * sum over the teachers of <M, KL(p_t, p_s)>."""
    return {
        "kl": distillation_term(batch.logits, batch.teacher_probs, params.mask, params.temperature)
    }


@register("hint", lambda params: {"hint": 1.0}, taps=("hint",))
def hint(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    """FitNets' hint loss: MSE between the translated student feature and the teacher's."""
    return {"hint": F.mse_loss(batch.taps["hint"], batch.teacher_taps["features"])}
