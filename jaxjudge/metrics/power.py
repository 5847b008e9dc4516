"""Power of a paired, grouped comparison read against a margin: what a planned n can confirm.

A confirmatory endpoint is a statistic of the test rows (e.g. the mean over score ranges of
Spearman(method) − Spearman(comparator)) whose interval is a bootstrap over whole groups. Its
standard error shrinks as ``sigma / sqrt(G)`` with ``G`` groups, where ``sigma`` is the
per-group standard deviation of the statistic's influence values. ``sigma`` is estimated from
a pilot's rows by the leave-one-group-out jackknife (`per_group_sd`): for a mean of one value
per group it is exactly the sample standard deviation of those values, and for a smooth
statistic such as a difference of correlations it is its first-order (delta-method) analogue.
`resampled_se` checks the ``sigma / sqrt(m)`` law by drawing ``m`` groups with replacement from
the pilot's groups, at any ``m``.

The verdict rule a registered endpoint is read by: the effect holds when the lower end of its
two-sided interval at level ``1 - 2 * alpha`` lies above the margin, i.e. the one-sided test of
``effect <= margin`` rejects at ``alpha``. With an estimate normal around the true effect
``delta`` with standard error ``se``, that happens with probability

    power(delta) = Phi((delta - margin) / se - z_{1 - alpha})

and 80% power is reached from ``delta = margin + (z_{1 - alpha} + z_{0.8}) * se`` (the
detectable effect). A Holm family of ``k`` hypotheses is planned at ``alpha / k`` (Bonferroni,
the step Holm's smallest p-value meets; Holm is never less powerful).
"""

from __future__ import annotations

from collections.abc import Callable
from statistics import NormalDist

import numpy as np

__all__ = ["power_at", "detectable_effect", "half_width", "per_group_sd", "resampled_se", "group_weights"]

_N = NormalDist()


def half_width(se: float, alpha: float = 0.025) -> float:
    """Half-width of the two-sided ``1 - 2 * alpha`` normal interval with standard error ``se``."""
    return _N.inv_cdf(1.0 - alpha) * float(se)


def power_at(effect: float, se: float, margin: float, alpha: float = 0.025) -> float:
    """Probability that the interval's lower end (one-sided level ``alpha``) lies above
    ``margin`` when the true effect is ``effect`` and the estimate's standard error ``se``."""
    if se <= 0:
        raise ValueError(f"power_at: se must be positive, got {se}")
    return _N.cdf((effect - margin) / se - _N.inv_cdf(1.0 - alpha))


def detectable_effect(se: float, margin: float, alpha: float = 0.025, power: float = 0.8) -> float:
    """The true effect read as above ``margin`` with probability ``power``."""
    return margin + (_N.inv_cdf(1.0 - alpha) + _N.inv_cdf(power)) * float(se)


def group_weights(codes: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Row weights `[..., N]` from per-group counts `[..., G]` (row i gets its group's count)."""
    return np.asarray(counts, np.float64)[..., np.asarray(codes)]


def per_group_sd(stat: Callable[[np.ndarray], np.ndarray], codes: np.ndarray, num_groups: int) -> float:
    """Per-group standard deviation of ``stat``'s influence values, by the grouped jackknife.

    Args:
      stat: row weights `[B, N]` -> statistic `[B]` (weights 0/1 drop rows; integer weights
        repeat them), vectorised over the leading axis.
      codes: `[N]` group code (0..G-1) of each row.
      num_groups: G.

    Returns:
      ``sqrt(G * var_jack)`` with ``var_jack = (G - 1) / G * sum_g (theta_(-g) - mean)^2``:
      the standard error at G groups times ``sqrt(G)``.
    """
    counts = 1.0 - np.eye(num_groups)  # [G, G]: leave group g out
    theta = np.asarray(stat(group_weights(codes, counts)), np.float64)  # [G]
    var_jack = (num_groups - 1) / num_groups * np.sum((theta - theta.mean()) ** 2)
    return float(np.sqrt(num_groups * var_jack))


def resampled_se(stat: Callable[[np.ndarray], np.ndarray], codes: np.ndarray, num_groups: int, m: int,
                 n_draws: int = 400, seed: int = 0, batch: int = 100) -> float:
    """Standard deviation of ``stat`` over ``n_draws`` samples of ``m`` groups drawn with
    replacement from the ``num_groups`` groups (a simulation of a study with m groups like these)."""
    rng = np.random.default_rng(seed)
    values = []
    for start in range(0, n_draws, batch):
        b = min(batch, n_draws - start)
        draws = rng.integers(0, num_groups, size=(b, m))  # [b, m]
        counts = np.zeros((b, num_groups))
        np.add.at(counts, (np.repeat(np.arange(b), m), draws.ravel()), 1.0)
        values.append(np.asarray(stat(group_weights(codes, counts)), np.float64))
    return float(np.std(np.concatenate(values), ddof=1))
