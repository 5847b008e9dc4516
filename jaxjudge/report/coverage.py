"""How often the report's intervals cover the truth, on synthetic judges of known correlation.

Each replicate draws a clustered data set (`jaxjudge.metrics.synthetic.clustered_judges`) with
two judges, splits it as the report would (a fixed dev/test split of whole groups, or grouped
k-fold with dev:test = 1:(k-1)), and computes the report's intervals with the same function
`evaluate_cell` uses (`jaxjudge.report.cell_stats.test_side_intervals`): Spearman of judge A, and
the paired difference Spearman(A) - Spearman(B). An interval covers when it holds the
population value. ``python experiments/coverage.py`` prints a table of coverage over designs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from jaxjudge.metrics.synthetic import clustered_judges
from jaxjudge.report.cell_inputs import MethodOptions
from jaxjudge.report.cell_stats import test_side_intervals
from jaxjudge.select import fixed_split, kfold_splits

__all__ = ["Coverage", "interval_coverage"]


@dataclass(frozen=True)
class Coverage:
    """Result of `interval_coverage`.

    Attributes:
      spearman, difference: share of replicates whose interval held the truth.
      n: replicates with an interval (others withheld it: too many undefined resamples).
      width: mean width of the Spearman interval.
    """

    spearman: float
    difference: float
    n: int
    width: float


def interval_coverage(
    design: str,
    n_groups: int,
    n_sims: int,
    *,
    per_group: int = 16,
    n_boot: int = 1000,
    ci_method: str = "expanded",
    seed: int = 0,
    rho_between: tuple[float, float] = (0.6, 0.3),
    rho_within: tuple[float, float] = (0.4, 0.3),
    n_folds: int = 5,
) -> Coverage:
    """Coverage of the report's 95% intervals over ``n_sims`` synthetic data sets.

    Args:
      design: ``"fixed"`` (``n_groups`` dev groups and ``n_groups`` reported test groups) or
        ``"kfold"`` (``n_groups`` groups, grouped ``n_folds``-fold, dev one fold).
      n_groups: groups reported (fixed) or in all (k-fold).
      n_sims: replicates.
      per_group: items per group (SummEval: 16 summaries per document).
      n_boot, ci_method: of the report's bootstrap.
      seed: of the data draws.
      rho_between, rho_within: the two judges' correlations (see `clustered_judges`).
      n_folds: of ``"kfold"``.

    Returns:
      `Coverage`.
    """
    if design not in ("fixed", "kfold"):
        raise ValueError(f"design must be 'fixed' or 'kfold', got {design!r}")
    opts = MethodOptions(metrics=("spearman",), n_boot=n_boot, min_ci_groups=2, ci_method=ci_method,
                         select_metric="spearman")
    rng = np.random.default_rng(seed)
    hits = np.zeros(2)
    widths, n = [], 0
    for i in range(n_sims):
        total = 2 * n_groups if design == "fixed" else n_groups
        d = clustered_judges(rng, total, per_group, rho_between, rho_within)
        if design == "fixed":
            splits = fixed_split(d.groups, list(range(n_groups)))
        else:
            splits = kfold_splits(d.groups, n_folds, seed + i)
        mets, deltas = test_side_intervals(d.judges[0], d.human, d.groups, splits,
                                           _seeded(opts, seed + i), base=d.judges[1])
        a, b = mets["spearman"], deltas["spearman"]
        if a["low"] is None or b["low"] is None:
            continue
        n += 1
        hits[0] += a["low"] <= d.spearman[0] <= a["high"]
        hits[1] += b["low"] <= d.spearman[0] - d.spearman[1] <= b["high"]
        widths.append(a["high"] - a["low"])
    share = hits / max(n, 1)
    return Coverage(spearman=float(share[0]), difference=float(share[1]), n=n,
                    width=float(np.mean(widths)) if widths else float("nan"))


def _seeded(opts: MethodOptions, seed: int) -> MethodOptions:
    return replace(opts, seed=seed)
