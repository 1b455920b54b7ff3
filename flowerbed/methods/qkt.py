"""QKT and QKT Light ("Query-based Knowledge Transfer", ICLR 2025): the student's step of the
exchange phase (``protocols.exchange``), after the local-fit phase.

A student s with training data D_s, query classes Q and local classes Y_S receives the other
clients' models (teachers t, used only through their predictions p_t = softmax(f_t(x) / T)).

* Teacher filtering (Eq. 2, ``kd.teachers.filter_teachers``): B inputs x' ~ N(0, 1) shaped
  like the model input; with every teacher in eval mode, keep
  T_Q = {t : (1/B) sum_x' f_t(x')[q] >= tau for some q in Q}.
* Class mask (Eq. 3): M[j] = lambda if j in Q; 1 if j in Y_S; 0 otherwise.
* QKD loss (Eq. 4, the ``masked-kd`` objective of ``kd.objectives``):
  (1/|D_s|) sum_(x,y) CE(f_s(x), y) + alpha sum_{t in T_Q} <M, KL(p_t, p_s)>.
  Naive KD (Eq. 1, objective ``kd``) is the same with every teacher and M = 1.
  ``qkt-teacher-weight='mean'`` (a diagnostic, not the paper's) divides alpha by |T_Q|, so the
  kept teachers are averaged rather than summed and the pull of the distillation term does not
  grow with the number of teachers the filter keeps.
* QKT: Phase 1 minimises Eq. 4 over the whole model for E epochs (``kt-epochs``). Phase 2
  restores the head h_mu to its state before Phase 1 (head replacement), freezes the feature
  extractor g_nu (eval mode, its output computed once) and refines the head alone with Eq. 4
  for E epochs.
* QKT Light: Phase 1 is naive KD (Eq. 1, all teachers, all classes); filtering and masks only
  in Phase 2 (``kt-light-head-epochs`` epochs, 5 in the paper). This is the paper's Table 2
  variant, where each student runs Phase 1 on its own data.
* Selective weight masking (Appendix A.5, ``qkt-weight-mask-percent`` Z > 0, off by default):
  before Phase 2, the importance of each head weight for the student's own task is the root
  mean square over its training batches of the gradient of CE (the L2 norm of the per-batch
  gradients, scaled); the top Z% head entries are frozen at their values during Phase 2.

The temperature T (``kt-temperature``, 1 in the paper) scales logits in both KL terms, and the
term is multiplied by T^2 (Hinton et al., 2015); with T = 1 both are no-ops.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.utils import parametrize

from ..core.device import to_device_of
from ..evaluation.metrics import eval_scores
from ..kd.objectives import KDParams
from ..kd.teachers import filter_teachers, teacher_probabilities
from ..protocols.exchange import Transfer
from ..settings import Setting
from ..training.loops import minibatches, predict
from .one_shot import one_shot_protocol

PAPER = "Query-based Knowledge Transfer (QKT), ICLR 2025"
_NOISE_TAG = 0x5EED

# Transfer settings shared with the naive-KD baseline (``one_shot_baselines``).
TRANSFER_SETTINGS = (
    Setting(
        "kt-epochs",
        10,
        "KD, QKT: transfer epochs E (QKT: Phase 1 and Phase 2 each; QKT Light: Phase 1)",
        low=0,
    ),
    Setting("kt-alpha", 1.0, "KD, QKT: weight alpha of the distillation term", low=0),
    Setting(
        "kt-temperature",
        1.0,
        "KD, QKT: softmax temperature T of the distillation term (scaled by T²)",
        low=0,
        low_open=True,
    ),
)
SETTINGS = (
    Setting("kt-light-head-epochs", 5, "QKT Light: Phase 2 (head refinement) epochs", low=0),
    Setting("qkt-lambda", 1.5, "QKT: mask value lambda on query classes (Eq. 3)", low=0),
    Setting(
        "qkt-tau",
        0.01,
        "QKT: teacher filter threshold tau on the mean noise probability of a query class (Eq. 2)",
        low=0,
        high=1,
    ),
    Setting("qkt-noise-samples", 20, "QKT: B Gaussian-noise inputs for teacher filtering", low=1),
    Setting(
        "qkt-teacher-weight",
        "sum",
        "QKT: 'sum' over the kept teachers T_Q as Eq. 4, or 'mean' (alpha / |T_Q|, a diagnostic)",
        choices=("sum", "mean"),
    ),
    Setting(
        "qkt-weight-mask-percent",
        0.0,
        "QKT: Z, freeze the top Z % most important head weights in Phase 2 (Appendix A.5); 0 = off",
        low=0,
        high=100,
        high_open=True,
    ),
)


def class_mask(
    num_classes: int, query: Sequence[int], local_classes: Sequence[int], lam: float
) -> Tensor:
    """Eq. (3): lambda on query classes, 1 on the student's local classes, 0 elsewhere."""
    mask = torch.zeros(num_classes)
    mask[list(local_classes)] = 1.0
    mask[list(query)] = float(lam)  # a query class the student holds a few samples of: lambda
    return mask


