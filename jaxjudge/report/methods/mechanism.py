"""Two controls for what contrastive decoding does, each contrastive decoding with its assistant
replaced (the third control, the score-level linear mix, is `linear_mix`):

- ``contrastive_prior``: the assistant replaced by the main judge's own content-free prior
  (its mean candidate distribution on the content-free inputs of contextual calibration, at the
  reading's temperature). If contrastive decoding only cancelled a preference for certain
  numbers that the two judges share, a prior that holds only that preference would do as well.
- ``contrastive_other``: the assistant replaced by a small judge of another family
  (``control_pairs``). The score candidates are digit strings, so the two judges' distributions
  are matched by candidate text, not token id. If the effect rests on a bias the same-family
  pair shares, an assistant of another family does not reproduce it.

Both read the same `contrastive_adjust` over contrastive decoding's own lambda x t grid, chosen
by the same selection code on the same dev data; their matched baseline is ``temperature``.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp

from jaxjudge.debias import contextual_prior, contrastive_adjust
from jaxjudge.report.methods.base import CONTENT_FREE, CONTROL_SCORES, CellContext, Kind, Method, Variant
from jaxjudge.report.methods.contrastive import _contrastive_data, _lam_and_temperature
from jaxjudge.select import lambda_temperature_grid


def _grid(cx: CellContext) -> dict:
    opts = cx.options
    return lambda_temperature_grid(opts.contrastive_lams, opts.contrastive_temps, name=opts.contrastive_temperature)


def _contrastive_prior(cx: CellContext) -> Iterator[Variant]:
    cf = jnp.asarray(cx.arrays.content_free)  # [M, K]

    def data(kt: Kind) -> dict[str, jax.Array]:
        main = cx.logits / cx.tau(kt)  # [N, K]
        prior = jnp.log(contextual_prior(cf / cx.tau(kt)))  # [K], the content-free prior at T
        return {"main": main, "asst": jnp.broadcast_to(prior, main.shape)}

    yield Variant("contrastive_prior", data=data, grid=_grid(cx), baseline="temperature")


def _contrastive_other(cx: CellContext) -> Iterator[Variant]:
    # The other judge's [N, K] arrays, candidates in the scale's order, read as the pair's are.
    yield Variant("contrastive_other", data=_contrastive_data(cx, cx.arrays.control), grid=_grid(cx),
                  baseline="temperature")


FAMILIES = (
    Method("contrastive_prior", "tuned", needs=(CONTENT_FREE,), variants=_contrastive_prior,
           adjust=contrastive_adjust, params=_lam_and_temperature, order=93),
    Method("contrastive_other", "tuned", needs=(CONTROL_SCORES,), variants=_contrastive_other,
           adjust=contrastive_adjust, params=_lam_and_temperature, order=94),
)
