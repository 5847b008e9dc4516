"""From a judge's log-probabilities over the K score candidates to a distribution and a score.

The engine stores, for every example, the judge's log-probabilities of the K score candidates
(e.g. the tokens "1" .. "5"). These are normalised over the full vocabulary, so they do not sum
to one over the candidates; every function here renormalises over the candidates first, which
also makes the results invariant to adding a per-example constant to the inputs.

All functions are pure and jit-compatible; the temperature is a traced argument (not static) so
that a grid over temperatures can be vmapped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def renormalize(logits: Array, temperature: float | Array = 1.0) -> Array:
    """Log-probabilities over the score candidates at a temperature.

    Args:
        logits: `[..., K]` logits or log-probabilities of the K score candidates (any per-row
            offset, e.g. a full-vocabulary log-normaliser, is irrelevant).
        temperature: positive scalar; the distribution is `softmax(logits / temperature)`.
            Lower values sharpen it towards the greedy choice.

    Returns:
        `[..., K]` log-probabilities that sum to one (in probability) over the last axis.
    """
    return jax.nn.log_softmax(logits / temperature, axis=-1)


def expected_score(logits: Array, values: Array, temperature: float | Array = 1.0) -> Array:
    """Probability-weighted score, `sum_k p_k(T) * values_k`.

    The random-number debiasing paper reads scores at temperature 0.2 (a sharpened distribution);
    temperature 1 is the plain expectation under the judge's candidate distribution.

    Args:
        logits: `[..., K]` logits or log-probabilities of the score candidates.
        values: `[K]` numeric value of each candidate (e.g. `[1., 2., 3., 4., 5.]`).
        temperature: positive scalar applied before the softmax.

    Returns:
        `[...]` expected scores.
    """
    probs = jax.nn.softmax(logits / temperature, axis=-1)  # [..., K]
    return jnp.einsum("...k,k->...", probs, jnp.asarray(values, probs.dtype))


def greedy_score(logits: Array, values: Array) -> Array:
    """Value of the most probable candidate (ties go to the first, i.e. lowest, candidate).

    Args:
        logits: `[..., K]` logits or log-probabilities of the score candidates.
        values: `[K]` numeric value of each candidate.

    Returns:
        `[...]` greedy scores.
    """
    return jnp.asarray(values)[jnp.argmax(logits, axis=-1)]
