"""System-level agreement: do the judge and the humans rank the systems the same way?

SummEval's 16 systems each summarise the same 100 documents. The system-level figure the
summarisation-evaluation literature reports beside the summary-level one is Kendall's tau-b
between the systems' mean judge scores and their mean human scores (one value per system).
Its interval comes from a bootstrap over documents: whole documents are resampled (each brings
all its systems' summaries), the S system means recomputed on the resample, and tau again.

Functions:

* `system_means(scores, systems, num_systems, weights)`: `[S]` weighted mean per system.
* `system_kendall(judge, human, systems, weights)`: tau-b of the system means (jittable core).
* `system_kendall_ci(judge, human, systems, groups, ...)`: the estimate with a percentile
  interval from the document bootstrap (`jaxjudge.metrics.bootstrap_distribution`).
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.metrics.bootstrap import Interval, bootstrap_distribution, expanded_levels
from jaxjudge.metrics.correlation import kendall

__all__ = ["system_means", "system_kendall", "system_kendall_ci"]


def system_means(scores: Any, systems: Any, num_systems: int, weights: Any | None = None) -> jax.Array:
    """Weighted mean score of each system.

    Args:
      scores: `[N]` scores of every output.
      systems: int `[N]` system codes in 0..S-1.
      num_systems: S (static under jit).
      weights: `[N]` row weights (None = ones), e.g. bootstrap multiplicities.

    Returns:
      `[S]` float32 means (NaN for a system with zero total weight).
    """
    x = jnp.asarray(scores, jnp.float32)
    w = jnp.ones_like(x) if weights is None else jnp.asarray(weights, jnp.float32)
    codes = jnp.asarray(systems, jnp.int32)
    num = jax.ops.segment_sum(w * x, codes, num_segments=num_systems)
    den = jax.ops.segment_sum(w, codes, num_segments=num_systems)
    return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), jnp.nan)


def system_kendall(judge: Any, human: Any, systems: Any, num_systems: int, weights: Any | None = None) -> jax.Array:
    """Kendall tau-b between the systems' mean judge and mean human scores.

    Args:
      judge, human: `[N]` scores of every output.
      systems: int `[N]` system codes in 0..S-1.
      num_systems: S (static under jit).
      weights: `[N]` row weights or None.

    Returns:
      float32 scalar tau-b over the S systems (NaN if either side is constant).
    """
    return kendall(system_means(judge, systems, num_systems, weights),
                   system_means(human, systems, num_systems, weights))


@functools.lru_cache(maxsize=16)
def _stat(num_systems: int):
    def stat(judge, human, systems, weights):
        return system_kendall(judge, human, systems, num_systems, weights)

    stat.__name__ = f"system_kendall_{num_systems}"
    return stat


def system_kendall_ci(
    judge: Any,
    human: Any,
    systems: Any,
    groups: Any,
    *,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    ci_method: str = "expanded",
) -> tuple[Interval, np.ndarray]:
    """System-level Kendall tau-b with a bootstrap interval over documents.

    Args:
      judge, human: `[N]` scores of every output.
      systems: `[N]` system ids (any type).
      groups: `[N]` document ids (any type); whole documents are resampled.
      n_boot: resamples; alpha: 1 - confidence level; seed: the resamples' seed.
      ci_method: ``"expanded"`` (`jaxjudge.metrics.expanded_levels`) or ``"percentile"``.

    Returns:
      ``(Interval(estimate, low, high), replicates [n_boot])``.

    Raises:
      ValueError: mismatched lengths, NaN, fewer than 2 systems or 2 documents, an unknown
        ``ci_method``.
    """
    j, h = np.asarray(judge, np.float64), np.asarray(human, np.float64)
    s, g = np.asarray(systems), np.asarray(groups)
    if not (j.ndim == h.ndim == s.ndim == g.ndim == 1) or not (j.shape == h.shape == s.shape == g.shape):
        raise ValueError(f"mismatched lengths: judge {j.shape}, human {h.shape}, systems {s.shape}, groups {g.shape}")
    for name, a in (("judge", j), ("human", h)):
        bad = np.flatnonzero(~np.isfinite(a))
        if bad.size:
            raise ValueError(f"{name} contains NaN or inf at rows {bad[:10].tolist()}")
    names, codes = np.unique(s, return_inverse=True)
    if names.size < 2:
        raise ValueError(f"system-level tau needs at least 2 systems, got {names.size}")
    num_docs = np.unique(g).size
    if num_docs < 2:
        raise ValueError(f"a bootstrap over documents needs at least 2 documents, got {num_docs}")
    if ci_method not in ("expanded", "percentile"):
        raise ValueError(f"unknown ci_method {ci_method!r}; expected 'expanded' or 'percentile'")
    arrays = (jnp.asarray(j, jnp.float32), jnp.asarray(h, jnp.float32), jnp.asarray(codes, jnp.int32))
    est, reps = bootstrap_distribution(_stat(int(names.size)), arrays, g, n_boot=n_boot, seed=seed)
    reps = np.asarray(reps, np.float64)
    ok = reps[np.isfinite(reps)]
    levels = expanded_levels(num_docs, alpha) if ci_method == "expanded" else (alpha / 2, 1 - alpha / 2)
    lo, hi = np.quantile(ok, levels) if ok.size else (np.nan, np.nan)
    return Interval(float(est), float(lo), float(hi)), reps
