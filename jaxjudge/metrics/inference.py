"""Prediction-powered inference: judge scores on every item plus human scores on a few.

A judge scores all N items of a set; humans score a random subset of n of them. The mean
human score of the set is then estimated with an interval that stays valid however biased the
judge is (Angelopoulos, Bates, Fannjiang, Jordan, Zrnic 2023, "Prediction-powered inference",
Science; the power-tuned PPI++ of Angelopoulos, Duchi, Zrnic 2023, "PPI++: efficient
prediction-powered inference"). With labelled items L (n of them) and unlabelled items U (the
other m = N - n):

    theta_hat(lam) = mean_L(y) + lam * (mean_U(f) - mean_L(f))
    se^2(lam)      = var_L(y - lam f) / n + lam^2 var_U(f) / m         (variances with ddof 1)
    interval       = theta_hat -+ z_{1 - alpha/2} se

``lam = 0`` is the classical interval from the human labels alone, ``lam = 1`` the original
prediction-powered estimate (the judge's mean over the unlabelled items, corrected by the
"rectifier" mean_L(y - f)), and the power-tuned ``lam`` minimises the estimated variance:

    lam_hat = cov_L(y, f) / n / (var_L(f) / n + var_U(f) / m)

which is PPI++'s ``cov(y, f) / ((1 + n/m) var(f))`` with the judge's variance estimated on
each side separately (the same asymptotically). Since se^2(lam) is a convex quadratic in lam,
the tuned interval is never wider than the classical one on the same data, and clipping lam to
[0, 1] (``clip=True``) keeps that property. The target is the population mean E[y] of which
the items are an i.i.d. sample (for the mean of the N items at hand it is conservative). If
every item is labelled (m = 0), lam is 0: the classical interval.

Clustered items (SummEval's 16 summaries of one article, ``groups``): the same estimator,
with a cluster-robust (sandwich) variance. Writing theta_hat - theta as a sum of per-item terms
psi_i = (y_i - lam f_i - c) / n on L and lam (f_j - mu_f) / m on U, and summing them within
each cluster g (clusters independent, items within one dependent, labelled or not):

    a_g = sum_{i in g, L} (y_i - mean_L y) / n
    b_g = sum_{i in g, L} (f_i - mean_L f) / n - sum_{j in g, U} (f_j - mean_U f) / m
    se^2(lam) = G / (G - 1) * sum_g (a_g - lam b_g)^2,   lam_hat = sum_g a_g b_g / sum_g b_g^2

with G the number of clusters (the CR1 small-sample factor). It needs enough clusters (about
20 or more with labelled items) for the normal interval to hold its level.

Built on it:

* `ppi_difference`: two systems scored on the same inputs, paired: the mean of the per-item
  difference, one lam for the difference (labels on an item give both systems' human scores).
* `ppi_ranking` and `effective_labels` (`jaxjudge.metrics.ranking`): simultaneous intervals and
  rank intervals for S systems on the same inputs, and the number of human labels alone that
  would give an interval as narrow.

Inputs: ``judge`` `[N]` on every item, ``human`` `[n]` human scores of the labelled items,
``labelled`` `[n]` their int indices into the N items (or a bool mask `[N]`, then ``human`` is
`[n]` in item order). The eager entry points check their inputs and raise ValueError naming
the problem (no labelled item, one labelled item, labels not a subset of the items, duplicated
labels, mismatched lengths, NaN or inf, a system with one item, fewer than two clusters). The
jitted core `ppi_core` works on masks, so that simulations vmap over replicates.
"""

from __future__ import annotations

import functools
import math
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.stats import norm

from jaxjudge.metrics._checks import as_vector, check_all_finite
from jaxjudge.metrics.groups import encode_groups

__all__ = [
    "PPI_METHODS",
    "PPIInterval",
    "ppi_core",
    "ppi_difference",
    "ppi_mean",
]

