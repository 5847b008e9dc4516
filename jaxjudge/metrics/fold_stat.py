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
from jaxjudge.metrics.tau_b import tau_b_doc, tau_b_pooled

__all__ = ["MIN_CI_GROUPS", "NAN_SHARE_MAX", "fold_mean_point", "fold_mean_stat", "interval_summary", "needs_signs"]

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


@functools.lru_cache(maxsize=64)
def fold_mean_stat(names: tuple[str, ...], num_groups: int):
    """`stat(*arrays, w) -> [S]`: every statistic of `names`, averaged over folds.

    Names are metric names (`get_metric`), ``<metric>_doc`` (per-document mean, `grouped`),
    ``validity``, ``sdd`` and ``delta_<metric>[_doc]`` (the prediction's metric minus the
    baseline's, on the same weights).

    Arrays (leading axis N): pred `[N, F]`, base `[N, F]` (for deltas), human on the scale
    `[N]`, human minus lo `[N]` (SDD), log-probs `[N, F, K]`, test `[N, F]` float, ok `[N]`
    (finite prediction), valid `[N]`, group codes `[N]`, and for Kendall the int8 sign matrices
    sign(pred_i - pred_j) `[N, F, N]` and sign(human_i - human_j) `[N, N]` (placeholders
    `[N, F, 1]`, `[N, 1]` otherwise; see `jaxjudge.metrics.tau_b.sign_matrix`).
    """

    def metric(name, pred, human, codes, ww):
        if name.endswith("_doc"):
            return grouped(name[: -len("_doc")], pred, human, codes, num_groups=num_groups, weights=ww)
        return get_metric(name)(pred, human, weights=ww)

    def stat(pred_nf, base_nf, human, hrel, probs_nfk, test_nf, ok, valid, codes, sx_nfn, sy_nn, w):
        def per_fold(pred, base, probs, test, sx):
            rows = w * test  # [N] multiplicity of each test row in this resample
            ww = rows * ok
            out = []
            for name in names:
                if name == "validity":
                    out.append(jnp.sum(rows * valid) / jnp.sum(rows))
                elif name == "sdd":
                    out.append(sdd_from_logprobs(probs, hrel, 0, weights=ww))
                elif name == "kendall":
                    out.append(tau_b_pooled(sx, sy_nn, ww))
                elif name == "kendall_doc":
                    out.append(tau_b_doc(sx, sy_nn, ww, codes, num_groups))
                elif name.startswith("delta_"):
                    inner = name[len("delta_"):]
                    out.append(metric(inner, pred, human, codes, ww) - metric(inner, base, human, codes, ww))
                else:
                    out.append(metric(name, pred, human, codes, ww))
            return jnp.stack(out)

        per = jax.vmap(per_fold, in_axes=(1, 1, 1, 1, 1))(pred_nf, base_nf, probs_nfk, test_nf, sx_nfn)  # [F, S]
        return jnp.mean(per, axis=0)

    stat.__name__ = "cell_stat_" + "_".join(names)
    return stat


@functools.lru_cache(maxsize=64)
def fold_mean_point(names: tuple[str, ...], num_groups: int):
    """`fold_mean_stat` on the original rows (unit weights), jitted: the point estimates."""
    stat = fold_mean_stat(names, num_groups)
    return jax.jit(lambda *arrays: stat(*arrays, jnp.ones_like(arrays[2])))


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
