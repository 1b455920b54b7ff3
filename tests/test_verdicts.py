"""flowerbed.experiments.verdicts on hand-made per-seed differences: each rule of ``verdict``
(reproduced, reversed, within noise for an interval holding 0 and for differences that do not
vary, not judged under 2 seeds), the side flipped for a metric to minimise, the interval's
bounds against a typed-in t quantile, ``contrast_verdict`` (a lead larger in one setting than in
another) worked out by hand, and ``chance_crossings``."""

import dataclasses
import math

import pytest

from flowerbed.experiments.stats import sign_test
from flowerbed.experiments.verdicts import (
    BEYOND_NOISE,
    INCLUDES_ZERO,
    NO_SPREAD,
    NOT_JUDGED,
    REPRODUCED,
    REVERSED,
    SIGN_BEYOND_NOISE,
    TOO_FEW_IN_A_SETTING,
    TOO_FEW_SEEDS,
    WITHIN_NOISE,
    Claim,
    chance_crossings,
    contrast_verdict,
    sign_verdict,
    verdict,
)

T_975_2 = 4.302653  # Student t, 97.5 % quantile, 2 degrees of freedom (3 seeds), from a table

# better - worse on 3 seeds: mean 3.5, deviations -0.5, 0, +0.5, variance (0.25 + 0 + 0.25) / 2
# = 0.25, sd 0.5, standard error 0.5 / sqrt(3) = 0.288675, half width 4.302653 x 0.288675
# = 1.242069: interval [2.257931, 4.742069], above 0
CLEAR_WIN = [3.0, 3.5, 4.0]
CLEAR_LOSS = [-3.0, -3.5, -4.0]  # the same mirrored: [-4.742069, -2.257931], below 0


def test_a_clear_win_is_reproduced():
    result = verdict(CLEAR_WIN)
    assert result.word == REPRODUCED and result.reason == BEYOND_NOISE
    assert result.interval.n == 3 and result.interval.mean == pytest.approx(3.5)


def test_a_clear_loss_is_reversed():
    result = verdict(CLEAR_LOSS)
    assert result.word == REVERSED and result.reason == BEYOND_NOISE


def test_the_bounds_are_the_mean_plus_and_minus_t_times_the_standard_error():
    interval = verdict(CLEAR_WIN).interval
    half = T_975_2 * 0.5 / math.sqrt(3)  # 1.242069
    assert interval.low == pytest.approx(3.5 - half, abs=1e-5)  # 2.257931
    assert interval.high == pytest.approx(3.5 + half, abs=1e-5)  # 4.742069
    assert interval.low == pytest.approx(2.257931, abs=1e-5)
    assert interval.high == pytest.approx(4.742069, abs=1e-5)


def test_a_noisy_difference_whose_interval_holds_zero_is_within_noise():
    # [-1, 2, 1]: mean 2/3, deviations -5/3, +4/3, +1/3, variance (25 + 16 + 1) / 9 / 2 = 7/3,
    # sd 1.527525, standard error 1.527525 / sqrt(3) = 0.881917, half width 4.302653 x 0.881917
    # = 3.794583: interval [-3.127917, +4.461250], which holds 0
    result = verdict([-1.0, 2.0, 1.0])
    assert result.word == WITHIN_NOISE and result.reason == INCLUDES_ZERO
    assert result.interval.low == pytest.approx(-3.127917, abs=1e-5)
    assert result.interval.high == pytest.approx(4.461250, abs=1e-5)
    # the same interval for a metric to minimise is within noise too
    assert verdict([-1.0, 2.0, 1.0], higher_is_better=False).word == WITHIN_NOISE


