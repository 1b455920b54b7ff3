"""The benchmark's ten distillation objectives and Basic KD (``flowerbed.kd.classic_objectives``)
against hand computations on tiny tensors; their weights, modes and label freedom; the loop's
withholding of labels; Born-Again generations and the student's size.

Every expected value is computed here, independently of the code under test: closed forms on
numbers chosen to be simple (logits that are logs of nice probabilities), written out in the
comments, or plain-Python loops over the published formulas (``softmax``, ``kl``, ``huber``
below). Hand tests use float64 tensors so that tolerances can be tight.
"""

import math
from dataclasses import replace

import pytest
import torch
from torch import nn

from flowerbed.kd.classic_objectives import NAMES
from flowerbed.kd.loop import WithAdapters, distill
from flowerbed.kd.objectives import MODES, KDBatch, KDParams, Objective, get_objective
from flowerbed.kd.student import (
    StudentResult,
    StudentTraining,
    cpu_latency_ms,
    distill_student,
)
from flowerbed.models import Classifier, build_model
from flowerbed.models.classifier import size_bytes

LN2, LN3 = math.log(2.0), math.log(3.0)
SQRT2 = math.sqrt(2.0)
# the benchmark's shared parameters (Table A3): a = b = 0.5, T = 2
BENCH = KDParams(alpha=0.5, beta=0.5, temperature=2.0)
ELEVEN = (
    "vanilla",
    "self",
    "logit-mse",
    "cosine",
    "feature",
    "attention",
    "sp",
    "rkd",
    "crd",
    "dkd",
    "basic",
)


def mode(params: KDParams, name: str, **changes) -> KDParams:
    return replace(params, mode=name, **changes)


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


# --- plain-Python references -----------------------------------------------------------------


def softmax(z: list[float]) -> list[float]:
    m = max(z)
    e = [math.exp(v - m) for v in z]
    return [v / sum(e) for v in e]


def kl(p: list[float], q: list[float]) -> float:
    """KL(p || q) = sum_j p_j log(p_j / q_j)."""
    return sum(pj * math.log(pj / qj) for pj, qj in zip(p, q) if pj > 0)


def huber(x: float) -> float:
    """Smooth L1 with beta 1."""
    return 0.5 * x * x if abs(x) < 1 else abs(x) - 0.5


