"""The distillation library (``flowerbed.kd``): objectives against hand-computed values, the
registry, the one loop (sample-index batching, the student's named taps, teacher taps), and the
noise filter of the QKT paper's Eq. (2) with tiny trained teachers."""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from flowerbed.kd.loop import distill
from flowerbed.kd.objectives import (
    OBJECTIVES,
    KDBatch,
    KDParams,
    distillation_term,
    get_objective,
    register,
)
from flowerbed.kd.teachers import filter_teachers
from flowerbed.models import Classifier

LN2 = math.log(2.0)


# --- objectives ----------------------------------------------------------------------------


def test_masked_distillation_term_by_hand():
    # student p_s = (1/2, 1/4, 1/4); teacher 1 p_t = (1/4, 1/4, 1/2); teacher 2 equals the student.
    student_logits = torch.log(torch.tensor([[0.5, 0.25, 0.25]]))
    teachers = torch.tensor([[[0.25, 0.25, 0.5]], [[0.5, 0.25, 0.25]]])  # (T=2, B=1, C=3)
    # element-wise KL of teacher 1: p_t log(p_t / p_s) = (-ln2 / 4, 0, ln2 / 2); teacher 2: 0
    assert distillation_term(student_logits, teachers).item() == pytest.approx(LN2 / 4)  # Eq. (1)
    mask = torch.tensor([1.0, 0.0, 1.5])
    assert distillation_term(student_logits, teachers, mask).item() == pytest.approx(
        -LN2 / 4 + 1.5 * LN2 / 2
    )
    only_first = torch.tensor([1.0, 0.0, 0.0])
    assert distillation_term(student_logits, teachers, only_first).item() == pytest.approx(-LN2 / 4)
    # the batch mean: a second sample where the student equals teacher 1 adds 0
    logits2 = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]]))
    teachers2 = torch.tensor([[[0.25, 0.25, 0.5], [0.25, 0.25, 0.5]]])
    assert distillation_term(logits2, teachers2, mask).item() == pytest.approx(
        (-LN2 / 4 + 0.75 * LN2) / 2
    )
    # no teacher kept: no distillation term
    assert distillation_term(student_logits, torch.zeros(0, 1, 3)).item() == 0.0


def test_masked_kd_is_cross_entropy_plus_alpha_times_the_masked_term():
    torch.manual_seed(0)
    head = torch.nn.Linear(2, 3)
    inputs = torch.randn(4, 2)
    probs = torch.softmax(torch.randn(2, 4, 3), dim=2)
    y = torch.tensor([0, 2, 1, 0])
    mask = torch.tensor([1.0, 1.5, 0.0])
    idx = torch.tensor([3, 1])
    logits = head(inputs[idx])
    batch = KDBatch(logits=logits, labels=y[idx], teacher_probs=probs[:, idx])
    loss = get_objective("masked-kd").loss(batch, KDParams(alpha=0.7, mask=mask))
    log_ps = F.log_softmax(logits, dim=1)
    by_hand = F.cross_entropy(logits, y[idx]) + 0.7 * sum(
        (mask * probs[t, idx] * (probs[t, idx].log() - log_ps)).sum(dim=1).mean() for t in range(2)
    )
    assert loss.item() == pytest.approx(by_hand.item(), rel=1e-6)
    # naive KD (Eq. 1) is the same with every class weighted 1
    naive = get_objective("kd").loss(batch, KDParams(alpha=0.7))
    unmasked = get_objective("masked-kd").loss(batch, KDParams(alpha=0.7, mask=torch.ones(3)))
    assert naive.item() == pytest.approx(unmasked.item(), rel=1e-6)


def test_unknown_objective_names_the_choices():
    with pytest.raises(
        ValueError, match="unknown distillation objective 'fitnets'; valid choices: kd"
    ):
        get_objective("fitnets")
    with pytest.raises(ValueError, match="registered twice"):
        register("kd", lambda params: {"x": 1.0})(lambda batch, params: {"x": batch.logits.sum()})


