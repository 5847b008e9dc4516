"""Bootstrap p-values for paired differences, and Holm's step-down adjustment over a family.

A report makes many comparisons (every method against vanilla on every range and reading,
against its matched baseline, over ranges). One of them is declared the primary endpoint and
read at its own level; the others are *secondary*, and their p-values are adjusted together
with Holm's procedure, which controls the family-wise error rate under any dependence between
the comparisons (Holm 1979, "A simple sequentially rejective multiple test procedure").

The p-value of a difference is by default the Wald one from the bootstrap's standard error,
``2 * Phi(-|estimate - null| / sd(replicates))``. The percentile-bootstrap p-value (twice the
smaller share of resamples on either side of the null, each share counted as
``(hits + 1) / (B + 1)``) is available too, but it cannot go below ``2 / (B + 1)``: with the
reports' B = 1000 resamples that is 0.002, and Holm over 100 comparisons asks 0.0005 of the
smallest p-value, so no secondary comparison could ever be declared; the Wald p-value has no
such floor. Printed beside an interval, a Wald p-value can disagree with it (p 0.040 beside a
percentile interval that covers 0); `interval_p_value` is the p-value of the interval itself:
the smallest alpha at which the report's interval, on the same resamples, excludes the null.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy.special import ndtri
from scipy.stats import t as student_t

__all__ = ["EXACT_ZERO", "bootstrap_p_value", "holm", "interval_p_value", "margin_p_values"]

EXACT_ZERO = 1e-6
"""A difference below this in the estimate and in every resample is float32 rounding of two
identical predictions (metrics are computed in float32): its p-value is 1."""


def bootstrap_p_value(estimate: float, reps: np.ndarray | Sequence[float], null: float = 0.0,
                      method: str = "wald") -> float | None:
    """Two-sided p-value of ``H0: difference = null`` from a bootstrap distribution.

    Args:
      estimate: the point estimate of the difference.
      reps: `[B]` bootstrap replicates of it; undefined (non-finite) ones are left out.
      null: the value under the null hypothesis.
      method: ``"wald"``: ``2 * Phi(-|estimate - null| / se)`` with ``se`` the replicates'
        standard deviation (ddof 1); ``"percentile"``:
        ``min(1, 2 * min((#{r <= null} + 1) / (B + 1), (#{r >= null} + 1) / (B + 1)))``.

    Returns:
      the p-value, or None when fewer than two replicates are finite or the estimate is not.
    """
    r = np.asarray(reps, np.float64)
    r = r[np.isfinite(r)]
    if r.size < 2 or not math.isfinite(estimate):
        return None
    if max(abs(estimate - null), float(np.max(np.abs(r - null)))) < EXACT_ZERO:
        return 1.0  # no difference in any resample beyond float32 rounding (identical predictions)
    if method == "wald":
        se = float(np.std(r, ddof=1))
        if se == 0.0:
            return 0.0
        return float(math.erfc(abs(estimate - null) / se / math.sqrt(2.0)))
    if method != "percentile":
        raise ValueError(f"bootstrap_p_value: method must be 'wald' or 'percentile', got {method!r}")
    b = r.size
    below = (np.count_nonzero(r <= null) + 1) / (b + 1)
    above = (np.count_nonzero(r >= null) + 1) / (b + 1)
    return float(min(1.0, 2.0 * min(below, above)))


def _level_past(r: np.ndarray, null: float) -> float:
    """The smallest tail level t such that an equal-tailed interval of the replicates' quantiles
    (numpy's linear interpolation) at levels (a, 1 - a) excludes ``null`` for every a > t."""
    n = r.size
    at = np.arange(n) / (n - 1)
    below = int(np.count_nonzero(r <= null))  # sup{tau : q(tau) <= null}
    if below == 0:
        tau_hi = 0.0
    elif below == n:
        tau_hi = 1.0
    else:
        tau_hi = float(at[below - 1] + (null - r[below - 1]) / (r[below] - r[below - 1]) / (n - 1))
    under = int(np.count_nonzero(r < null))  # inf{tau : q(tau) >= null}
    if under == 0:
        tau_lo = 0.0
    elif under == n:
        tau_lo = 1.0
    else:
        tau_lo = float(at[under - 1] + (null - r[under - 1]) / (r[under] - r[under - 1]) / (n - 1))
    return min(tau_hi, 1.0 - tau_lo)


def interval_p_value(estimate: float, reps: np.ndarray | Sequence[float], null: float = 0.0, *,
                     method: str = "percentile", num_groups: int | None = None) -> float | None:
    """Two-sided p-value of ``H0: difference = null`` that agrees with the bootstrap interval on
    the same replicates: the smallest alpha at which that interval excludes ``null`` (the test
    the interval inverts), so ``p < alpha`` exactly where the (1 - alpha) interval lies on one
    side of ``null``.

    Args:
      estimate: the point estimate (only to tell an exact zero, as `bootstrap_p_value`).
      reps: `[B]` replicates; undefined ones are left out, as the interval leaves them out.
      null: the value under the null hypothesis.
      method: the interval's: ``"percentile"`` (quantiles at alpha / 2 and 1 - alpha / 2) or
        ``"expanded"`` (`jaxjudge.metrics.bootstrap.expanded_levels`, which needs ``num_groups``):
        the level that just reaches ``null``, t, gives ``p = 2 t`` (percentile) or
        ``p = 2 T_{G-1}(Phi^-1(t) / sqrt(G / (G - 1)))`` (expanded), ``T`` Student's t cdf.

    Returns:
      the p-value (0 where ``null`` lies outside every replicate: no level excludes less; it is
      printed as below 1 / B), or None when fewer than two replicates are finite.
    """
    r = np.sort(np.asarray(reps, np.float64))
    r = r[np.isfinite(r)]
    if r.size < 2 or not math.isfinite(estimate):
        return None
    if max(abs(estimate - null), float(np.max(np.abs(r - null)))) < EXACT_ZERO:
        return 1.0
    t = _level_past(r, null)
    if method == "percentile":
        return float(min(1.0, 2.0 * t))
    if method != "expanded" or num_groups is None or num_groups < 2:
        raise ValueError(f"interval_p_value: method must be 'percentile' or 'expanded' (with num_groups >= 2), "
                         f"got {method!r}, num_groups={num_groups!r}")
    if t <= 0.0:
        return 0.0
    z = float(ndtri(min(t, 0.5))) / math.sqrt(num_groups / (num_groups - 1))
    return float(min(1.0, 2.0 * student_t.cdf(z, num_groups - 1)))


def holm(pvalues: Sequence[float | None]) -> list[float | None]:
    """Holm-adjusted p-values, in the input order (None stays None and is not counted).

    With the m defined p-values sorted ascending, ``p_(1) <= ... <= p_(m)``, the adjusted value
    of the i-th is ``max_{j <= i} min(1, (m - j + 1) p_(j))``; rejecting where the adjusted
    value is below alpha is Holm's procedure at family-wise level alpha.
    """
    idx = [i for i, p in enumerate(pvalues) if p is not None]
    for i in idx:
        p = pvalues[i]
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"holm: p-value {p!r} at position {i} is not in [0, 1]")
    m = len(idx)
    order = sorted(idx, key=lambda i: pvalues[i])
    out: list[float | None] = [None] * len(pvalues)
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        out[i] = running
    return out


def margin_p_values(reps: np.ndarray, margins: Sequence[float]) -> dict[str, float | None]:
    """``{f"{margin:g}": p}``: the one-sided p-value of ``effect <= margin`` a confirmatory plan
    registers (`jaxjudge.experiment.confirmation.VERDICT_RULE`), the share of the defined
    resamples at or below the margin, from the same resamples as the interval."""
    r = np.asarray(reps, np.float64)
    r = r[np.isfinite(r)]
    return {f"{m:g}": float(np.mean(r <= m)) if r.size else None for m in margins}
