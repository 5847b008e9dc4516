"""Confidence intervals for rates in [0, 1] that stay in [0, 1].

A Wald interval `rate +- z se` leaves [0, 1] near the ends (a consistency of 2 / 240 gets a
negative lower bound) and under-covers there. Wilson's score interval instead inverts the score
test: it is the set of proportions pi with (p - pi)**2 <= z**2 pi (1 - pi) / n, which solves to

    centre = (p + z**2 / (2 n)) / (1 + z**2 / n)
    half   = z sqrt(p (1 - p) / n + z**2 / (4 n**2)) / (1 + z**2 / n)

and lies inside [0, 1] for every p in [0, 1] (Wilson 1927; recommended by Brown, Cai and
DasGupta 2001). Example: 3 successes in 10 give [0.1078, 0.6032] at 95%.

Clustered rates. When the items are clustered (pairs of summaries of one article), the rate is
the mean m of per-item values in [0, 1] and its cluster-robust standard error se
(`clustered_mean_se`) is larger than sqrt(m (1 - m) / N). Wilson's formula is then applied at
the effective sample size that standard error implies,

    n_eff = m (1 - m) / se**2,

the design-effect substitution Korn and Graubard (1998) use for exact intervals from survey
data, with the Student t quantile of G - 1 degrees of freedom (G clusters) in place of z. The
per-item values need not be 0/1 (a tie counted as 1/2 is fine): n_eff then reflects their
actual spread, and the interval still stays in [0, 1].
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from jaxjudge.diagnostics._stats import normal_quantile, t_quantile
from jaxjudge.diagnostics.paired import clustered_mean_se
from jaxjudge.metrics._checks import as_float_vector
from jaxjudge.metrics.groups import encode_groups


def _wilson(p: float, n: float, z: float) -> tuple[float, float]:
    """Wilson's bounds for a proportion p observed on n (possibly effective, non-integer) trials."""
    z2n = z * z / n
    centre = (p + z2n / 2.0) / (1.0 + z2n)
    half = z * math.sqrt(p * (1.0 - p) / n + z2n / (4.0 * n)) / (1.0 + z2n)
    # At p = 0 (p = 1) the lower (upper) root is exactly 0 (1); rounding can leave it a few ulps
    # off, on either side of p.
    return max(0.0, min(centre - half, p)), min(1.0, max(centre + half, p))


def wilson_interval(successes: float, n: float, alpha: float = 0.05) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    Args:
      successes: number of successes x, 0 <= x <= n (a non-integer x, e.g. ties counted 1/2,
        is accepted and treated as the proportion x / n).
      n: number of trials (> 0; may be an effective, non-integer size).
      alpha: 1 - confidence level, in (0, 1); the normal (1 - alpha/2) quantile is used.

    Returns:
      (low, high) with 0 <= low <= x / n <= high <= 1.

    Raises:
      ValueError: n not positive, x outside [0, n], non-finite input, alpha outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    x, n = float(successes), float(n)
    if not (math.isfinite(x) and math.isfinite(n)) or n <= 0:
        raise ValueError(f"n must be a finite number > 0 and successes finite, got x={successes!r}, n={n!r}")
    if not 0.0 <= x <= n:
        raise ValueError(f"successes must lie in [0, n] = [0, {n}], got {successes!r}")
    return _wilson(x / n, n, normal_quantile(1.0 - alpha / 2.0))


@dataclass(frozen=True)
class RateInterval:
    """A rate (mean of per-item values in [0, 1]) with a clustered Wilson interval.

    Attributes:
      estimate: the rate m.
      se: its cluster-robust standard error (`clustered_mean_se`).
      low, high: Wilson bounds at the effective sample size n_eff, in [0, 1].
      n_eff: m (1 - m) / se**2; the item count N when m is 0 or 1 (no spread to measure),
        inf when 0 < m < 1 and se = 0 (all items equal: the interval is the point m).
      df: G - 1, the degrees of freedom of the t quantile.
    """

    estimate: float
    se: float
    low: float
    high: float
    n_eff: float
    df: int


def clustered_wilson_interval(values, groups, alpha: float = 0.05) -> RateInterval:
    """Wilson interval for the mean of per-item values in [0, 1], clustered (module docstring).

    Args:
      values: per-item values [N] in [0, 1] (e.g. 1 = consistent pair, 0 = not).
      groups: cluster (source document) id per item [N]; at least two distinct.
      alpha: 1 - confidence level, in (0, 1).

    Returns:
      RateInterval.

    Raises:
      ValueError: values outside [0, 1] or non-finite, fewer than 2 clusters, mismatched
        lengths, alpha outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    v = as_float_vector(values, "values")
    if ((v < 0.0) | (v > 1.0)).any():
        raise ValueError("values must lie in [0, 1] for a rate interval")
    codes, g = encode_groups(groups, order="first", name="groups", n=v.shape[0])[:2]
    m, se = clustered_mean_se(v, codes)
    df = g - 1
    z = t_quantile(1.0 - alpha / 2.0, df)
    if m in (0.0, 1.0):
        n_eff = float(v.shape[0])
    elif se == 0.0:
        return RateInterval(estimate=m, se=se, low=m, high=m, n_eff=math.inf, df=df)
    else:
        n_eff = m * (1.0 - m) / se**2
    low, high = _wilson(m, n_eff, z)
    return RateInterval(estimate=m, se=se, low=low, high=high, n_eff=n_eff, df=df)
