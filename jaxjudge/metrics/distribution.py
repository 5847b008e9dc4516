"""Metrics on the judge's score distribution: Score Distribution Divergence and validity rate."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.metrics import _checks

# Probabilities below this are raised to it before the log (then rows are renormalised), so a
# judge that puts exactly zero mass on a human score gives a large but finite divergence
# (at most about -log(1e-6) = 13.8 nats per example).
SDD_EPS = 1e-6


def _targets(human: jax.Array, lo: Any, num_scores: int) -> jax.Array:
    # Scores outside [lo, lo+K-1] are clipped here; the eager `sdd` raises on them instead.
    s = jnp.clip(human.astype(jnp.float32) - lo, 0.0, num_scores - 1.0)
    below = jnp.floor(s)
    frac = s - below
    below_i = below.astype(jnp.int32)
    above_i = jnp.minimum(below_i + 1, num_scores - 1)
    # [N, K]: mass 1 - frac on floor(s), frac on ceil(s); an integer score is one-hot.
    return jax.nn.one_hot(below_i, num_scores) * (1.0 - frac)[:, None] + jax.nn.one_hot(
        above_i, num_scores
    ) * frac[:, None]


def score_targets(human: Any, lo: int, num_scores: int) -> jax.Array:
    """Turn continuous human scores into distributions over the integer scores `[N, K]`.

    A score s puts mass (ceil(s) - s) on floor(s) and (s - floor(s)) on ceil(s): 3.7 gives 0.3 on
    3 and 0.7 on 4; an integer score is one-hot. Scores are clipped to [lo, lo + K - 1].

    Args:
      human: human scores `[N]` (e.g. a mean of annotators).
      lo: the lowest score; the scores are lo, lo+1, ..., lo+K-1.
      num_scores: K (static).

    Returns:
      float32 `[N, K]`, rows summing to 1.
    """
    _checks.check_vector(human, "human scores")
    return _targets(jnp.asarray(human, jnp.float32), lo, int(num_scores))


@jax.jit
def _sdd_core(probs: jax.Array, human: jax.Array, lo: jax.Array, w: jax.Array, eps) -> jax.Array:
    num_scores = probs.shape[-1]
    q = _targets(human, lo, num_scores)  # [N, K]
    p = jnp.maximum(probs, eps)
    p = p / jnp.sum(p, axis=-1, keepdims=True)
    # 0 * log 0 = 0: scores the human distribution does not cover contribute nothing.
    kl = jnp.sum(jnp.where(q > 0, q * (jnp.log(jnp.where(q > 0, q, 1.0)) - jnp.log(p)), 0.0), -1)
    pos = w > 0
    wsum = jnp.sum(jnp.where(pos, w, 0.0))
    total = jnp.sum(jnp.where(pos, w * kl, 0.0))
    return jnp.where(wsum > 0, total / jnp.where(wsum > 0, wsum, 1.0), jnp.nan)


def sdd(
    probs: Any,
    human: Any,
    lo: int,
    mask: Any | None = None,
    *,
    weights: Any | None = None,
    eps: float = SDD_EPS,
) -> jax.Array:
    """Score Distribution Divergence: mean over examples of KL(Q || P), in nats.

    Q is the human score spread over its two neighbouring integer scores (`score_targets`), P the
    judge's distribution over the K score candidates. P is clipped below at `eps` and
    renormalised before the log.

    Human scores outside [lo, lo + K - 1] raise ValueError in eager calls; under `jit`/`vmap`
    (no value checks possible) they are clipped to the range.

    Args:
      probs: judge probabilities `[N, K]` over the scores lo..lo+K-1 (e.g. a softmax of the
        debiased score logits).
      human: human scores `[N]`, continuous.
      lo: the lowest score.
      mask: bool `[N]` or None; unselected rows are ignored.
      weights: float `[N]` >= 0 or None (integer weights equal repeated rows).
      eps: probability floor.

    Returns:
      float32 scalar >= 0; NaN when no row is selected (eager: ValueError).
    """
    shape = tuple(np.shape(probs))
    if len(shape) != 2:
        raise ValueError(f"probs must be [N, K], got shape {shape}")
    n, k = shape
    if k < 2:
        raise ValueError(f"probs must cover at least 2 scores (K >= 2), got K={k}")
    _checks.check_vector(human, "human scores", n)
    w = _checks.effective_weights(n, mask, weights)
    probs = jnp.asarray(probs, jnp.float32)
    human = jnp.asarray(human, jnp.float32)
    if not _checks.is_traced(probs, human, w, lo):
        sel = _checks.check_weight_values(w)
        _checks.check_finite(human, "human scores", sel)
        p_np = np.asarray(probs)
        bad = np.flatnonzero(~np.isfinite(p_np).all(-1) & sel)
        if bad.size:
            raise ValueError(f"probs contain NaN or inf at rows {_checks.format_rows(bad)}")
        bad = np.flatnonzero(((p_np < 0).any(-1) | (np.abs(p_np.sum(-1) - 1) > 1e-3)) & sel)
        if bad.size:
            raise ValueError(
                f"probs rows {_checks.format_rows(bad)} are not distributions (negative entries "
                "or sum != 1); pass probabilities, e.g. jax.nn.softmax(logits, -1)"
            )
        h_np = np.asarray(human)
        out = np.flatnonzero(((h_np < lo) | (h_np > lo + k - 1)) & sel)
        if out.size:
            raise ValueError(
                f"human scores outside the score range [{lo}, {lo + k - 1}] at rows "
                f"{_checks.format_rows(out)}"
            )
    return _sdd_core(probs, human, jnp.asarray(lo, jnp.float32), w, jnp.float32(eps))


@jax.jit
def _rate_core(valid: jax.Array, w: jax.Array) -> jax.Array:
    pos = w > 0
    wsum = jnp.sum(jnp.where(pos, w, 0.0))
    hits = jnp.sum(jnp.where(pos & valid, w, 0.0))
    return jnp.where(wsum > 0, hits / jnp.where(wsum > 0, wsum, 1.0), jnp.nan)


def validity_rate(valid: Any, mask: Any | None = None, *, weights: Any | None = None) -> jax.Array:
    """Fraction of selected examples whose judge output was a valid score.

    Args:
      valid: bool `[N]`.
      mask: bool `[N]` or None.
      weights: float `[N]` >= 0 or None.

    Returns:
      float32 scalar in [0, 1]; NaN when nothing is selected (eager: ValueError).
    """
    n = _checks.check_vector(valid, "valid")
    valid = jnp.asarray(valid)
    if valid.dtype != jnp.bool_:
        raise TypeError(f"valid must be a boolean array, got dtype {valid.dtype}")
    w = _checks.effective_weights(n, mask, weights)
    if not _checks.is_traced(valid, w):
        _checks.check_weight_values(w)
    return _rate_core(valid, w)
