"""Contrastive decoding over the score candidates: a large judge minus a small assistant.

The assistant (a smaller model of the same family, given the same prompt) shares the large
judge's surface biases but less of its competence, so subtracting a fraction of its
log-probabilities removes bias while keeping the judgement.
"""

from __future__ import annotations

import jax

Array = jax.Array


def contrastive(
    main_logits: Array,
    asst_logits: Array,
    lam: float | Array,
    t_main: float | Array = 1.0,
    t_asst: float | Array = 1.0,
) -> Array:
    """Contrastive candidate log-probabilities.

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

    Args:
        main_logits: `[N, K]` main (large) judge logits or log-probabilities of the candidates.
        asst_logits: `[N, K]` assistant (small) model logits or log-probabilities.
        lam: scalar weight of the assistant; 0 returns the main model's candidate distribution.
        t_main: positive temperature dividing the main model's logits.
        t_asst: positive temperature dividing the assistant's logits.

    Returns:
        `[N, K]` log-probabilities over the candidates.
    """
    main = jax.nn.log_softmax(main_logits / t_main, axis=-1)  # [N, K]
    asst = jax.nn.log_softmax(asst_logits / t_asst, axis=-1)  # [N, K]
    return jax.nn.log_softmax(main - lam * asst, axis=-1)
