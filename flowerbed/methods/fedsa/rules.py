"""FedSA's knowledge selection and aggregation rules, as pure functions (see ``protocol``).

* saliency maps (Eq. 1): ``input_grad_maps`` (the paper: |d ||r(x)|| / dx| with r the model's
  feature vector) and ``gradcam_maps`` (the authors' code: Grad-CAM on the last convolutional
  feature map, for the model's own arg-max class);
* similarity of a teacher's maps to the target's (Eq. 2): ``averaged`` (the paper: cosine of
  the maps averaged over the probe images) or ``per-image`` (the code: the mean over images of
  0.5 + 0.5 cos);
* probabilities (Eq. 3 as the code computes it): min-max normalised similarities, then a
  softmax with a temperature;
* draws (``SELECTION_RULES``), multiplicities and aggregation weights (Table 2's weightings),
  and the weighted average of the returned students (Eq. 5).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ...core.device import device_of, to_device_of

SALIENCY_METHODS = ("input-grad", "gradcam")
SIMILARITIES = ("averaged", "per-image")
# saliency: K draws with replacement by p; random: K uniform draws with replacement; fixed: the
# first saliency draw, kept; top-k / least-k: the K most / least similar teachers; all: every
# teacher once per round (FedAvg+); scratch: no teacher (the target set only).
SELECTION_RULES = ("saliency", "random", "fixed", "top-k", "least-k", "all", "scratch")
WEIGHTINGS = ("uniform", "positive", "negative")


# --- saliency (Eq. 1) ------------------------------------------------------------------------


def input_grad_maps(model: nn.Module, probes: Tensor) -> Tensor:
    """a_j = |d ||features(x_j)||_2 / d x_j| for every probe x_j: maps of the input's shape.

    One forward and one backward pass for the whole batch: in eval mode the samples are
    independent, so the gradient of sum_j ||r(x_j)|| with respect to x_j is that of ||r(x_j)||.
    """
    model.eval()
    x = probes.detach().clone().requires_grad_(True)
    norms = model.features(x).flatten(1).norm(dim=1)
    (grad,) = torch.autograd.grad(norms.sum(), x)
    return grad.abs()


def last_feature_map(model: nn.Module, x: Tensor) -> tuple[Tensor | None, Tensor]:
    """The output of the last module of ``model.features`` that yields a 4-D map (B, C, h, w),
    kept in the graph, and the model's logits; (None, logits) when there is none."""
    maps: list[Tensor] = []
    hooks = [
        module.register_forward_hook(
            lambda _m, _i, out: (
                maps.append(out) if torch.is_tensor(out) and out.dim() == 4 else None
            )
        )
        for module in model.features.modules()
        if not list(module.children())  # leaves only: each output recorded once
    ]
    try:
        logits = model(x)
    finally:
        for hook in hooks:
            hook.remove()
    return (maps[-1] if maps else None), logits


def has_feature_map(model: nn.Module, input_shape: tuple[int, ...]) -> bool:
    """Whether Grad-CAM applies: ``model.features`` produces a convolutional feature map."""
    model.eval()
    with torch.no_grad():
        feature_map, _ = last_feature_map(
            model, torch.zeros(2, *input_shape, device=device_of(model))
        )
    return feature_map is not None


def gradcam_maps(model: nn.Module, probes: Tensor) -> Tensor:
    """Grad-CAM (Selvaraju et al., 2017) per probe, for the model's arg-max class c:
    w_k = mean over positions of d logit_c / d A_k, cam = ReLU(sum_k w_k A_k), upsampled
    bilinearly to the input's height and width, min-max normalised per image (a constant map
    becomes zeros: the authors' code divided by zero there). Returns (M, H, W)."""
    model.eval()
    x = probes.detach()
    feature_map, logits = last_feature_map(model, x)
    if feature_map is None:
        raise ValueError("Grad-CAM needs a convolutional feature map; this model has none")
    chosen = logits.gather(1, logits.argmax(dim=1, keepdim=True)).sum()
    (grad,) = torch.autograd.grad(chosen, feature_map)
    weights = grad.mean(dim=(2, 3), keepdim=True)
    cam = F.relu((weights * feature_map).sum(dim=1, keepdim=True)).detach()
    cam = F.interpolate(cam, size=tuple(x.shape[-2:]), mode="bilinear", align_corners=False)
    cam = cam.flatten(1)
    low, high = cam.min(dim=1, keepdim=True).values, cam.max(dim=1, keepdim=True).values
    span = high - low
    cam = torch.where(span > 0, (cam - low) / span.clamp_min(1e-12), torch.zeros_like(cam))
    return cam.reshape(len(x), *x.shape[-2:])


