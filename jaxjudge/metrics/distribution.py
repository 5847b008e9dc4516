"""Metrics on the judge's score distribution: Score Distribution Divergence and validity rate."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.metrics import _checks

# The probability floor `sdd` used before it computed KL from log-probabilities: it capped each
# example's KL at about -log(1e-6) = 13.8 nats. Kept only for `sdd(..., eps=SDD_EPS)`, to
# reproduce figures computed with it; the default is no floor.
SDD_EPS = 1e-6

# `sdd` on probabilities takes log(max(p, _TINY)): an exact 0 (e.g. a float32 softmax that
# underflowed) has no finite log, and the smallest normal float32 is the closest value the
# arithmetic can represent without flushing (log = -87.34 nats). Entries >= _TINY are untouched.
_TINY = float(np.finfo(np.float32).tiny)


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


def kl_rows(logp: jax.Array, human: jax.Array, lo: jax.Array) -> jax.Array:
    """Each row's KL(Q || P) `[N]` (traced; no checks): the terms `sdd_from_logprobs` averages."""
    num_scores = logp.shape[-1]
    q = _targets(human, lo, num_scores)  # [N, K]
    # Rows are normalised to within 1e-3 (checked eagerly); make them exact, so that KL >= 0.
    logp = logp - jax.nn.logsumexp(logp, axis=-1, keepdims=True)
    # KL(Q || P) = sum_k q_k (log q_k - log p_k), with 0 * log 0 = 0 on the human side: scores
    # the human distribution does not cover contribute nothing, whatever the judge's log p_k
    # (even -inf, whose product with 0 the `where` discards).
    covered = q > 0
    terms = jnp.where(covered, q * (jnp.log(jnp.where(covered, q, 1.0)) - logp), 0.0)
    return jnp.sum(terms, -1)


@jax.jit
def _sdd_core(logp: jax.Array, human: jax.Array, lo: jax.Array, w: jax.Array) -> jax.Array:
    kl = kl_rows(logp, human, lo)
    pos = w > 0
    wsum = jnp.sum(jnp.where(pos, w, 0.0))
    total = jnp.sum(jnp.where(pos, w * kl, 0.0))
    return jnp.where(wsum > 0, total / jnp.where(wsum > 0, wsum, 1.0), jnp.nan)


@jax.jit
def _safe_log(probs: jax.Array) -> jax.Array:
    return jnp.log(jnp.maximum(probs, _TINY))


@jax.jit
def _floored_log(probs: jax.Array, eps: jax.Array) -> jax.Array:
    return jnp.log(jnp.maximum(probs, eps))  # renormalised in `_sdd_core`


@dataclasses.dataclass(frozen=True)
class _SddInputs:
    """The inputs of `sdd` / `sdd_from_logprobs` after `_check_sdd_inputs`.

    Attributes:
      arr: float32 `[N, K]` probabilities or log-probabilities.
      human: float32 `[N]` human scores.
      w: float32 `[N]` row weights, the mask folded in.
      sel: bool `[N]` numpy, the selected rows (w > 0); None when traced (no value checks).
    """

    arr: jax.Array
    human: jax.Array
    w: jax.Array
    sel: np.ndarray | None

    @property
    def traced(self) -> bool:
        """Whether an input is traced (under `jit`/`vmap`): only the shapes were checked."""
        return self.sel is None


def _check_sdd_inputs(name: str, arr: Any, human: Any, lo: Any, mask: Any, weights: Any) -> _SddInputs:
    """Shape checks (always) and the shared eager value checks of `sdd` / `sdd_from_logprobs`."""
    shape = tuple(np.shape(arr))
    if len(shape) != 2:
        raise ValueError(f"{name} must be [N, K], got shape {shape}")
    n, k = shape
    if k < 2:
        raise ValueError(f"{name} must cover at least 2 scores (K >= 2), got K={k}")
    _checks.check_vector(human, "human scores", n)
    w = _checks.effective_weights(n, mask, weights)
    arr = jnp.asarray(arr, jnp.float32)
    human = jnp.asarray(human, jnp.float32)
    if _checks.is_traced(arr, human, w, lo):
        return _SddInputs(arr, human, w, None)
    sel = _checks.check_weight_values(w)
    _checks.check_finite(human, "human scores", sel)
    h_np = np.asarray(human)
    out = np.flatnonzero(((h_np < lo) | (h_np > lo + k - 1)) & sel)
    if out.size:
        raise ValueError(
            f"human scores outside the score range [{lo}, {lo + k - 1}] at rows "
            f"{_checks.format_rows(out)}"
        )
    return _SddInputs(arr, human, w, sel)


