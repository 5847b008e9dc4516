"""One jitted statistic for every metric of a method read one way, averaged over folds, and
its interval summary.

The report evaluates every method of a cell with the same compiled statistic: the arrays of
the reported rows go in once, the bootstrap (`jaxjudge.metrics.bootstrap_distribution`)
resamples whole groups by re-weighting the rows, and the statistic returns every metric of
`names`, each fold's test-side value averaged over the folds.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.metrics.bootstrap import bca_quantiles, expanded_levels
from jaxjudge.metrics.correlation import get_metric, grouped
from jaxjudge.metrics.distribution import sdd_from_logprobs
from jaxjudge.metrics.tau_b import sign_matrix, tau_b_doc, tau_b_pooled

__all__ = [
    "MIN_CI_GROUPS", "NAN_SHARE_MAX", "fold_arrays", "fold_layout", "fold_mean_stat",
    "interval_summary", "methods_point", "methods_stat", "needs_signs",
]

NAN_SHARE_MAX = 0.05
"""Above this share of undefined bootstrap resamples a cell prints no interval (the survivors
are a biased subsample: e.g. resamples whose test side holds one distinct parsed score)."""

MIN_CI_GROUPS = 10
"""Fewest reported (test) groups for which the report prints an interval. Below it the
percentile bootstrap of a correlation under-covers badly (3 test documents: about 77% for a
nominal 95%); `tests/test_coverage.py` and `benchmarks/coverage.py` measure coverage at and
above this minimum."""


def needs_signs(names: tuple[str, ...] | list[str]) -> bool:
    """Whether the statistic of `names` reads the Kendall sign matrices."""
    return any(n in ("kendall", "kendall_doc") for n in names)


def fold_layout(test_nf: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each fold's test rows, padded to the largest fold: `(index [F, M] int32, pad [F, M])`.

    `index[f, s]` is the row of fold f's s-th test row (0 for a padding slot) and `pad` is 1
    on real slots, 0 on padding. A fold's metric reads its test rows only (every other row
    has weight 0 there), so the statistic works on `[F, M]` arrays, not `[N, F]`: k folds
    cost one fold's worth of rows each, and Kendall's pair matrices shrink k^2-fold.
    """
    test = np.asarray(test_nf) > 0  # [N, F]
    members = [np.flatnonzero(test[:, f]) for f in range(test.shape[1])]
    m = max(1, max(len(r) for r in members))
    index = np.zeros((len(members), m), np.int32)
    pad = np.zeros((len(members), m), np.float32)
    for f, r in enumerate(members):
        index[f, : len(r)] = r
        pad[f, : len(r)] = 1.0
    return index, pad


def fold_arrays(pred_nf, base_nf, human, hrel, probs_nfk, test_nf, ok, valid, codes):
    """The statistic's inputs in the per-fold layout of `fold_layout` (numpy in, numpy out).

    Args (row axis N): pred `[..., N, F]` (leading axes: several methods scored at once),
    base `[N, F]` (for deltas), human on the scale `[N]`, human minus lo `[N]` (SDD), log-probs
    `[..., N, F, K]` (the same leading axes as pred, or none), test `[N, F]`, ok `[N]` (finite
    prediction), valid `[N]`, group codes `[N]`.

    Returns:
      ``(index, pad, pred, base, human, hrel, probs, ok, valid, codes)``, each `[F, M, ...]`
      (pred and probs with pred's leading axes).
    """
    index, pad = fold_layout(test_nf)
    f = index.shape[0]
    cols = np.arange(f)[:, None]
    pred = np.asarray(pred_nf, np.float32)[..., index, cols]
    base = np.asarray(base_nf, np.float32)[index, cols]
    human_f = np.asarray(human, np.float32)[index]
    probs = np.asarray(probs_nfk, np.float32)[..., index, cols, :]
    return (index, pad, pred, base, human_f, np.asarray(hrel, np.float32)[index], probs,
            np.asarray(ok, np.float32)[index], np.asarray(valid, np.float32)[index],
            np.asarray(codes, np.int32)[index])


