"""The families with nothing to choose: the vanilla judge and the three calibration baselines
(contextual: content-free inputs; batch: the test rows' mean prediction; distribution: a Beta
fit of the dev labels over the judge's dev marginal)."""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.debias import batch_calibration, contextual_calibration, distribution_correction, human_prior, rectify
from jaxjudge.report.methods.base import CONTENT_FREE, CellContext, Kind, Method, Role, Variant


def _vanilla(cx: CellContext) -> Iterator[Variant]:
    yield Variant("vanilla", fixed=cx.vanilla)


def _contextual(cx: CellContext) -> Iterator[Variant]:
    def fixed(kt: Kind) -> jax.Array:
        cf = jnp.asarray(cx.arrays.content_free) / cx.tau(kt)  # the content-free prior at T
        return jnp.broadcast_to(contextual_calibration(cx.tempered(kt), cf), (cx.f, cx.n, cx.k))

    yield Variant("contextual", fixed=fixed)


def _batch(cx: CellContext) -> Iterator[Variant]:
    def fixed(kt: Kind) -> jax.Array:
        return jnp.stack([batch_calibration(cx.tempered(kt), jnp.asarray(cx.test[i])) for i in range(cx.f)])

    yield Variant("batch", fixed=fixed)


def _distribution(cx: CellContext) -> Iterator[Variant]:
    # p_T(y) * q(y) / pbar_T(y): q (Beta fit on dev labels only) enters once, the judge's
    # marginal pbar is measured on dev at the reading's temperature.
    qs = [human_prior(jnp.asarray(cx.human, jnp.float32), cx.values, jnp.asarray(cx.dev[i])) for i in range(cx.f)]

    def fixed(kt: Kind) -> jax.Array:
        lt = cx.tempered(kt)
        return jnp.stack([rectify(lt, distribution_correction(lt, qs[i], jnp.asarray(cx.dev[i])), 1.0) for i in range(cx.f)])

    yield Variant("distribution", fixed=fixed, hparams=[{"q": [round(float(x), 6) for x in np.asarray(q)]} for q in qs])


FAMILIES = (
    Method("vanilla", "fixed", variants=_vanilla, role=Role.REFERENCE, order=0),
    Method("contextual", "fixed", variants=_contextual, role=Role.CALIBRATION, order=30, needs=(CONTENT_FREE,)),
    Method("batch", "fixed", variants=_batch, role=Role.CALIBRATION, order=40),
    Method("distribution", "fixed", variants=_distribution, role=Role.CALIBRATION, order=50),
)
