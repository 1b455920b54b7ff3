"""QKT and QKT Light ("Query-based Knowledge Transfer", ICLR 2025), run in one transfer
round (``one_shot.py``).

A student s with training data D_s, query classes Q and local classes Y_S receives the other
clients' models (teachers t, used only through their predictions p_t = softmax(f_t(x) / T)).

* Teacher filtering (Eq. 2): B inputs x' ~ N(0, 1) shaped like the model input; with every
  teacher in eval mode, keep T_Q = {t : (1/B) sum_x' f_t(x')[q] >= tau for some q in Q}.
* Class mask (Eq. 3): M[j] = lambda if j in Q; 1 if j in Y_S; 0 otherwise.
* QKD loss (Eq. 4): (1/|D_s|) sum_(x,y) CE(f_s(x), y) + alpha sum_{t in T_Q} <M, KL(p_t, p_s)>
  with KL the element-wise vector KL_j = p_t[j] (log p_t[j] - log p_s[j]) (it differs from the
  paper's "p_t log p_s" by the teachers' entropy, a constant: same gradients, and >= 0).
  Naive KD (Eq. 1) is the same with every teacher and M = 1.
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

from ..training import minibatches, predict
from .one_shot import Transfer, eval_scores, one_shot_spec

PAPER = "Query-based Knowledge Transfer (QKT), ICLR 2025"
_NOISE_TAG = 0x5EED


# --- Eqs. (1)-(4) ----------------------------------------------------------------------------------


def class_mask(
    num_classes: int, query: Sequence[int], local_classes: Sequence[int], lam: float
) -> Tensor:
    """Eq. (3): lambda on query classes, 1 on the student's local classes, 0 elsewhere."""
    mask = torch.zeros(num_classes)
    mask[list(local_classes)] = 1.0
    mask[list(query)] = float(lam)  # a query class the student holds a few samples of: lambda
    return mask


