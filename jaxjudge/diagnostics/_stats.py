"""Small float64 statistics the diagnostics need.

The diagnostics report float64 values, so their correlations come from scipy (float64) rather
than from the float32 JAX metrics of `jaxjudge.metrics` (which differ in the eighth digit); the
weighted forms below are batched over bootstrap replicates, which scipy does not offer.
Correlations here raise on constant input instead of returning NaN, so no undefined value can
leak into a report.
"""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
from scipy.stats import pearsonr, rankdata, spearmanr
from scipy.stats import t as student_t


def normal_quantile(q: float) -> float:
    """Quantile of the standard normal distribution (stdlib, exact to double precision)."""
    return NormalDist().inv_cdf(q)


def t_quantile(q: float, df: int) -> float:
    """Quantile of Student's t with integer `df` >= 1, for q in (0.5, 1) (`scipy.stats.t`)."""
    if not 0.5 < q < 1.0:
        raise ValueError(f"t_quantile needs q in (0.5, 1), got {q}")
    if df < 1:
        raise ValueError(f"t_quantile needs df >= 1, got {df}")
    return float(student_t.ppf(q, df))


def t_two_sided_p(t: float, df: int) -> float:
    """P(|T| >= |t|) for Student's t with `df` degrees of freedom (`scipy.stats.t`)."""
    return float(2.0 * student_t.sf(abs(t), df))


def average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..N with ties given their average rank (`scipy.stats.rankdata`), float64 [N]."""
    return rankdata(x, method="average").astype(np.float64)


def _check_not_constant(x: np.ndarray, name: str) -> None:
    # Relative threshold: a vector that is constant up to rounding has no defined correlation.
    xc = x - x.mean()
    if float(xc @ xc) <= 1e-24 * max(1.0, float(x @ x)):
        raise ValueError(f"correlation undefined: {name} is constant")


def _checked(corr, x: np.ndarray, y: np.ndarray, x_name: str, y_name: str) -> float:
    x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
    _check_not_constant(x, x_name)
    _check_not_constant(y, y_name)
    return max(-1.0, min(1.0, float(corr(x, y)[0])))


def pearson(x: np.ndarray, y: np.ndarray, *, x_name: str = "x", y_name: str = "y") -> float:
    """Pearson correlation of two float vectors [N] (`scipy.stats.pearsonr`); raises if either
    is constant."""
    return _checked(pearsonr, x, y, x_name, y_name)


def spearman(x: np.ndarray, y: np.ndarray, *, x_name: str = "x", y_name: str = "y") -> float:
    """Spearman correlation (`scipy.stats.spearmanr`, average ranks for ties); raises if either
    is constant."""
    return _checked(spearmanr, x, y, x_name, y_name)


def weighted_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pearson correlation under per-item weights, batched over replicates.

    Args:
      x: values [B, N] or [N].
      y: values [B, N] or [N].
      w: non-negative weights [B, N] (e.g. bootstrap multiplicities).

    Returns:
      correlations [B]; NaN where a replicate has zero variance in x or y (callers drop
      and count those, never return them).
    """
    wsum = w.sum(axis=-1, keepdims=True)  # [B, 1]
    mx = (w * x).sum(axis=-1, keepdims=True) / wsum
    my = (w * y).sum(axis=-1, keepdims=True) / wsum
    xc, yc = x - mx, y - my
    sxy = (w * xc * yc).sum(axis=-1)
    sxx = (w * xc * xc).sum(axis=-1)
    syy = (w * yc * yc).sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = sxy / np.sqrt(sxx * syy)
    tiny = 1e-24 * np.maximum(1.0, wsum[:, 0])
    r = np.where((sxx <= tiny) | (syy <= tiny), np.nan, r)
    return np.clip(r, -1.0, 1.0)


def weighted_average_ranks(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Average ranks of the items of `x` in the multiset where item i appears w[b, i] times.

    This is the rank each copy of an item gets in a bootstrap resample, computed without
    materialising the resample: rank = (copies of smaller values) + (copies of equal values
    + 1) / 2.

    Args:
      x: values [N] (shared by all replicates).
      w: integer multiplicities [B, N].

    Returns:
      ranks [B, N] (entries for items with w = 0 are defined but carry no weight).
    """
    uniq, inv = np.unique(x, return_inverse=True)  # [U], [N]
    onehot = np.zeros((x.shape[0], uniq.shape[0]), dtype=np.float64)  # [N, U]
    onehot[np.arange(x.shape[0]), inv] = 1.0
    w_eq = w @ onehot  # [B, U] copies of each distinct value
    w_less = np.cumsum(w_eq, axis=-1) - w_eq  # [B, U] copies of strictly smaller values
    block_rank = w_less + (w_eq + 1.0) / 2.0  # [B, U]
    return block_rank[:, inv]  # [B, N]