# --- the loop ------------------------------------------------------------------------------


def test_distill_batches_by_index_and_passes_the_students_feature_tap():
    """A toy feature objective (MSE between the student's ``features`` tap and the teacher's
    precomputed features) sees, batch by batch, the rows of the same samples on both sides,
    and one SGD step on it moves the student exactly as the hand-computed gradient says."""
    torch.manual_seed(0)
    student = Classifier(nn.Linear(3, 2, bias=False), nn.Linear(2, 4))
    inputs = torch.randn(6, 3)
    labels = torch.tensor([0, 1, 2, 3, 0, 1])
    teacher_features = torch.randn(6, 2)
    seen = []

    def feature_mse(batch, params):
        seen.append((batch.taps["features"].detach().clone(), batch.teacher_taps["features"]))
        return {"mse": (batch.taps["features"] - batch.teacher_taps["features"]).pow(2).mean()}

    register("toy-fitnets", lambda params: {"mse": params.alpha}, taps=("features",))(feature_mse)
    try:
        weight = student.features.weight.detach().clone()
        loss = distill(
            student,
            inputs,
            labels,
            torch.zeros(0, 6, 4),
            "toy-fitnets",
            KDParams(alpha=2.0),
            epochs=1,
            batch_size=6,
            optimizer=torch.optim.SGD(student.parameters(), lr=0.1),
            generator=torch.Generator().manual_seed(1),
            teacher_taps={"features": teacher_features},
        ).mean_loss
    finally:
        OBJECTIVES.pop("toy-fitnets", None)
    ((features, targets),) = seen
    order = torch.randperm(6, generator=torch.Generator().manual_seed(1))  # the loop's shuffle
    assert torch.equal(targets, teacher_features[order])
    assert torch.allclose(features, inputs[order] @ weight.T)
    # by hand: d/dW of 2 * mean((x W^T - t)^2) = 2 * 2 (x W^T - t)^T x / (6 * 2)
    residual = inputs @ weight.T - teacher_features
    grad = 4 * residual.T @ inputs / 12
    assert loss == pytest.approx((2.0 * residual.pow(2).mean()).item(), rel=1e-5)
    assert torch.allclose(student.features.weight, weight - 0.1 * grad, atol=1e-6)


def test_classifier_taps_are_features_and_logits_of_one_forward_pass():
    torch.manual_seed(0)
    model = Classifier(nn.Sequential(nn.Linear(3, 5), nn.ReLU()), nn.Linear(5, 2))
    x = torch.randn(4, 3)
    taps = model.taps(x)
    assert torch.equal(taps["features"], model.features(x))
    assert torch.equal(taps["logits"], model(x))


# --- teachers (QKT's Eq. 2) ----------------------------------------------------------------


def test_filtering_keeps_the_teacher_that_knows_the_query_class_and_drops_the_other(fl):
    knows, never_saw = fl.trained_mlp([0, 1]), fl.trained_mlp([2, 3])
    kept, mean = filter_teachers(
        [never_saw, knows],
        [1],
        (6,),
        num_noise=20,
        tau=0.01,
        generator=torch.Generator().manual_seed(0),
    )
    assert kept == [1]
    assert mean.shape == (2, 4) and mean[1, 1] >= 0.01 > mean[0, 1]
    assert torch.allclose(mean.sum(dim=1), torch.ones(2))
    # a query with a class each knows keeps both; a threshold above every mean keeps none
    both, _ = filter_teachers(
        [never_saw, knows], [1, 3], (6,), 20, 0.01, torch.Generator().manual_seed(0)
    )
    assert both == [0, 1]
    none, _ = filter_teachers(
        [never_saw, knows], [1], (6,), 20, 1.01, torch.Generator().manual_seed(0)
    )
    assert none == []


def test_filtering_puts_teachers_in_eval_mode(fl):
    teacher = fl.trained_mlp([0, 1]).train()
    filter_teachers([teacher], [1], (6,), 20, 0.01, torch.Generator().manual_seed(0))
    assert not teacher.training
