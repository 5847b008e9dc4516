"""Latent number bias: Deb-R (plain random-number prompts) and Deb-T (the task instruction
prepended), lambda chosen on dev over `B = log U - log P_random`."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.debias import latent_prior, prior_correction, rectify_adjust
from jaxjudge.jobs import RandomRJob
from jaxjudge.report.methods.base import (
    RANDOM_T,
    CellContext,
    Kind,
    Method,
    Need,
    Variant,
    per_tp_rows,
    random_prior_into,
)
from jaxjudge.select import lambda_grid


def _deb(variant: str) -> Callable[[CellContext], Iterator[Variant]]:
    """Deb-R (``variant="R"``) or Deb-T (``"T"``): one family per random-number prompt set."""
    family = f"deb_{variant.lower()}"

    def variants(cx: CellContext) -> Iterator[Variant]:
        rp, opts = cx.arrays.random[variant], cx.options
        for tp in opts.deb_tp:
            top = jnp.asarray(rp.top(tp))  # [Tp, K]
            cx.aux["priors"].setdefault(variant, {})[f"tp{tp}"] = np.asarray(latent_prior(top)).tolist()  # at T = 1

            def data(kt: Kind, top=top) -> dict[str, jax.Array]:
                # l = the judge's log-probabilities at T; B from P_random measured at T;
                # lambda multiplies B in log-probability units, whatever T is.
                return {"logits": cx.tempered(kt), "correction": prior_correction(latent_prior(top / cx.tau(kt)))}

            grids = [("", opts.lambdas)]
            if opts.lambdas_extended is not None:
                grids.append(("_ext", opts.lambdas_extended))
            for suffix, lams in grids:
                yield Variant(f"{family}_tp{tp}{suffix}", data=data, grid=lambda_grid(lams))

    return variants


FAMILIES = (
    Method("deb_r", "tuned", needs=(Need(RandomRJob, into=random_prior_into("R"), has=lambda a: "R" in a.random),),
           variants=_deb("R"), rows=per_tp_rows("deb_r", extended=True), adjust=rectify_adjust,
           params=lambda opts: ("lam",), order=60),
    Method("deb_t", "tuned", needs=(RANDOM_T,), variants=_deb("T"), rows=per_tp_rows("deb_t", extended=True),
           adjust=rectify_adjust, params=lambda opts: ("lam",), order=70),
)
