"""The interval the report prints for a bootstrapped statistic, or why it prints none.

`interval_summary` turns a point estimate and its bootstrap replicates (`jaxjudge.metrics.
bootstrap_distribution`, e.g. of a `jaxjudge.metrics.fold_stat` statistic) into the report's
``{estimate, low, high, ...}``: a percentile, expanded-percentile or BCa interval, withheld
with a ``reason`` when the resampled groups are fewer than `MIN_CI_GROUPS` or more than
`NAN_SHARE_MAX` of the resamples are undefined.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from jaxjudge.metrics.bootstrap import bca_quantiles, expanded_levels

__all__ = ["MIN_CI_GROUPS", "NAN_SHARE_MAX", "interval_summary"]

NAN_SHARE_MAX = 0.05
"""Above this share of undefined bootstrap resamples a cell prints no interval (the survivors
are a biased subsample: e.g. resamples whose test side holds one distinct parsed score)."""

MIN_CI_GROUPS = 10
"""Fewest reported (test) groups for which the report prints an interval. Below it the
percentile bootstrap of a correlation under-covers badly (3 test documents: about 77% for a
nominal 95%); `tests/report/test_coverage.py` and `benchmarks/coverage.py` measure coverage at and
above this minimum."""


def interval_summary(
    estimate: float, reps: np.ndarray | None, alpha: float, *, num_groups: int | None = None,
    min_groups: int = MIN_CI_GROUPS, jack: np.ndarray | None = None, method: str = "percentile",
) -> dict[str, Any]:
    """``{estimate, low, high}`` plus, for a bootstrapped statistic, ``n_boot``,
    ``n_boot_nan`` and ``nan_share``; ``reason`` says why an interval is withheld.

    Args:
      estimate: the point estimate.
      reps: `[B]` bootstrap replicates, or None (a point estimate only).
      alpha: 1 - confidence level.
      num_groups: groups resampled; below `min_groups` no interval is given.
      min_groups: see `MIN_CI_GROUPS`.
      jack: `[G]` jackknife values (``method="bca"``).
      method: ``"percentile"``, ``"expanded"`` (`expanded_levels`) or ``"bca"``.
    """
    est = float(estimate)
    out: dict[str, Any] = {"estimate": est if math.isfinite(est) else None, "low": None, "high": None}
    if reps is None:
        return out
    r_all = np.asarray(reps, np.float64)
    r = r_all[np.isfinite(r_all)]
    out["n_boot"] = int(r_all.size)
    out["n_boot_nan"] = int(r_all.size - r.size)
    out["nan_share"] = out["n_boot_nan"] / max(r_all.size, 1)
    if num_groups is not None and num_groups < min_groups:
        out["reason"] = f"too few groups ({num_groups} < {min_groups})"
    elif out["nan_share"] > NAN_SHARE_MAX:
        out["reason"] = f"{out['nan_share']:.0%} of resamples undefined"
    elif r.size:
        if method == "bca":
            lo, hi = bca_quantiles(est, r, jack, alpha)
        else:
            levels = expanded_levels(num_groups, alpha) if method == "expanded" else (alpha / 2, 1 - alpha / 2)
            lo, hi = np.quantile(r, levels)
        out["low"], out["high"] = float(lo), float(hi)
    return out