def saliency_maps(model: nn.Module, probes: Tensor, method: str) -> Tensor:
    """The ``method``'s maps of ``probes``, computed on the model's device, on the host."""
    probes = to_device_of(model, probes)
    if method == "input-grad":
        return input_grad_maps(model, probes).cpu()
    if method == "gradcam":
        return gradcam_maps(model, probes).cpu()
    raise ValueError(f"unknown saliency method {method!r}; valid: {', '.join(SALIENCY_METHODS)}")


# --- similarity and probabilities (Eqs. 2-3) -------------------------------------------------


def _cosine(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Row-wise cosine similarity; 0 where a row is all zeros."""
    norms = np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1)
    dots = np.sum(a * b, axis=-1)
    return np.divide(dots, norms, out=np.zeros_like(dots, dtype=np.float64), where=norms > 0)


def similarities(teacher_maps: np.ndarray, target_maps: np.ndarray) -> dict[str, np.ndarray]:
    """Both similarities of every teacher's maps to the target's.

    ``teacher_maps``: (N, M, ...) per teacher and probe image; ``target_maps``: (M, ...).
    ``averaged``: cos(A_n, A_T) with A = the mean map over the M images (the paper);
    ``per-image``: (1/M) sum_j (0.5 + 0.5 cos(a_{n,j}, a_{T,j})) (the code). Returns (N,) each.
    """
    n, m = teacher_maps.shape[:2]
    teachers = teacher_maps.reshape(n, m, -1).astype(np.float64)
    target = target_maps.reshape(m, -1).astype(np.float64)
    return {
        "averaged": _cosine(teachers.mean(axis=1), target.mean(axis=0)[None]),
        "per-image": (0.5 + 0.5 * _cosine(teachers, target[None])).mean(axis=1),
    }


def selection_probabilities(similarity: np.ndarray, temperature: float) -> np.ndarray:
    """p_n = softmax(Qhat / tau)_n with Qhat the similarities min-max normalised to [0, 1]
    over the teachers (all equal: uniform). tau = 1 is the authors' code; Eq. 3 as printed
    (Q = cos / M with M probe images) is uniform to two decimals, the limit tau -> infinity."""
    q = np.asarray(similarity, dtype=np.float64)
    span = q.max() - q.min()
    q_hat = (q - q.min()) / span if span > 0 else np.zeros_like(q)
    logits = q_hat / temperature
    weights = np.exp(logits - logits.max())
    return weights / weights.sum()


# --- the draw and the weights ----------------------------------------------------------------


def draw_teachers(
    rule: str, num_selected: int, probabilities: np.ndarray, similarity: np.ndarray, seed: int
) -> np.ndarray:
    """Indices (into the N candidates) of one selection: a multiset of ``num_selected`` draws
    for ``saliency``/``fixed`` (by ``probabilities``) and ``random`` (uniform), both with
    replacement; the K most (``top-k``) or least (``least-k``) similar, ties by index; every
    candidate once for ``all``."""
    n = len(probabilities)
    rng = np.random.default_rng(seed)
    if rule in ("saliency", "fixed"):
        return np.sort(rng.choice(n, size=num_selected, replace=True, p=probabilities))
    if rule == "random":
        return np.sort(rng.choice(n, size=num_selected, replace=True))
    if rule == "top-k":
        return np.sort(np.argsort(-np.asarray(similarity), kind="stable")[:num_selected])
    if rule == "least-k":
        return np.sort(np.argsort(np.asarray(similarity), kind="stable")[:num_selected])
    if rule == "all":
        return np.arange(n)
    raise ValueError(f"rule {rule!r} draws no teachers; valid: {', '.join(SELECTION_RULES[:-1])}")


def aggregation_weights(
    multiplicities: np.ndarray, probabilities: np.ndarray, weighting: str
) -> np.ndarray:
    """Weights of the distinct selected teachers (summing to 1): ``uniform`` m_n / K (Eq. 5,
    duplicates count m_n times); ``positive`` proportional to m_n p_n; ``negative`` to
    m_n (1 - p_n) (Table 2's weightings; the paper gives no formula). A zero total (one teacher
    with p = 1, negative weighting) falls back to uniform."""
    m = np.asarray(multiplicities, dtype=np.float64)
    p = np.asarray(probabilities, dtype=np.float64)
    if weighting == "positive":
        raw = m * p
    elif weighting == "negative":
        raw = m * (1.0 - p)
    elif weighting == "uniform":
        raw = m
    else:
        raise ValueError(f"unknown weighting {weighting!r}; valid: {', '.join(WEIGHTINGS)}")
    return raw / raw.sum() if raw.sum() > 0 else m / m.sum()
