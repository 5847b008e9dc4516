"""The score-level linear mix ``main − w · assistant``: a control for contrastive decoding.

Its expected score ranks the examples as ``E_main(t_main) - w * E_asst`` does (see
`jaxjudge.debias.linear_mix`). It tunes as many values as contrastive decoding, on the same
grid: ``w`` over contrastive decoding's lambda values and ``t_main`` over its main-model
temperatures, chosen by the same selection code on the same dev data, and it reads the judges
under the same temperature convention (both distributions tempered at the reading's T first).
Its matched baseline is ``temperature``, which is the mix at ``w = 0``.
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.debias import linear_mix_adjust
from jaxjudge.report.methods.base import ASSISTANT_SCORES, CellContext, Kind, Method, Variant
from jaxjudge.select import product_grid


def _linear_mix(cx: CellContext) -> Iterator[Variant]:
    opts = cx.options
    if opts.contrastive_temperature != "t_main":
        raise ValueError("linear_mix tunes the main judge's temperature; contrastive_temperature "
                         f"{opts.contrastive_temperature!r} is not supported")
    steps = np.diff(np.asarray(cx.values, np.float64))
    if not (steps > 0).all() or not np.allclose(steps, steps[0]):
        raise ValueError(f"linear_mix needs increasing, evenly spaced candidate values, got {list(cx.values)}")
    asst = jnp.asarray(cx.arrays.assistant)

    def data(kt: Kind) -> dict[str, jax.Array]:
        return {"main": cx.logits / cx.tau(kt), "asst": asst / cx.tau(kt)}

    grid = product_grid(w=opts.contrastive_lams, t_main=opts.contrastive_temps)
    yield Variant("linear_mix", data=data, grid=grid, baseline="temperature")


FAMILIES = (
    Method("linear_mix", "tuned", needs=(ASSISTANT_SCORES,), variants=_linear_mix, adjust=linear_mix_adjust,
           params=lambda opts: ("w", "t_main"), order=92),
)