def norm(v: list[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


def unit(v: list[float]) -> list[float]:
    n = norm(v)
    return [x / n for x in v] if n > 0 else [0.0] * len(v)


def dot(u: list[float], v: list[float]) -> float:
    return sum(a * b for a, b in zip(u, v))


# --- the shared tiny batch -------------------------------------------------------------------
#
# At T = 2, logits 2 log(p) give softmax(z / 2) = p. Sample 1: student p_s = (1/2, 1/4, 1/4),
# teacher p_t = (1/4, 1/4, 1/2); sample 2: both (1/4, 1/4, 1/2).
# KL_1 = 1/4 ln(1/2) + 0 + 1/2 ln 2 = ln2 / 4, so T^2 KL_1 = ln 2; KL_2 = 0: the term = ln2 / 2.
# At T = 1 the student's softmax(2 log p_s) = p_s^2 / sum p_s^2: sample 1 (1/4, 1/16, 1/16) /
# (3/8) = (2/3, 1/6, 1/6), label 0: CE = ln(3/2); sample 2 (1/6, 1/6, 2/3), label 1: CE = ln 6;
# the batch CE = (ln(3/2) + ln 6) / 2 = ln(9) / 2 = ln 3.
P_S = [[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]]
P_T = [[0.25, 0.25, 0.5], [0.25, 0.25, 0.5]]
STUDENT_LOGITS = 2 * t(P_S).log()
TEACHER_LOGITS = 2 * t(P_T).log()
LABELS = torch.tensor([0, 1])
KL_T2 = LN2 / 2  # T^2 KL(p_t || p_s), batch mean
CE = LN3


def logit_batch(labels=LABELS, **extra) -> KDBatch:
    return KDBatch(
        logits=STUDENT_LOGITS,
        labels=labels,
        teacher_probs=None,
        teacher_taps={"logits": TEACHER_LOGITS, **extra.pop("teacher_taps", {})},
        **extra,
    )


# --- 1, 2, 11, 12: the soft-target KL objectives -------------------------------------------------


def test_vanilla_is_one_minus_a_ce_plus_a_t_squared_kl_by_hand():
    vanilla = get_objective("vanilla")
    assert vanilla.terms(logit_batch(), BENCH)["kl"].item() == pytest.approx(KL_T2, rel=1e-12)
    assert vanilla.weights(BENCH) == {"ce": 0.5, "kl": 0.5}
    assert vanilla.weights(mode(BENCH, "no-ce")) == {"kl": 1.0}
    assert vanilla.weights(mode(BENCH, "unlabeled")) == {"kl": 1.0}
    weighted = vanilla.weighted_terms(logit_batch(), BENCH)
    assert list(weighted) == ["ce", "kl"]
    assert weighted["ce"].item() == pytest.approx(0.5 * CE, rel=1e-12)
    # labeled: 0.5 ln3 + 0.5 ln2 / 2
    assert vanilla.loss(logit_batch(), BENCH).item() == pytest.approx(0.5 * LN3 + LN2 / 4)
    a03 = mode(BENCH, "labeled", alpha=0.3)
    assert vanilla.loss(logit_batch(), a03).item() == pytest.approx(0.7 * LN3 + 0.3 * LN2 / 2)
    # without CE the KL carries full weight; unlabeled needs no labels
    assert vanilla.loss(logit_batch(), mode(BENCH, "no-ce")).item() == pytest.approx(LN2 / 2)
    unlabeled = vanilla.loss(logit_batch(labels=None), mode(BENCH, "unlabeled"))
    assert unlabeled.item() == pytest.approx(LN2 / 2)
    # labeled mode with withheld labels is an error, not a silent KL-only loss
    with pytest.raises(ValueError, match="labels are withheld"):
        vanilla.loss(logit_batch(labels=None), BENCH)


def test_self_has_the_terms_and_weights_of_vanilla_and_two_generations():
    self_kd, vanilla = get_objective("self"), get_objective("vanilla")
    assert self_kd.generations == 2 and vanilla.generations == 1
    assert self_kd.terms(logit_batch(), BENCH)["kl"].item() == pytest.approx(KL_T2, rel=1e-12)
    for name in MODES:
        assert self_kd.weights(mode(BENCH, name)) == vanilla.weights(mode(BENCH, name))
    assert self_kd.loss(logit_batch(), BENCH).item() == pytest.approx(0.5 * LN3 + LN2 / 4)


def test_basic_keeps_the_cross_entropy_at_full_weight():
    basic = get_objective("basic")
    assert basic.weights(BENCH) == {"ce": 1.0, "kl": 0.5}
    assert basic.weights(mode(BENCH, "no-ce")) == {"kl": 1.0}
    assert basic.weights(mode(BENCH, "unlabeled")) == {"kl": 1.0}
    assert basic.terms(logit_batch(), BENCH)["kl"].item() == pytest.approx(KL_T2, rel=1e-12)
    # CE + 0.5 * ln2 / 2
    assert basic.loss(logit_batch(), BENCH).item() == pytest.approx(LN3 + LN2 / 4)
    assert basic.loss(logit_batch(), mode(BENCH, "no-ce")).item() == pytest.approx(LN2 / 2)


def test_the_kl_term_is_t_squared_times_the_kl_at_temperature_t():
    # student z_s = (ln 4, 0), teacher z_t = (0, ln 9).
    # T = 1: p_s = (4/5, 1/5), p_t = (1/10, 9/10):
    #   KL = 1/10 ln((1/10) / (4/5)) + 9/10 ln((9/10) / (1/5)) = 1/10 ln(1/8) + 9/10 ln(9/2).
    # T = 2: p_s = softmax(ln 2, 0) = (2/3, 1/3), p_t = softmax(0, ln 3) = (1/4, 3/4):
    #   KL = 1/4 ln((1/4) / (2/3)) + 3/4 ln((3/4) / (1/3)) = 1/4 ln(3/8) + 3/4 ln(9/4).
    batch = KDBatch(
        logits=t([[math.log(4.0), 0.0]]),
        labels=None,
        teacher_probs=None,
        teacher_taps={"logits": t([[0.0, math.log(9.0)]])},
    )
    vanilla = get_objective("vanilla")
    kl1 = 0.1 * math.log(1 / 8) + 0.9 * math.log(9 / 2)
    kl2 = 0.25 * math.log(3 / 8) + 0.75 * math.log(9 / 4)
    at = {T: vanilla.terms(batch, KDParams(temperature=T))["kl"].item() for T in (1.0, 2.0)}
    assert at[1.0] == pytest.approx(kl1, rel=1e-12)
    assert at[2.0] == pytest.approx(4 * kl2, rel=1e-12)
    # logits doubled at T = 2 give the T = 1 distributions: exactly 4 times the T = 1 term
    doubled = KDBatch(
        logits=2 * batch.logits,
        labels=None,
        teacher_probs=None,
        teacher_taps={"logits": 2 * batch.teacher_taps["logits"]},
    )
    assert vanilla.terms(doubled, KDParams(temperature=2.0))["kl"].item() == pytest.approx(
        4 * kl1, rel=1e-12
    )


# --- 3, 4: log-probability objectives -------------------------------------------------------


def test_logit_mse_compares_log_probabilities_not_raw_logits():
    # sample 1: student log p_s = ln(1/2, 1/4, 1/4), teacher log p_t = ln(1/4, 1/4, 1/2) + 3:
    #   log p_s - log p_t = (ln 2, 0, -ln 2), squares (ln2^2, 0, ln2^2);
    # sample 2: teacher logits = student logits + 5: the same log-probabilities, 0.
    # MSE over the 6 elements = 2 ln2^2 / 6 = ln2^2 / 3 (raw logits would add 3 * 25 / 6 and more)
    student = t([[0.5, 0.25, 0.25], [0.2, 0.3, 0.5]]).log()
    teacher = torch.cat([t([[0.25, 0.25, 0.5]]).log() + 3, student[1:] + 5])
    batch = KDBatch(student, LABELS, None, teacher_taps={"logits": teacher})
    objective = get_objective("logit-mse")
    assert objective.terms(batch, BENCH)["mse"].item() == pytest.approx(LN2**2 / 3, rel=1e-12)
    raw = sum((a - b) ** 2 for a, b in zip(student.flatten().tolist(), teacher.flatten().tolist()))
    assert raw / 6 > 10 * LN2**2 / 3  # what a raw-logit MSE would give: far away
    # teacher = student + a constant per row: 0 (no temperature enters)
    shifted = KDBatch(student, LABELS, None, teacher_taps={"logits": student + t([[2.0], [-7.0]])})
    assert objective.terms(shifted, BENCH)["mse"].item() == pytest.approx(0.0, abs=1e-12)
    assert objective.weights(BENCH) == {"ce": 0.5, "mse": 0.5}
    assert objective.weights(mode(BENCH, "no-ce")) == {"mse": 1.0}
    assert objective.weights(mode(BENCH, "unlabeled")) == {"mse": 1.0}
    # labeled: 0.5 CE + 0.5 MSE, CE by hand: -ln p_s[0] = ln 2, -ln p_s[1] = -ln 0.3
    ce = (LN2 - math.log(0.3)) / 2
    assert objective.loss(batch, BENCH).item() == pytest.approx(0.5 * ce + 0.5 * LN2**2 / 3)


def test_cosine_is_one_minus_the_mean_cosine_of_log_probabilities():
    # sample 1: log p_s = -ln2 (1, 2, 2), log p_t = -ln2 (2, 2, 1) (+ 4 on the raw logits):
    #   cos = (2 + 4 + 2) / (3 * 3) = 8/9; sample 2: teacher = student + 1 per row: cos = 1.
    # term = 1 - (8/9 + 1) / 2 = 1/18
    student = t([[0.5, 0.25, 0.25], [0.25, 0.25, 0.5]]).log()
    teacher = torch.cat([t([[0.25, 0.25, 0.5]]).log() + 4, student[1:] + 1])
    batch = KDBatch(student, LABELS, None, teacher_taps={"logits": teacher})
    objective = get_objective("cosine")
    assert objective.terms(batch, BENCH)["cosine"].item() == pytest.approx(1 / 18, rel=1e-12)
    # raw logits: sample 1 cos((-1, -2, -2) ln2, (-2 ln2 + 4, ...)) is not 8/9
    raw = dot(student[0].tolist(), teacher[0].tolist()) / (
        norm(student[0].tolist()) * norm(teacher[0].tolist())
    )
    assert abs(raw - 8 / 9) > 0.1
    assert objective.weights(BENCH) == {"ce": 0.5, "cosine": 0.5}
    assert objective.weights(mode(BENCH, "no-ce")) == {"cosine": 1.0}
    assert objective.loss(batch, mode(BENCH, "no-ce")).item() == pytest.approx(1 / 18)


# --- 5, 6: feature and attention with the projection phi ------------------------------------


def swap_projection() -> nn.Linear:
    """phi: R^2 -> R^4, phi(a, b) = (b, a, 0, 0)."""
    phi = nn.Linear(2, 4).double()
    with torch.no_grad():
        phi.weight.copy_(t([[0.0, 1.0], [1.0, 0.0], [0.0, 0.0], [0.0, 0.0]]))
        phi.bias.zero_()
    return phi


def feature_batch(f_s, f_t, labels=LABELS, adapters=None) -> KDBatch:
    return KDBatch(
        logits=STUDENT_LOGITS,
        labels=labels,
        teacher_probs=None,
        taps={"features": t(f_s)},
        teacher_taps={"logits": TEACHER_LOGITS, "features": t(f_t)},
        adapters={"phi": swap_projection()} if adapters is None else adapters,
    )


def test_feature_term_by_hand_with_a_projection():
    # sample 1: phi(4, 3) = (3, 4, 0, 0) -> (0.6, 0.8, 0, 0); f_t = (0, 4, 0, 3) -> (0, 0.8, 0, 0.6)
    #   difference (0.6, 0, 0, -0.6): squares sum 0.72;
    # sample 2: phi(0, 2) = (2, 0, 0, 0) -> (1, 0, 0, 0); f_t = (5, 0, 0, 0) -> same: 0.
    # MSE over 8 elements = 0.72 / 8 = 0.09
    objective = get_objective("feature")
    batch = feature_batch([[4.0, 3.0], [0.0, 2.0]], [[0.0, 4.0, 0.0, 3.0], [5.0, 0.0, 0.0, 0.0]])
    terms = objective.terms(batch, BENCH)
    assert terms["feature"].item() == pytest.approx(0.09, rel=1e-12)
    assert terms["kl"].item() == pytest.approx(KL_T2, rel=1e-12)
    # a = b = 0.5: CE weight 1 - 0.5 - 0.5 = 0, so labeled and no-ce are the same loss
    assert objective.weights(BENCH) == {"ce": 0.0, "kl": 0.5, "feature": 0.5}
    assert objective.weights(mode(BENCH, "no-ce")) == {"kl": 0.5, "feature": 0.5}
    expected = 0.5 * LN2 / 2 + 0.5 * 0.09
    assert "ce" not in objective.weighted_terms(batch, BENCH)
    assert objective.loss(batch, BENCH).item() == pytest.approx(expected, rel=1e-12)
    assert objective.loss(batch, mode(BENCH, "no-ce")).item() == pytest.approx(expected, rel=1e-12)
    unlabeled = feature_batch([[4.0, 3.0], [0.0, 2.0]], [[0, 4, 0, 3.0], [5, 0, 0, 0.0]], None)
    assert objective.loss(unlabeled, BENCH).item() == pytest.approx(expected, rel=1e-12)
    # a = 0.3, b = 0.2: CE at 0.5
    other = mode(BENCH, "labeled", alpha=0.3, beta=0.2)
    assert objective.loss(batch, other).item() == pytest.approx(
        0.5 * CE + 0.3 * LN2 / 2 + 0.2 * 0.09, rel=1e-12
    )


def test_feature_without_projection_when_the_widths_agree():
    objective = get_objective("feature")
    assert objective.adapters(4, 4, KDParams()) == {}
    (name, phi), *rest = objective.adapters(2, 4, KDParams()).items()
    assert not rest and name == "phi"
    assert isinstance(phi, nn.Linear) and (phi.in_features, phi.out_features) == (2, 4)
    # equal widths, no adapter: f_s used as is. (3, 4) -> (0.6, 0.8) vs (1, 0): squares 0.16 +
    # 0.64 = 0.8; (0, 1) vs (0, 1): 0; MSE = 0.8 / 4 = 0.2
    batch = feature_batch([[3.0, 4.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 3.0]], adapters={})
    assert objective.terms(batch, BENCH)["feature"].item() == pytest.approx(0.2, rel=1e-12)


def test_attention_term_squares_the_projected_feature_before_normalising():
    # sample 1: phi(-1, 1) = (1, -1, 0, 0), squared (1, 1, 0, 0) -> (1, 1, 0, 0) / sqrt 2;
    #   f_t = (0, 2, 0, 0), squared (0, 4, 0, 0) -> (0, 1, 0, 0):
    #   difference (1/sqrt2, 1/sqrt2 - 1, 0, 0): squares 1/2 + (1/2 - sqrt2 + 1) = 2 - sqrt2;
    # sample 2: phi(0, 2) = (2, 0, 0, 0) -> (1, 0, 0, 0); f_t = (-3, 0, 0, 0) squared ->
    #   (1, 0, 0, 0): 0 (the sign is gone). MSE = (2 - sqrt2) / 8.
    objective = get_objective("attention")
    batch = feature_batch([[-1.0, 1.0], [0.0, 2.0]], [[0.0, 2.0, 0.0, 0.0], [-3.0, 0.0, 0.0, 0.0]])
    terms = objective.terms(batch, BENCH)
    assert terms["attention"].item() == pytest.approx((2 - SQRT2) / 8, rel=1e-12)
    assert terms["kl"].item() == pytest.approx(KL_T2, rel=1e-12)
    assert objective.weights(BENCH) == {"ce": 0.0, "kl": 0.5, "attention": 0.5}
    assert objective.adapters(3, 3, KDParams()) == {}
    assert objective.loss(batch, mode(BENCH, "no-ce")).item() == pytest.approx(
        0.5 * LN2 / 2 + 0.5 * (2 - SQRT2) / 8, rel=1e-12
    )


# --- 7, 8: relational objectives ------------------------------------------------------------


def test_similarity_preserving_term_by_hand():
    # f_s = I: G_s = I (rows already unit). f_t = (1, 0, 0) twice: f f^T = all ones, rows
    # normalised to 1/sqrt2. (G_s - G_t)^2: diagonal (1 - 1/sqrt2)^2 = 3/2 - sqrt2, off-diagonal
    # 1/2; mean over the 4 entries = (2 (3/2 - sqrt2) + 2 / 2) / 4 = 1 - sqrt2 / 2
    objective = get_objective("sp")
    batch = feature_batch([[1.0, 0.0], [0.0, 1.0]], [[1.0, 0, 0], [1.0, 0, 0]], adapters={})
    terms = objective.terms(batch, BENCH)
    assert terms["sp"].item() == pytest.approx(1 - SQRT2 / 2, rel=1e-12)
    assert terms["kl"].item() == pytest.approx(KL_T2, rel=1e-12)
    assert objective.weights(BENCH) == {"ce": 0.0, "kl": 0.5, "sp": 0.5}
    assert objective.adapters is None  # the Gram matrices are B x B whatever the widths


def test_similarity_preserving_on_three_samples_by_loops():
    f_s = [[1.0, 2.0], [0.0, 1.0], [-1.0, 1.0]]
    f_t = [[1.0, 0.0, 2.0], [0.0, 1.0, 1.0], [2.0, 1.0, -1.0]]

    def gram(f):  # f f^T, each row L2-normalised
        return [unit([dot(a, b) for b in f]) for a in f]

    g_s, g_t = gram(f_s), gram(f_t)
    expected = sum((g_s[i][j] - g_t[i][j]) ** 2 for i in range(3) for j in range(3)) / 9
    batch = KDBatch(
        logits=torch.zeros(3, 2, dtype=torch.float64),
        labels=None,
        teacher_probs=None,
        taps={"features": t(f_s)},
        teacher_taps={"logits": torch.zeros(3, 2, dtype=torch.float64), "features": t(f_t)},
    )
    assert get_objective("sp").terms(batch, BENCH)["sp"].item() == pytest.approx(
        expected, rel=1e-12
    )


def rkd_by_hand(e_s: list[list[float]], e_t: list[list[float]]) -> float:
    """RKD's psi_D + psi_A with Huber losses, by loops over pairs and triplets."""
    n = len(e_s)

    def distances(e):
        d = [[math.dist(e[i], e[j]) if i != j else 0.0 for j in range(n)] for i in range(n)]
        mean = sum(map(sum, d)) / (n * (n - 1))
        return [[v / mean for v in row] for row in d]

    def angles(e):
        out = []
        for j in range(n):
            for i in range(n):
                for k in range(n):
                    a = [x - y for x, y in zip(e[i], e[j])]
                    b = [x - y for x, y in zip(e[k], e[j])]
                    out.append(dot(unit(a), unit(b)))
        return out

    d_s, d_t = distances(e_s), distances(e_t)
    distance = sum(huber(d_s[i][j] - d_t[i][j]) for i in range(n) for j in range(n)) / n**2
    a_s, a_t = angles(e_s), angles(e_t)
    angle = sum(huber(x - y) for x, y in zip(a_s, a_t)) / n**3
    return distance + angle


def rkd_term(e_s, e_t) -> float:
    zeros = torch.zeros(len(e_s), 2, dtype=torch.float64)
    batch = KDBatch(
        logits=zeros,
        labels=None,
        teacher_probs=None,
        taps={"features": t(e_s)},
        teacher_taps={"logits": zeros, "features": t(e_t)},
    )
    return get_objective("rkd").terms(batch, BENCH)["rkd"].item()


def test_rkd_by_hand_on_two_right_triangles():
    student = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]  # legs 1, 1, hypotenuse sqrt2
    teacher = [[0.0, 0.0], [3.0, 0.0], [0.0, 4.0]]  # 3-4-5
    # distances: student (d01, d02, d12) = (1, 1, sqrt2), mean over the 6 ordered pairs
    # (2 + sqrt2) / 3: potentials 3 / (2 + sqrt2) = 3 - 1.5 sqrt2 (twice) and 3 sqrt2 - 3;
    # teacher (3, 4, 5), mean 4: (3/4, 1, 5/4). Every |difference| < 1: Huber 0.5 x^2, each pair
    # twice, diagonal 0, over 9 entries: (x01^2 + x02^2 + x12^2) / 9.
    x = [3 - 1.5 * SQRT2 - 0.75, 3 - 1.5 * SQRT2 - 1.0, 3 * SQRT2 - 3 - 1.25]
    distance = sum(v * v for v in x) / 9
    # angles (27 triplets): i == k != j gives cos 1 on both sides, i == j or k == j a zero
    # vector (0); the two ordered triplets of each vertex j: student (0, sqrt2/2, sqrt2/2) at
    # vertices (0, 1, 2), teacher (0, 3/5, 4/5) (at (3, 0): (-3, 0).(-3, 4) / 15 = 9/15; at (0,
    # 4): (0, -4).(3, -4) / 20 = 16/20). Huber: 2 * 0.5 * (y1^2 + y2^2) / 27.
    y = [SQRT2 / 2 - 0.6, SQRT2 / 2 - 0.8]
    angle = sum(v * v for v in y) / 27
    assert rkd_term(student, teacher) == pytest.approx(distance + angle, rel=1e-9)
    assert rkd_by_hand(student, teacher) == pytest.approx(distance + angle, rel=1e-12)
    # the potentials are scale invariant: a triangle against itself doubled is 0
    assert rkd_term(student, [[0.0, 0.0], [2.0, 0.0], [0.0, 2.0]]) == pytest.approx(0, abs=1e-12)
    objective = get_objective("rkd")
    assert objective.weights(BENCH) == {"ce": 0.0, "kl": 0.5, "rkd": 0.5}


def test_rkd_huber_linear_branch_by_loops():
    # collinear student (0, 0), (1, 0), (2, 0): the angle at the middle point is 180 degrees, cos
    # -1, against the teacher's 45 degrees: a difference of 1 + sqrt2/2 > 1 (the linear branch)
    student = [[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]
    teacher = [[0.0, 0.0], [1.0, 0.0], [0.0, 1.0]]
    expected = rkd_by_hand(student, teacher)
    # by hand: distances (1, 2, 1) / (4/3) = (3/4, 3/2, 3/4) vs (3 - 1.5 sqrt2, 3 - 1.5 sqrt2,
    # 3 sqrt2 - 3); angles at vertices (0, 1, 2): cos (1, -1, 1) vs (0, sqrt2/2, sqrt2/2)
    d = [0.75 - (3 - 1.5 * SQRT2), 1.5 - (3 - 1.5 * SQRT2), 0.75 - (3 * SQRT2 - 3)]
    a = [1.0, -1 - SQRT2 / 2, 1 - SQRT2 / 2]
    closed = 2 * sum(huber(v) for v in d) / 9 + 2 * sum(huber(v) for v in a) / 27
    assert expected == pytest.approx(closed, rel=1e-12)
    assert abs(a[1]) - 0.5 == pytest.approx(0.5 + SQRT2 / 2)  # the linear branch is exercised
    assert rkd_term(student, teacher) == pytest.approx(expected, rel=1e-9)


def test_rkd_gradient_is_finite_when_two_samples_coincide():
    features = torch.tensor([[0.5, -1.0], [0.5, -1.0], [2.0, 1.0]], requires_grad=True)
    batch = KDBatch(
        logits=torch.zeros(3, 3),
        labels=None,
        teacher_probs=None,
        taps={"features": features},
        teacher_taps={
            "logits": torch.zeros(3, 3),
            "features": torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]),
        },
    )
    term = get_objective("rkd").terms(batch, BENCH)["rkd"]
    term.backward()
    assert math.isfinite(term.item())
    assert torch.isfinite(features.grad).all()