# --- Phase 2 and Appendix A.5 --------------------------------------------------------------------


class _Frozen(nn.Module):
    """Parametrization holding the masked entries of a tensor at fixed values."""

    def __init__(self, mask: Tensor, value: Tensor) -> None:
        super().__init__()
        self.register_buffer("mask", mask)
        self.register_buffer("value", value.detach().clone())

    def forward(self, w: Tensor) -> Tensor:
        return torch.where(self.mask, self.value, w)


def head_importance(
    head: nn.Module, features: Tensor, y: Tensor, batch_size: int
) -> dict[str, Tensor]:
    """Appendix A.5: per-entry RMS over the student's batches of d CE / d weight."""
    squares = {n: torch.zeros_like(p) for n, p in head.named_parameters()}
    batches = 0
    for xb, yb in minibatches(features, y, batch_size):
        xb, yb = to_device_of(head, xb, yb)
        head.zero_grad()
        F.cross_entropy(head(xb), yb).backward()
        for n, p in head.named_parameters():
            squares[n] += p.grad.detach() ** 2
        batches += 1
    head.zero_grad()
    return {n: (s / max(batches, 1)).sqrt() for n, s in squares.items()}


def freeze_top_weights(head: nn.Module, importance: dict[str, Tensor], percent: float) -> list[str]:
    """Freeze the top ``percent`` % head entries by importance (parametrizations); returns the
    parameter names that got a parametrization (undo with ``unfreeze``)."""
    scores = torch.cat([importance[n].flatten() for n, _ in head.named_parameters()])
    k = round(percent / 100.0 * scores.numel())
    if k == 0:
        return []
    flat = torch.zeros(scores.numel(), dtype=torch.bool, device=scores.device)
    flat[torch.topk(scores, k).indices] = True
    names, offset = [], 0
    for name, p in list(head.named_parameters()):
        mask = flat[offset : offset + p.numel()].view_as(p)
        offset += p.numel()
        if mask.any():
            module_path, _, attr = name.rpartition(".")
            parametrize.register_parametrization(
                head.get_submodule(module_path), attr, _Frozen(mask, p)
            )
            names.append(name)
    return names


def unfreeze(head: nn.Module, names: list[str]) -> None:
    for name in names:
        module_path, _, attr = name.rpartition(".")
        parametrize.remove_parametrizations(
            head.get_submodule(module_path), attr, leave_parametrized=True
        )


def refine_head(
    job: Transfer, head_state: dict, teacher_probs: Tensor, params: KDParams, epochs: int
) -> float:
    """Phase 2: restore the head to ``head_state``, freeze the feature extractor, refine the
    head with the QKD loss (and A.5's weight masking when ``qkt-weight-mask-percent`` > 0)."""
    config, model = job.config, job.student
    model.head.load_state_dict(head_state)  # head replacement
    features = predict(model.features, job.client.x_train)  # frozen: eval mode, computed once
    frozen = []
    if config.qkt_weight_mask_percent > 0:
        importance = head_importance(model.head, features, job.client.y_train, config.batch_size)
        frozen = freeze_top_weights(model.head, importance, config.qkt_weight_mask_percent)
    loss = job.distill(model.head, features, teacher_probs, "masked-kd", params, epochs)
    unfreeze(model.head, frozen)
    return loss


