"""Prior corrections: `adjusted = log_softmax(logits + sum_c lambda_c * B_c)`.

Every debiasing method in the papers the library follows is a logit adjustment. A prior
correction for a prior distribution `pi` over the K candidates is

    B(y) = log U(y) - log max(pi(y), 1e-12),    U uniform over the K candidates,

so that `lam = 1` divides the judge's distribution by its prior (a judge whose output equals
its prior becomes uniform) and `lam = 0` leaves it unchanged. The random-number prior
(Deb-R / Deb-T) is the judge's candidate distribution when asked to "pick a random number"
instead of a score; `latent_prior` builds it from those prompts.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

Array = jax.Array

PRIOR_FLOOR = 1e-12  # Candidates the prior never produces would otherwise get an infinite boost.


def prior_correction(prior: Array) -> Array:
    """Correction vector `B = log U - log max(prior, 1e-12)`.

    Args:
        prior: `[..., K]` probabilities over the candidates (need not be exactly normalised).

    Returns:
        `[..., K]` correction; zero for a uniform prior.
    """
    prior = jnp.asarray(prior)
    k = prior.shape[-1]
    return -jnp.log(float(k)) - jnp.log(jnp.maximum(prior, PRIOR_FLOOR))


def rectify(logits: Array, correction: Array, lam: float | Array) -> Array:
    """Rectified candidate log-probabilities, `log_softmax(logits + lam * B)`.

    Args:
        logits: `[N, K]` (or `[..., K]`) logits or log-probabilities of the candidates.
        correction: `[K]` (or broadcastable to `logits`) correction B, e.g. from
            `prior_correction`.
        lam: scalar strength; 0 is the identity (up to renormalisation).

    Returns:
        `[N, K]` log-probabilities over the candidates.
    """
    return jax.nn.log_softmax(logits + lam * correction, axis=-1)


def adjust(logits: Array, corrections: Array, lams: Array) -> Array:
    """Generic adjustment `log_softmax(logits + sum_c lams[c] * corrections[c])`.

    Args:
        logits: `[N, K]` logits or log-probabilities of the candidates.
        corrections: `[C, K]` per-candidate corrections shared by all examples, or `[C, N, K]`
            per-example corrections (e.g. an assistant model's negated log-probabilities).
        lams: `[C]` strengths.

    Returns:
        `[N, K]` adjusted log-probabilities over the candidates.
    """
    corrections = jnp.asarray(corrections)
    lams = jnp.asarray(lams, corrections.dtype)
    if lams.ndim != 1 or corrections.shape[:1] != lams.shape:
        raise ValueError(
            f"adjust: corrections has leading dim {corrections.shape[:1]} but lams has shape "
            f"{lams.shape}; expected corrections [C, K] or [C, N, K] and lams [C]"
        )
    total = jnp.tensordot(lams, corrections, axes=1)  # [K] or [N, K]
    return jax.nn.log_softmax(logits + total, axis=-1)


def latent_prior(per_prompt_logprobs: Array, mask: Array | None = None) -> Array:
    """The judge's latent score prior from content-free (random-number) prompts.

    Each prompt's log-probabilities are renormalised over the candidates (they usually come
    normalised over the full vocabulary), turned into probabilities and averaged over prompts.
    Choosing which prompts to use (e.g. the `Tp` of least perplexity, see `least_perplexity`)
    is left to the caller.

    Args:
        per_prompt_logprobs: `[P, K]` log-probabilities (or logits) of the K candidates for each
            of P prompts.
        mask: optional `[P]` bool; only prompts with True are averaged.

    Returns:
        `[K]` prior probabilities (sums to one).
    """
    probs = jax.nn.softmax(per_prompt_logprobs, axis=-1)  # [P, K]
    if mask is None:
        return jnp.mean(probs, axis=0)
    w = jnp.asarray(mask, probs.dtype)  # [P]
    return jnp.einsum("p,pk->k", w, probs) / jnp.sum(w)


@partial(jax.jit, static_argnames=("tp",))
def least_perplexity(nll_per_prompt: Array, tp: int) -> Array:
    """Indices of the `tp` prompts with the lowest negative log-likelihood (perplexity).

    Ties are broken by the lower index, so the choice is deterministic.

    Args:
        nll_per_prompt: `[P]` mean token negative log-likelihood (log-perplexity) per prompt.
        tp: number of prompts to keep (static), `1 <= tp <= P`.

    Returns:
        `[tp]` int32 indices, in increasing order of perplexity.
    """
    p = nll_per_prompt.shape[0]
    if not 1 <= tp <= p:
        raise ValueError(f"least_perplexity: tp={tp} must be in [1, {p}] (number of prompts)")
    return jnp.argsort(nll_per_prompt, stable=True)[:tp].astype(jnp.int32)
