"""Energy coefficients (``flowerbed.kd.energy``): the moment approximation of CTL against hand
computations, the exact pairwise value, and its own derivation."""

import math

import numpy as np
import pytest
from scipy import stats

from flowerbed.kd.energy import (
    exact_feature_coefficients,
    expected_distance,
    feature_coefficients,
    feature_importance,
    feature_moments,
)


def test_moments_match_scipy_and_constant_columns_are_zero():
    rng = np.random.default_rng(0)
    x = np.column_stack([rng.exponential(size=500), rng.normal(size=500), np.full(500, 3.0)])
    m = feature_moments(x)
    np.testing.assert_allclose(m[0, :2], x[:, :2].mean(axis=0))
    np.testing.assert_allclose(m[1, :2], x[:, :2].std(axis=0))
    np.testing.assert_allclose(m[2, :2], stats.skew(x[:, :2], axis=0))
    np.testing.assert_allclose(m[3, :2], stats.kurtosis(x[:, :2], axis=0, fisher=True))
    assert m[:, 2].tolist() == [3.0, 0.0, 0.0, 0.0]


def test_expected_distance_of_two_gaussians_by_hand():
    # N(0, 1) vs N(1, 1): nu = 1 + 1 + 1 = 3, no skewness or excess kurtosis:
    # sqrt(3) (3/4 + 2 / (8 * 9)) = 1.34715...; the exact E|D|, D ~ N(1, 2), is 1.39928
    x = np.array([[0.0], [1.0], [0.0], [0.0]])
    y = np.array([[1.0], [1.0], [0.0], [0.0]])
    approx = expected_distance(x, y)[0]
    assert approx == pytest.approx(math.sqrt(3) * (0.75 + 2 / 72), rel=1e-12)
    exact = math.sqrt(2) * math.sqrt(2 / math.pi) * math.exp(-1 / 4) + (
        1 - 2 * stats.norm.cdf(-1 / math.sqrt(2))
    )
    assert exact == pytest.approx(1.39928, abs=1e-5)
    assert abs(approx - exact) < 0.06  # the approximation's error on this pair


def test_the_formula_is_the_second_order_expansion_with_excess_kurtosis():
    # E|D| ~ sqrt(nu) (1 - Var(D^2) / (8 nu^2)), D = X - Y; Var(D^2) computed exactly over all
    # pairs of two small skewed samples (population moments): this fixes every sign of (C10)
    # and that g4 is the excess kurtosis
    x = np.array([0.0, 0.1, 0.3, 2.0, 5.0])
    y = np.array([1.0, 1.2, 1.3, 1.9, 4.0, 7.5])
    d = (x[:, None] - y[None, :]).reshape(-1)
    nu = np.mean(d**2)
    var_d2 = np.var(d**2)
    expected = math.sqrt(nu) * (1 - var_d2 / (8 * nu**2))
    got = expected_distance(feature_moments(x[:, None]), feature_moments(y[:, None]))[0]
    assert got == pytest.approx(expected, rel=1e-12)


def test_identical_moments_give_exactly_zero():
    m = feature_moments(np.random.default_rng(1).exponential(size=(300, 4)))
    assert np.array_equal(feature_coefficients(m, m), np.zeros(4))


@pytest.mark.parametrize("shift, scale", [(1.0, 1.0), (3.0, 2.0), (0.3, 0.5), (0.0, 3.0)])
def test_approximation_is_close_to_the_exact_value_on_gaussians(shift, scale):
    rng = np.random.default_rng(2)
    x = rng.normal(0, 1, size=(3000, 1))
    y = rng.normal(shift, scale, size=(3000, 1))
    approx = feature_coefficients(feature_moments(x), feature_moments(y))[0]
    exact = exact_feature_coefficients(x, y, max_samples=3000)[0]
    assert 0 < exact < 1
    assert abs(approx - exact) < 0.05


def test_exact_coefficient_by_hand():
    # x = {0, 1}, y = {2, 3}: E|X - Y| = (2 + 3 + 1 + 2) / 4 = 2, E|X - X'| = E|Y - Y'| = 1/2
    h = exact_feature_coefficients(np.array([[0.0], [1.0]]), np.array([[2.0], [3.0]]))
    assert h[0] == pytest.approx((2 * 2 - 0.5 - 0.5) / (2 * 2))


def test_moments_broadcast_over_pairs_of_distributions():
    rng = np.random.default_rng(3)
    moments = np.stack([feature_moments(rng.normal(k, 1 + k, size=(200, 2))) for k in range(3)])
    table = feature_coefficients(moments[:, None], moments[None])  # (3, 3, d)
    for a in range(3):
        for b in range(3):
            np.testing.assert_allclose(table[a, b], feature_coefficients(moments[a], moments[b]))


def test_feature_importance_by_hand():
    np.testing.assert_allclose(feature_importance(0.5, [0.6, 0.3, 0.5]), [1 / 3, 2 / 3, 0.0])
    # a model constant at the probes (zero-initialised): uniform weights
    np.testing.assert_allclose(feature_importance(0.5, [0.5, 0.5, 0.5, 0.5]), [0.25] * 4)