def test_differences_that_do_not_vary_are_within_noise_never_reproduced():
    # every seed +1.0: sd 0, no t statistic; the interval is the mean alone, [1.0, 1.0], which
    # lies above 0 but must not count as a reproduction
    result = verdict([1.0, 1.0, 1.0])
    assert result.word == WITHIN_NOISE and result.reason == NO_SPREAD
    assert result.interval.low == result.interval.high == 1.0
    assert not result.interval.spread and math.isnan(result.interval.p)
    # 1e-6 apart (floating-point noise) is the same within the default tolerance, 1e-4
    assert verdict([1.0, 1.0 + 1e-6, 1.0 - 1e-6]).reason == NO_SPREAD
    # and with a tolerance below that spread, the values vary: 1 +- 1e-6 is then reproduced
    assert verdict([1.0, 1.0 + 1e-6, 1.0 - 1e-6], tolerance=1e-9).word == REPRODUCED


def test_fewer_than_two_seeds_are_not_judged():
    one = verdict([5.0])
    assert one.word == NOT_JUDGED and one.reason == TOO_FEW_SEEDS
    assert one.interval.n == 1 and one.interval.mean == 5.0 and math.isnan(one.interval.low)
    none = verdict([])
    assert none.word == NOT_JUDGED and none.reason == TOO_FEW_SEEDS
    assert none.interval.n == 0 and math.isnan(none.interval.mean)


def test_lower_is_better_flips_the_claimed_side():
    # a loss: better - worse below 0 is the claim; the same intervals as above, judged the
    # other way round
    assert verdict(CLEAR_LOSS, higher_is_better=False).word == REPRODUCED
    assert verdict(CLEAR_WIN, higher_is_better=False).word == REVERSED


def test_chance_crossings_is_the_number_of_intervals_times_alpha():
    assert chance_crossings(20) == pytest.approx(1.0)  # 20 x 0.05
    assert chance_crossings(30, alpha=0.01) == pytest.approx(0.3)  # 30 x 0.01
    assert chance_crossings(0) == 0.0
    with pytest.raises(ValueError):
        chance_crossings(-1)
    with pytest.raises(ValueError):
        chance_crossings(10, alpha=1.5)


def test_a_claim_is_frozen_and_says_where_the_paper_makes_it():
    claim = Claim("fedprox", "FedProx", "FedAvg", "accuracy", True, "Table 2, p. 7")
    assert (claim.better, claim.worse, claim.source) == ("FedProx", "FedAvg", "Table 2, p. 7")
    with pytest.raises(dataclasses.FrozenInstanceError):
        claim.better = "FedAvg"


# --- the sign test, for differences that may be infinite ------------------------------------------


def test_the_sign_tests_interval_is_the_order_statistics_a_binomial_table_gives():
    # n = 8: P(B <= 0) = 1/256 = 0.0039 <= 0.025, P(B <= 1) = 9/256 = 0.035 > 0.025, so k = 1:
    # [d_(1), d_(8)], coverage 1 - 2/256 = 99.2 %; the median is (d_(4) + d_(5)) / 2
    differences = [5.0, -1.0, 3.0, 2.0, 4.0, 7.0, 6.0, 1.0]
    interval = sign_test(differences)
    assert (interval.low, interval.high, interval.mean) == (-1.0, 7.0, 3.5)
    assert interval.p == pytest.approx(2 * 9 / 256)  # 7 of 8 above 0: 2 P(B <= 1)
    # n = 20: P(B <= 5) = 0.0207, P(B <= 6) = 0.0577, so k = 6: [d_(6), d_(15)]
    interval = sign_test([float(d) for d in range(1, 21)])
    assert (interval.low, interval.high) == (6.0, 15.0)


def test_the_sign_test_judges_infinite_differences_and_needs_six_seeds():
    never = [-math.inf] * 6  # the better method reached its target, the worse never did
    result = sign_verdict(never, higher_is_better=False)
    assert result.word == REPRODUCED and result.reason == SIGN_BEYOND_NOISE
    assert (result.interval.low, result.interval.high) == (-math.inf, -math.inf)
    assert sign_verdict([math.inf] * 6, higher_is_better=False).word == REVERSED
    five = sign_verdict([-math.inf] * 5, higher_is_better=False)  # 1/32 > 0.025: no interval
    assert five.word == WITHIN_NOISE and five.reason == INCLUDES_ZERO
    assert (five.interval.low, five.interval.high) == (-math.inf, math.inf)
    ties = sign_verdict([0.0] * 8)  # two ∞ in every seed: all ties
    assert ties.word == WITHIN_NOISE and math.isnan(ties.interval.p)
    assert sign_verdict([-math.inf]).word == NOT_JUDGED
    assert sign_verdict([]).reason == TOO_FEW_SEEDS


