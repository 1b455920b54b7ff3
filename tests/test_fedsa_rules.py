"""FedSA's selection and aggregation rules (``flowerbed.methods.fedsa.rules``) and the hint
objective with its translator (``flowerbed.kd``), against hand computations on tiny tensors."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from flowerbed.kd.loop import distill
from flowerbed.kd.objectives import KDBatch, KDParams, Objective, get_objective
from flowerbed.kd.translator import Translated, Translator
from flowerbed.methods.fedsa.rules import (
    aggregation_weights,
    draw_teachers,
    gradcam_maps,
    has_feature_map,
    input_grad_maps,
    selection_probabilities,
    similarities,
)
from flowerbed.models import Classifier, build_model

# --- saliency (Eq. 1) ------------------------------------------------------------------------


def linear_features_model(weight: torch.Tensor) -> Classifier:
    """features(x) = W x (no bias), head irrelevant."""
    features = nn.Linear(weight.shape[1], weight.shape[0], bias=False)
    features.weight.data = weight.clone()
    return Classifier(features, nn.Linear(weight.shape[0], 2))


def test_input_gradient_saliency_is_the_gradient_of_the_feature_norm_by_hand():
    # r = W x with W = [[1, 2], [0, 3]]; ||r|| has gradient W^T r / ||r||.
    # x = (1, 0): r = (1, 0), gradient = W^T (1, 0) = (1, 2); x = (0, 1): r = (2, 3), ||r|| =
    # sqrt(13), gradient = W^T (2, 3) / sqrt(13) = (2, 13) / sqrt(13); x = (-1, 0): r = (-1, 0),
    # gradient = -(1, 2), absolute value (1, 2).
    model = linear_features_model(torch.tensor([[1.0, 2.0], [0.0, 3.0]]))
    maps = input_grad_maps(model, torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]))
    expected = torch.tensor([[1.0, 2.0], [2 / math.sqrt(13), 13 / math.sqrt(13)], [1.0, 2.0]])
    torch.testing.assert_close(maps, expected)


def test_input_gradient_saliency_of_a_batch_equals_one_image_at_a_time():
    torch.manual_seed(0)
    model = build_model("cnn", (1, 8, 8), 10)
    probes = torch.randn(5, 1, 8, 8)
    together = input_grad_maps(model, probes)
    alone = torch.cat([input_grad_maps(model, probes[i : i + 1]) for i in range(5)])
    torch.testing.assert_close(together, alone)


class TwoPixelCNN(nn.Module):
    """features: conv 1x1 (weights a, b into 2 channels) on a 1x1x2 image; head: sum of the
    spatially averaged channels with weights (1, -1) for class 0 and (0, 0) for class 1."""

    def __init__(self) -> None:
        super().__init__()
        conv = nn.Conv2d(1, 2, kernel_size=1, bias=False)
        conv.weight.data = torch.tensor([[[[1.0]]], [[[2.0]]]])
        self.features = nn.Sequential(conv, nn.Flatten())
        self.head = nn.Linear(4, 2, bias=False)
        # flattened (channel, position): c0p0, c0p1, c1p0, c1p1
        self.head.weight.data = torch.tensor([[1.0, 1.0, -1.0, -1.0], [0.0, 0.0, 0.0, 0.0]])

    def forward(self, x):
        return self.head(self.features(x))


def test_gradcam_by_hand_on_a_two_pixel_image():
    # x = (3, 1) on a 1x2 image: A_0 = (3, 1), A_1 = (6, 2); logit_0 = 4 - 8 = -4 < 0 = logit_1
    # would pick class 1 (zero gradient), so take x = (-3, -1): A_0 = (-3, -1), A_1 = (-6, -2),
    # logit_0 = -4 + 8 = 4 > 0: class 0. d logit_0 / d A_0 = (1, 1), / d A_1 = (-1, -1): weights
    # w = (1, -1); cam = ReLU(A_0 - A_1) = ReLU((3, 1)) = (3, 1); min-max: (1, 0).
    maps = gradcam_maps(TwoPixelCNN(), torch.tensor([[[[-3.0, -1.0]]]]))
    torch.testing.assert_close(maps, torch.tensor([[[1.0, 0.0]]]))


def test_gradcam_of_a_constant_map_is_zero_not_a_division_by_zero():
    # class 1 has zero weights: every gradient is zero, the map constant, normalised to zeros
    maps = gradcam_maps(TwoPixelCNN(), torch.tensor([[[[3.0, 1.0]]]]))
    assert torch.equal(maps, torch.zeros(1, 1, 2))


def test_gradcam_needs_a_convolutional_feature_map():
    assert has_feature_map(build_model("cnn", (1, 8, 8), 10), (1, 8, 8))
    assert has_feature_map(build_model("resnet18", (3, 8, 8), 10), (3, 8, 8))
    assert not has_feature_map(build_model("mlp", (1, 8, 8), 10), (1, 8, 8))
    with pytest.raises(ValueError, match="convolutional feature map"):
        gradcam_maps(build_model("mlp", (1, 8, 8), 10), torch.zeros(2, 1, 8, 8))


def test_gradcam_maps_have_the_input_size_and_lie_in_zero_one():
    torch.manual_seed(1)
    maps = gradcam_maps(build_model("cnn", (1, 8, 8), 10), torch.randn(4, 1, 8, 8))
    assert maps.shape == (4, 8, 8)
    assert maps.min() >= 0 and maps.max() <= 1


# --- similarity and probabilities (Eqs. 2-3) ---------------------------------------------------


def test_similarities_by_hand():
    # target maps: (1, 0) and (0, 1); mean (0.5, 0.5).
    # teacher 0 maps: (1, 0) and (1, 0); mean (1, 0): averaged cos = 0.5 / (1 * sqrt(0.5)) =
    #   sqrt(0.5); per image: cos = 1 and 0 -> (1 + 0.5) / 2 = 0.75.
    # teacher 1 maps: (2, 0) and (0, 3): mean (1, 1.5): averaged cos = 1.25 / (sqrt(3.25) *
    #   sqrt(0.5)); per image: cos 1 and 1 -> 1.
    # teacher 2 maps: all zero: cosine 0 (no division by zero) -> averaged 0, per image 0.5.
    target = np.array([[1.0, 0.0], [0.0, 1.0]])
    teachers = np.array([[[1.0, 0.0], [1.0, 0.0]], [[2.0, 0.0], [0.0, 3.0]], [[0.0, 0.0]] * 2])
    both = similarities(teachers, target)
    np.testing.assert_allclose(
        both["averaged"], [math.sqrt(0.5), 1.25 / (math.sqrt(3.25) * math.sqrt(0.5)), 0.0]
    )
    np.testing.assert_allclose(both["per-image"], [0.75, 1.0, 0.5])


def test_probabilities_are_a_softmax_of_min_max_normalised_similarities_by_hand():
    # similarities (0.2, 0.6, 1.0) -> Qhat (0, 0.5, 1); tau = 0.5: exp(0, 1, 2) / sum
    p = selection_probabilities(np.array([0.2, 0.6, 1.0]), temperature=0.5)
    e = np.exp([0.0, 1.0, 2.0])
    np.testing.assert_allclose(p, e / e.sum())
    # tau = 1 (the authors' code): the best teacher is e times as likely as the worst
    p1 = selection_probabilities(np.array([0.2, 0.6, 1.0]), temperature=1.0)
    assert p1[2] / p1[0] == pytest.approx(math.e)
    # equal similarities, or a huge temperature (the printed Eq. 3): uniform
    np.testing.assert_allclose(selection_probabilities(np.full(4, 0.3), 1.0), np.full(4, 0.25))
    np.testing.assert_allclose(
        selection_probabilities(np.array([0.2, 0.6, 1.0]), 1e9), np.full(3, 1 / 3)
    )


# --- the draw and the weights ------------------------------------------------------------------


def test_saliency_draws_are_seeded_with_replacement_and_follow_the_probabilities():
    p = np.array([0.7, 0.2, 0.1, 0.0])
    sim = np.zeros(4)
    first = draw_teachers("saliency", 3, p, sim, seed=5)
    assert np.array_equal(first, draw_teachers("saliency", 3, p, sim, seed=5))
    # with replacement: 6 draws from the 3 possible teachers repeat one; teacher 3 never appears
    assert len(draw_teachers("saliency", 6, p, sim, seed=1)) == 6
    counts = np.bincount(
        np.concatenate([draw_teachers("saliency", 3, p, sim, seed=s) for s in range(2000)]),
        minlength=4,
    )
    np.testing.assert_allclose(counts / counts.sum(), p, atol=0.02)
    assert counts[3] == 0
    # replacement: a single teacher with all the mass is drawn K times
    assert draw_teachers("saliency", 3, np.array([1.0, 0.0]), np.zeros(2), 0).tolist() == [0, 0, 0]


def test_random_draws_ignore_the_probabilities():
    p = np.array([1.0, 0.0, 0.0])
    counts = np.bincount(
        np.concatenate([draw_teachers("random", 3, p, np.zeros(3), seed=s) for s in range(1000)]),
        minlength=3,
    )
    assert counts.min() > 800  # about 1000 each of 3000 draws


def test_top_least_and_all_by_hand():
    sim = np.array([0.5, 0.9, 0.1, 0.9, 0.3])
    p = np.full(5, 0.2)
    assert draw_teachers("top-k", 2, p, sim, 0).tolist() == [1, 3]
    assert draw_teachers("least-k", 2, p, sim, 0).tolist() == [2, 4]
    assert draw_teachers("top-k", 3, p, sim, 0).tolist() == [0, 1, 3]
    assert draw_teachers("all", 2, p, sim, 0).tolist() == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="draws no teachers"):
        draw_teachers("scratch", 2, p, sim, 0)


def test_aggregation_weights_by_hand():
    m = np.array([2, 1])  # teacher a drawn twice, b once: K = 3
    p = np.array([0.6, 0.2])
    np.testing.assert_allclose(aggregation_weights(m, p, "uniform"), [2 / 3, 1 / 3])
    np.testing.assert_allclose(aggregation_weights(m, p, "positive"), [1.2 / 1.4, 0.2 / 1.4])
    np.testing.assert_allclose(aggregation_weights(m, p, "negative"), [0.8 / 1.6, 0.8 / 1.6])
    # one teacher with p = 1 and negative weighting: zero total, uniform instead
    np.testing.assert_allclose(aggregation_weights(np.array([3]), np.array([1.0]), "negative"), [1])
    with pytest.raises(ValueError, match="valid: uniform"):
        aggregation_weights(m, p, "median")


# --- the hint objective and the translator -----------------------------------------------------


def test_hint_loss_is_the_mean_squared_difference_by_hand():
    hint = torch.tensor([[1.0, 2.0], [0.0, 0.0]])
    teacher = torch.tensor([[0.0, 0.0], [1.0, 3.0]])
    batch = KDBatch(
        logits=torch.zeros(2, 3),
        labels=None,
        teacher_probs=None,
        taps={"hint": hint},
        teacher_taps={"features": teacher},
    )
    # (1 + 4 + 1 + 9) / 4
    assert get_objective("hint").loss(batch, KDParams()).item() == pytest.approx(15 / 4)


def test_translator_blocks_by_hand_in_eval_mode():
    translator = Translator(2, 3).eval()  # fresh running stats: mean 0, var 1
    for linear in translator.linears:
        nn.init.eye_(linear.weight)
        nn.init.zeros_(linear.bias)
    x = torch.tensor([[2.0, -1.0]])
    scale = 1 / math.sqrt(1 + 1e-5)  # BatchNorm's eps
    # block 1 (2 -> 2): identity, BN, LeakyReLU: (2 s, -0.1 s); block 2 (2 -> 3): (2 s^2,
    # -0.01 s^2, 0) (a negative value shrinks by 0.1 at every LeakyReLU); block 3 (3 -> 3).
    expected = torch.tensor([[2 * scale**3, -0.001 * scale**3, 0.0]])
    torch.testing.assert_close(translator(x), expected)


def test_translator_accepts_a_batch_of_one_sample_in_training():
    translator = Translator(4, 3).train()
    assert translator(torch.randn(1, 4)).shape == (1, 3)
    assert translator(torch.randn(5, 4)).shape == (5, 3)


def test_hint_distillation_never_reads_labels_and_trains_student_and_translator():
    torch.manual_seed(0)
    student = build_model("mlp", (4,), 3, config=None)
    pair = Translated(student, Translator(64, 5))
    before = {k: v.clone() for k, v in pair.state_dict().items()}
    x = torch.randn(10, 4)
    seen = []

    hint = get_objective("hint")

    def spy(batch, params):
        seen.append(batch.labels)
        return hint.terms(batch, params)

    loss = distill(
        pair,
        x,
        None,
        None,
        Objective("spy", spy, hint.weights, taps=("hint",)),
        KDParams(),
        epochs=2,
        batch_size=4,
        optimizer=torch.optim.Adam(pair.parameters(), lr=1e-2),
        generator=torch.Generator().manual_seed(0),
        teacher_taps={"features": torch.randn(10, 5)},
    ).mean_loss
    assert math.isfinite(loss)
    assert seen and all(labels is None for labels in seen)
    after = pair.state_dict()
    assert not torch.equal(before["student.features.1.weight"], after["student.features.1.weight"])
    assert not torch.equal(
        before["translator.linears.0.weight"], after["translator.linears.0.weight"]
    )
    # the hint loss gives the student's head no gradient: it is unchanged
    assert torch.equal(before["student.head.weight"], after["student.head.weight"])
