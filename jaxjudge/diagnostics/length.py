"""Length bias: does the judge's score follow the response's length?

What is reported (`length_bias`):

1. `pearson_length`, `spearman_length`: correlation between length (tokens) and judge score.
2. An OLS fit `judge = intercept + slope * length` (with intercept) and its R**2, the share of
   judge-score variance that length alone explains.
3. The residual judge score `judge - (intercept + slope * length)`, i.e. the judge score with
   its linear length trend removed, and, when human scores are given, the correlation of
   human scores with the raw judge score (`raw_pearson`, `raw_spearman`) beside their
   correlation with the residual (`residual_pearson`, `residual_spearman`), plus the
   correlation of length with the human score (`human_pearson_length`).

How to read it: if the residual correlation with humans stays close to the raw one, the
judge's agreement with humans does not come from length. Regressing length out also removes
any *genuine* length-quality link, so read the residual figures beside
`human_pearson_length`: when humans also prefer longer texts, a drop from raw to residual is
expected and is not by itself evidence of bias; the bias is the excess of the judge's length
correlation over the humans'.

For two systems or methods (`length_controlled_difference`), the length-controlled difference
is the difference in mean residual score between the two groups (B minus A), beside the raw
difference of means. With `slope="within"` (default) the length slope is the pooled
within-group slope, i.e. the fit `judge = a + c * is_b + slope * length` (ANCOVA); the
difference in mean residual `judge - slope * length` then equals c exactly. With
`slope="pooled"` the residuals come from one fit `judge = a + slope * length` over both groups
ignoring group; this lets the slope absorb part of a real group difference when one group is
longer, so it is more conservative.

Degenerate input: fewer than 3 items, or all lengths equal (length can explain nothing and the
correlations are 0/0), raise ValueError; so does a constant judge or human score, since the
correlations would be undefined. No NaN is returned.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from jaxjudge.diagnostics._stats import pearson, spearman
from jaxjudge.metrics._checks import as_float_vector, same_length


def _ols_line(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Least-squares intercept and slope of y on x (x not constant)."""
    xc = x - x.mean()
    slope = float(xc @ (y - y.mean())) / float(xc @ xc)
    return float(y.mean()) - slope * float(x.mean()), slope


def _check_lengths_vary(lengths: np.ndarray) -> None:
    if np.all(lengths == lengths[0]):
        raise ValueError(
            f"lengths are all equal ({lengths[0]}): length bias is undefined when length does not vary"
        )


def length_residuals(lengths, judge_scores) -> tuple[np.ndarray, float, float]:
    """Judge scores with their linear length trend removed.

    Args:
      lengths: response lengths [N] (tokens).
      judge_scores: judge scores [N].

    Returns:
      (residuals [N], intercept, slope) of the OLS fit judge = intercept + slope * length.
      The residuals have mean zero; add back the mean judge score to stay on the score scale.
    """
    x = as_float_vector(lengths, "lengths", min_len=3)
    y = as_float_vector(judge_scores, "judge_scores", min_len=3)
    same_length(lengths=x, judge_scores=y)
    _check_lengths_vary(x)
    intercept, slope = _ols_line(x, y)
    return y - (intercept + slope * x), intercept, slope


@dataclass(frozen=True)
class LengthBias:
    """Length-bias report (see the module docstring for definitions).

    Attributes:
      n: number of items.
      pearson_length, spearman_length: corr(length, judge score).
      intercept, slope: OLS fit judge = intercept + slope * length (slope in score per token).
      r_squared: share of judge-score variance explained by length (= pearson_length**2).
      raw_pearson, raw_spearman: corr(judge, human); None without human scores.
      residual_pearson, residual_spearman: corr(judge residual, human); None without human.
      human_pearson_length: corr(length, human); None without human scores.
    """

    n: int
    pearson_length: float
    spearman_length: float
    intercept: float
    slope: float
    r_squared: float
    raw_pearson: float | None = None
    raw_spearman: float | None = None
    residual_pearson: float | None = None
    residual_spearman: float | None = None
    human_pearson_length: float | None = None


def length_bias(lengths, judge_scores, human_scores=None) -> LengthBias:
    """Correlation of judge score with length, and the length-controlled comparison with humans.

    Args:
      lengths: response lengths [N] in tokens (any tokenizer, stated in the report).
      judge_scores: judge scores [N] (e.g. expected score under the judge's distribution).
      human_scores: optional human scores [N].

    Returns:
      LengthBias.

    Raises:
      ValueError: N < 3, length mismatch, non-finite values, all lengths equal, or a constant
        judge/human score (correlation undefined).
    """
    resid, intercept, slope = length_residuals(lengths, judge_scores)
    x = np.asarray(lengths, dtype=np.float64)
    y = np.asarray(judge_scores, dtype=np.float64)
    r = pearson(x, y, x_name="lengths", y_name="judge_scores")
    out = dict(
        n=int(x.shape[0]),
        pearson_length=r,
        spearman_length=spearman(x, y, x_name="lengths", y_name="judge_scores"),
        intercept=intercept,
        slope=slope,
        r_squared=r * r,
    )
    if human_scores is not None:
        h = as_float_vector(human_scores, "human_scores", min_len=3)
        same_length(lengths=x, human_scores=h)
        out.update(
            raw_pearson=pearson(y, h, x_name="judge_scores", y_name="human_scores"),
            raw_spearman=spearman(y, h, x_name="judge_scores", y_name="human_scores"),
            # A judge fully explained by length leaves a constant residual: its length-free
            # signal then has no defined correlation, which is an error worth surfacing.
            residual_pearson=pearson(resid, h, x_name="judge residual after length", y_name="human_scores"),
            residual_spearman=spearman(resid, h, x_name="judge residual after length", y_name="human_scores"),
            human_pearson_length=pearson(x, h, x_name="lengths", y_name="human_scores"),
        )
    return LengthBias(**out)


