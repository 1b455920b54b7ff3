"""Verdicts on the orderings papers claim: a ``Claim`` ("method A beats method B on this metric",
and where the paper says so) and the ``verdict`` of its paired per-seed differences, one word
of "reproduced", "reversed", "within noise" or "not judged" with the 95 % interval it rests on
(the paired t interval of the mean difference; ``sign_verdict``: the sign test's interval of the
median difference, for differences that may be infinite; ``contrast_verdict``: for a claim
across two settings, "A's lead over B is larger in this setting than in that one", the Welch
interval of the difference of the two settings' mean paired differences);
and ``chance_crossings``, how many of a page's intervals would exclude 0 by chance alone."""

from __future__ import annotations

import math
from dataclasses import dataclass

from flowerbed.experiments.stats import (
    Interval,
    paired_test,
    same_within,
    sign_test,
    welch_test,
)

REPRODUCED = "reproduced"
REVERSED = "reversed"
WITHIN_NOISE = "within noise"
NOT_JUDGED = "not judged"

# the reasons a verdict gives
BEYOND_NOISE = "the interval excludes 0 and the differences vary"
SIGN_BEYOND_NOISE = "the sign test's interval of the median excludes 0"
INCLUDES_ZERO = "the interval includes 0"
NO_SPREAD = "the differences do not vary (no spread): no t test can judge them"
TOO_FEW_SEEDS = "fewer than 2 seeds"
TOO_FEW_IN_A_SETTING = "fewer than 2 seeds in one of the two settings"

# the interval of a verdict without any seed: NaN throughout, n = 0
NO_SEED = Interval(math.nan, math.nan, math.nan, 0, math.nan, False, "paired t")


@dataclass(frozen=True)
class Claim:
    """An ordering a paper claims: on ``metric``, method ``better`` beats method ``worse``.
    ``higher_is_better`` is False for a metric to minimise (a loss, an error rate); ``source``
    says where the paper claims it ("Table 2, p. 7")."""

    paper: str
    better: str
    worse: str
    metric: str
    higher_is_better: bool
    source: str


@dataclass(frozen=True)
class Verdict:
    """The verdict on a claim: ``word`` (``REPRODUCED``, ``REVERSED``, ``WITHIN_NOISE`` or
    ``NOT_JUDGED``), the paired interval of the per-seed differences it rests on, and why
    (``reason``: one of ``BEYOND_NOISE``, ``INCLUDES_ZERO``, ``NO_SPREAD``,
    ``TOO_FEW_SEEDS``)."""

    word: str
    interval: Interval
    reason: str


def verdict(
    differences: list[float], higher_is_better: bool = True, tolerance: float = same_within(1)
) -> Verdict:
    """The verdict on per-seed differences (better - worse, one per seed, in the metric's units)
    from their paired 95 % t interval (``paired_test``, with ``tolerance`` for "the same").

    The rules, in order:

    - fewer than 2 seeds: "not judged" (one seed: the mean with NaN bounds; no seed: ``NO_SEED``,
      NaN throughout);
    - every difference the same within ``tolerance``: "within noise", reason ``NO_SPREAD``
      (a zero-width interval is never called beyond noise, whatever its sign);
    - the interval includes 0: "within noise", reason ``INCLUDES_ZERO``;
    - otherwise the interval lies on one side of 0: "reproduced" where that is the claimed side,
      "reversed" where it is the other. The claimed side is positive where higher is better and
      negative where lower is (a loss, an error: the better method's value is the smaller).
    """
    if not differences:
        return Verdict(NOT_JUDGED, NO_SEED, TOO_FEW_SEEDS)
    interval = paired_test(differences, tolerance)
    if interval.n < 2:
        return Verdict(NOT_JUDGED, interval, TOO_FEW_SEEDS)
    return sided_verdict(interval, higher_is_better, BEYOND_NOISE)


def sided_verdict(interval: Interval, higher_is_better: bool, beyond: str) -> Verdict:
    """The verdict an interval of a judged claim gives: without spread "within noise"
    (``NO_SPREAD``); holding 0 "within noise" (``INCLUDES_ZERO``); otherwise "reproduced" on
    the claimed side (positive where higher is better, negative where lower is) and "reversed"
    on the other, both for the reason ``beyond``."""
    if not interval.spread:
        return Verdict(WITHIN_NOISE, interval, NO_SPREAD)
    if not interval.excludes_zero:
        return Verdict(WITHIN_NOISE, interval, INCLUDES_ZERO)
    on_claimed_side = interval.low > 0 if higher_is_better else interval.high < 0
    return Verdict(REPRODUCED if on_claimed_side else REVERSED, interval, beyond)


def sign_verdict(differences: list[float], higher_is_better: bool = True) -> Verdict:
    """The verdict on per-seed differences that may be infinite (a target never reached), from
    the sign test's 95 % interval of their median (``stats.sign_test``, distribution-free, no
    finite value needed): under 2 seeds "not judged"; the interval includes 0 (always under 6
    seeds): "within noise"; otherwise "reproduced" on the claimed side, "reversed" on the
    other, as ``verdict``."""
    interval = sign_test(differences) if differences else NO_SEED
    if interval.n < 2:
        return Verdict(NOT_JUDGED, interval, TOO_FEW_SEEDS)
    return sided_verdict(interval, higher_is_better, SIGN_BEYOND_NOISE)  # always with spread


def contrast_verdict(
    first: list[float],
    second: list[float],
    higher_is_better: bool = True,
    tolerance: float = same_within(1),
) -> Verdict:
    """The verdict on a claim across two settings: that a method's lead over another is larger
    in the first setting than in the second. ``first`` and ``second``: the per-seed differences
    (better - worse) in each setting. The interval is the 95 % Welch t interval of
    mean(first) - mean(second) (``stats.welch_test``): unpaired, since each setting keeps its
    own seeds. Under 2 differences in either setting "not judged" (NaN bounds,
    ``TOO_FEW_IN_A_SETTING``); otherwise the
    rules of ``verdict`` (``sided_verdict``): the claimed side is positive where higher is
    better, negative where lower is (a larger lead is then a more negative difference)."""
    if min(len(first), len(second)) < 2:
        n = len(first) + len(second)
        no_interval = Interval(math.nan, math.nan, math.nan, n, math.nan, False, "Welch t")
        return Verdict(NOT_JUDGED, no_interval, TOO_FEW_IN_A_SETTING)
    return sided_verdict(welch_test(first, second, tolerance), higher_is_better, BEYOND_NOISE)


def chance_crossings(n_intervals: int, alpha: float = 0.05) -> float:
    """The expected number of ``n_intervals`` (1 - ``alpha``) intervals that exclude 0 by chance
    alone, when every true difference is 0: each does with probability ``alpha``, so
    ``n_intervals * alpha`` (20 intervals at 95 %: 1). The page's "how many would cross by
    chance" line, to set beside how many do."""
    if n_intervals < 0:
        raise ValueError(f"n_intervals must be >= 0, not {n_intervals}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), not {alpha}")
    return n_intervals * alpha
