"""Kendall's tau-b under bootstrap row weights, from fixed pair matrices.

Under the grouped bootstrap only the row weights change, so tau-b's three pair sums are
quadratic forms `w^T S w` of fixed matrices (`pair_matrices`). With whole groups resampled the
row weights are `A c` for group multiplicities `c`, and each sum is `c^T (A^T S A) c`: the
report's cell statistic (`jaxjudge.metrics.fold_stat`) reduces the matrices to groups once and
reads each resample from `[G, G]` forms. The plain `jaxjudge.metrics.kendall` is the reference
they are tested against.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

__all__ = ["pair_matrices", "sign_matrix", "tau_from_sums"]


def sign_matrix(v):
    """int8 `[..., N, N]` sign(v_i - v_j) over the last axis of `v` (numpy in, numpy out; a
    jax array or tracer in, jax out)."""
    xp = np if isinstance(v, np.ndarray) else jnp
    return xp.sign(v[..., :, None] - v[..., None, :]).astype(xp.int8)


def pair_matrices(x, y):
    """float32 `[N, N]` each: concordance `s_x s_y`, and the untied pairs of x and of y
    (`|s_x|`, `|s_y|`); `w^T S w` of each gives tau-b's numerator and its two tie-corrected
    pair counts under row weights `w`."""
    sx = sign_matrix(jnp.asarray(x)).astype(jnp.float32)
    sy = sign_matrix(jnp.asarray(y)).astype(jnp.float32)
    return sx * sy, jnp.abs(sx), jnp.abs(sy)


def tau_from_sums(num, nx, ny):
    """tau-b from its three pair sums; NaN where x or y has no untied pair."""
    ok = (nx > 0) & (ny > 0)
    return jnp.where(ok, jnp.clip(num / jnp.sqrt(jnp.where(ok, nx * ny, 1.0)), -1.0, 1.0), jnp.nan)
