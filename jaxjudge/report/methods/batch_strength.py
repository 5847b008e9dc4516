"""Batch calibration with a strength chosen on dev: the batch prior's correction scaled by a
strength the dev labels choose.

Batch calibration (Zhou et al., 2024) divides the judge's candidate distribution by its mean
over a batch of inputs; their learnable variant (BCL) scales that correction by a strength fitted
on a few labelled examples. Here the batch is every item of the cell (the judge's predictions
only: no label enters the prior), read at the reading's temperature T, and the strength is
chosen on each fold's dev labels like every tuned method's hyper-parameter:

    p(y | x) ∝ exp(l_T(y | x) + strength * B(y)),   B(y) = log U(y) - log pbar_T(y),
    pbar_T(y) = mean over the cell's items of softmax(l_T)(y).

Strength 0 is the vanilla judge and 1 full batch calibration over the whole cell (the ``batch``
row divides by the mean over each fold's test rows instead). The grid comes from the config:
``method_options={'batch_strength': {'strengths': (...)}}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp

from jaxjudge.debias import batch_prior, prior_correction, rectify_adjust
from jaxjudge.report.methods.base import CellContext, Kind, Method, Variant
from jaxjudge.select import lambda_grid

NAME = "batch_strength"


@dataclass(frozen=True)
class BatchStrengthOptions:
    """The family's options (config: ``method_options={'batch_strength': {...}}``).

    Attributes:
      strengths: the grid the dev labels choose the strength from; 0 is the vanilla judge,
        1 batch calibration over the cell's items.
    """

    strengths: tuple[float, ...] = field(default=tuple(round(0.1 * i, 1) for i in range(21)), metadata={"min": 0.0})


def _variants(cx: CellContext) -> Iterator[Variant]:
    opts = cx.options.family(NAME, BatchStrengthOptions)

    def data(kt: Kind) -> dict[str, jax.Array]:
        lt = cx.tempered(kt)  # [N, K] the judge at T
        return {"logits": lt, "correction": prior_correction(batch_prior(lt))}  # prior over every item

    yield Variant(NAME, data=data, grid=lambda_grid(jnp.asarray(opts.strengths, jnp.float32)))


FAMILIES = (
    Method(NAME, "tuned", variants=_variants, adjust=rectify_adjust, params=lambda opts: ("lam",),
           options=BatchStrengthOptions, order=55),
)
