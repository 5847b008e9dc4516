"""Calibration baselines, each expressed as a prior correction (`adjusted = logits + lam * B`).

- Contextual calibration: the prior is the judge's mean candidate distribution on
  content-free inputs (e.g. the prompt filled with "N/A"); `lam = 1` divides by it.
- Batch calibration: the prior is the judge's mean predicted distribution over a set of
  (unlabelled) test inputs, optionally restricted by a mask.
- Distribution calibration: reweight the judge's distribution by `q(y) / p(y)`, where `p` is
  the judge's marginal (its mean predicted distribution) and `q` is the distribution of the
  human scores, modelled as a Beta distribution fitted by maximum likelihood and discretised
  over the candidates.

Scale mapping and discretisation for distribution calibration (one convention, used both ways):
the K candidates `lo, lo + step, ..., hi` are given K equal bins that tile (0, 1), bin k being
`[k / K, (k + 1) / K]` and centred on the rescaled candidate `(k + 1/2) / K`. A human score s is
rescaled with the same affine map, `u = (s - lo + step / 2) / (K * step)`, so scores on the ends
of the scale land at `1 / (2K)` and `1 - 1 / (2K)` rather than on 0 and 1 (where the Beta
log-likelihood is infinite): this is the squeeze away from the ends. The discretised human prior
is the Beta mass of each bin, `q_k = I(a, b, (k + 1) / K) - I(a, b, k / K)` with `I` the
regularised incomplete beta function (the Beta cdf), so `q` sums to one exactly and gives each
candidate the mass of the scores that would round to it.
"""

from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.scipy.special import betainc, betaln

from jaxjudge.debias.prior import prior_correction, rectify
from jaxjudge.metrics._checks import is_traced

Array = jax.Array


# --- contextual and batch calibration -----------------------------------------------------


def contextual_prior(content_free_logits: Array) -> Array:
    """Mean candidate distribution of the judge on content-free inputs.

    Args:
        content_free_logits: `[M, K]` logits or log-probabilities of the candidates for M
            content-free inputs (e.g. the judging prompt with every text replaced by "N/A").

    Returns:
        `[K]` prior probabilities.
    """
    return jnp.mean(jax.nn.softmax(content_free_logits, axis=-1), axis=0)


def contextual_calibration(
    logits: Array, content_free_logits: Array, lam: float | Array = 1.0
) -> Array:
    """Contextual calibration: divide the judge's distribution by its content-free prior.

    With `lam = 1` this is `p(y | x) / p_cf(y)` renormalised, i.e. the diagonal calibration
    matrix `W = diag(p_cf)^-1` with zero bias of the original method.

    Args:
        logits: `[N, K]` candidate logits or log-probabilities.
        content_free_logits: `[M, K]` candidate logits on content-free inputs.
        lam: scalar strength of the correction.

    Returns:
        `[N, K]` calibrated log-probabilities.
    """
    return rectify(logits, prior_correction(contextual_prior(content_free_logits)), lam)


def batch_prior(logits: Array, mask: Array | None = None) -> Array:
    """Mean predicted candidate distribution over a set of examples.

    Args:
        logits: `[N, K]` candidate logits or log-probabilities.
        mask: optional `[N]` bool; only rows with True contribute.

    Returns:
        `[K]` probabilities.
    """
    probs = jax.nn.softmax(logits, axis=-1)  # [N, K]
    if mask is None:
        return jnp.mean(probs, axis=0)
    w = jnp.asarray(mask, probs.dtype)  # [N]
    return jnp.einsum("n,nk->k", w, probs) / jnp.sum(w)


def batch_calibration(
    logits: Array, mask: Array | None = None, lam: float | Array = 1.0
) -> Array:
    """Batch calibration: divide by the mean predicted distribution over the (masked) set.

    Args:
        logits: `[N, K]` candidate logits or log-probabilities.
        mask: optional `[N]` bool selecting the rows that estimate the prior (all rows are
            adjusted).
        lam: scalar strength of the correction.

    Returns:
        `[N, K]` calibrated log-probabilities.
    """
    return rectify(logits, prior_correction(batch_prior(logits, mask)), lam)


# --- distribution calibration ---------------------------------------------------------------


class BetaFit(NamedTuple):
    """Maximum-likelihood Beta(a, b) fit.

    Attributes:
        a: scalar first shape parameter.
        b: scalar second shape parameter.
        nll: scalar mean negative log-likelihood at (a, b).
    """

    a: Array
    b: Array
    nll: Array


