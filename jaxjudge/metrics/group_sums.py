"""Pooled metrics of a grouped bootstrap resample read from per-group sums.

A resample of whole groups gives every row of group g the same multiplicity c_g, so a row
weight is ``c_g * fixed_i`` (``fixed`` the row's own 0/1 weight: a test row of the fold with a
finite prediction). Any weighted sum over the rows is then ``c . S`` for the group sums
``S_g = sum_{i in g} fixed_i f(row i)``, computed once per call: a resample costs G
multiply-adds per sum instead of passes over every row. `jaxjudge.metrics.fold_stat` reads the
pooled Pearson, MSE and SDD this way when a fold has more test rows than groups, and the
pooled Spearman from mid-rank vectors (`midrank_pearson`).

The numbers equal those of `jaxjudge.metrics.pearson`, `mse` and `sdd_from_logprobs` on the
literally repeated rows up to float32 rounding (tests/report/test_report.py compares with scipy).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxjudge.metrics.distribution import kl_rows

__all__ = ["PEARSON_SUMS", "kl_sums", "mean_from_sums", "midrank_pearson", "pearson_from_sums", "pearson_sums",
           "sq_error_sums"]

PEARSON_SUMS = 10
"""Rows of `pearson_sums`: count, the centred sums of x, y, x^2, y^2 and x y, and the extremes
of x and y."""


def _seg(v, codes, num_groups: int):
    return jax.ops.segment_sum(v, codes, num_segments=num_groups)


def pearson_sums(x, y, fixed, codes, num_groups: int):
    """`[PEARSON_SUMS, G]` group sums for `pearson_from_sums`.

    x and y are centred at their fixed-weighted means over all rows first, so that a resample's
    variance ``c . Sxx - (c . Sx)^2 / W`` subtracts a small correction, not a large mean: a
    resample's means lie near the original ones. The extremes (over rows with ``fixed > 0``;
    -inf / +inf for a group without one) tell a constant input exactly, as the row-wise
    `jaxjudge.metrics.pearson` does, where a centred variance would round to a tiny number.
    """
    has = fixed > 0
    n = jnp.sum(fixed)
    safe = jnp.where(n > 0, n, 1.0)
    dx = jnp.where(has, x - jnp.sum(jnp.where(has, fixed * x, 0.0)) / safe, 0.0)
    dy = jnp.where(has, y - jnp.sum(jnp.where(has, fixed * y, 0.0)) / safe, 0.0)
    fx, fy = fixed * dx, fixed * dy
    sums = [_seg(v, codes, num_groups) for v in (fixed, fx, fy, fx * dx, fy * dy, fx * dy)]
    ext = [
        jax.ops.segment_max(jnp.where(has, x, -jnp.inf), codes, num_segments=num_groups),
        jax.ops.segment_min(jnp.where(has, x, jnp.inf), codes, num_segments=num_groups),
        jax.ops.segment_max(jnp.where(has, y, -jnp.inf), codes, num_segments=num_groups),
        jax.ops.segment_min(jnp.where(has, y, jnp.inf), codes, num_segments=num_groups),
    ]
    return jnp.stack(sums + ext)


def _constant(hi, lo, drawn):
    """Whether the rows of the drawn groups hold a single value (or none)."""
    return jnp.max(jnp.where(drawn, hi, -jnp.inf)) <= jnp.min(jnp.where(drawn, lo, jnp.inf))


def pearson_from_sums(sums, c):
    """The pooled Pearson correlation under group multiplicities `c` `[G]` (NaN where x or y is
    constant over the drawn rows, as `jaxjudge.metrics.pearson`)."""
    n, sx, sy, sxx, syy, sxy, xhi, xlo, yhi, ylo = sums
    drawn = (c > 0) & (n > 0)
    w = c @ n
    safe = jnp.where(w > 0, w, 1.0)
    tx, ty = c @ sx, c @ sy
    vxx = c @ sxx - tx * tx / safe
    vyy = c @ syy - ty * ty / safe
    vxy = c @ sxy - tx * ty / safe
    defined = ~_constant(xhi, xlo, drawn) & ~_constant(yhi, ylo, drawn) & (vxx > 0) & (vyy > 0)
    r = vxy / jnp.where(defined, jnp.sqrt(vxx) * jnp.sqrt(vyy), 1.0)
    return jnp.where(defined, jnp.clip(r, -1.0, 1.0), jnp.nan)


def sq_error_sums(x, y, fixed, codes, num_groups: int):
    """`[2, G]`: each group's row count and sum of squared errors, for `mean_from_sums`."""
    has = fixed > 0
    err = jnp.where(has, fixed * (x - y) ** 2, 0.0)
    return jnp.stack([_seg(fixed, codes, num_groups), _seg(err, codes, num_groups)])


def kl_sums(logp, hrel, fixed, codes, num_groups: int):
    """`[2, G]`: each group's row count and sum of KL(Q || P) (`jaxjudge.metrics.sdd_from_logprobs`'s
    terms; inf stays inf), for `mean_from_sums`."""
    has = fixed > 0
    kl = jnp.where(has, fixed * kl_rows(logp, hrel, jnp.float32(0.0)), 0.0)
    return jnp.stack([_seg(fixed, codes, num_groups), _seg(kl, codes, num_groups)])


def mean_from_sums(sums, c):
    """Weighted mean of the per-row terms under multiplicities `c` (NaN when no row is drawn).
    Undrawn groups add nothing, even an infinite sum."""
    n, total = sums
    w = c @ n
    t = jnp.sum(jnp.where(c > 0, c * total, 0.0))
    return jnp.where(w > 0, t / jnp.where(w > 0, w, 1.0), jnp.nan)


def midrank_pearson(rx, ry, w):
    """Pearson correlation of two weighted mid-rank vectors (`_rank_matrix` products of
    `jaxjudge.metrics.fold_stat`) under the row weights `w` they were taken with: Spearman's rho.

    Weighted mid-ranks have a known weighted mean, half the total weight W: every pair of rows
    adds w_i w_j to the rank sum (split 1 + 0 by value, 1/2 + 1/2 in a tie) and each row
    w_i^2 / 2 of itself, so ``sum_i w_i r_i = W^2 / 2``. Centring is then one subtraction, not
    two weighted passes (2 r and W are integers for integer multiplicities and 0/1 row
    weights, so the centred ranks are exact). Undefined (NaN) when either rank vector is
    constant over the weighted rows, as `jaxjudge.metrics.spearman`.
    """
    half = 0.5 * jnp.sum(w)
    dx, dy = rx - half, ry - half
    sxx, syy, sxy = jnp.sum(w * dx * dx), jnp.sum(w * dy * dy), jnp.sum(w * dx * dy)
    defined = (sxx > 0) & (syy > 0)
    r = sxy / jnp.where(defined, jnp.sqrt(sxx) * jnp.sqrt(syy), 1.0)
    return jnp.where(defined, jnp.clip(r, -1.0, 1.0), jnp.nan)
