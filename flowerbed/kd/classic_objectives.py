"""The ten objectives of the point-cloud FL + KD benchmark, and its Basic KD probe.

From "Benchmarking Federated Learning & Knowledge Distillation for Point Cloud
Classification" (Table A3), each with its original paper. Shared notation: alpha = 0.5
(soft-target weight), beta = 0.5 (intermediate-representation weight), T = 2 with T^2 on every
KL; p^T = softmax(z / T); f_s, f_t = the student's and the teacher's ``features`` (the vector
the head reads); phi = a learnable Linear(d_s -> d_t), present only when the widths differ
(as the benchmark's code); normalize = L2 normalisation of each row; "MSE" = the mean over
elements; batch-level terms use the mini-batch.

=============  =================================================================  ==========
name           loss (``labeled`` mode)                                            CE weight
=============  =================================================================  ==========
``vanilla``    (1-a) CE + a T^2 KL(p_t^T || p_s^T)  (Hinton et al., 2015)          1 - a
``self``       ``vanilla`` from the previous student generation: generation 1     1 - a
               learns from the teacher, generation 2 (reported) from generation 1
               ("Born-Again Neural Networks", Furlanello et al., ICML 2018)
``logit-mse``  (1-a) CE + a MSE(log p_s, log p_t)  (Ba & Caruana, 2014)             1 - a
``cosine``     (1-a) CE + a (1 - cos(log p_s, log p_t))                           1 - a
``feature``    (1-a-b) CE + a T^2 KL + b MSE(normalize(phi(f_s)), normalize(f_t))  1 - a - b
               ("FitNets: Hints for Thin Deep Nets", Romero et al., 2015)
``attention``  (1-a-b) CE + a T^2 KL + b MSE(normalize(phi(f_s)^2),                1 - a - b
               normalize(f_t^2)) ("Paying More Attention to Attention",
               Zagoruyko & Komodakis, 2017, on the pooled feature)
``sp``         (1-a-b) CE + a T^2 KL + b mean((G_s - G_t)^2), G = row-normalised   1 - a - b
               f f^T of the batch ("Similarity-Preserving Knowledge
               Distillation", Tung & Mori, 2019)
``rkd``        (1-a-b) CE + a T^2 KL + b (psi_D + psi_A): Huber loss between the   1 - a - b
               pairwise distances divided by their mean, and between the cosines
               of the triplet angles ("Relational Knowledge Distillation", Park
               et al., 2019)
``crd``        (1-a) CE + a NT-Xent(h_s(f_s), h_t(f_t)): learnable heads to 128     1 - a
               dimensions, L2-normalised, temperature 0.07, the positive the
               teacher embedding of the same sample, the negatives the batch's
               others ("Contrastive Representation Distillation", Tian et al., 2020)
``dkd``        CE + alpha_D TCKD + beta_D NCKD, alpha_D = 1, beta_D = 8: TCKD = T^2   1
               KL of the binary (target, rest) distributions, NCKD = T^2 KL over the
               non-target classes renormalised ("Decoupled Knowledge
               Distillation", Zhao et al., 2022)
``basic``      CE + a T^2 KL: the cross-entropy at full weight, the benchmark's     1
               probe
=============  =================================================================  ==========

The benchmark's models output log-probabilities, and its objectives act on them; so do these
(``log p``): KL and DKD are unchanged (softmax(log_softmax(z) / T) = softmax(z / T)), but
``logit-mse`` and ``cosine`` compare log-probability vectors, not raw logits.

Without the cross-entropy (``no-ce`` and ``unlabeled`` modes): the term of a "(1-a) CE + a x"
objective carries full weight (``vanilla``, ``self``, ``logit-mse``, ``cosine``, ``crd``,
``basic``); the four "(1-a-b) CE + ..." objectives keep a and b (their CE weight is already 0 at
a = b = 0.5, so ``labeled`` and ``no-ce`` are the same computation); ``dkd`` keeps
alpha_D TCKD + beta_D NCKD in ``no-ce``, which still split the classes by the label (it is *not*
label-free), and falls back to T^2 KL when the labels are withheld (as the benchmark's code).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .objectives import CE, OBJECTIVES, KDBatch, KDParams, distillation_term, register

# --- weights -------------------------------------------------------------------------------


def ce_and(term: str):
    """(1 - a) CE + a term; without CE the term carries full weight."""

    def weights(params: KDParams) -> dict[str, float]:
        if params.mode != "labeled":
            return {term: 1.0}
        return {CE: 1.0 - params.alpha, term: params.alpha}

    return weights


def ce_kl_and(term: str):
    """(1 - a - b) CE + a T^2 KL + b term; without CE, a KL + b term."""

    def weights(params: KDParams) -> dict[str, float]:
        rest = {"kl": params.alpha, term: params.beta}
        if params.mode != "labeled":
            return rest
        return {CE: 1.0 - params.alpha - params.beta, **rest}

    return weights


def basic_weights(params: KDParams) -> dict[str, float]:
    """CE + a T^2 KL; without CE the KL carries full weight."""
    return {CE: 1.0, "kl": params.alpha} if params.mode == "labeled" else {"kl": 1.0}


def dkd_weights(params: KDParams) -> dict[str, float]:
    """CE + alpha_D TCKD + beta_D NCKD; ``no-ce`` drops CE; ``unlabeled`` is plain T^2 KL."""
    if params.mode == "unlabeled":
        return {"kl": 1.0}
    decoupled = {"tckd": params.dkd_alpha, "nckd": params.dkd_beta}
    return {CE: 1.0, **decoupled} if params.mode == "labeled" else decoupled


# --- adapters ------------------------------------------------------------------------------


def projection(student_width: int, teacher_width: int, params: KDParams) -> dict[str, nn.Module]:
    """phi: Linear(d_s -> d_t), only where the widths differ (the benchmark's code)."""
    if student_width == teacher_width:
        return {}
    return {"phi": nn.Linear(student_width, teacher_width)}


def contrastive_heads(
    student_width: int, teacher_width: int, params: KDParams
) -> dict[str, nn.Module]:
    """CRD's learnable heads, both to ``crd_dim`` dimensions."""
    return {
        "student_head": nn.Linear(student_width, params.crd_dim),
        "teacher_head": nn.Linear(teacher_width, params.crd_dim),
    }


# --- shared pieces -------------------------------------------------------------------------


def soft_kl(batch: KDBatch, params: KDParams) -> Tensor:
    """T^2 KL(p_t^T || p_s^T), averaged over the batch."""
    teacher = F.softmax(batch.teacher_taps["logits"] / params.temperature, dim=1)
    return distillation_term(batch.logits, teacher.unsqueeze(0), None, params.temperature)


def projected_student(batch: KDBatch) -> Tensor:
    features = batch.taps["features"]
    return batch.adapters["phi"](features) if "phi" in batch.adapters else features


def gram(features: Tensor) -> Tensor:
    """The batch's similarity matrix f f^T, each row L2-normalised (SP)."""
    return F.normalize(features @ features.T, dim=1)


def pairwise_distances(e: Tensor) -> Tensor:
    """||e_i - e_j||, from the squared distances clamped at 1e-12: the square root's
    gradient is infinite at 0 (the diagonal), as the benchmark's code notes."""
    squared = (e**2).sum(dim=1)
    return (squared[:, None] + squared[None, :] - 2 * e @ e.T).clamp_min(1e-12).sqrt()


def distance_potential(e: Tensor) -> Tensor:
    """Pairwise distances, diagonal 0, divided by the mean over the pairs i != j (RKD's
    psi_D)."""
    n = len(e)
    distances = pairwise_distances(e) * (1 - torch.eye(n, dtype=e.dtype, device=e.device))
    return distances / (distances.sum() / (n * (n - 1))) if n > 1 else distances


def angle_potential(e: Tensor) -> Tensor:
    """cos of the angle at j between e_i and e_k, for all (i, j, k) (RKD's psi_A)."""
    directions = F.normalize(e.unsqueeze(0) - e.unsqueeze(1), dim=2)  # [j, i] = e_i - e_j
    return torch.bmm(directions, directions.transpose(1, 2)).reshape(-1)


def log_probs(logits: Tensor) -> Tensor:
    return F.log_softmax(logits, dim=1)


# --- the objectives ------------------------------------------------------------------------


@register("vanilla", ce_and("kl"))
def vanilla(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    return {"kl": soft_kl(batch, params)}


register("self", ce_and("kl"), generations=2)(vanilla)


@register("logit-mse", ce_and("mse"))
def logit_mse(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    return {"mse": F.mse_loss(log_probs(batch.logits), log_probs(batch.teacher_taps["logits"]))}


@register("cosine", ce_and("cosine"))
def cosine(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    student = F.normalize(log_probs(batch.logits), dim=1)
    teacher = F.normalize(log_probs(batch.teacher_taps["logits"]), dim=1)
    return {"cosine": 1.0 - (student * teacher).sum(dim=1).mean()}


@register("feature", ce_kl_and("feature"), taps=("features",), adapters=projection)
def feature(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    student = F.normalize(projected_student(batch), dim=1)
    teacher = F.normalize(batch.teacher_taps["features"], dim=1)
    return {"kl": soft_kl(batch, params), "feature": F.mse_loss(student, teacher)}


@register("attention", ce_kl_and("attention"), taps=("features",), adapters=projection)
def attention(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    student = F.normalize(projected_student(batch) ** 2, dim=1)
    teacher = F.normalize(batch.teacher_taps["features"] ** 2, dim=1)
    return {"kl": soft_kl(batch, params), "attention": F.mse_loss(student, teacher)}


@register("sp", ce_kl_and("sp"), taps=("features",))
def similarity_preserving(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    difference = gram(batch.taps["features"]) - gram(batch.teacher_taps["features"])
    return {"kl": soft_kl(batch, params), "sp": (difference**2).mean()}


@register("rkd", ce_kl_and("rkd"), taps=("features",))
def relational(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    student, teacher = batch.taps["features"], batch.teacher_taps["features"]
    distance = F.smooth_l1_loss(distance_potential(student), distance_potential(teacher))
    angle = F.smooth_l1_loss(angle_potential(student), angle_potential(teacher))
    return {"kl": soft_kl(batch, params), "rkd": distance + angle}


@register("crd", ce_and("crd"), taps=("features",), adapters=contrastive_heads)
def contrastive(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    student = F.normalize(batch.adapters["student_head"](batch.taps["features"]), dim=1)
    teacher = F.normalize(batch.adapters["teacher_head"](batch.teacher_taps["features"]), dim=1)
    similarity = student @ teacher.T / params.crd_temperature
    positives = torch.arange(len(student), device=student.device)
    return {"crd": F.cross_entropy(similarity, positives)}


@register("dkd", dkd_weights, terms_read_labels=True)
def decoupled(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    if params.mode == "unlabeled":
        return {"kl": soft_kl(batch, params)}
    if batch.labels is None:
        raise ValueError(f"objective 'dkd' in mode {params.mode!r} splits the classes by the label")
    t = params.temperature
    student, teacher = batch.logits / t, batch.teacher_taps["logits"] / t
    target = F.one_hot(batch.labels, student.shape[1]).to(student.dtype)

    def binary(probs: Tensor) -> Tensor:  # (target, rest), floored as the benchmark's code
        on_target = (probs * target).sum(dim=1)
        return torch.stack([on_target, (probs * (1 - target)).sum(dim=1)], dim=1).clamp_min(1e-6)

    tckd = F.kl_div(
        binary(F.softmax(student, dim=1)).log(),
        binary(F.softmax(teacher, dim=1)),
        reduction="batchmean",
    )
    # the target class masked out by a large negative logit: the non-target distributions
    nckd = F.kl_div(
        F.log_softmax(student - 1000.0 * target, dim=1),
        F.softmax(teacher - 1000.0 * target, dim=1),
        reduction="batchmean",
    )
    return {"tckd": tckd * t**2, "nckd": nckd * t**2}


@register("basic", basic_weights)
def basic(batch: KDBatch, params: KDParams) -> dict[str, Tensor]:
    return {"kl": soft_kl(batch, params)}


# the objectives above, in the order of the module docstring's table
NAMES = tuple(name for name, o in OBJECTIVES.items() if o.terms.__module__ == __name__)