# --- the two methods -------------------------------------------------------------------------------


def _prepare(job: Transfer):
    """Teachers' predictions on the transfer set (the student's data), T_Q and the mask."""
    config, data = job.config, job.client.data
    probs = teacher_probabilities(
        job.teachers, job.client.x_train, data.num_classes, config.kt_temperature
    )
    kept, _ = filter_teachers(
        job.teachers,
        job.query,
        data.input_shape,
        config.qkt_noise_samples,
        config.qkt_tau,
        job.generator(_NOISE_TAG),
    )
    mask = class_mask(data.num_classes, job.query, job.local_classes, config.qkt_lambda)
    return probs, kept, mask


def qkd_params(config, mask: Tensor, kept: Sequence[int]) -> KDParams:
    """Eq. 4's weight and temperature: alpha, or alpha / |T_Q| with
    ``qkt-teacher-weight='mean'`` (no teacher kept: nothing to divide, alpha)."""
    alpha = config.kt_alpha
    if config.qkt_teacher_weight == "mean" and len(kept) > 0:
        alpha = alpha / len(kept)
    return KDParams(alpha, config.kt_temperature, mask)


def naive_kd(job: Transfer, probs: Tensor) -> float:
    """Eq. (1) over the whole student model: CE + alpha * sum over every teacher of KL."""
    config = job.config
    params = KDParams(config.kt_alpha, config.kt_temperature)
    return job.distill(job.student, job.client.x_train, probs, "kd", params, config.kt_epochs)


def qkt_transfer(job: Transfer):
    """QKT: Phase 1 with Eq. 4 on the whole model, Phase 2 on the restored head."""
    config = job.config
    head_before = {k: v.detach().clone() for k, v in job.student.head.state_dict().items()}
    probs, kept, mask = _prepare(job)
    params = qkd_params(config, mask, kept)
    phase1 = job.distill(
        job.student, job.client.x_train, probs[kept], "masked-kd", params, config.kt_epochs
    )
    phase2 = refine_head(job, head_before, probs[kept], params, config.kt_epochs)
    return eval_scores(job.student), {
        "teachers-kept": len(kept),
        "phase1-loss": phase1,
        "train-loss": phase2,
    }


def qkt_light_transfer(job: Transfer):
    """QKT Light: naive KD in Phase 1, filtering and masks in Phase 2 only."""
    head_before = {k: v.detach().clone() for k, v in job.student.head.state_dict().items()}
    probs, kept, mask = _prepare(job)
    phase1 = naive_kd(job, probs)
    params = qkd_params(job.config, mask, kept)
    phase2 = refine_head(job, head_before, probs[kept], params, job.config.kt_light_head_epochs)
    return eval_scores(job.student), {
        "teachers-kept": len(kept),
        "phase1-loss": phase1,
        "train-loss": phase2,
    }


PROTOCOLS = (
    one_shot_protocol(
        "qkt",
        "one-shot query-based knowledge transfer: teachers filtered with Gaussian noise (Eq. 2),"
        " class-masked distillation on the whole model (Eqs. 3-4), then the old head restored and"
        " refined on the frozen feature extractor",
        PAPER,
        qkt_transfer,
        "teachers",
        (*TRANSFER_SETTINGS, *SETTINGS[1:]),
        kind="one-shot knowledge transfer",
        reproduction="qkt",
    ),
    one_shot_protocol(
        "qkt-light",
        "QKT with naive KD (all teachers, all classes) in Phase 1; filtering and masks only in the"
        " head refinement",
        PAPER,
        qkt_light_transfer,
        "teachers",
        (*TRANSFER_SETTINGS, *SETTINGS),
        kind="one-shot knowledge transfer",
        reproduction="qkt",
    ),
)