# --- 9: CRD ---------------------------------------------------------------------------------


def test_crd_is_cross_entropy_of_normalised_head_similarities_by_hand():
    student_head = nn.Linear(2, 2).double()  # (a, b) -> (b, a)
    teacher_head = nn.Linear(3, 2).double()  # (a, b, c) -> (a, b)
    with torch.no_grad():
        student_head.weight.copy_(t([[0.0, 1.0], [1.0, 0.0]]))
        teacher_head.weight.copy_(t([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]))
        student_head.bias.zero_()
        teacher_head.bias.zero_()
    batch = KDBatch(
        logits=STUDENT_LOGITS,
        labels=LABELS,
        teacher_probs=None,
        taps={"features": t([[4.0, 3.0], [-3.0, 4.0]])},
        teacher_taps={"logits": TEACHER_LOGITS, "features": t([[2.0, 0.0, 7.0], [0.0, 3.0, -1.0]])},
        adapters={"student_head": student_head, "teacher_head": teacher_head},
    )
    # student (3, 4)/5 = (0.6, 0.8) and (4, -3)/5 = (0.8, -0.6); teacher (1, 0) and (0, 1).
    # row 0: logits (0.6, 0.8)/tau, target 0: ln(1 + exp(0.2 / tau));
    # row 1: logits (0.8, -0.6)/tau, target 1: ln(1 + exp(1.4 / tau)); tau = 0.07: 1.4/tau = 20
    objective = get_objective("crd")
    for tau in (0.07, 1.0):
        expected = (math.log1p(math.exp(0.2 / tau)) + math.log1p(math.exp(1.4 / tau))) / 2
        params = mode(BENCH, "labeled", crd_temperature=tau)
        assert objective.terms(batch, params)["crd"].item() == pytest.approx(expected, rel=1e-9)
    assert objective.weights(BENCH) == {"ce": 0.5, "crd": 0.5}
    assert objective.weights(mode(BENCH, "no-ce")) == {"crd": 1.0}
    heads = objective.adapters(5, 5, mode(BENCH, "labeled", crd_dim=7))
    assert sorted(heads) == ["student_head", "teacher_head"]  # present even at equal widths
    assert (heads["student_head"].in_features, heads["student_head"].out_features) == (5, 7)
    assert KDParams().crd_dim == 128 and KDParams().crd_temperature == 0.07


