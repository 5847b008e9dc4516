"""Contrastive decoding (main - lambda * assistant, with temperature normalisation), its matched
baseline ``temperature`` (lambda = 0 over the same main-model temperatures), contrastive
decoding combined with Deb-T, and that combination's matched baseline ``deb_t_temperature``
(Deb-T with the main judge's temperature tuned on the same grid: the combination at lambda = 0)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import jax
import jax.numpy as jnp

from jaxjudge.debias import combined_adjust, contrastive_adjust
from jaxjudge.jobs import RandomTJob
from jaxjudge.report.cell_inputs import MethodOptions, RandomPrior
from jaxjudge.report.methods.base import (
    ASSISTANT_SCORES, RANDOM_T, CellContext, Kind, Method, Need, Variant, per_tp_rows,
)
from jaxjudge.select import lambda_temperature_grid, product_grid

_ASSISTANTRANDOM_T = Need(RandomTJob, into=lambda r: {"assistant_random": {"T": RandomPrior(r["logprobs"], r["nll"])}},
                           has=lambda a: "T" in (a.assistant_random or {}), assistant=True, required=False)


def _contrastive_data(cx: CellContext, assistant=None) -> Callable[[Kind], dict[str, jax.Array]]:
    """The judge and an assistant's `[N, K]` arrays (default: the pair's assistant) at a reading."""
    asst = jnp.asarray(cx.arrays.assistant if assistant is None else assistant)

    def data(kt: Kind) -> dict[str, jax.Array]:
        # Both models tempered at the reading's T; the grid's own temperature then
        # normalises one model against the other.
        return {"main": cx.logits / cx.tau(kt), "asst": asst / cx.tau(kt)}

    return data


def _contrastive(cx: CellContext) -> Iterator[Variant]:
    opts, data = cx.options, _contrastive_data(cx)
    grid_sets = [("contrastive", opts.contrastive_lams, opts.contrastive_temps, "temperature")]
    if opts.contrastive_fine:
        grid_sets.append(("contrastive_fine", opts.contrastive_lams_fine, opts.contrastive_temps_fine,
                          "temperature_fine"))
    for name, lams, temps, baseline in grid_sets:
        yield Variant(name, data=data, grid=lambda_temperature_grid(lams, temps, name=opts.contrastive_temperature),
                      baseline=baseline)


def _temperature(cx: CellContext) -> Iterator[Variant]:
    """Contrastive decoding's matched baseline: lambda = 0 over the same main-model temperatures.

    The main judge alone (the assistant's place is held by zeros, which lambda = 0 ignores),
    read through the same `contrastive_adjust` and chosen by the same selection code, so that
    contrastive decoding's difference from it is the assistant's effect alone. Where the grid's
    temperature divides the assistant (``t_asst``), the vanilla judge has no such knob and the
    grid is t_main = 1: the vanilla judge itself.
    """
    opts = cx.options

    def data(kt: Kind) -> dict[str, jax.Array]:
        main = cx.logits / cx.tau(kt)
        return {"main": main, "asst": jnp.zeros_like(main)}

    grid_sets = [("temperature", opts.contrastive_temps)]
    if opts.contrastive_fine:
        grid_sets.append(("temperature_fine", opts.contrastive_temps_fine))
    for name, temps in grid_sets:
        temps = temps if opts.contrastive_temperature == "t_main" else (1.0,)
        yield Variant(name, data=data, grid=lambda_temperature_grid((0.0,), temps, name="t_main"))


def _contrastive_deb_t(cx: CellContext) -> Iterator[Variant]:
    opts, cdata_at = cx.options, _contrastive_data(cx)
    rp = cx.arrays.random["T"]
    arp = cx.arrays.assistant_random.get("T")
    for tp in opts.deb_tp:
        # Perplexity is ranked under the main judge: the combination has no sequence NLL.
        idx = rp.top_indices(tp)
        if arp is not None and arp.logprobs.shape != rp.logprobs.shape:
            raise ValueError(
                f"assistant random_t arrays {arp.logprobs.shape} do not match the judge's {rp.logprobs.shape}"
            )
        grid = product_grid(lam=opts.contrastive_lams, **{opts.contrastive_temperature: opts.contrastive_temps},
                            lam_d=opts.lambdas)

        def data(kt: Kind, idx=idx) -> dict[str, jax.Array]:
            cdata = dict(cdata_at(kt), rand_main=jnp.asarray(rp.logprobs[idx]) / cx.tau(kt))
            if arp is not None:
                cdata["rand_asst"] = jnp.asarray(arp.logprobs[idx]) / cx.tau(kt)
            return cdata

        # Its matched baseline switches the assistant off and keeps everything else tuned: Deb-T
        # with the temperature (when the config runs it; else the temperature alone).
        baseline = f"deb_t_temperature_tp{tp}" if "deb_t_temperature" in opts.methods else "temperature"
        yield Variant(f"contrastive_deb_t_tp{tp}", data=data, grid=grid, baseline=baseline)


def _deb_t_temperature(cx: CellContext) -> Iterator[Variant]:
    """``contrastive_deb_t`` at lambda = 0: Deb-T (the same Tp prompts, the same lambda_d grid) with
    the main judge's temperature chosen on the same grid, read through the same
    `combined_adjust`. Where the combination's prior is that of the combined judge (the
    assistant's random-number arrays are there), the baseline's prior is the main judge's at the
    same temperature, which is what the combination's is at lambda = 0."""
    opts, rp = cx.options, cx.arrays.random["T"]
    tempered_prior = (cx.arrays.assistant_random or {}).get("T") is not None
    temps = opts.contrastive_temps if opts.contrastive_temperature == "t_main" else (1.0,)
    for tp in opts.deb_tp:
        idx = rp.top_indices(tp)
        grid = product_grid(lam=(0.0,), t_main=temps, lam_d=opts.lambdas)

        def data(kt: Kind, idx=idx) -> dict[str, jax.Array]:
            main = cx.logits / cx.tau(kt)
            out = {"main": main, "asst": jnp.zeros_like(main), "rand_main": jnp.asarray(rp.logprobs[idx]) / cx.tau(kt)}
            if tempered_prior:
                out["rand_asst"] = jnp.zeros_like(out["rand_main"])
            return out

        yield Variant(f"deb_t_temperature_tp{tp}", data=data, grid=grid)


def _with_fine(family: str) -> Callable[[Any], list[str]]:
    """Rows of a contrastive-grid family: its own, and ``<family>_fine`` when the fine grid is on."""
    return lambda cfg: [family] + ([f"{family}_fine"] if cfg.contrastive_fine else [])


def _lam_and_temperature(opts: MethodOptions) -> tuple[str, ...]:
    return ("lam", opts.contrastive_temperature)


FAMILIES = (
    Method("temperature", "tuned", variants=_temperature, rows=_with_fine("temperature"),
           adjust=contrastive_adjust, params=lambda opts: ("t_main",), order=80),
    Method("contrastive", "tuned", needs=(ASSISTANT_SCORES,), variants=_contrastive,
           rows=_with_fine("contrastive"), adjust=contrastive_adjust, params=_lam_and_temperature, order=90),
    Method("deb_t_temperature", "tuned", needs=(RANDOM_T,), variants=_deb_t_temperature,
           rows=per_tp_rows("deb_t_temperature", extended=False), adjust=combined_adjust,
           params=lambda opts: ("t_main", "lam_d"), order=95),
    Method("contrastive_deb_t", "tuned", needs=(ASSISTANT_SCORES, RANDOM_T, _ASSISTANTRANDOM_T),
           variants=_contrastive_deb_t, rows=per_tp_rows("contrastive_deb_t", extended=False),
           adjust=combined_adjust, params=lambda opts: (*_lam_and_temperature(opts), "lam_d"), order=100),
)
