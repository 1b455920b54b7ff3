"""flowerbed.experiments.stats against hand computations: the Holm-Bonferroni adjustment, and
the p-value of the paired and Welch t tests (an interval excludes 0 exactly where p < 0.05)."""

import math

import pytest

from flowerbed.experiments.stats import holm, paired_ratio, paired_test, welch_test


def test_holm_against_a_hand_computation():
    """p = 0.01, 0.04, 0.03, 0.005 at 0.05: sorted, 0.005 x 4 = 0.02 <= 0.05, 0.01 x 3 = 0.03
    <= 0.05, 0.03 x 2 = 0.06 > 0.05: stop; two survive (0.005 and 0.01). Adjusted: 0.03, 0.06
    (0.04 x 1 is raised to the 0.06 before it), 0.06, 0.02. A NaN p (no spread) counts in m."""
    adjusted, survives = holm([0.01, 0.04, 0.03, 0.005], 0.05)
    assert survives == [True, False, False, True]
    assert adjusted == pytest.approx([0.03, 0.06, 0.06, 0.02])
    adjusted, survives = holm([0.01, math.nan, 0.02], 0.05)
    assert adjusted[0] == pytest.approx(0.03) and adjusted[2] == pytest.approx(0.04)
    assert math.isnan(adjusted[1]) and survives == [True, False, True]
    assert holm([0.02, 0.03]) == (pytest.approx([0.04, 0.04]), [True, True])
    assert holm([0.5, 0.9])[0] == pytest.approx([1.0, 1.0])  # capped at 1


def test_the_p_value_is_the_t_test_of_the_interval():
    """Two-sided one-sample t test of the differences (scipy's ``ttest_1samp``, by hand here:
    [1, 2, 4]: mean 7/3, sd sqrt(7/3), t = 7/3 / sqrt(7/9) = 2.6458, p = 0.1181 on 2 degrees of
    freedom); the interval excludes 0 exactly where p < 0.05."""
    test = paired_test([1.0, 2.0, 4.0])
    assert test.p == pytest.approx(0.118083, abs=1e-6)
    assert not test.excludes_zero and test.spread
    test = paired_test([3.0, 3.5, 4.0])
    assert test.excludes_zero and test.p < 0.05 and test.beyond_noise
    welch = welch_test([1.0, 2.0, 4.0], [0.0, 0.5, 0.2, 0.1])
    assert welch.p == pytest.approx(0.134693, abs=1e-6)  # scipy's ttest_ind(equal_var=False)


def test_paired_ratio_is_the_median_of_the_ratios_by_repeat_with_the_lowest_and_highest():
    """Repeats 0..4 of A and B: ratios 12/10 = 1.2, 9/10 = 0.9, 22/11 = 2.0, 15/10 = 1.5,
    10/8 = 1.25; sorted 0.9, 1.2, 1.25, 1.5, 2.0: median 1.25 (not 15/10, the ratio of the
    medians, 12 / 10 = 1.2). Repeat 5 has no B: left out."""
    a = {0: 12.0, 1: 9.0, 2: 22.0, 3: 15.0, 4: 10.0, 5: 99.0}
    b = {0: 10.0, 1: 10.0, 2: 11.0, 3: 10.0, 4: 8.0}
    ratio = paired_ratio(a, b)
    assert (ratio.median, ratio.low, ratio.high, ratio.n) == (1.25, 0.9, 2.0, 5)
    # an even count: the mean of the two middle ratios
    assert paired_ratio({0: 1.0, 1: 3.0}, {0: 1.0, 1: 1.0}).median == 2.0
    assert paired_ratio({0: 1.0}, {1: 1.0}) is None