# --- 10: DKD --------------------------------------------------------------------------------

# DKD at T = 2 on the shared batch. Sample 1 (label 0): student (1/2, 1/4, 1/4), teacher
# (1/4, 1/4, 1/2). Binary (target, rest): student (1/2, 1/2), teacher (1/4, 3/4):
#   KL = 1/4 ln(1/2) + 3/4 ln(3/2) = 3/4 ln3 - ln2.
# Non-target renormalised: student (1/2, 1/2), teacher (1/3, 2/3):
#   KL = 1/3 ln(2/3) + 2/3 ln(4/3) = 5/3 ln2 - ln3.
# Sample 2 (label 1): the shared student (1/4, 1/4, 1/2), a teacher of its own (1/2, 1/4, 1/4):
#   binary: student (1/4, 3/4), teacher (1/4, 3/4): 0;
#   non-target (classes 0, 2): student (1/3, 2/3), teacher (2/3, 1/3): 2/3 ln2 + 1/3 ln(1/2) =
#   1/3 ln2.
# batch means times T^2 = 4: TCKD = 2 (3/4 ln3 - ln2) = 1.5 ln3 - 2 ln2,
#   NCKD = 2 (5/3 ln2 - ln3 + 1/3 ln2) = 4 ln2 - 2 ln3.
# Plain T^2 KL: sample 1 4 * ln2/4 = ln2; sample 2 KL((1/2,1/4,1/4) || (1/4,1/4,1/2)) = ln2/4,
#   times 4 = ln2: mean ln2. CE (T = 1) as the shared batch: ln 3.
DKD_TEACHER = 2 * t([[0.25, 0.25, 0.5], [0.5, 0.25, 0.25]]).log()
TCKD = 1.5 * LN3 - 2 * LN2
NCKD = 4 * LN2 - 2 * LN3


