"""How often the intervals of the spread over score ranges cover the truth, at the level of the
range estimates: the report's heterogeneity (`jaxjudge.metrics.heterogeneity`) against the
percentile interval of max - min, and the report's interval of a difference of two spreads
(``spread_diff`` in `jaxjudge.report.ranges`). ``python experiments/coverage.py --spread``
prints both tables with a committed run's noise.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jaxjudge.metrics.heterogeneity import heterogeneity_interval, net_sd, noise_covariance

__all__ = ["SpreadCoverage", "spread_coverage", "spread_diff_coverage"]


@dataclass(frozen=True)
class SpreadCoverage:
    """Result of `spread_coverage` at one true heterogeneity.

    Attributes:
      tau: the true heterogeneity (standard deviation of the K true values).
      max_min: the true max - min of the K values.
      heterogeneity: share of replicates whose heterogeneity interval held ``tau``.
      max_min_percentile: share whose percentile interval of max - min held ``max_min``.
      estimate_inside: share whose heterogeneity estimate lay inside its own interval.
      max_min_inside: the same for max - min and its percentile interval.
      n: replicates.
    """

    tau: float
    max_min: float
    heterogeneity: float
    max_min_percentile: float
    estimate_inside: float
    max_min_inside: float
    n: int


def spread_coverage(
    cov: np.ndarray,
    taus: tuple[float, ...],
    n_sims: int,
    *,
    direction: tuple[float, ...] = (-3.0, -1.0, 1.0, 3.0),
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> list[SpreadCoverage]:
    """Coverage of the spread intervals, at the level of the K range estimates.

    Each replicate draws the K estimates as ``theta + N(0, cov)``, with ``theta`` deviating
    from a common value along ``direction`` (centred and scaled to heterogeneity ``tau``), and
    ``n_boot`` bootstrap-like replicates as ``estimates + N(0, cov)`` (what a paired bootstrap
    gives under normal noise); then computes the heterogeneity interval
    (`jaxjudge.metrics.heterogeneity.heterogeneity_interval`) and the percentile interval of
    max - min, and counts how often each holds its truth. ``cov`` is meant to be a committed
    run's bootstrap covariance across ranges (``experiments/coverage.py --spread``).
    """
    cov = np.asarray(cov, np.float64)
    k = cov.shape[0]
    u = np.asarray(direction, np.float64)
    if u.shape != (k,):
        raise ValueError(f"direction must have {k} entries (one per range), got {u.shape[0]}")
    u = u - u.mean()
    u = u / np.sqrt(np.sum(u * u) / (k - 1))  # heterogeneity 1
    rng = np.random.default_rng(seed)
    out = []
    for tau in taus:
        theta = 0.5 + tau * u
        spread = float(theta.max() - theta.min())
        hits = {"h": 0, "m": 0, "hi": 0, "mi": 0}
        for i in range(n_sims):
            est = rng.multivariate_normal(theta, cov)
            reps = rng.multivariate_normal(est, cov, size=n_boot).T  # [K, B]
            h = heterogeneity_interval(est, reps, alpha, seed=i)
            hits["h"] += h["low"] <= tau <= h["high"]
            hits["hi"] += h["low"] <= h["estimate"] <= h["high"]
            mm = reps.max(0) - reps.min(0)
            lo, hi = np.quantile(mm, [alpha / 2, 1 - alpha / 2])
            hits["m"] += lo <= spread <= hi
            hits["mi"] += lo <= float(est.max() - est.min()) <= hi
        out.append(SpreadCoverage(tau, spread, hits["h"] / n_sims, hits["m"] / n_sims, hits["hi"] / n_sims,
                                  hits["mi"] / n_sims, n_sims))
    return out


def spread_diff_coverage(
    cov: np.ndarray,
    pairs: tuple[tuple[float, float], ...],
    n_sims: int,
    *,
    cross: float = 0.6,
    direction: tuple[float, ...] = (-3.0, -1.0, 1.0, 3.0),
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> list[tuple[float, float, float]]:
    """Coverage of the report's interval of ``spread_diff`` (method's heterogeneity minus the
    comparator's; `jaxjudge.report.ranges`), at the level of the range estimates: both sides
    have noise ``cov`` across ranges, correlated ``cross`` between the two sides (they score the
    same items), true heterogeneities ``(tau_method, tau_comparator)`` per pair. Returns
    ``(tau_method, tau_comparator, coverage)`` per pair (percentile interval)."""
    cov = np.asarray(cov, np.float64)
    k = cov.shape[0]
    joint = np.block([[cov, cross * cov], [cross * cov, cov]])
    u = np.asarray(direction, np.float64)
    u = u - u.mean()
    u = u / np.sqrt(np.sum(u * u) / (k - 1))
    rng = np.random.default_rng(seed)
    out = []
    for tm, tb in pairs:
        theta = np.concatenate([0.5 + tm * u, 0.4 + tb * u])
        hits = 0
        for _ in range(n_sims):
            est = rng.multivariate_normal(theta, joint)
            reps = rng.multivariate_normal(est, joint, size=n_boot).T
            a, b = reps[:k], reps[k:]
            d = net_sd(a, noise_covariance(a)[1], 2.0) - net_sd(b, noise_covariance(b)[1], 2.0)
            lo, hi = np.quantile(d, [alpha / 2, 1 - alpha / 2])
            hits += lo <= tm - tb <= hi
        out.append((tm, tb, hits / n_sims))
    return out