def distillation_term(
    student_logits: Tensor,
    teacher_probs: Tensor,
    mask: Tensor | None = None,
    temperature: float = 1.0,
) -> Tensor:
    """sum_t <M, KL(p_t, p_s)>, averaged over the batch (M = 1 when ``mask`` is None: Eq. 1).

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


def transfer_loss(
    inputs: Tensor, teacher_probs: Tensor, alpha: float, mask: Tensor | None, temperature: float
):
    """A ``train_local`` loss over *sample indices*: CE + alpha * distillation term (Eq. 1/4).

    ``train_local`` shuffles and batches its ``x``; passing ``torch.arange(N)`` as ``x`` lets the
    batch index both ``inputs`` and the teachers' precomputed predictions (teachers are fixed).
    """

    def loss_fn(module: nn.Module, idx: Tensor, y: Tensor) -> Tensor:
        logits = module(inputs[idx])
        return F.cross_entropy(logits, y) + alpha * distillation_term(
            logits, teacher_probs[:, idx], mask, temperature
        )

    return loss_fn


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
    """Eq. (2): indices of teachers whose mean probability on B Gaussian inputs reaches tau for
    some query class, and the (T, C) mean probabilities."""
    noise = torch.randn((num_noise, *input_shape), generator=generator)
    if not teachers:
        return [], torch.zeros(0, 0)
    mean = torch.stack([F.softmax(predict(t, noise), dim=1).mean(dim=0) for t in teachers])
    kept = [i for i in range(len(teachers)) if bool((mean[i, list(query)] >= tau).any())]
    return kept, mean


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
    flat = torch.zeros(scores.numel(), dtype=torch.bool)
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
    job: Transfer, head_state: dict, teacher_probs: Tensor, mask: Tensor | None, epochs: int
) -> float:
    """Phase 2: restore the head to ``head_state``, freeze the feature extractor, refine the
    head with the QKD loss (and A.5's weight masking when ``qkt-weight-mask-percent`` > 0)."""
    s, model = job.settings, job.student
    model.head.load_state_dict(head_state)  # head replacement
    features = predict(model.features, job.client.x_train)  # frozen: eval mode, computed once
    y = job.client.y_train
    frozen = []
    if s.weight_mask_percent > 0:
        importance = head_importance(model.head, features, y, job.client.config.batch_size)
        frozen = freeze_top_weights(model.head, importance, s.weight_mask_percent)
    loss = job.train(
        model.head,
        torch.arange(len(y)),
        y,
        epochs,
        transfer_loss(features, teacher_probs, s.alpha, mask, s.temperature),
    )
    unfreeze(model.head, frozen)
    return loss


# --- the two methods -------------------------------------------------------------------------------


def _prepare(job: Transfer):
    """Teachers' predictions on the transfer set (the student's data), T_Q and the mask."""
    s, data = job.settings, job.client.data
    probs = teacher_probabilities(job.teachers, job.client.x_train, data.num_classes, s.temperature)
    kept, _ = filter_teachers(
        job.teachers, job.query, data.input_shape, s.noise_samples, s.tau, job.generator(_NOISE_TAG)
    )
    mask = class_mask(data.num_classes, job.query, job.local_classes, s.lam)
    return probs, kept, mask


def naive_kd(job: Transfer, probs: Tensor) -> float:
    """Eq. (1) over the whole student model: CE + alpha * sum over every teacher of KL."""
    s, y = job.settings, job.client.y_train
    return job.train(
        job.student,
        torch.arange(len(y)),
        y,
        s.epochs,
        transfer_loss(job.client.x_train, probs, s.alpha, None, s.temperature),
    )


def qkt_transfer(job: Transfer):
    """QKT: Phase 1 with Eq. 4 on the whole model, Phase 2 on the restored head."""
    s, y = job.settings, job.client.y_train
    head_before = {k: v.detach().clone() for k, v in job.student.head.state_dict().items()}
    probs, kept, mask = _prepare(job)
    phase1 = job.train(
        job.student,
        torch.arange(len(y)),
        y,
        s.epochs,
        transfer_loss(job.client.x_train, probs[kept], s.alpha, mask, s.temperature),
    )
    phase2 = refine_head(job, head_before, probs[kept], mask, s.epochs)
    return eval_scores(job.student), {
        "teachers-kept": len(kept),
        "phase1-loss": phase1,
        "train-loss": phase2,
    }


def qkt_light_transfer(job: Transfer):
    """QKT Light: naive KD in Phase 1, filtering and masks in Phase 2 only."""
    s = job.settings
    head_before = {k: v.detach().clone() for k, v in job.student.head.state_dict().items()}
    probs, kept, mask = _prepare(job)
    phase1 = naive_kd(job, probs)
    phase2 = refine_head(job, head_before, probs[kept], mask, s.light_head_epochs)
    return eval_scores(job.student), {
        "teachers-kept": len(kept),
        "phase1-loss": phase1,
        "train-loss": phase2,
    }


_KEYS = (
    "kt-query",
    "kt-query-threshold",
    "kt-max-query-classes",
    "kt-local-max-epochs",
    "kt-local-patience",
    "kt-epochs",
    "kt-alpha",
    "kt-temperature",
    "qkt-lambda",
    "qkt-tau",
    "qkt-noise-samples",
    "qkt-weight-mask-percent",
    "kt-client-models",
)

SPECS = (
    one_shot_spec(
        "qkt",
        "query-based knowledge transfer: filtered, class-masked distillation, then"
        " head refinement on the frozen feature extractor (one round)",
        PAPER,
        qkt_transfer,
        "teachers",
        _KEYS,
    ),
    one_shot_spec(
        "qkt-light",
        "QKT with naive KD in Phase 1; filtering and masks only in the head refinement (one round)",
        PAPER,
        qkt_light_transfer,
        "teachers",
        _KEYS + ("kt-light-head-epochs",),
    ),
)