def dkd_batch(labels=LABELS) -> KDBatch:
    return KDBatch(STUDENT_LOGITS, labels, None, teacher_taps={"logits": DKD_TEACHER})


def test_dkd_terms_by_hand():
    dkd = get_objective("dkd")
    terms = dkd.terms(dkd_batch(), BENCH)
    assert set(terms) == {"tckd", "nckd"}
    assert terms["tckd"].item() == pytest.approx(TCKD, rel=1e-9)
    assert terms["nckd"].item() == pytest.approx(NCKD, rel=1e-9)
    assert dkd.weights(BENCH) == {"ce": 1.0, "tckd": 1.0, "nckd": 8.0}
    assert dkd.weights(mode(BENCH, "no-ce")) == {"tckd": 1.0, "nckd": 8.0}
    assert dkd.weights(mode(BENCH, "unlabeled")) == {"kl": 1.0}
    assert dkd.loss(dkd_batch(), BENCH).item() == pytest.approx(CE + TCKD + 8 * NCKD, rel=1e-9)
    no_ce = mode(BENCH, "no-ce")
    assert dkd.loss(dkd_batch(), no_ce).item() == pytest.approx(TCKD + 8 * NCKD, rel=1e-9)
    # labels withheld: plain T^2 KL
    unlabeled = dkd.terms(dkd_batch(labels=None), mode(BENCH, "unlabeled"))
    assert list(unlabeled) == ["kl"] and unlabeled["kl"].item() == pytest.approx(LN2, rel=1e-12)
    assert dkd.loss(dkd_batch(None), mode(BENCH, "unlabeled")).item() == pytest.approx(LN2)
    # label freedom: no-ce still splits the classes by the label
    assert not dkd.label_free(BENCH)
    assert not dkd.label_free(no_ce)
    assert dkd.label_free(mode(BENCH, "unlabeled"))
    # beta_D = 0: the binary KL only
    tckd_only = mode(BENCH, "no-ce", dkd_alpha=1.0, dkd_beta=0.0)
    assert dkd.loss(dkd_batch(), tckd_only).item() == pytest.approx(TCKD, rel=1e-9)


