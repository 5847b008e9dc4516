"""Contrastive decoding over the score candidates: a large judge minus a small assistant.

The assistant (a smaller model of the same family, given the same prompt) shares the large
judge's surface biases but less of its competence, so subtracting a fraction of its
log-probabilities removes bias while keeping the judgement.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def contrastive_scores(
    main_logits: Array,
    asst_logits: Array,
    lam: float | Array,
    t_main: float | Array = 1.0,
    t_asst: float | Array = 1.0,
    alpha: float | Array = 0.0,
) -> Array:
    """Contrastive scores, not normalised: the one formula candidate scoring and generation share.

            log_softmax(main / t_main) - lam * log_softmax(asst / t_asst)

    where the main model's (tempered) probability is at least ``alpha`` times its largest, and
    ``-inf`` elsewhere (Li et al. 2023, "Contrastive Decoding", the adaptive plausibility
    constraint). Each `log_softmax` is over the last axis: the K score candidates in
    `contrastive`, the whole vocabulary when `jaxjudge.engine.decode.Contrastive` picks a
    generated token. The most likely main-model entry always stays, so ``lam = 0`` ranks
    entries as the main model does; ``alpha = 0`` keeps every entry (``log 0 = -inf``).
    Traceable; every argument may be traced.

    Args:
        main_logits: ``[..., K]`` main (large) judge logits or log-probabilities.
        asst_logits: ``[..., K]`` assistant (small) model logits or log-probabilities.
        lam: weight of the assistant; 0 leaves the main model alone.
        t_main, t_asst: positive temperatures dividing each model's logits.
        alpha: plausibility threshold in [0, 1]; 0 disables it.

    Returns:
        ``[..., K]`` scores (``-inf`` for excluded entries); their argmax is the contrastive
        choice.
    """
    main = jax.nn.log_softmax(main_logits / t_main, axis=-1)  # [..., K]
    asst = jax.nn.log_softmax(asst_logits / t_asst, axis=-1)  # [..., K]
    score = main - lam * asst  # [..., K]
    keep = main >= jnp.log(alpha) + jnp.max(main, axis=-1, keepdims=True)  # alpha = 0: log 0 = -inf keeps all
    return jnp.where(keep, score, -jnp.inf)


def contrastive(
    main_logits: Array,
    asst_logits: Array,
    lam: float | Array,
    t_main: float | Array = 1.0,
    t_asst: float | Array = 1.0,
    alpha: float | Array = 0.0,
) -> Array:
    """Contrastive candidate log-probabilities: `contrastive_scores` renormalised over the K
    candidates,

            log_softmax( log_softmax(main / t_main) - lam * log_softmax(asst / t_asst) )

    Both inner `log_softmax`s are over the K candidates. The inputs may be the engine's
    full-vocabulary-normalised candidate log-probabilities (they do not sum to one over the
    candidates); renormalising each model over the candidates first is what makes the
    difference well-defined and invariant to each model's per-example log-normaliser.

    Temperatures: the contrastive-decoding paper describes a temperature normalisation between
    the two model sizes, while its public code divides the main (expert) model's logits by the
    temperature. `t_main` is that main-model temperature; `t_asst` scales the assistant
    (amateur) model. Both default to 1 and both are traced arguments, so a lambda x temperature
    grid can be vmapped.

    Plausibility: a candidate whose main-model probability (at `t_main`, as it enters the
    difference) is below `alpha` times the largest main-model candidate probability is
    excluded, its output set to -inf, before the contrastive scores are compared and
    renormalised; the most likely main-model candidate always stays. The ratio is the same
    whether the main model is normalised over the candidates or the full vocabulary.
    `alpha = 0` (default) turns the constraint off and returns exactly the unconstrained
    result. For the constraint over the full vocabulary during generation see
    `jaxjudge.engine.contrastive_generate`.

    Args:
        main_logits: `[N, K]` main (large) judge logits or log-probabilities of the candidates.
        asst_logits: `[N, K]` assistant (small) model logits or log-probabilities.
        lam: scalar weight of the assistant; 0 returns the main model's candidate distribution.
        t_main: positive temperature dividing the main model's logits.
        t_asst: positive temperature dividing the assistant's logits.
        alpha: plausibility threshold in [0, 1] (traced); 0 disables it.

    Returns:
        `[N, K]` log-probabilities over the candidates (-inf for excluded candidates).
    """
    return jax.nn.log_softmax(contrastive_scores(main_logits, asst_logits, lam, t_main, t_asst, alpha), axis=-1)