def _scale_of(values) -> tuple[float, float, int]:
    """(lo, step, K) of evenly spaced candidate values; raises if they are not."""
    v = np.asarray(values, dtype=np.float64)
    if v.ndim != 1 or v.shape[0] < 2:
        raise ValueError(f"values must be a [K] vector with K >= 2, got shape {v.shape}")
    steps = np.diff(v)
    if not np.all(steps > 0) or not np.allclose(steps, steps[0], rtol=1e-6, atol=1e-9):
        raise ValueError(f"values must be increasing and evenly spaced, got {v.tolist()}")
    return float(v[0]), float(steps[0]), int(v.shape[0])


def rescale_scores(scores: Array, values) -> Array:
    """Map scores on the candidates' scale into (0, 1), the centre of each candidate's bin.

    `u = (s - lo + step / 2) / (K * step)`: candidate k maps to `(k + 1/2) / K`, so the ends of
    the scale map to `1 / (2K)` and `1 - 1 / (2K)` (see the module docstring).

    Args:
        scores: `[N]` scores within `[lo, hi]` (continuous scores, e.g. averages of annotators,
            are allowed).
        values: `[K]` increasing, evenly spaced candidate values (static: a concrete array).

    Returns:
        `[N]` rescaled scores in (0, 1).
    """
    lo, step, k = _scale_of(values)
    scores = jnp.asarray(scores, jnp.float32)
    if not is_traced(scores):
        s = np.asarray(scores)
        hi = lo + (k - 1) * step
        bad = np.flatnonzero((s < lo - 1e-6) | (s > hi + 1e-6) | ~np.isfinite(s))
        if bad.size:
            raise ValueError(
                f"scores must be finite and within [{lo}, {hi}]; "
                f"row {int(bad[0])} is {s[bad[0]]} "
                f"({bad.size} bad rows)"
            )
    return (scores - lo + step / 2) / (k * step)


def _beta_nll(log_ab: Array, mean_log_u: Array, mean_log_1mu: Array) -> Array:
    a, b = jnp.exp(log_ab[0]), jnp.exp(log_ab[1])
    return betaln(a, b) - (a - 1.0) * mean_log_u - (b - 1.0) * mean_log_1mu


@jax.jit
def _beta_stats(u: Array, w: Array) -> Array:
    """Weighted [mean log u, mean log(1 - u), mean u, variance of u]."""
    w = w / jnp.sum(w)  # [N]
    m = jnp.sum(w * u)
    return jnp.stack([
        jnp.sum(w * jnp.log(u)), jnp.sum(w * jnp.log1p(-u)), m, jnp.sum(w * (u - m) ** 2)
    ])


# The optimisation sees only four scalars, so it compiles once whatever the number of rows.
@partial(jax.jit, static_argnames=("steps",))
def _fit_beta_jit(stats: Array, steps: int) -> BetaFit:
    mean_log_u, mean_log_1mu, m, v = stats[0], stats[1], stats[2], jnp.maximum(stats[3], 1e-8)
    # Method-of-moments start: close to the optimum, so a few L-BFGS steps suffice.
    common = jnp.maximum(m * (1.0 - m) / v - 1.0, 1e-2)
    init = jnp.log(jnp.stack([m * common, (1.0 - m) * common]))

    fun = partial(_beta_nll, mean_log_u=mean_log_u, mean_log_1mu=mean_log_1mu)
    opt = optax.lbfgs()
    value_and_grad = optax.value_and_grad_from_state(fun)

    def step(carry, _):
        params, state = carry
        value, grad = value_and_grad(params, state=state)
        updates, state = opt.update(grad, state, params, value=value, grad=grad, value_fn=fun)
        return (optax.apply_updates(params, updates), state), None

    (params, _), _ = jax.lax.scan(step, (init, opt.init(init)), None, length=steps)

    # Near the optimum the objective changes by less than float32 resolves, so the line search
    # stalls up to ~1e-3 away from it; the gradient is still resolved there. A few Newton steps
    # on it polish the optimum (rejected if they would leave the finite region).
    def newton(p, _):
        g, h = jax.grad(fun)(p), jax.hessian(fun)(p)
        new = p - jnp.linalg.solve(h, g)
        return jnp.where(jnp.all(jnp.isfinite(new)), new, p), None

    params, _ = jax.lax.scan(newton, params, None, length=3)
    return BetaFit(jnp.exp(params[0]), jnp.exp(params[1]), fun(params))