@dataclass(frozen=True)
class LengthControlledDifference:
    """Difference between two groups' judge scores, raw and with length controlled.

    Attributes:
      raw_difference: mean judge score of B minus that of A.
      controlled_difference: mean residual of B minus that of A (see module docstring).
      se: classical OLS standard error of `controlled_difference` (homoskedastic, independent
        items; use `paired_difference` for a document-clustered error on paired data).
      slope: the length slope used (score per token).
      mean_length_a, mean_length_b: mean lengths of the groups.
      n_a, n_b: group sizes.
      slope_kind: "within" or "pooled".
    """

    raw_difference: float
    controlled_difference: float
    se: float
    slope: float
    mean_length_a: float
    mean_length_b: float
    n_a: int
    n_b: int
    slope_kind: str


def length_controlled_difference(lengths, judge_scores, is_b, *,
                                 slope: Literal["within", "pooled"] = "within") -> LengthControlledDifference:
    """Compares two systems' (or methods') judge scores with response length controlled.

    Args:
      lengths: response lengths [N] (tokens), both groups stacked.
      judge_scores: judge scores [N].
      is_b: group membership [N], True/1 for group B and False/0 for group A.
      slope: "within" (ANCOVA, default) or "pooled"; see the module docstring.

    Returns:
      LengthControlledDifference.

    Raises:
      ValueError: a group with fewer than 2 items, all lengths equal (within each group for
        "within"), non-binary is_b, mismatched lengths.
    """
    x = as_float_vector(lengths, "lengths", min_len=3)
    y = as_float_vector(judge_scores, "judge_scores", min_len=3)
    g = as_float_vector(is_b, "is_b", min_len=3)
    same_length(lengths=x, judge_scores=y, is_b=g)
    if not np.all((g == 0.0) | (g == 1.0)):
        raise ValueError(f"is_b must hold 0/1 or booleans; row {int(np.argmax((g != 0) & (g != 1)))} does not")
    b = g.astype(bool)
    n_b, n_a = int(b.sum()), int((~b).sum())
    if n_a < 2 or n_b < 2:
        raise ValueError(f"each group needs at least 2 items, got n_a={n_a}, n_b={n_b}")
    if slope not in ("within", "pooled"):
        raise ValueError(f"slope must be 'within' or 'pooled', got {slope!r}")
    _check_lengths_vary(x)
    # Design [1, is_b, length] for the ANCOVA; its coefficient on is_b is the controlled difference.
    design = np.stack([np.ones_like(x), g, x], axis=1)  # [N, 3]
    if slope == "within":
        # Within-group demeaned length must vary, or the slope is not identified.
        xw = x - np.where(b, x[b].mean(), x[~b].mean())
        if np.all(np.abs(xw) <= 1e-12 * max(1.0, float(np.abs(x).max()))):
            raise ValueError("lengths are constant within each group: the within-group length slope is undefined")
        coef, *_ = np.linalg.lstsq(design, y, rcond=None)
        beta = float(coef[2])
        resid_full = y - design @ coef
        dof = x.shape[0] - 3
        sigma2 = float(resid_full @ resid_full) / dof if dof > 0 else 0.0
        cov = sigma2 * np.linalg.inv(design.T @ design)
        se = math.sqrt(max(float(cov[1, 1]), 0.0))
    else:
        _, beta = _ols_line(x, y)
        # Controlled difference = raw difference - beta * length difference; beta from the
        # pooled fit is treated as known here, so the SE is the two-sample SE of the residuals.
        resid = y - beta * x
        ra, rb = resid[~b], resid[b]
        se = math.sqrt(float(ra.var(ddof=1)) / n_a + float(rb.var(ddof=1)) / n_b)
    resid = y - beta * x
    return LengthControlledDifference(
        raw_difference=float(y[b].mean() - y[~b].mean()),
        controlled_difference=float(resid[b].mean() - resid[~b].mean()),
        se=se,
        slope=beta,
        mean_length_a=float(x[~b].mean()),
        mean_length_b=float(x[b].mean()),
        n_a=n_a,
        n_b=n_b,
        slope_kind=slope,
    )