@pytest.mark.parametrize(
    ("student", "teacher", "label"),
    [
        ([0.5, 0.25, 0.25], [0.25, 0.25, 0.5], 0),  # the hand values above
        ([0.1, 0.2, 0.3, 0.4], [0.4, 0.1, 0.25, 0.25], 2),
        ([0.7, 0.2, 0.1], [0.05, 0.9, 0.05], 1),
    ],
)
def test_dkd_identity_kl_is_tckd_plus_rest_times_nckd(student, teacher, label):
    """Zhao et al. (2022), Eq. 2: KL = TCKD + (1 - p_t[target]) NCKD, per sample at T = 1."""
    batch = KDBatch(
        t([student]).log(), torch.tensor([label]), None, teacher_taps={"logits": t([teacher]).log()}
    )
    params = KDParams(temperature=1.0)
    terms = get_objective("dkd").terms(batch, params)
    kl_code = get_objective("vanilla").terms(batch, params)["kl"].item()
    # by hand (the logits are logs of probabilities)
    binary_s = [student[label], 1 - student[label]]
    binary_t = [teacher[label], 1 - teacher[label]]
    rest_s = [p / (1 - student[label]) for j, p in enumerate(student) if j != label]
    rest_t = [p / (1 - teacher[label]) for j, p in enumerate(teacher) if j != label]
    assert terms["tckd"].item() == pytest.approx(kl(binary_t, binary_s), rel=1e-6)
    assert terms["nckd"].item() == pytest.approx(kl(rest_t, rest_s), rel=1e-6)
    assert kl_code == pytest.approx(kl(teacher, student), rel=1e-9)
    rest = 1 - teacher[label]
    assert kl(teacher, student) == pytest.approx(kl(binary_t, binary_s) + rest * kl(rest_t, rest_s))
    assert kl_code == pytest.approx(terms["tckd"].item() + rest * terms["nckd"].item(), rel=1e-6)


