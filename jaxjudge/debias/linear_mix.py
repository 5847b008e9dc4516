"""A score-level linear mix of two judges: a control for contrastive decoding's mechanism.

Contrastive decoding subtracts the assistant inside the distribution (log-probabilities, then a
softmax). The control subtracts it at the level of the score: the main judge's expected score
minus ``w`` times the assistant's,

        m = E_main(t_main) - w * E_asst,        E_x = sum_k p_x(k) * v_k,

with the same number of tuned values as contrastive decoding (``w`` in place of lambda, and the
main judge's temperature ``t_main``). If contrastive decoding's gain over its temperature
baseline were only "main judge minus some of the assistant's score", this mix would match it.

The report reads every method from a distribution over the K candidates, so the mix is written
as one: on evenly spaced candidate values ``v_k = lo + k * step`` (every `ScoreScale`), the
assistant's distribution reversed over the candidates, ``p_asst(K - 1 - k)``, has expected score
``lo + hi - E_asst``, and the mixture

        q(k) = (p_main(k) + w * p_asst(K - 1 - k)) / (1 + w)

has expected score ``(E_main + w * (lo + hi - E_asst)) / (1 + w) = (m + w * (lo + hi)) / (1 + w)``:
an increasing affine map of ``m`` for a fixed ``w``, inside ``[lo, hi]``. Rank and linear
correlations of the expected score of ``q`` are those of ``m``; its MSE, SDD and greedy score are
those of the mixture, not of ``m`` (they are not what the control measures).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

Array = jax.Array


def linear_mix(
    main_logits: Array,
    asst_logits: Array,
    w: float | Array,
    t_main: float | Array = 1.0,
) -> Array:
    """Log-probabilities of the mixture whose expected score is the linear mix (module docstring).

            log( (softmax(main / t_main)[k] + w * softmax(asst)[K - 1 - k]) / (1 + w) )

    Both softmaxes are over the K candidates (the engine's full-vocabulary-normalised inputs do
    not sum to one over them). The candidates must be in increasing order of evenly spaced
    values, as every `jaxjudge.prompts.ScoreScale` is: reversing them is what turns ``- w *
    E_asst`` into a mixture weight. ``w = 0`` returns the main judge at ``t_main``. Traceable;
    ``w`` and ``t_main`` may be traced (a grid is vmapped over them).

    Args:
        main_logits: `[..., K]` main judge logits or log-probabilities of the candidates.
        asst_logits: `[..., K]` assistant logits or log-probabilities of the candidates.
        w: non-negative weight of the assistant's expected score.
        t_main: positive temperature dividing the main judge's logits.

    Returns:
        `[..., K]` log-probabilities over the candidates.
    """
    main = jax.nn.log_softmax(main_logits / t_main, axis=-1)  # [..., K]
    asst_reversed = jax.nn.log_softmax(asst_logits, axis=-1)[..., ::-1]  # [..., K]
    w = jnp.asarray(w, main.dtype)
    # log(w) is -inf at w = 0, which logaddexp turns into the main judge alone.
    return jnp.logaddexp(main, jnp.log(w) + asst_reversed) - jnp.log1p(w)