# A contrast: per-seed differences (better - worse) in two settings, unpaired. Each sample of 3
# with the same variance gives Welch-Satterthwaite degrees of freedom (2v/3)^2 / (2 (v/3)^2 / 2)
# = 4 exactly; t(0.975, 4) = 2.776445 (from a table).
T_975_4 = 2.776445
LARGE_LEAD = [5.0, 6.0, 7.0]  # mean 6, variance 1
SMALL_LEAD = [1.0, 2.0, 3.0]  # mean 2, variance 1


def test_a_lead_clearly_larger_in_the_first_setting_is_reproduced():
    # 6 - 2 = 4, standard error sqrt(1/3 + 1/3) = 0.816497, half 2.776445 x 0.816497 = 2.266966
    result = contrast_verdict(LARGE_LEAD, SMALL_LEAD)
    assert result.word == REPRODUCED and result.reason == BEYOND_NOISE
    assert result.interval.test == "Welch t" and result.interval.n == 6
    half = T_975_4 * math.sqrt(2 / 3)
    assert half == pytest.approx(2.266966, abs=1e-5)
    assert result.interval.mean == pytest.approx(4.0)
    assert result.interval.low == pytest.approx(4 - half, abs=1e-5)  # 1.733034
    assert result.interval.high == pytest.approx(4 + half, abs=1e-5)  # 6.266966


def test_a_lead_clearly_smaller_in_the_first_setting_is_reversed():
    result = contrast_verdict(SMALL_LEAD, LARGE_LEAD)
    assert result.word == REVERSED and result.reason == BEYOND_NOISE
    assert result.interval.high == pytest.approx(-4 + T_975_4 * math.sqrt(2 / 3), abs=1e-5)


def test_a_contrast_whose_interval_holds_zero_is_within_noise():
    # [0, 3, 6] and [-1, 2, 5]: means 3 and 2, variances 9 and 9, standard error sqrt(3 + 3)
    # = 2.449490, half 2.776445 x 2.449490 = 6.800874: [-5.800874, 7.800874]
    result = contrast_verdict([0.0, 3.0, 6.0], [-1.0, 2.0, 5.0])
    assert result.word == WITHIN_NOISE and result.reason == INCLUDES_ZERO
    assert T_975_4 * math.sqrt(6) == pytest.approx(6.800874, abs=1e-5)
    assert result.interval.low == pytest.approx(1 - 6.800874, abs=1e-5)
    assert result.interval.high == pytest.approx(1 + 6.800874, abs=1e-5)


def test_a_contrast_for_a_metric_to_minimise_claims_the_negative_side():
    # lower is better: a larger lead is a more negative better - worse
    leads = ([-x for x in LARGE_LEAD], [-x for x in SMALL_LEAD])
    assert contrast_verdict(*leads, higher_is_better=False).word == REPRODUCED
    assert contrast_verdict(LARGE_LEAD, SMALL_LEAD, higher_is_better=False).word == REVERSED


def test_a_contrast_without_spread_or_seeds_is_not_called_beyond_noise():
    flat = contrast_verdict([2.0, 2.0, 2.0], [1.0, 1.0, 1.0])
    assert flat.word == WITHIN_NOISE and flat.reason == NO_SPREAD
    assert flat.interval.low == flat.interval.high == 1.0
    alone = contrast_verdict([5.0], SMALL_LEAD)
    assert alone.word == NOT_JUDGED and alone.reason == TOO_FEW_IN_A_SETTING
    assert alone.interval.n == 4 and math.isnan(alone.interval.low)