@functools.lru_cache(maxsize=64)
def fold_mean_stat(names: tuple[str, ...], num_groups: int):
    """`stat(*fold_arrays, w) -> [S]`: every statistic of `names`, averaged over folds.

    Names are metric names (`get_metric`), ``<metric>_doc`` (per-document mean, `grouped`),
    ``validity``, ``sdd`` and ``delta_<metric>[_doc]`` (the prediction's metric minus the
    baseline's, on the same weights).

    The inputs are `fold_arrays`' tuple and the row weights `w` `[N]` (a bootstrap resample's
    multiplicities; None for the original rows): fold f's slot s weighs `w[index[f, s]]`.
    """

    def metric(name, pred, human, codes, ww):
        if name.endswith("_doc"):
            return grouped(name[: -len("_doc")], pred, human, codes, num_groups=num_groups, weights=ww)
        return get_metric(name)(pred, human, weights=ww)

    def stat(index, pad, pred_f, base_f, human_f, hrel_f, probs_f, ok_f, valid_f, codes_f, w):
        def per_fold(idx, real, pred, base, human, hrel, probs, ok, valid, codes):
            rows = real if w is None else w[idx] * real  # [M] multiplicity of each test row
            ww = rows * ok
            if needs_signs(names):  # Kendall's fixed pair signs, [M, M] each: built once per call
                sx, sy = sign_matrix(pred), sign_matrix(human)
            out = []
            for name in names:
                if name == "validity":
                    out.append(jnp.sum(rows * valid) / jnp.sum(rows))
                elif name == "sdd":
                    out.append(sdd_from_logprobs(probs, hrel, 0, weights=ww))
                elif name == "kendall":
                    out.append(tau_b_pooled(sx, sy, ww))
                elif name == "kendall_doc":
                    out.append(tau_b_doc(sx, sy, ww, codes, num_groups))
                elif name.startswith("delta_"):
                    inner = name[len("delta_"):]
                    out.append(metric(inner, pred, human, codes, ww) - metric(inner, base, human, codes, ww))
                else:
                    out.append(metric(name, pred, human, codes, ww))
            return jnp.stack(out)

        # A Python loop over the (few) folds, not a vmap: under the bootstrap's vmap over
        # resamples (and a report's over methods) a third vmap level made XLA's CPU code about
        # five times slower (benchmarks/bench_report_stats.py).
        folds = zip(index, pad, pred_f, base_f, human_f, hrel_f, probs_f, ok_f, valid_f, codes_f)
        per = jnp.stack([per_fold(*fold) for fold in folds])  # [F, S]
        return jnp.mean(per, axis=0)

    stat.__name__ = "cell_stat_" + "_".join(names)
    return stat


@functools.lru_cache(maxsize=64)
def methods_stat(names: tuple[str, ...], num_groups: int, probs_per_method: bool):
    """`fold_mean_stat` for several methods on the same resample: `stat(*fold_arrays, w) -> [M, S]`.

    pred carries a leading method axis `[M, ...]` (probs too when `probs_per_method`);
    everything else (human, base, the layout, the weights) is shared, so the work that does
    not depend on the method (the ranks of the human scores and of the shared base under each
    resample) is done once per resample, not once per method.
    """
    one = fold_mean_stat(names, num_groups)

    def stat(index, pad, pred_m, base, human, hrel, probs, ok, valid, codes, w):
        def per_method(pred, probs_):
            return one(index, pad, pred, base, human, hrel, probs_, ok, valid, codes, w)

        return jax.vmap(per_method, in_axes=(0, 0 if probs_per_method else None))(pred_m, probs)

    stat.__name__ = "methods_stat_" + "_".join(names)
    return stat


@functools.lru_cache(maxsize=64)
def methods_point(names: tuple[str, ...], num_groups: int, probs_per_method: bool):
    """`methods_stat` on the original rows (unit weights), jitted: the point estimates `[M, S]`."""
    stat = methods_stat(names, num_groups, probs_per_method)
    return jax.jit(lambda *arrays: stat(*arrays, None))


def interval_summary(
    estimate: float, reps: np.ndarray | None, alpha: float, *, num_groups: int | None = None,
    min_groups: int = MIN_CI_GROUPS, jack: np.ndarray | None = None, method: str = "percentile",
) -> dict[str, Any]:
    """``{estimate, low, high}`` plus, for a bootstrapped statistic, ``n_boot``,
    ``n_boot_nan`` and ``nan_share``; ``reason`` says why an interval is withheld.

    Args:
      estimate: the point estimate.
      reps: `[B]` bootstrap replicates, or None (a point estimate only).
      alpha: 1 - confidence level.
      num_groups: groups resampled; below `min_groups` no interval is given.
      min_groups: see `MIN_CI_GROUPS`.
      jack: `[G]` jackknife values (``method="bca"``).
      method: ``"percentile"``, ``"expanded"`` (`expanded_levels`) or ``"bca"``.
    """
    est = float(estimate)
    out: dict[str, Any] = {"estimate": est if math.isfinite(est) else None, "low": None, "high": None}
    if reps is None:
        return out
    r_all = np.asarray(reps, np.float64)
    r = r_all[np.isfinite(r_all)]
    out["n_boot"] = int(r_all.size)
    out["n_boot_nan"] = int(r_all.size - r.size)
    out["nan_share"] = out["n_boot_nan"] / max(r_all.size, 1)
    if num_groups is not None and num_groups < min_groups:
        out["reason"] = f"too few groups ({num_groups} < {min_groups})"
    elif out["nan_share"] > NAN_SHARE_MAX:
        out["reason"] = f"{out['nan_share']:.0%} of resamples undefined"
    elif r.size:
        if method == "bca":
            lo, hi = bca_quantiles(est, r, jack, alpha)
        else:
            levels = expanded_levels(num_groups, alpha) if method == "expanded" else (alpha / 2, 1 - alpha / 2)
            lo, hi = np.quantile(r, levels)
        out["low"], out["high"] = float(lo), float(hi)
    return out
