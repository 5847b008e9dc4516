"""Summary-level ("per-group") metrics: a metric inside each group, and their mean over groups.

SummEval's summary-level correlation is the mean over source documents of the correlation
among each document's summaries. `per_group` returns the within-group values, `grouped` their
mean over the groups where the metric is defined (each weighted by its mean row weight, so a
group drawn m times by the grouped bootstrap counts m times), and `grouped_metric` binds the
groups into a plain `(x, y, mask=None)` metric for selection.

Registered metrics (`jaxjudge.metrics.correlation.METRICS`) run their segmented core once over
all rows; any other jittable `(x, y, mask, *, weights)` callable is vmapped over group masks.
Inputs are validated eagerly as in `jaxjudge.metrics.correlation` (see `_checks.py`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge.metrics import _checks
from jaxjudge.metrics.correlation import (
    HIGHER_IS_BETTER,
    METRICS,
    _CORES,
    _F32,
    _IS_CORRELATION,
    _corr_defined,
    _prepare,
    _safe_div,
    _seg_sum,
    get_metric,
)

__all__ = ["grouped", "grouped_metric", "per_group"]

_NAME_OF = {fn: name for name, fn in METRICS.items()}


def _metric_name(metric: str | Callable) -> str | None:
    if isinstance(metric, str):
        get_metric(metric)
        return metric
    return _NAME_OF.get(metric)


def _generic_groups(metric: Callable, x, y, w, groups, num_groups: int, corr: bool) -> jax.Array:
    """Per-group values of an arbitrary `(x, y, mask, *, weights)` metric: a vmap over groups.

    Costs G evaluations over all N rows; registered metrics use their segmented cores instead.
    """
    s = _prepare(x, y, w)

    def one(g):
        in_g = groups == g
        return metric(s.x, s.y, in_g & s.pos, weights=s.w)

    values = jax.vmap(one)(jnp.arange(num_groups))
    if corr:
        ok = _corr_defined(s.x, s.y, s.pos, groups, num_groups)
    else:
        ok = _seg_sum(s.pos.astype(_F32), groups, num_groups) > 0
    return jnp.where(ok, values, jnp.nan)


def _group_values(metric, x, y, w, groups, num_groups: int) -> jax.Array:
    name = _metric_name(metric)
    if name is not None:
        return _CORES[name](x, y, w, groups, num_groups=num_groups)
    return _generic_groups(metric, x, y, w, groups, num_groups, corr=True)


def _group_mean(values, w, groups, num_groups: int) -> jax.Array:
    """Mean of the defined per-group values; each group weighted by its mean row weight.

    With a mask only, every group counts once. Under the grouped bootstrap every row of a
    group drawn m times has weight m, so the group counts m times, as a resample should.
    """
    pos = w > 0
    wsum = _seg_sum(jnp.where(pos, w, 0.0), groups, num_groups)
    count = _seg_sum(pos.astype(_F32), groups, num_groups)
    gw = jnp.where(jnp.isnan(values), 0.0, _safe_div(wsum, count))
    total = jnp.sum(gw)
    return jnp.where(total > 0, _safe_div(jnp.sum(gw * jnp.nan_to_num(values)), total), jnp.nan)


@dataclasses.dataclass(frozen=True)
class _GroupedInputs:
    """The checked inputs of `per_group` and `grouped` (`_check_grouped`).

    Attributes:
      x, y: float32 `[N]` predictions and human scores.
      w: float32 `[N]` row weights, the mask folded in.
      groups: int32 `[N]` codes in 0..G-1.
      num_groups: G.
      corr: whether the metric is a correlation (needs two rows and non-constant x and y).
    """

    x: jax.Array
    y: jax.Array
    w: jax.Array
    groups: jax.Array
    num_groups: int
    corr: bool


def _check_grouped(metric, x, y, groups, mask, weights, num_groups) -> _GroupedInputs:
    name = _metric_name(metric)
    corr = True if name is None else _IS_CORRELATION[name]
    label = name or getattr(metric, "__name__", "metric")
    x, y, w = _checks.check_pair(
        x, y, mask, weights, metric=label, min_rows=1, warn_constant=False
    )
    groups, num_groups = _checks.check_groups(groups, x.shape[0], num_groups)
    return _GroupedInputs(x, y, w, groups, num_groups, corr)


def per_group(
    metric: str | Callable,
    x: Any,
    y: Any,
    groups: Any,
    mask: Any | None = None,
    *,
    num_groups: int | None = None,
    weights: Any | None = None,
) -> jax.Array:
    """The metric inside each group `[G]`; NaN for groups that are skipped.

    Args:
      metric: a registered name or metric function, or any jittable
        `(x, y, mask, *, weights)` callable (vmapped over group masks, G full passes).
      x, y: predictions and human scores `[N]`.
      groups: int codes `[N]` in 0..G-1 (see `encode_groups`).
      mask, weights: as in `pearson`.
      num_groups: G, static. Inferred as max(groups)+1 in eager calls; required under jit.

    Returns:
      float32 `[G]`. A correlation (and any unregistered callable) is NaN for a group with < 2
      selected rows or constant x or y on them; MSE is NaN only for a group with no selected
      row.
    """
    g = _check_grouped(metric, x, y, groups, mask, weights, num_groups)
    return _group_values(metric, g.x, g.y, g.w, g.groups, g.num_groups)


def grouped(
    metric: str | Callable,
    x: Any,
    y: Any,
    groups: Any,
    mask: Any | None = None,
    *,
    num_groups: int | None = None,
    weights: Any | None = None,
) -> jax.Array:
    """Summary-level metric: mean over groups of the within-group metric.

    Groups where the metric is undefined (see `per_group`) are skipped; when weights are given,
    each group counts with its mean row weight (its multiplicity in a grouped bootstrap).
    Registered metrics run one segmented pass over all rows (Spearman: one sort by
    (group, value)); other callables are vmapped over group masks.

    Args: as `per_group`.

    Returns:
      float32 scalar; NaN (eager: ValueError) when no group is usable.
    """
    g = _check_grouped(metric, x, y, groups, mask, weights, num_groups)
    values = _group_values(metric, g.x, g.y, g.w, g.groups, g.num_groups)
    result = _group_mean(values, g.w, g.groups, g.num_groups)
    if not _checks.is_traced(result) and bool(jnp.isnan(result)):
        need = "two selected rows with non-constant x and y" if g.corr else "one selected row"
        raise ValueError(f"no group is usable for the summary-level metric: none has {need}")
    return result


def grouped_metric(
    metric: str | Callable, groups: Any, num_groups: int
) -> Callable[..., jax.Array]:
    """Bind `groups` into a summary-level metric with the plain `(x, y, mask=None)` signature.

    Selection code can then treat dataset-level and summary-level metrics alike, e.g.
    `jax.vmap(grouped_metric("spearman", doc_ids, G), in_axes=(0, None, None))`.
    """
    if not isinstance(metric, str) and not callable(metric):
        raise TypeError(f"metric must be a name or a callable, got {type(metric).__name__}")
    _metric_name(metric)  # raises for an unknown name now rather than at call time
    if not _checks.is_traced(groups):
        groups, num_groups = _checks.check_groups(groups, np.shape(groups)[0], num_groups)

    def fn(x, y, mask=None, *, weights=None):
        return grouped(metric, x, y, groups, mask, num_groups=num_groups, weights=weights)

    name = _metric_name(metric)
    fn.__name__ = f"grouped_{name or getattr(metric, '__name__', 'metric')}"
    # Selection reads the optimisation direction from this attribute for unregistered names.
    fn.higher_is_better = HIGHER_IS_BETTER.get(name) if name else None
    return fn
