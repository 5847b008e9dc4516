"""Chance-corrected agreement between a judge and human raters: Cohen's kappa.

Both raters' scores are placed on one ordered label set (given explicitly, as an integer range
lo..hi, or the union of observed values). Kappa compares the observed weighted disagreement
with the disagreement expected if the two raters labelled independently with their own
marginal frequencies:

    kappa = 1 - sum_ij w_ij O_ij / sum_ij w_ij E_ij,   E_ij = (row_i total)(col_j total) / N

with w_ij = 0 on the diagonal and, for label positions i, j out of K labels,
    unweighted: 1 off the diagonal
    linear:     |i - j| / (K - 1)
    quadratic:  (i - j)**2 / (K - 1)**2
(weights use label positions, as scikit-learn does; on an integer scale lo..hi positions and
values differ only by a shift). The normalisation of w cancels in the ratio.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np

from jaxjudge.metrics._checks import as_float_vector, same_length

Weights = Literal["unweighted", "linear", "quadratic"] | None


def _resolve_labels(a: np.ndarray, b: np.ndarray, labels, lo, hi) -> np.ndarray:
    if labels is not None and (lo is not None or hi is not None):
        raise ValueError("give either labels or lo/hi, not both")
    if (lo is None) != (hi is None):
        raise ValueError("lo and hi must be given together")
    if labels is not None:
        scale = as_float_vector(labels, "labels")
        if np.unique(scale).shape[0] != scale.shape[0]:
            raise ValueError("labels has duplicate values")
        scale = np.sort(scale)
    elif lo is not None:
        if int(lo) != lo or int(hi) != hi:
            raise ValueError(f"lo and hi must be integers, got lo={lo}, hi={hi}")
        if hi <= lo:
            raise ValueError(f"hi must exceed lo, got lo={lo}, hi={hi}")
        scale = np.arange(int(lo), int(hi) + 1, dtype=np.float64)
    else:
        scale = np.unique(np.concatenate([a, b]))
    if scale.shape[0] < 2:
        raise ValueError(
            "kappa needs at least two labels on the scale; pass labels= or lo=/hi= to state the "
            f"scale (observed only {scale.tolist()})"
        )
    return scale


def _positions(x: np.ndarray, scale: np.ndarray, name: str) -> np.ndarray:
    pos = np.searchsorted(scale, x)
    pos_c = np.minimum(pos, scale.shape[0] - 1)
    bad = scale[pos_c] != x
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"{name} row {row} has value {x[row]!r}, not on the label scale {scale.tolist()} "
            "(map continuous scores to the scale first, e.g. with to_integer_scale)"
        )
    return pos_c


def confusion_matrix(rater_a, rater_b, *, labels: Sequence[float] | None = None, lo: int | None = None,
                     hi: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Counts of (rater_a label, rater_b label) pairs on a common scale.

    Args:
      rater_a: labels [N] (e.g. the judge's integer scores).
      rater_b: labels [N] (e.g. rounded human scores).
      labels: the label scale; or lo, hi: the integer scale lo..hi; or neither: the union of
        observed values.

    Returns:
      (counts [K, K] float64 with rows = rater_a, scale [K]).
    """
    a = as_float_vector(rater_a, "rater_a")
    b = as_float_vector(rater_b, "rater_b")
    same_length(rater_a=a, rater_b=b)
    scale = _resolve_labels(a, b, labels, lo, hi)
    ia, ib = _positions(a, scale, "rater_a"), _positions(b, scale, "rater_b")
    k = scale.shape[0]
    counts = np.zeros((k, k), dtype=np.float64)
    np.add.at(counts, (ia, ib), 1.0)
    return counts, scale


def cohen_kappa(rater_a, rater_b, *, weights: Weights = None, labels: Sequence[float] | None = None,
                lo: int | None = None, hi: int | None = None) -> float:
    """Cohen's kappa, unweighted or with linear/quadratic disagreement weights.

    Args:
      rater_a: labels [N].
      rater_b: labels [N].
      weights: None or "unweighted", "linear", "quadratic".
      labels: the label scale (any sortable numbers); or lo, hi: the integer scale lo..hi; or
        neither: the union of observed values. Stating the scale matters for weighted kappa
        when the data skip an inner label (with scores {1, 2, 5} observed, 5 is three steps
        from 2 on the scale 1..5 but one step on the observed labels); unused labels at the
        ends change nothing, since a common factor in the weights cancels.

    Returns:
      kappa in [-1, 1].

    Raises:
      ValueError: empty or mismatched inputs, a value off the scale, fewer than two labels on
        the scale, or zero expected disagreement. The last happens only when both raters give
        every item the same single label; kappa is then 0/0 and is reported as an error rather
        than NaN. (One constant rater against a varying one is defined: kappa <= 0.)
    """
    if weights not in (None, "unweighted", "linear", "quadratic"):
        raise ValueError(f"weights must be None, 'unweighted', 'linear' or 'quadratic', got {weights!r}")
    counts, scale = confusion_matrix(rater_a, rater_b, labels=labels, lo=lo, hi=hi)
    k = scale.shape[0]
    idx = np.arange(k, dtype=np.float64)
    diff = np.abs(idx[:, None] - idx[None, :])  # [K, K]
    if weights in (None, "unweighted"):
        w = (diff > 0).astype(np.float64)
    elif weights == "linear":
        w = diff / (k - 1)
    else:
        w = (diff / (k - 1)) ** 2
    n = counts.sum()
    expected = np.outer(counts.sum(axis=1), counts.sum(axis=0)) / n  # [K, K]
    denom = float((w * expected).sum())
    if denom <= 0.0:
        raise ValueError(
            "cohen_kappa is undefined: both raters gave every item the same label "
            f"({scale[int(np.argmax(counts.sum(axis=1)))]}), so the expected disagreement is zero"
        )
    return 1.0 - float((w * counts).sum()) / denom


def to_integer_scale(scores, lo: int, hi: int) -> np.ndarray:
    """Rounds continuous scores to the nearest integer in lo..hi (halves round to even).

    Use it to put expected scores from score distributions, or averaged human ratings such as
    SummEval's thirds, on the integer scale kappa needs.

    Args:
      scores: values [N].
      lo, hi: integer scale bounds.

    Returns:
      float64 integers [N] in [lo, hi].
    """
    x = as_float_vector(scores, "scores")
    if int(lo) != lo or int(hi) != hi or hi <= lo:
        raise ValueError(f"lo and hi must be integers with hi > lo, got lo={lo}, hi={hi}")
    return np.clip(np.round(x), lo, hi)