def fit_beta(u: Array, mask: Array | None = None, *, steps: int = 50) -> BetaFit:
    """Maximum-likelihood Beta(a, b) for data in the open interval (0, 1), with optax L-BFGS.

    The log-likelihood depends on the data only through `mean(log u)` and `mean(log(1 - u))`;
    it is maximised over `(log a, log b)` by L-BFGS from a method-of-moments start, then
    polished by three Newton steps on the gradient (float32 cannot resolve the objective's
    value close to the optimum, which stalls a line search).

    Args:
        u: `[N]` observations strictly inside (0, 1) (see `rescale_scores` for judge scales).
        mask: optional `[N]` bool; only rows with True are fitted (e.g. the dev fold).
        steps: number of L-BFGS iterations (static).

    Returns:
        `BetaFit(a, b, nll)`.
    """
    u = jnp.asarray(u, jnp.float32)
    if u.ndim != 1:
        raise ValueError(f"fit_beta: u must be [N], got shape {u.shape}")
    w = jnp.ones_like(u) if mask is None else jnp.asarray(mask, jnp.float32)
    if w.shape != u.shape:
        raise ValueError(f"fit_beta: mask shape {w.shape} does not match u shape {u.shape}")
    if not is_traced(u, w):
        un, wn = np.asarray(u), np.asarray(w) > 0
        if wn.sum() < 2:
            raise ValueError(
                f"fit_beta: need at least 2 selected observations, got {int(wn.sum())}"
            )
        bad = np.flatnonzero(wn & ~((un > 0) & (un < 1)))
        if bad.size:
            raise ValueError(
                f"fit_beta: observations must lie strictly inside (0, 1) (rescale scores with "
                f"rescale_scores); row {int(bad[0])} is {un[bad[0]]}"
            )
    return _fit_beta_jit(_beta_stats(u, w), steps)


def beta_candidate_prior(a: Array, b: Array, k: int) -> Array:
    """Beta(a, b) mass on each of the K equal bins of (0, 1) (see the module docstring).

    Args:
        a: scalar Beta shape parameter.
        b: scalar Beta shape parameter.
        k: number of candidates K (static).

    Returns:
        `[K]` probabilities, `q_j = I(a, b, (j + 1) / K) - I(a, b, j / K)`.
    """
    edges = jnp.linspace(0.0, 1.0, k + 1)  # [K + 1]
    cdf = betainc(a, b, edges)
    # The end edges are exact, whatever the incomplete beta returns at 0 and 1.
    cdf = cdf.at[0].set(0.0).at[-1].set(1.0)
    return jnp.diff(cdf)


def human_prior(human: Array, values, mask: Array | None = None, *, steps: int = 50) -> Array:
    """Distribution-calibration target q: Beta fitted to the human scores, discretised.

    Fit it on the dev examples only (via `mask`) when the result is evaluated on held-out data.

    Args:
        human: `[N]` human scores on the candidates' scale `[lo, hi]`.
        values: `[K]` increasing, evenly spaced candidate values.
        mask: optional `[N]` bool; rows used for the fit.
        steps: L-BFGS iterations.

    Returns:
        `[K]` probabilities over the candidates.
    """
    fit = fit_beta(rescale_scores(human, values), mask, steps=steps)
    return beta_candidate_prior(fit.a, fit.b, len(np.asarray(values)))


def distribution_correction(logits: Array, q: Array, mask: Array | None = None) -> Array:
    """Correction `B = log q - log p`, p being the judge's marginal over the (masked) set.

    Args:
        logits: `[N, K]` candidate logits or log-probabilities.
        q: `[K]` target distribution over the candidates (e.g. `human_prior`).
        mask: optional `[N]` bool; rows that estimate the marginal p.

    Returns:
        `[K]` correction (floors both distributions at 1e-12).
    """
    # prior_correction(p) - prior_correction(q) = log max(q) - log max(p): the same floor.
    return prior_correction(batch_prior(logits, mask)) - prior_correction(q)


def distribution_calibration(
    logits: Array, q: Array, mask: Array | None = None, lam: float | Array = 1.0
) -> Array:
    """Distribution calibration: `log_softmax(logits + lam * (log q - log p))`.

    Args:
        logits: `[N, K]` candidate logits or log-probabilities.
        q: `[K]` target distribution over the candidates (e.g. `human_prior` on the dev set).
        mask: optional `[N]` bool; rows that estimate the judge's marginal p.
        lam: scalar strength; 1 is the method as published.

    Returns:
        `[N, K]` calibrated log-probabilities.
    """
    return rectify(logits, distribution_correction(logits, q, mask), lam)