# --- 15: the table of CE weights and label freedom --------------------------------------------

# from the module docstring at a = b = 0.5: (CE weight, label-free) per mode
TABLE = {
    "vanilla": (0.5, False),
    "self": (0.5, False),
    "logit-mse": (0.5, False),
    "cosine": (0.5, False),
    "feature": (0.0, True),
    "attention": (0.0, True),
    "sp": (0.0, True),
    "rkd": (0.0, True),
    "crd": (0.5, False),
    "dkd": (1.0, False),
    "basic": (1.0, False),
}


def test_the_eleven_are_registered_in_the_docstring_order():
    assert NAMES == ELEVEN


@pytest.mark.parametrize("name", ELEVEN)
def test_ce_weight_and_label_freedom_table(name):
    objective = get_objective(name)
    ce, free = TABLE[name]
    assert objective.ce_weight(BENCH) == ce
    assert objective.label_free(BENCH) is free
    no_ce = mode(BENCH, "no-ce")
    assert objective.ce_weight(no_ce) == 0.0
    assert objective.label_free(no_ce) is (name != "dkd")
    unlabeled = mode(BENCH, "unlabeled")
    assert objective.ce_weight(unlabeled) == 0.0
    assert objective.label_free(unlabeled) is True
    assert objective.terms_read_labels is (name == "dkd")


# --- 13, 14: the loop -------------------------------------------------------------------------

N, DT = 10, 5  # samples; the teacher's feature width (the student mlp-small's is 24)


def loop_data():
    g = torch.Generator().manual_seed(3)
    inputs = torch.randn(N, 4, generator=g)
    labels = torch.randint(0, 3, (N,), generator=g)
    teacher_taps = {
        "logits": torch.randn(N, 3, generator=g),
        "features": torch.randn(N, DT, generator=g),
    }
    return inputs, labels, teacher_taps