PPI_METHODS = ("classical", "ppi", "ppi++")
"""``classical``: human labels alone (lam = 0); ``ppi``: lam = 1; ``ppi++``: lam tuned."""


class PPIInterval(NamedTuple):
    """An estimate with its interval.

    Attributes:
      estimate, low, high: the point estimate and the interval's ends.
      se: standard error.
      lam: the lam used (0 for classical, 1 for ppi, the tuned value for ppi++).
      n_labelled, n_unlabelled: n and m.
      level: the interval's confidence level (1 - alpha, or the Bonferroni-adjusted one).
    """

    estimate: float
    low: float
    high: float
    se: float
    lam: float
    n_labelled: int
    n_unlabelled: int
    level: float

    @property
    def width(self) -> float:
        return self.high - self.low


# -- the jitted core -----------------------------------------------------------------------------


def _lam_mode(method: str) -> str:
    if method not in PPI_METHODS:
        raise ValueError(f"unknown PPI method {method!r}; expected one of {PPI_METHODS}")
    return method


@functools.partial(jax.jit, static_argnames=("method", "num_groups", "clip"))
def ppi_core(
    judge: jax.Array,
    human: jax.Array,
    labelled: jax.Array,
    groups: jax.Array | None = None,
    *,
    method: str = "ppi++",
    num_groups: int | None = None,
    clip: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Estimate, standard error and lam of the mean of ``human`` (no input checks).

    Args:
      judge: `[N]` judge scores of every item.
      human: `[N]` human scores; read only where ``labelled`` (other entries may hold
        anything finite or NaN).
      labelled: bool `[N]`, the labelled items (at least 2; at least 2 unlabelled for lam != 0).
      groups: int `[N]` cluster codes in 0..num_groups-1, or None (independent items).
      method: ``"classical"``, ``"ppi"`` or ``"ppi++"`` (static).
      num_groups: the number of cluster codes G (static; needed with ``groups``).
      clip: clip the tuned lam to [0, 1] (static).

    Returns:
      ``(estimate, se, lam)``, float32 scalars. Vmappable over every array argument.
    """
    f = jnp.asarray(judge, jnp.float32)
    lab = jnp.asarray(labelled, bool)
    y = jnp.where(lab, jnp.asarray(human, jnp.float32), 0.0)
    wl = lab.astype(jnp.float32)
    wu = 1.0 - wl
    n = jnp.sum(wl)
    m = jnp.sum(wu)
    m_safe = jnp.maximum(m, 1.0)
    mean_y = jnp.sum(wl * y) / n
    mean_fl = jnp.sum(wl * f) / n
    mean_fu = jnp.sum(wu * f) / m_safe
    dy = wl * (y - mean_y)  # [N] zero off L
    dfl = wl * (f - mean_fl)
    dfu = wu * (f - mean_fu)

    if groups is None:
        var_y = jnp.sum(dy * dy) / (n - 1)
        var_fl = jnp.sum(dfl * dfl) / (n - 1)
        cov = jnp.sum(dy * dfl) / (n - 1)
        var_fu = jnp.sum(dfu * dfu) / jnp.maximum(m - 1, 1.0)

        def var_of(lam):
            return (var_y - 2 * lam * cov + lam * lam * var_fl) / n + lam * lam * var_fu / m_safe

        tuned = (cov / n) / (var_fl / n + var_fu / m_safe)
    else:
        if num_groups is None:
            raise ValueError("ppi_core: groups need num_groups")
        codes = jnp.asarray(groups, jnp.int32)
        a = jax.ops.segment_sum(dy / n, codes, num_segments=num_groups)  # [G]
        b = jax.ops.segment_sum(dfl / n - dfu / m_safe, codes, num_segments=num_groups)  # [G]
        present = jax.ops.segment_sum(jnp.ones_like(f), codes, num_segments=num_groups) > 0
        g = jnp.sum(present.astype(jnp.float32))
        factor = g / (g - 1)

        def var_of(lam):
            r = a - lam * b
            return factor * jnp.sum(r * r)

        tuned = jnp.sum(a * b) / jnp.sum(b * b)

    if method == "classical":
        lam = jnp.float32(0.0)
    elif method == "ppi":
        lam = jnp.float32(1.0)
    else:
        lam = jnp.nan_to_num(tuned)  # a constant judge: lam 0
        if clip:
            lam = jnp.clip(lam, 0.0, 1.0)
    lam = jnp.where(m > 0, lam, 0.0)  # every item labelled: nothing to borrow from the judge
    est = mean_y + lam * (mean_fu - mean_fl)
    se = jnp.sqrt(jnp.maximum(var_of(lam), 0.0))
    return est, se, lam


def _z(level: float) -> float:
    return float(norm.ppf(0.5 + level / 2))


# -- input checks --------------------------------------------------------------------------------


def _labelled_mask(labelled: Any, n_items: int, what: str = "items") -> np.ndarray:
    """Bool `[N]` from int indices (or a bool mask); raises naming the bad labels."""
    lab = as_vector(labelled, "labelled")
    if lab.dtype == bool:
        if lab.shape[0] != n_items:
            raise ValueError(f"mismatched lengths: the labelled mask has {lab.shape[0]} entries, the {what} {n_items}")
        mask = lab.copy()
    else:
        if lab.size and not np.issubdtype(lab.dtype, np.integer):
            raise ValueError(f"labelled must hold int indices of the {what} or be a bool mask, got dtype {lab.dtype}")
        lab = lab.astype(np.int64)
        out = np.flatnonzero((lab < 0) | (lab >= n_items))
        if out.size:
            raise ValueError(
                f"labels not a subset of the {what}: labelled indices {lab[out][:10].tolist()} are not in "
                f"0..{n_items - 1}")
        uniq, counts = np.unique(lab, return_counts=True)
        if (counts > 1).any():
            raise ValueError(f"labels not a subset of the {what}: items {uniq[counts > 1][:10].tolist()} labelled twice")
        mask = np.zeros(n_items, bool)
        mask[lab] = True
    if not mask.any():
        raise ValueError(f"no labelled items among the {n_items} {what}: PPI needs human scores on some of them")
    if mask.sum() < 2:
        raise ValueError(f"one labelled item (of {n_items} {what}): a variance needs at least 2")
    return mask


def _spread(labelled: Any, human: Any, mask: np.ndarray, name: str = "human") -> np.ndarray:
    """`[N]` human scores in item order (NaN off the labelled items)."""
    h = np.asarray(human, np.float64)
    n = int(mask.sum())
    if h.ndim != 1 or h.shape[0] != n:
        raise ValueError(
            f"mismatched lengths: {name} has shape {h.shape} but {n} items are labelled "
            "(one human score per labelled item, in the order of `labelled`)")
    check_all_finite(h, name)
    out = np.full(mask.shape[0], np.nan)
    lab = np.asarray(labelled)
    if lab.dtype == bool:
        out[mask] = h
    else:
        out[lab.astype(np.int64)] = h
    return out


def _codes(groups: Any, n_items: int) -> tuple[np.ndarray, int]:
    g = as_vector(groups, "groups")
    if g.shape[0] != n_items:
        raise ValueError(f"mismatched lengths: groups has {g.shape[0]} entries, the items {n_items}")
    codes, k = encode_groups(g, name="groups")[:2] if g.size else (np.zeros(0, np.int32), 0)
    if k < 2:
        raise ValueError(f"fewer than two clusters ({k}): a cluster-robust variance needs at least 2")
    return codes, k


def _interval(est, se, lam, n: int, m: int, level: float) -> PPIInterval:
    est, se, lam = float(est), float(se), float(lam)
    half = _z(level) * se
    return PPIInterval(est, est - half, est + half, se, lam, n, m, level)


def _check_level(alpha: float) -> None:
    if not 0 < alpha < 1 or not math.isfinite(alpha):
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")


# -- public entry points -------------------------------------------------------------------------


def ppi_mean(
    judge: Any,
    human: Any,
    labelled: Any,
    *,
    method: str = "ppi++",
    alpha: float = 0.05,
    groups: Any | None = None,
    clip: bool = False,
    name: str = "items",
) -> PPIInterval:
    """The mean human score of a set of items, from judge scores on all and human scores on some.

    Args:
      judge: `[N]` judge scores of every item.
      human: `[n]` human scores of the labelled items, in the order of ``labelled``.
      labelled: `[n]` distinct int indices into the N items, or a bool mask `[N]`.
      method: ``"classical"`` (human labels alone), ``"ppi"`` (lam = 1) or ``"ppi++"`` (lam tuned
        to minimise the variance).
      alpha: 1 - confidence level.
      groups: `[N]` cluster ids (e.g. source documents) for a cluster-robust variance, or None.
      clip: clip the tuned lam to [0, 1].
      name: what the items are, for error messages (e.g. ``"system M11"``).

    Returns:
      `PPIInterval` at level 1 - alpha.

    Raises:
      ValueError: naming the bad input (see the module docstring).
    """
    _lam_mode(method)
    _check_level(alpha)
    f = as_vector(judge, "judge").astype(np.float64)
    if f.shape[0] < 2:
        raise ValueError(f"{name} has {f.shape[0]} item(s): at least 2 are needed for an interval")
    check_all_finite(f, "judge")
    mask = _labelled_mask(labelled, f.shape[0], name)
    y = _spread(labelled, human, mask)
    codes, k = (None, None) if groups is None else _codes(groups, f.shape[0])
    est, se, lam = ppi_core(f, np.nan_to_num(y), mask, codes, method=method, num_groups=k, clip=clip)
    return _interval(est, se, lam, int(mask.sum()), int((~mask).sum()), 1 - alpha)


def ppi_difference(
    judge_a: Any,
    judge_b: Any,
    human_a: Any,
    human_b: Any,
    labelled: Any,
    *,
    method: str = "ppi++",
    alpha: float = 0.05,
    groups: Any | None = None,
    clip: bool = False,
    names: tuple[str, str] = ("a", "b"),
) -> PPIInterval:
    """Mean human score of system a minus system b on the same inputs (paired).

    Item i is one input scored by both systems' outputs; a labelled input has both human scores.
    The difference is estimated as `ppi_mean` of the per-item differences (one lam for them).

    Args:
      judge_a, judge_b: `[N]` judge scores of the two systems' outputs on the N inputs.
      human_a, human_b: `[n]` human scores of the labelled inputs, in the order of ``labelled``.
      labelled: `[n]` int indices of the labelled inputs, or a bool mask `[N]`.
      method, alpha, groups, clip: as `ppi_mean`.
      names: the systems' names, for error messages.

    Returns:
      `PPIInterval` of mean_a - mean_b.
    """
    fa = as_vector(judge_a, f"judge of system {names[0]}")
    fb = as_vector(judge_b, f"judge of system {names[1]}")
    if fa.shape != fb.shape:
        raise ValueError(
            f"mismatched lengths: system {names[0]} has {fa.shape[0]} judged items, system {names[1]} "
            f"{fb.shape[0]}; a paired difference needs the same inputs")
    ha, hb = np.asarray(human_a, np.float64), np.asarray(human_b, np.float64)
    if ha.shape != hb.shape:
        raise ValueError(
            f"mismatched lengths: system {names[0]} has {ha.shape} human scores, system {names[1]} {hb.shape}")
    check_all_finite(ha, f"human scores of system {names[0]}")
    check_all_finite(hb, f"human scores of system {names[1]}")
    return ppi_mean(fa.astype(np.float64) - fb.astype(np.float64), ha - hb, labelled, method=method, alpha=alpha,
                    groups=groups, clip=clip, name=f"inputs of systems {names[0]} and {names[1]}")
