"""Energy coefficients between distributions, from samples or from four moments per feature.

"Distributed Collaborative Learning with Representative Knowledge Sharing" (Casey et al.,
Mathematics 2025; CTL) weights each guest node by how close its data are to a prediction task,
measured by the energy coefficient of two random vectors X and Y (X', Y' independent copies):

    H = (2 E|X - Y| - E|X - X'| - E|Y - Y'|) / (2 E|X - Y|),   in [0, 1], 0 = same law.  (C8)

CTL computes it per feature i, so that nodes only share moments (never samples), and combines
the features with importance weights w_i (C11): H = sum_i w_i H_i (C12).

Moment approximation (C10), per feature, with dmu = mu_X - mu_Y, nu = sigma_X^2 + sigma_Y^2 +
dmu^2, C3 = sigma_X^3 g3_X - sigma_Y^3 g3_Y, C4 = sigma_X^4 g4_X + sigma_Y^4 g4_Y (g3 skewness,
g4 *excess* kurtosis):

    E|X_i - Y_i| ~ sqrt(nu) (3/4 - (C4 + 4 C3 dmu - 2 dmu^4) / (8 nu^2)).

It is the second-order expansion E sqrt(D^2) ~ sqrt(m) - Var(D^2) / (8 m^(3/2)) with D = X - Y
and m = E D^2 = nu; Var(D^2) = C4 + 4 C3 dmu + 2 nu^2 - 2 dmu^4 holds exactly when g4 is the
excess kurtosis. E|X_i - X_i'| is the same formula with Y = X. The paper's extracted text lost
the signs; the authors' code (``jcasey98/DCLRep``) uses this form. The approximation is close
for Gaussian-like features and poor for strongly skewed ones (Exp(1) vs Exp(1) + 0.5: H 0.33
against an exact 0.10), and can leave [0, 1] slightly; ``exact_feature_coefficients`` computes
the exact per-feature value from samples (pairwise, on a subsample) to measure that.

Hand-written: no maintained library computes energy coefficients from moments.
"""

from __future__ import annotations

import numpy as np

MOMENTS = ("mean", "std", "skewness", "excess-kurtosis")


def feature_moments(x: np.ndarray) -> np.ndarray:
    """(4, d): mean, standard deviation (ddof 0), skewness and excess kurtosis per column.

    A constant column has skewness and excess kurtosis 0 (scipy would give NaN); a sample of
    one row has standard deviation 0 and the same convention.
    """
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    if len(x) == 0:
        raise ValueError("feature_moments needs at least one sample")
    mean = x.mean(axis=0)
    centred = x - mean
    var = (centred**2).mean(axis=0)
    std = np.sqrt(var)
    safe = np.where(var > 0, var, 1.0)
    skew = np.where(var > 0, (centred**3).mean(axis=0) / safe**1.5, 0.0)
    kurt = np.where(var > 0, (centred**4).mean(axis=0) / safe**2 - 3.0, 0.0)
    return np.stack([mean, std, skew, kurt])


def expected_distance(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(C10) per feature: the moment approximation of E|X_i - Y_i|.

    ``x``, ``y``: moments shaped (..., 4, d) as ``feature_moments`` gives them; leading axes
    broadcast (all pairs of K distributions at once: ``x[:, None]`` against ``y[None]``).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    mu_x, s_x, g3_x, g4_x = (x[..., m, :] for m in range(4))
    mu_y, s_y, g3_y, g4_y = (y[..., m, :] for m in range(4))
    dmu = mu_x - mu_y
    nu = s_x**2 + s_y**2 + dmu**2
    c3 = s_x**3 * g3_x - s_y**3 * g3_y
    c4 = s_x**4 * g4_x + s_y**4 * g4_y
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.sqrt(nu) * (0.75 - (c4 + 4 * c3 * dmu - 2 * dmu**4) / (8 * nu**2))
    return np.where(nu > 0, value, 0.0)  # two point masses at the same place: distance 0


def _coefficient(between: np.ndarray, within_x: np.ndarray, within_y: np.ndarray) -> np.ndarray:
    """(C8) per feature from the three expected distances; 0 where X and Y are one point mass."""
    with np.errstate(divide="ignore", invalid="ignore"):
        h = (2 * between - within_x - within_y) / (2 * between)
    return np.where(between > 0, h, 0.0)


def feature_coefficients(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """(..., d) per-feature energy coefficients H_i by the moment approximation (C10), for
    moments shaped (..., 4, d) (leading axes broadcast).

    Exactly 0 for identical moments; not clipped (the approximation can leave [0, 1]).
    """
    return _coefficient(expected_distance(x, y), expected_distance(x, x), expected_distance(y, y))


def exact_feature_coefficients(
    x: np.ndarray, y: np.ndarray, max_samples: int = 2000, seed: int = 0
) -> np.ndarray:
    """(d,) per-feature energy coefficients from samples (C9: all pairs of a subsample of at most
    ``max_samples`` rows of each; O(max_samples^2 d))."""
    rng = np.random.default_rng(seed)
    x = np.asarray(x, dtype=np.float64).reshape(len(x), -1)
    y = np.asarray(y, dtype=np.float64).reshape(len(y), -1)
    x = x[rng.permutation(len(x))[:max_samples]]
    y = y[rng.permutation(len(y))[:max_samples]]

    def mean_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return np.abs(a[:, None, :] - b[None, :, :]).mean(axis=(0, 1))

    return _coefficient(mean_distance(x, y), mean_distance(x, x), mean_distance(y, y))


def feature_importance(q0: float, q: np.ndarray) -> np.ndarray:
    """(C11): w_i = |q_i - q_0| / sum_j |q_j - q_0|, from the model's prediction q_0 at the
    origin and q_i at the unit vector e_i. Uniform 1/d when the model is constant there (a
    zero-initialised model at the first round, as in the authors' code)."""
    change = np.abs(np.asarray(q, dtype=np.float64) - float(q0))
    total = change.sum()
    if not np.isfinite(total) or total <= 0:
        return np.full(len(change), 1.0 / len(change))
    return change / total