def student_for(objective: Objective, params: KDParams, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    student = build_model("mlp-small", (4,), 3)
    adapters = objective.adapters(24, DT, params) if objective.adapters else {}
    return WithAdapters(student, adapters) if adapters else student


def distill_tiny(module, inputs, labels, objective, params, teacher_taps, shuffle_seed):
    """Two epochs of batches 4, 4, 2 with Adam at 1e-2."""
    return distill(
        module,
        inputs,
        labels,
        None,
        objective,
        params,
        epochs=2,
        batch_size=4,
        optimizer=torch.optim.Adam(module.parameters(), lr=1e-2),
        generator=torch.Generator().manual_seed(shuffle_seed),
        teacher_taps=teacher_taps,
    )


@pytest.mark.parametrize("name", ELEVEN)
@pytest.mark.parametrize("distill_mode", MODES)
def test_distill_withholds_the_labels_only_in_unlabeled_mode(name, distill_mode):
    inner = get_objective(name)
    seen = []

    def spy(batch, params):
        seen.append((batch.labels, batch.teacher_taps["index"]))
        return inner.terms(batch, params)

    spied = Objective(
        "spy",
        spy,
        inner.weights,
        taps=inner.taps,
        adapters=inner.adapters,
        terms_read_labels=inner.terms_read_labels,
    )
    params = mode(BENCH, distill_mode)
    module = student_for(inner, params)
    inputs, labels, teacher_taps = loop_data()
    result = distill_tiny(
        module, inputs, labels, spied, params, {**teacher_taps, "index": torch.arange(N)}, 0
    )
    assert math.isfinite(result.mean_loss)
    assert len(seen) == 6  # 2 epochs of batches 4, 4, 2
    assert sorted(torch.cat([index for _, index in seen[:3]]).tolist()) == list(range(N))
    for batch_labels, index in seen:
        if distill_mode == "unlabeled":
            assert batch_labels is None
        else:  # the labels of the shuffled batch's samples
            assert torch.equal(batch_labels, labels[index])
    assert ("ce" in result.terms) is (inner.ce_weight(params) != 0)


def trained_weights(name: str, distill_mode: str) -> dict[str, torch.Tensor]:
    objective = get_objective(name)
    params = mode(BENCH, distill_mode)
    module = student_for(objective, params, seed=7)
    inputs, labels, teacher_taps = loop_data()
    distill_tiny(module, inputs, labels, objective, params, teacher_taps, 1)
    return module.state_dict()


@pytest.mark.parametrize("name", ["feature", "attention", "sp", "rkd", "vanilla"])
def test_labeled_and_no_ce_are_the_same_computation_when_the_ce_weight_is_zero(name):
    labeled, no_ce = trained_weights(name, "labeled"), trained_weights(name, "no-ce")
    assert labeled.keys() == no_ce.keys()
    same = all(torch.equal(labeled[k], no_ce[k]) for k in labeled)
    assert same is (name != "vanilla")


# --- 16: Born-Again generations, size and latency -----------------------------------------------


def tiny_classifier() -> Classifier:
    return Classifier(nn.Linear(3, 2), nn.Linear(2, 3))


def test_self_distillation_trains_two_generations_the_second_from_the_first():
    torch.manual_seed(0)
    teacher = tiny_classifier()
    x, y = torch.randn(12, 3), torch.randint(0, 3, (12,))
    test = torch.randn(9, 3), torch.randint(0, 3, (9,))
    vanilla = get_objective("vanilla")
    sources = []

    def spy(batch, params):
        sources.append(batch.teacher_taps["logits"])
        return vanilla.terms(batch, params)

    built = []

    def build():
        built.append(tiny_classifier())
        return built[-1]

    result = distill_student(
        teacher,
        build,
        (x, y),
        test,
        Objective("spy-self", spy, vanilla.weights, generations=2),
        BENCH,
        StudentTraining(epochs=3, batch_size=4, learning_rate=1e-3, weight_decay=1e-4),
        seed=0,
    )
    assert [(row["generation"], row["epoch"]) for row in result.rows] == [
        (g, e) for g in (1, 2) for e in (1, 2, 3)
    ]
    assert len(built) == 2 and result.student is built[1]
    second = [row for row in result.rows if row["generation"] == 2]
    assert result.reported == second
    assert result.final_accuracy == second[-1]["test_accuracy"]
    best = max(row["test_accuracy"] for row in second)
    assert result.best["generation"] == 2 and result.best["test_accuracy"] == best
    assert result.best["epoch"] == min(r["epoch"] for r in second if r["test_accuracy"] == best)

    def by_first_column(rows):
        return rows[rows[:, 0].argsort()]

    with torch.no_grad():
        from_teacher, from_first = teacher(x), built[0](x)
    steps = 3  # 12 samples, batches of 4
    gen1 = torch.cat(sources[:steps])  # one epoch of generation 1: every sample once
    gen2 = torch.cat(sources[3 * steps : 4 * steps])  # first epoch of generation 2
    torch.testing.assert_close(by_first_column(gen1), by_first_column(from_teacher))
    torch.testing.assert_close(by_first_column(gen2), by_first_column(from_first))
    assert not torch.allclose(by_first_column(gen2), by_first_column(from_teacher))
    # a one-generation objective has generation-1 rows only
    once = distill_student(
        teacher,
        tiny_classifier,
        (x, y),
        test,
        vanilla,
        BENCH,
        StudentTraining(2, 4, 1e-3, 1e-4),
        seed=0,
    )
    assert [row["generation"] for row in once.rows] == [1, 1]


def test_best_epoch_is_the_reported_generations_earliest_highest():
    rows = [
        {"generation": 1, "epoch": 1, "test_accuracy": 0.9},
        {"generation": 2, "epoch": 1, "test_accuracy": 0.5},
        {"generation": 2, "epoch": 2, "test_accuracy": 0.7},
        {"generation": 2, "epoch": 3, "test_accuracy": 0.7},
        {"generation": 2, "epoch": 4, "test_accuracy": 0.6},
    ]
    result = StudentResult(student=tiny_classifier(), rows=rows)
    assert result.best is rows[2]  # not generation 1's 0.9, and the earlier of the tie
    assert result.final_accuracy == 0.6


def test_size_bytes_counts_parameters_and_buffers():
    assert size_bytes(nn.Linear(3, 2)) == (6 + 2) * 4
    # weight, bias, running_mean, running_var: 4 x 2 float32; num_batches_tracked: one int64
    assert size_bytes(nn.BatchNorm1d(2)) == 4 * 2 * 4 + 8
    assert size_bytes(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))) == 32 + 40
    assert size_bytes(nn.Linear(3, 2).double()) == 8 * 8


def test_cpu_latency_is_positive_and_in_eval_mode():
    model = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).train()
    latency = cpu_latency_ms(model, torch.randn(4, 3), warmup=1, runs=3)
    assert latency > 0 and math.isfinite(latency)
    assert not model.training


def test_a_negative_cross_entropy_weight_and_dkd_without_its_labels_are_refused():
    batch = KDBatch(
        logits=torch.zeros(2, 3),
        labels=None,
        teacher_probs=None,
        taps={"features": torch.ones(2, 2)},
        teacher_taps={"logits": torch.zeros(2, 3), "features": torch.ones(2, 2)},
    )
    labeled = KDBatch(**{**batch.__dict__, "labels": torch.tensor([0, 1])})
    # QKT's defaults (alpha 1) with beta 0.5: CE weight 1 - 1 - 0.5 < 0
    with pytest.raises(ValueError, match="cross-entropy weight is -0.5 < 0"):
        get_objective("sp").loss(labeled, KDParams(alpha=1.0, beta=0.5))
    with pytest.raises(ValueError, match="'dkd' in mode 'no-ce' splits the classes by the label"):
        get_objective("dkd").loss(batch, KDParams(mode="no-ce"))
