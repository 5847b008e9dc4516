"""The ensembling control: the best score-level use of the two judges, fitted on dev.

Per fold, an ordinary least-squares fit on the dev rows of the human score on both judges'
expected scores at the reading's temperature, ``human ~ a * E_main + b * E_asst + c``. What
contrastive decoding adds is then measured against this, the linear model a reader would fit
first with the same two judges' score arrays (no extraction beyond contrastive decoding's own).

The row's candidate distribution is the mixture of the two judges' distributions with weights
``|a|`` and ``|b|``, a judge's candidates reversed where its coefficient is negative (on an
evenly spaced scale reversing turns ``E`` into ``lo + hi - E``). Its expected score is
``(a * E_main + b * E_asst + const) / (|a| + |b|)``: a positive affine map of the fitted
prediction, so its Spearman and Pearson on any rows are the linear model's. Errors (MSE) are
those of the mixture, not of the fit's own scale. ``a = b = 0`` (neither judge helps on dev)
falls back to the main judge alone. The fitted coefficients are the row's ``hparams``.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.report.methods.base import ASSISTANT_SCORES, CellContext, Kind, Method, Variant

__all__ = ["ensemble_fit", "ensemble_mixture"]


def ensemble_fit(e_main: np.ndarray, e_asst: np.ndarray, human: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """`[3]` least-squares ``(a, b, c)`` of ``human ~ a * e_main + b * e_asst + c`` on ``mask``'s rows.

    Solved by the normal equations in float64 (a 3 x 3 system; the minimum-norm solution
    through the pseudo-inverse when the judges' scores are collinear or constant on dev)."""
    sel = np.asarray(mask, bool)
    x = np.stack([np.asarray(e_main, np.float64)[sel], np.asarray(e_asst, np.float64)[sel],
                  np.ones(int(sel.sum()))], axis=1)  # [D, 3]
    y = np.asarray(human, np.float64)[sel]  # [D]
    return np.linalg.pinv(x.T @ x) @ (x.T @ y)  # [3]


def ensemble_mixture(main_lp: jax.Array, asst_lp: jax.Array, a: float, b: float) -> jax.Array:
    """`[N, K]` log-probabilities of the mixture ``(|a| p_main' + |b| p_asst') / (|a| + |b|)``,
    ``p'`` reversed over the candidates where the coefficient is negative.

    Args:
      main_lp, asst_lp: `[N, K]` log-probabilities over the candidates (normalised over them).
      a, b: the fitted coefficients of the main judge's and the assistant's expected scores.
    """
    if a == 0 and b == 0:
        return main_lp
    main = main_lp if a >= 0 else main_lp[..., ::-1]  # [N, K]
    asst = asst_lp if b >= 0 else asst_lp[..., ::-1]  # [N, K]
    wa, wb = abs(a) / (abs(a) + abs(b)), abs(b) / (abs(a) + abs(b))
    terms = jnp.stack([main + jnp.log(wa) if wa > 0 else jnp.full_like(main, -jnp.inf),
                       asst + jnp.log(wb) if wb > 0 else jnp.full_like(asst, -jnp.inf)])  # [2, N, K]
    return jax.nn.logsumexp(terms, axis=0)


def _ensemble(cx: CellContext) -> Iterator[Variant]:
    steps = np.diff(np.asarray(cx.values, np.float64))
    if not (steps > 0).all() or not np.allclose(steps, steps[0]):
        raise ValueError(f"ensemble needs increasing, evenly spaced candidate values, got {list(cx.values)}")
    asst = jnp.asarray(cx.arrays.assistant)
    values = jnp.asarray(cx.values, jnp.float32)
    fits: dict[Kind, list[np.ndarray]] = {}

    def fitted(kt: Kind) -> tuple[jax.Array, jax.Array, list[np.ndarray]]:
        main_lp = cx.tempered(kt)  # [N, K]
        asst_lp = jax.nn.log_softmax(asst / cx.tau(kt), -1)  # [N, K]
        if kt not in fits:
            e_main = np.asarray(jnp.exp(main_lp) @ values)  # [N]
            e_asst = np.asarray(jnp.exp(asst_lp) @ values)  # [N]
            fits[kt] = [ensemble_fit(e_main, e_asst, cx.human, cx.dev[i]) for i in range(cx.f)]
        return main_lp, asst_lp, fits[kt]

    def fixed(kt: Kind) -> jax.Array:
        main_lp, asst_lp, coefs = fitted(kt)
        return jnp.stack([ensemble_mixture(main_lp, asst_lp, float(c[0]), float(c[1])) for c in coefs])  # [F, N, K]

    # The coefficients at the first reading (the row's hparams; each reading fits its own).
    t0 = float(cx.options.temperatures[0]) if cx.options.temperatures else None
    first = (f"expected@{t0:g}" if t0 is not None else "greedy", t0)
    hparams = [{"a_main": round(float(c[0]), 6), "b_asst": round(float(c[1]), 6), "c": round(float(c[2]), 6)}
               for c in fitted(first)[2]]
    yield Variant("ensemble", fixed=fixed, hparams=hparams)


FAMILIES = (
    Method("ensemble", "fixed", needs=(ASSISTANT_SCORES,), variants=_ensemble, order=96),
)
