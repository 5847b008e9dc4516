"""Adjustment functions in the form `jaxjudge.select.grid_search` searches over.

Each is `adjust_fn(params, data[, fold]) -> [N, K]` adjusted log-probabilities for one grid
point: the hyper-parameters in `params`, the arrays in `data` (passed, not closed over, so
that one compilation serves every data set of the same shape). They are module-level so that
their compilations are reused.
"""

from __future__ import annotations

import functools

import jax

from jaxjudge.debias.contrastive import contrastive
from jaxjudge.debias.linear_mix import linear_mix
from jaxjudge.debias.prior import latent_prior, prior_correction, rectify

Array = jax.Array

__all__ = ["adjust_per_fold", "combined_adjust", "contrastive_adjust", "linear_mix_adjust", "rectify_adjust"]


def _lam(params) -> Array:
    return params["lam"] if isinstance(params, dict) else params


def rectify_adjust(params, data, fold=None) -> Array:
    """`rectify(logits, correction, params["lam"])` for `grid_search`.

    Args:
        params: `{"lam": scalar}` (or the scalar itself).
        data: `{"logits": [N, K]}` plus `"correction": [K]` when it is shared by all folds.
        fold: optional per-fold `{"correction": [K]}` (from `fold_data`), e.g. a distribution
            calibration correction fitted on that fold's dev labels; it overrides `data`'s.

    Returns:
        `[N, K]` adjusted log-probabilities.
    """
    correction = data["correction"] if fold is None else fold["correction"]
    return rectify(data["logits"], correction, _lam(params))


def contrastive_adjust(params, data) -> Array:
    """`contrastive(data["main"], data["asst"], lam, t_main, t_asst, alpha)` for `grid_search`.

    Args:
        params: `{"lam": scalar}` with optional `"t_main"` and `"t_asst"` (default 1) and
            `"alpha"` (a grid axis of the plausibility threshold).
        data: `{"main": [N, K], "asst": [N, K]}`, optionally `"alpha"`: a fixed plausibility
            threshold. Without either `alpha` the constraint is off (alpha = 0), as before.

    Returns:
        `[N, K]` adjusted log-probabilities.
    """
    p = params if isinstance(params, dict) else {"lam": params}
    alpha = p.get("alpha", data.get("alpha", 0.0))
    return contrastive(
        data["main"], data["asst"], p["lam"], p.get("t_main", 1.0), p.get("t_asst", 1.0), alpha
    )


def linear_mix_adjust(params, data) -> Array:
    """`linear_mix(data["main"], data["asst"], w, t_main)` for `grid_search`.

    Args:
        params: `{"w": scalar}` with optional `"t_main"` (default 1).
        data: `{"main": [N, K], "asst": [N, K]}`.

    Returns:
        `[N, K]` log-probabilities of the mixture (see `jaxjudge.debias.linear_mix`).
    """
    return linear_mix(data["main"], data["asst"], params["w"], params.get("t_main", 1.0))


def combined_adjust(params, data) -> Array:
    """Contrastive decoding, then the Deb-T correction of the (combined) judge's prior.

    Args:
        params: `{"lam", "lam_d"}` (contrastive and Deb-T strengths) with optional
            `"t_main"` and `"t_asst"` (default 1).
        data: `{"main": [N, K], "asst": [N, K], "rand_main": [P, K]}` and optionally
            `"rand_asst": [P, K]`. With ``rand_asst`` the prior is that of the contrastive
            combination itself, on the random-number prompts, at the same (lambda,
            temperature); otherwise the main judge's.

    Returns:
        `[N, K]` adjusted log-probabilities.
    """
    t_main = params.get("t_main", 1.0)
    t_asst = params.get("t_asst", 1.0)
    adj = contrastive(data["main"], data["asst"], params["lam"], t_main, t_asst)  # [N, K]
    if "rand_asst" in data:
        prior_logits = contrastive(data["rand_main"], data["rand_asst"], params["lam"], t_main, t_asst)  # [P, K]
    else:
        prior_logits = data["rand_main"]
    return rectify(adj, prior_correction(latent_prior(prior_logits)), params["lam_d"])


@functools.partial(jax.jit, static_argnames=("adjust_fn",))
def adjust_per_fold(chosen, data, *, adjust_fn):
    """`[F, N, K]`: `adjust_fn` at each fold's chosen grid point (leaves of `chosen`: `[F]`)."""
    return jax.vmap(lambda p: adjust_fn(p, data))(chosen)  # [F, N, K]
