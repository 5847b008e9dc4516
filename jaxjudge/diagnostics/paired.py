"""Paired comparisons of two judges or methods on the same items, clustered by source document.

Items that share a source document (the 16 summaries of one SummEval article) are not
independent: a hard article makes every judge err on all of its summaries. Standard errors
here therefore treat the document, not the item, as the unit of independent sampling.

Cluster-robust SE of a mean. For per-item values v_i (e.g. the per-item difference
|pred_a - human| - |pred_b - human|) in G clusters, with residuals e_i = v_i - mean(v) and
cluster sums S_g = sum_{i in g} e_i,

    Var(mean) = G / (G - 1) * sum_g S_g**2 / N**2 .

This is the sandwich (CR1) estimator for an intercept-only regression. Its small-sample factor
in general is G/(G-1) * (N-1)/(N-k); with k = 1 parameter the second factor is 1, leaving
G/(G-1). With every item its own cluster it equals the textbook s**2 / N (s with ddof=1).
Intervals and p-values use Student's t with G - 1 degrees of freedom, the usual reference
distribution when clusters are few.

Difference of correlations. A correlation over all items is not a mean of per-item values,
so its paired difference is bootstrapped: documents are resampled with replacement (each
replicate draws G documents, keeping all items of each), both judges' correlations with the
human scores are recomputed on the same replicate, and the spread of their difference gives
the SE and a percentile interval. For the "summary-level" convention (a correlation per
document, averaged), compute the per-document correlations yourself and pass them to
`paired_difference` with one row per document.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from jaxjudge.diagnostics._stats import (
    pearson,
    spearman,
    t_quantile,
    t_two_sided_p,
    weighted_average_ranks,
    weighted_pearson,
)
from jaxjudge.metrics._checks import as_float_vector, same_length
from jaxjudge.metrics.groups import encode_groups


def clustered_mean_se(values, groups) -> tuple[float, float]:
    """Mean of per-item values and its cluster-robust standard error (CR1, see module doc).

    Args:
      values: per-item values [N].
      groups: cluster (source document) id per item [N].

    Returns:
      (mean, se).

    Raises:
      ValueError: fewer than 2 clusters (the between-cluster variance is not estimable),
        mismatched lengths, non-finite values.
    """
    v = as_float_vector(values, "values")
    codes, g = encode_groups(groups, order="first", name="groups", n=v.shape[0])[:2]
    if g < 2:
        raise ValueError(f"clustered_mean_se needs at least 2 clusters (groups), got {g}")
    mean = float(v.mean())
    sums = np.bincount(codes, weights=v - mean, minlength=g)  # [G] cluster sums of residuals
    var = g / (g - 1) * float(sums @ sums) / v.shape[0] ** 2
    return mean, math.sqrt(var)


@dataclass(frozen=True)
class PairedDifference:
    """Mean of a per-item quantity under method A minus under method B, clustered SE.

    Attributes:
      mean_a, mean_b: means of the per-item quantity.
      difference: mean_a - mean_b.
      se: cluster-robust standard error of `difference`.
      low, high: t interval with df = n_clusters - 1.
      t_stat: difference / se (inf with sign of difference if se == 0 and difference != 0,
        0 if both are 0).
      p_value: two-sided, from Student's t with df.
      df: n_clusters - 1.
      n_items, n_clusters: sizes.
    """

    mean_a: float
    mean_b: float
    difference: float
    se: float
    low: float
    high: float
    t_stat: float
    p_value: float
    df: int
    n_items: int
    n_clusters: int


def paired_difference(values_a, values_b, groups, *, alpha: float = 0.05) -> PairedDifference:
    """Compares two judges/methods on the same items through a per-item quantity.

    Typical quantities: absolute error |pred - human|, squared error, a 0/1 pairwise
    correctness. Because both methods are measured on the same items, the SE is that of the
    per-item difference (pairing removes the item-difficulty variance they share), clustered by
    source document.

    Args:
      values_a: per-item quantity under method A [N].
      values_b: per-item quantity under method B [N], same items in the same order.
      groups: source-document id per item [N].
      alpha: 1 - confidence level.

    Returns:
      PairedDifference (A minus B).

    Raises:
      ValueError: mismatched lengths, non-finite values, fewer than 2 clusters, bad alpha.
    """
    a = as_float_vector(values_a, "values_a")
    b = as_float_vector(values_b, "values_b")
    n = same_length(values_a=a, values_b=b)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    codes, g = encode_groups(groups, order="first", name="groups", n=n)[:2]
    diff, se = clustered_mean_se(a - b, codes)
    df = g - 1
    half = t_quantile(1.0 - alpha / 2.0, df) * se
    if se > 0:
        t_stat = diff / se
        p_value = t_two_sided_p(t_stat, df)
    else:
        # All per-item differences equal: no sampling spread at all.
        t_stat = 0.0 if diff == 0 else math.copysign(math.inf, diff)
        p_value = 1.0 if diff == 0 else 0.0
    return PairedDifference(
        mean_a=float(a.mean()), mean_b=float(b.mean()), difference=diff, se=se,
        low=diff - half, high=diff + half, t_stat=t_stat, p_value=max(0.0, min(1.0, p_value)),
        df=df, n_items=n, n_clusters=g,
    )


@dataclass(frozen=True)
class CorrelationDifference:
    """Difference between two judges' correlations with human scores on the same items.

    Attributes:
      corr_a, corr_b: correlations on the full data.
      difference: corr_a - corr_b.
      se: standard deviation of the bootstrap differences.
      low, high: percentile interval of the bootstrap differences.
      method: "pearson" or "spearman".
      n_boot: replicates drawn; n_boot_valid: replicates where both correlations were defined
        (a replicate whose resampled scores are constant is dropped, not counted as NaN).
      n_items, n_clusters: sizes.
    """

    corr_a: float
    corr_b: float
    difference: float
    se: float
    low: float
    high: float
    method: str
    n_boot: int
    n_boot_valid: int
    n_items: int
    n_clusters: int


def paired_correlation_difference(pred_a, pred_b, human, groups, *,
                                  method: Literal["pearson", "spearman"] = "spearman",
                                  n_boot: int = 2000, seed: int = 0, alpha: float = 0.05,
                                  chunk: int = 256) -> CorrelationDifference:
    """Bootstrap (resampling documents) the difference of two judges' correlations with humans.

    Args:
      pred_a: judge A's scores [N].
      pred_b: judge B's scores [N] on the same items.
      human: human scores [N].
      groups: source-document id per item [N]; whole documents are resampled.
      method: "pearson" or "spearman" (average ranks for ties, recomputed in every replicate).
      n_boot: number of bootstrap replicates.
      seed: seed of `numpy.random.default_rng`.
      alpha: 1 - confidence level of the percentile interval.
      chunk: replicates processed at once (bounds memory at about 10 * chunk * N floats).

    Returns:
      CorrelationDifference.

    Raises:
      ValueError: mismatched lengths, fewer than 2 documents, a constant input on the full
        data, or fewer than half of the replicates with defined correlations.
    """
    if method not in ("pearson", "spearman"):
        raise ValueError(f"method must be 'pearson' or 'spearman', got {method!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if int(n_boot) != n_boot or n_boot < 2:
        raise ValueError(f"n_boot must be an integer >= 2, got {n_boot!r}")
    xa = as_float_vector(pred_a, "pred_a", min_len=3)
    xb = as_float_vector(pred_b, "pred_b", min_len=3)
    h = as_float_vector(human, "human", min_len=3)
    n = same_length(pred_a=xa, pred_b=xb, human=h)
    codes, g = encode_groups(groups, order="first", name="groups", n=n)[:2]
    if g < 2:
        raise ValueError(f"the document bootstrap needs at least 2 groups, got {g}")
    corr = pearson if method == "pearson" else spearman
    ca = corr(xa, h, x_name="pred_a", y_name="human")
    cb = corr(xb, h, x_name="pred_b", y_name="human")

    rng = np.random.default_rng(seed)
    diffs = []
    remaining = int(n_boot)
    while remaining > 0:
        b = min(chunk, remaining)
        remaining -= b
        counts = rng.multinomial(g, np.full(g, 1.0 / g), size=b).astype(np.float64)  # [b, G]
        w = counts[:, codes]  # [b, N] multiplicity of each item in the replicate
        if method == "spearman":
            ra, rb, rh = (weighted_average_ranks(x, w) for x in (xa, xb, h))  # [b, N] each
        else:
            ra, rb, rh = xa[None, :], xb[None, :], h[None, :]
        da = weighted_pearson(np.broadcast_to(ra, w.shape), np.broadcast_to(rh, w.shape), w)  # [b]
        db = weighted_pearson(np.broadcast_to(rb, w.shape), np.broadcast_to(rh, w.shape), w)  # [b]
        diffs.append(da - db)
    d = np.concatenate(diffs)
    valid = d[np.isfinite(d)]
    if valid.shape[0] < max(2, n_boot // 2):
        raise ValueError(
            f"only {valid.shape[0]} of {n_boot} bootstrap replicates had defined correlations "
            "(scores constant within resampled documents); too few documents to bootstrap"
        )
    low, high = np.quantile(valid, [alpha / 2.0, 1.0 - alpha / 2.0])
    return CorrelationDifference(
        corr_a=ca, corr_b=cb, difference=ca - cb, se=float(valid.std(ddof=1)),
        low=float(low), high=float(high), method=method, n_boot=int(n_boot),
        n_boot_valid=int(valid.shape[0]), n_items=n, n_clusters=g,
    )
