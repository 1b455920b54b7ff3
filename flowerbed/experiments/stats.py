"""The statistics that judge a comparison of per-seed results: a 95 % Student-t interval of a
difference with the two-sided p-value of the same t test (``paired_test`` for per-seed
differences, ``welch_test`` for two unpaired samples), the sign test's distribution-free
interval of the median per-seed difference for differences that may be infinite
(``sign_test``), the tolerance within which values count as
the same (``same_within``), and the Holm-Bonferroni correction over a family of such tests
(``holm``). An interval whose values do not vary has no spread: it is the mean alone, its
p-value is NaN, and it is never called beyond noise.

Timing comparisons are ratios, not differences: ``paired_ratio`` is the median of the ratios of
two variants paired by repeat (the variants alternate within each repeat, so load from other
work falls on both alike), with its spread, the lowest and the highest ratio."""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping
from dataclasses import dataclass

from scipy import stats


@dataclass(frozen=True)
class Interval:
    """A 95 % t interval of a difference and the two-sided p-value of the same t test (H0: the
    difference is 0). ``spread``: whether the values it was made of vary; without spread the
    interval is the mean alone (``low == high == mean``), the t statistic is undefined and
    ``p`` is NaN: such an interval is shown, counted, and never called beyond noise."""

    mean: float  # the sign test's: the median
    low: float
    high: float
    n: int
    p: float
    spread: bool  # a sign-test interval is always informative: True
    test: str  # "paired t", "Welch t" or SIGN_TEST

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    @property
    def beyond_noise(self) -> bool:
        """The bold rule: the interval excludes 0 and the values vary."""
        return self.spread and self.excludes_zero


def same_within(digits: int) -> float:
    """How far apart values may be and still count as the same, for a cell shown with
    ``digits`` decimals: a thousandth of the last digit shown. Accuracies are stored as float32
    fractions (k/360 as 0.9416666626930237), so differences that are equal in exact arithmetic
    differ by about 1e-5 points in floating point; real differences are at least one test
    sample (0.28 points on digits' 360)."""
    return 10.0 ** -(digits + 3)


def _varies(values: list[float], tolerance: float) -> bool:
    return max(values) - min(values) > tolerance


def paired_test(differences: list[float], tolerance: float = same_within(1)) -> Interval:
    """The paired t test of per-seed differences (n >= 1): their mean, its 95 % Student-t
    interval (t with n - 1 degrees of freedom) and the two-sided p-value of the same t
    statistic, mean / (sd / sqrt(n)); NaN bounds and p for one difference, NaN p and
    ``low == high == mean`` where every difference is the same within ``tolerance`` (no
    spread: ``same_within``)."""
    n = len(differences)
    mean = statistics.mean(differences)
    if n < 2:
        return Interval(mean, math.nan, math.nan, n, math.nan, False, "paired t")
    if not _varies(differences, tolerance):
        return Interval(mean, mean, mean, n, math.nan, False, "paired t")
    error = statistics.stdev(differences) / math.sqrt(n)
    half = stats.t.ppf(0.975, n - 1) * error
    p = 2 * stats.t.sf(abs(mean) / error, n - 1)
    return Interval(mean, mean - half, mean + half, n, float(p), True, "paired t")


SIGN_TEST = "sign test"


def sign_test(differences: list[float]) -> Interval:
    """The sign test of per-seed differences that may be infinite (a target one method never
    reaches: 12 - ∞ = -∞; two ∞ of the same sign are a tie, 0): the median difference, its
    distribution-free 95 % interval from the order statistics, [d_(k), d_(n + 1 - k)] with k
    the largest such that P(B <= k - 1) <= 0.025 for B ~ Binomial(n, 1/2) (coverage at least
    95 % for any distribution), and the two-sided binomial p-value of the signs, ties left out.
    It needs no finite value and no spread: every difference -∞ gives [-∞, -∞]. Under 6 seeds
    no k exists (1/2^5 > 0.025): the interval is (-∞, ∞) and never excludes 0."""
    values = sorted(0.0 if math.isnan(d) else d for d in differences)
    n = len(values)
    k = 0
    while k < n // 2 and stats.binom.cdf(k, n, 0.5) <= 0.025:  # P(B <= k), the next k's
        k += 1
    low, high = (values[k - 1], values[n - k]) if k else (-math.inf, math.inf)
    above, below = sum(d > 0 for d in values), sum(d < 0 for d in values)
    p = float(stats.binomtest(above, above + below).pvalue) if above + below else math.nan
    median = statistics.median(values) if n else math.nan
    return Interval(median, low, high, n, p, True, SIGN_TEST)


def welch_test(a: list[float], b: list[float], tolerance: float = same_within(1)) -> Interval:
    """mean(a) - mean(b), its 95 % Welch t interval (unpaired, unequal variances, Welch-
    Satterthwaite degrees of freedom) and the two-sided p-value of the same t statistic; no
    spread (NaN p) where both samples are constant (within ``tolerance``)."""
    difference = statistics.mean(a) - statistics.mean(b)
    n = len(a) + len(b)
    if not (_varies(a, tolerance) or _varies(b, tolerance)):
        return Interval(difference, difference, difference, n, math.nan, False, "Welch t")
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    dof = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    error = math.sqrt(va + vb)
    half = stats.t.ppf(0.975, dof) * error
    p = 2 * stats.t.sf(abs(difference) / error, dof)
    return Interval(difference, difference - half, difference + half, n, float(p), True, "Welch t")


def holm(p_values: list[float], alpha: float = 0.05) -> tuple[list[float], list[bool]]:
    """Holm-Bonferroni over a family of m tests: the i-th smallest p-value (i = 1..m) times
    (m - i + 1), made non-decreasing (the adjusted p-values), and whether each survives at
    family-wise ``alpha`` (adjusted <= alpha: the step-down procedure, which stops at the
    first p-value above alpha / (m - i + 1)). A NaN p-value (an interval without spread)
    counts in m, is adjusted to NaN and never survives."""
    m = len(p_values)
    order = sorted((p, i) for i, p in enumerate(p_values) if not math.isnan(p))
    adjusted = [math.nan] * m
    running = 0.0
    for rank, (p, i) in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p))
        adjusted[i] = running
    return adjusted, [not math.isnan(a) and a <= alpha for a in adjusted]


@dataclass(frozen=True)
class Ratio:
    """The median of ``n`` paired ratios and their spread: the lowest and the highest."""

    median: float
    low: float
    high: float
    n: int


def paired_ratio(ours: Mapping[Hashable, float], base: Mapping[Hashable, float]) -> Ratio | None:
    """``ours`` over ``base`` paired by key (a repeat, a seed: the keys both have, others left
    out): the median of the per-key ratios, the lowest and the highest; None where no key has
    both."""
    ratios = [value / base[key] for key, value in ours.items() if key in base]
    if not ratios:
        return None
    return Ratio(statistics.median(ratios), min(ratios), max(ratios), len(ratios))