def sdd(
    probs: Any,
    human: Any,
    lo: int,
    mask: Any | None = None,
    *,
    weights: Any | None = None,
    eps: float | None = None,
) -> jax.Array:
    """Score Distribution Divergence: mean over examples of KL(Q || P), in nats.

    Q is the human score spread over its two neighbouring integer scores (`score_targets`): a
    score of 3.7 puts 0.3 on "3" and 0.7 on "4". P is the judge's distribution over the K score
    candidates. The KL is computed from log P with no floor: log(max(p, tiny)), tiny = 1.2e-38
    the smallest normal float32, only so that an exact 0 (a float32 softmax that underflowed)
    gives a finite log (at most 87.3 nats per example) instead of inf. Where the judge's
    probabilities come from logits, pass `sdd_from_logprobs(jax.nn.log_softmax(logits, -1), ...)`
    instead: log-probabilities far below float32's range stay exact there.

    Human scores outside [lo, lo + K - 1] raise ValueError in eager calls; under `jit`/`vmap`
    (no value checks possible) they are clipped to the range.

    Args:
      probs: judge probabilities `[N, K]` over the scores lo..lo+K-1 (e.g. a softmax of the
        debiased score logits).
      human: human scores `[N]`, continuous.
      lo: the lowest score.
      mask: bool `[N]` or None; unselected rows are ignored.
      weights: float `[N]` >= 0 or None (integer weights equal repeated rows).
      eps: None (default) for the exact KL. A float reproduces the earlier definition: P
        clipped below at `eps` and renormalised before the log, which caps each example's KL
        at about -log(eps) (13.8 nats for `SDD_EPS` = 1e-6); use only to compare with figures
        computed that way.

    Returns:
      float32 scalar >= 0; NaN when no row is selected (eager: ValueError).
    """
    inputs = _check_sdd_inputs("probs", probs, human, lo, mask, weights)
    probs, sel = inputs.arr, inputs.sel
    if not inputs.traced:
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
    if eps is None:
        logp = _safe_log(probs)
    else:
        if not _checks.is_traced(eps) and not float(eps) > 0.0:
            raise ValueError(f"eps must be > 0 (or None for no floor), got {eps}")
        logp = _floored_log(probs, jnp.float32(eps))
    return _sdd_core(logp, inputs.human, jnp.asarray(lo, jnp.float32), inputs.w)


def sdd_from_logprobs(
    logprobs: Any,
    human: Any,
    lo: int,
    mask: Any | None = None,
    *,
    weights: Any | None = None,
) -> jax.Array:
    """Score Distribution Divergence from the judge's log-probabilities, with no floor at all.

    The same statistic as `sdd` (mean over examples of KL(Q || P), Q the human score split over
    its two integer neighbours), read from log P directly, so a judge that gives a human score
    log-probability -200 contributes its full 200 nats, however far below float32's smallest
    probability that is. A log-probability of -inf on a score the human distribution covers
    makes that example's KL, and the mean, inf (the true value); on a score it does not
    cover it contributes 0 (0 * log 0 = 0).

    Args:
      logprobs: judge log-probabilities `[N, K]` over the scores lo..lo+K-1, normalised per row
        (e.g. `jax.nn.log_softmax(logits / t, -1)`; the rounding left in a row's logsumexp is
        removed before the KL); entries may be -inf.
      human: human scores `[N]`, continuous.
      lo: the lowest score.
      mask: bool `[N]` or None; unselected rows are ignored.
      weights: float `[N]` >= 0 or None (integer weights equal repeated rows).

    Returns:
      float32 scalar >= 0 (inf as above); NaN when no row is selected (eager: ValueError).

    Raises:
      ValueError (eager calls): shapes, human scores outside the range, NaN or +inf entries, or
        rows whose probabilities do not sum to 1 (|logsumexp| > 1e-3) in selected rows.
    """
    inputs = _check_sdd_inputs("logprobs", logprobs, human, lo, mask, weights)
    sel = inputs.sel
    if not inputs.traced:
        lp = np.asarray(inputs.arr, np.float64)
        bad = np.flatnonzero((np.isnan(lp) | (lp == np.inf)).any(-1) & sel)
        if bad.size:
            raise ValueError(f"logprobs contain NaN or +inf at rows {_checks.format_rows(bad)}")
        with np.errstate(divide="ignore", invalid="ignore"):
            top = np.max(lp, axis=-1, keepdims=True)
            lse = top[:, 0] + np.log(np.sum(np.exp(lp - top), axis=-1))
        bad = np.flatnonzero(~(np.abs(lse) <= 1e-3) & sel)
        if bad.size:
            raise ValueError(
                f"logprobs rows {_checks.format_rows(bad)} are not normalised (logsumexp != 0); pass "
                "log-probabilities, e.g. jax.nn.log_softmax(logits, -1)"
            )
    return _sdd_core(inputs.arr, inputs.human, jnp.asarray(lo, jnp.float32), inputs.w)


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
