"""Paired, grouped bootstrap confidence intervals.

A resample draws G groups (source documents) with replacement out of the G groups present and
gives every row of a group drawn m times the weight m. All arrays share the same weights, so
a statistic of several arrays (the difference between two methods scored on the same items)
is resampled *paired*. The weighted metrics treat integer weights exactly as repeated rows, so
a weighted evaluation equals the evaluation on the literally resampled data, without building
it. Resamples are evaluated in batches with `jax.lax.map` (a vmap per batch) inside one jit.

The interval is the percentile interval: the alpha/2 and 1 - alpha/2 quantiles (linear
interpolation) of the bootstrap distribution. It is simple, transformation-respecting (fine for
bounded statistics like correlations) and what evaluation papers usually report; it can under-
cover a little for small samples. Resamples where the statistic is undefined (NaN, e.g. a
constant resample) are dropped with a warning.
"""

from __future__ import annotations

import functools
import math
import warnings
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from scipy.special import ndtr, ndtri
from scipy.stats import t as student_t

from jaxjudge.metrics import _checks
from jaxjudge.metrics import correlation as _corr
from jaxjudge.metrics.summary_level import grouped
from jaxjudge.metrics.groups import encode_groups


class Interval(NamedTuple):
    """A point estimate with a (1 - alpha) bootstrap interval."""

    estimate: float
    low: float
    high: float


StatFn = Callable[..., jax.Array]
"""`stat_fn(*arrays, *consts, weights) -> scalar`; `weights` float `[N]`, 0 for rows not drawn."""


def resample_weights(key: jax.Array, groups: jax.Array, num_groups: int) -> jax.Array:
    """Per-row multiplicities `[N]` for one resample of whole groups.

    Args:
      key: a PRNG key.
      groups: int32 codes `[N]` in 0..G-1, every code present.
      num_groups: G (static).

    Returns:
      float32 `[N]`: rows of a group drawn m times get m; the per-group counts sum to G.
    """
    drawn = jax.random.randint(key, (num_groups,), 0, num_groups)
    counts = jnp.zeros((num_groups,), jnp.float32).at[drawn].add(1.0)  # [G]
    return counts[groups]


@functools.partial(jax.jit, static_argnames=("stat_fn", "num_groups", "n_boot", "batch_size"))
def _replicates(
    stat_fn: StatFn,
    arrays: tuple[jax.Array, ...],
    consts: tuple[Any, ...],
    groups: jax.Array,
    key: jax.Array,
    *,
    num_groups: int,
    n_boot: int,
    batch_size: int,
) -> tuple[jax.Array, jax.Array]:
    def one(args):
        k, is_estimate = args
        w = resample_weights(k, groups, num_groups)
        # The point estimate (all weights 1) rides along as item 0, so that stat_fn is traced
        # and compiled once, in its batched form only.
        return stat_fn(*arrays, *consts, jnp.where(is_estimate, 1.0, w))

    keys = jax.random.split(key, n_boot + 1)
    # Pad to a whole number of batches: a remainder batch would be traced and compiled again.
    pad = -(n_boot + 1) % batch_size
    keys = jnp.concatenate([keys, keys[:pad]]) if pad else keys
    is_estimate = jnp.arange(keys.shape[0]) == 0
    values = jax.lax.map(one, (keys, is_estimate), batch_size=batch_size)
    estimate, reps = values[0], values[1 : n_boot + 1]  # scalar, [n_boot]
    return estimate, reps


def _prepare(arrays, groups, mask):
    if not isinstance(arrays, (tuple, list)) or not (arrays or groups is not None):
        raise TypeError("arrays must be a non-empty tuple of arrays sharing the row axis "
                        "(it may be empty when groups gives the rows)")
    arrays = tuple(jnp.asarray(a) for a in arrays)
    if arrays:
        n = arrays[0].shape[0] if arrays[0].ndim else None
    else:
        n = int(np.shape(groups)[0]) if np.ndim(groups) else None
    for i, a in enumerate(arrays):
        if a.ndim == 0 or a.shape[0] != n:
            raise ValueError(
                f"arrays[{i}] has shape {a.shape}; every array needs the same leading axis N={n}"
            )
    if _checks.is_traced(*arrays, groups, mask):
        raise TypeError("bootstrap_ci is an eager function; call it outside jit/vmap")
    if groups is None:
        groups_np = np.arange(n)  # each row its own group: the ordinary (iid) bootstrap
    else:
        _checks.check_vector(groups, "groups", n)
        groups_np = np.asarray(groups)
        if groups_np.dtype.kind == "f" and np.isnan(groups_np).any():
            bad = np.flatnonzero(np.isnan(groups_np))
            raise ValueError(f"groups contain NaN at rows {_checks.format_rows(bad)}")
    if mask is not None:
        _checks.check_vector(mask, "mask", n)
        mask_np = np.asarray(mask)
        if mask_np.dtype != bool:
            raise TypeError(f"mask must be a boolean array, got dtype {mask_np.dtype}")
        if not mask_np.any():
            raise ValueError("the mask selects no rows")
        # Only groups with a selected row are resampled: keep the selected rows only.
        arrays = tuple(a[np.flatnonzero(mask_np)] for a in arrays)
        groups_np = groups_np[mask_np]
    if groups_np.shape[0] == 0:
        raise ValueError("arrays are empty")
    codes = encode_groups(groups_np)
    if codes.num_groups < 2:
        raise ValueError(
            f"the bootstrap needs at least 2 groups to resample, got {codes.num_groups}"
        )
    return arrays, jnp.asarray(codes.codes), codes.num_groups


def bootstrap_distribution(
    stat_fn: StatFn,
    arrays: tuple[Any, ...],
    groups: Any | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    *,
    mask: Any | None = None,
    batch_size: int = 128,
    consts: tuple[Any, ...] = (),
) -> tuple[jax.Array, jax.Array]:
    """Point estimate and bootstrap replicates of `stat_fn`, resampling whole groups.

    Args:
      stat_fn: `stat_fn(*arrays, *consts, weights) -> scalar`, jittable, treating `weights`
        `[N]` as row multiplicities (the metrics here take `weights=`). It is a static
        argument of the jitted loop: pass the same function object across calls to reuse the
        compilation.
      arrays: arrays sharing the leading axis N (paired: all get the same resample); may be
        empty when `groups` is given and the statistic reads only `consts`.
      groups: `[N]` group ids of any type (source documents), or None for the iid bootstrap.
      n_boot: number of resamples.
      seed: PRNG seed; the same seed gives the same resamples.
      mask: bool `[N]` or None; only selected rows (and groups having one) take part.
      batch_size: resamples evaluated together (memory vs speed).
      consts: arrays of any shape, or pytrees of them (e.g. a dataclass registered as a pytree),
        passed to `stat_fn` after `arrays`, untouched by `mask` (e.g. a statistic's own row
        layout, indexing `weights`).

    Returns:
      `(estimate, replicates [n_boot])`, float32.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    arrays, codes, num_groups = _prepare(arrays, groups, mask)
    return _replicates(
        stat_fn,
        arrays,
        tuple(jax.tree.map(jnp.asarray, c) for c in consts),
        codes,
        jax.random.key(seed),
        num_groups=num_groups,
        n_boot=int(n_boot),
        batch_size=int(min(batch_size, n_boot + 1)),
    )


@functools.partial(jax.jit, static_argnames=("stat_fn", "num_groups", "batch_size"))
def _jackknife(stat_fn, arrays, consts, groups, *, num_groups: int, batch_size: int) -> jax.Array:
    def one(g):
        return stat_fn(*arrays, *consts, (groups != g).astype(jnp.float32))

    return jax.lax.map(one, jnp.arange(num_groups), batch_size=batch_size)


def jackknife_distribution(
    stat_fn: StatFn,
    arrays: tuple[Any, ...],
    groups: Any | None = None,
    *,
    mask: Any | None = None,
    batch_size: int = 128,
    consts: tuple[Any, ...] = (),
) -> jax.Array:
    """Leave-one-group-out values of `stat_fn`: `[G]` (or `[G, S]` for a vector statistic).

    Value g is the statistic with every row of group g given weight 0 (the others weight 1).
    Args: as `bootstrap_distribution`.
    """
    arrays, codes, num_groups = _prepare(arrays, groups, mask)
    consts = tuple(jax.tree.map(jnp.asarray, c) for c in consts)
    return _jackknife(stat_fn, arrays, consts, codes, num_groups=num_groups, batch_size=int(min(batch_size, num_groups)))


def expanded_levels(num_groups: int, alpha: float = 0.05) -> tuple[float, float]:
    """Quantile levels of the expanded percentile interval (Hesterberg 2015).

    The percentile interval of G resampled groups is too narrow for small G: the bootstrap
    variance of a mean is (G - 1) / G times the usual estimate, and the spread is itself
    estimated from G groups (a t, not a normal, quantile). The expanded interval takes the
    replicates' quantiles at ``Phi(-+ sqrt(G / (G - 1)) * t_{G-1}(1 - alpha / 2))`` instead of
    alpha / 2 and 1 - alpha / 2; it tends to the percentile interval as G grows and, like it,
    stays inside the range of the replicates (a correlation's interval inside [-1, 1]).

    Args:
      num_groups: G, the number of groups resampled (>= 2).
      alpha: 1 - confidence level.

    Returns:
      ``(low_level, high_level)``.
    """
    if num_groups < 2:
        raise ValueError(f"the expanded percentile interval needs >= 2 groups, got {num_groups}")
    z = math.sqrt(num_groups / (num_groups - 1)) * float(student_t.ppf(1 - alpha / 2, num_groups - 1))
    low = float(ndtr(-z))
    return low, 1.0 - low


def bca_quantiles(estimate: Any, reps: Any, jack: Any, alpha: float = 0.05) -> tuple[float, float]:
    """The bias-corrected and accelerated (BCa) bootstrap interval (Efron 1987).

    The percentile interval takes the alpha/2 and 1 - alpha/2 quantiles of the replicates;
    BCa moves those levels to

        Phi(z0 + (z0 + z) / (1 - a (z0 + z))),   z = Phi^-1(alpha/2) or Phi^-1(1 - alpha/2),

    with the bias correction ``z0 = Phi^-1(share of replicates below the estimate, ties
    counted half)`` and the acceleration ``a = sum(d^3) / (6 sum(d^2)^1.5)``, ``d`` the
    jackknife values' deviations from their mean. It corrects the percentile interval's
    under-coverage when the statistic's distribution is skewed or its spread depends on its
    value (a correlation over few groups). Non-finite replicates and jackknife values are left
    out (the caller reports how many).

    Args:
      estimate: the point estimate.
      reps: `[B]` bootstrap replicates.
      jack: `[G]` leave-one-group-out values (`jackknife_distribution`).
      alpha: 1 - confidence level.

    Returns:
      ``(low, high)``; NaNs when there are no finite replicates.
    """
    reps = np.asarray(reps, np.float64)
    reps = reps[np.isfinite(reps)]
    est = float(estimate)
    if reps.size == 0 or not math.isfinite(est):
        return float("nan"), float("nan")
    below = (np.sum(reps < est) + 0.5 * np.sum(reps == est)) / reps.size
    below = min(max(below, 0.5 / reps.size), 1.0 - 0.5 / reps.size)
    z0 = float(ndtri(below))
    jack = np.asarray(jack, np.float64)
    jack = jack[np.isfinite(jack)]
    a = 0.0
    if jack.size >= 3:
        d = jack.mean() - jack
        ss = float(np.sum(d * d))
        if ss > 0:
            a = float(np.sum(d**3)) / (6.0 * ss**1.5)
    levels = []
    for z in (ndtri(alpha / 2), ndtri(1 - alpha / 2)):
        denom = 1.0 - a * (z0 + z)
        levels.append(float(ndtr(z0 + (z0 + z) / denom)) if denom > 0 else (0.0 if z < 0 else 1.0))
    low, high = np.quantile(reps, levels)
    return float(low), float(high)


def bootstrap_ci(
    stat_fn: StatFn,
    arrays: tuple[Any, ...],
    groups: Any | None = None,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    *,
    mask: Any | None = None,
    batch_size: int = 128,
) -> Interval:
    """Percentile bootstrap interval of `stat_fn`, resampling whole groups with replacement.

    Args: as `bootstrap_distribution`, plus
      alpha: 1 - confidence level (0.05 gives a 95% interval).

    Returns:
      `Interval(estimate, low, high)` as Python floats; low/high are the alpha/2 and
      1 - alpha/2 quantiles of the replicates (NaN replicates dropped, with a warning).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    estimate, reps = bootstrap_distribution(
        stat_fn, arrays, groups, n_boot, seed, mask=mask, batch_size=batch_size
    )
    reps = np.asarray(reps, np.float64)
    n_nan = int(np.isnan(reps).sum())
    if n_nan == reps.size:
        warnings.warn("the statistic is NaN on every resample", RuntimeWarning, stacklevel=2)
        return Interval(float(estimate), float("nan"), float("nan"))
    if n_nan:
        warnings.warn(
            f"{n_nan} of {reps.size} resamples gave NaN and were dropped",
            RuntimeWarning,
            stacklevel=2,
        )
    low, high = np.nanquantile(reps, [alpha / 2, 1 - alpha / 2])
    return Interval(float(estimate), float(low), float(high))


def _resolve(metric: str | Callable) -> Callable:
    return _corr.get_metric(metric) if isinstance(metric, str) else metric


@functools.lru_cache(maxsize=64)
def _metric_stat(metric: Callable, per_group: bool, num_groups: int) -> StatFn:
    # Cached so that repeated calls hand the jitted loop the same function and reuse its trace.
    if per_group:

        def stat(pred, human, groups, w):
            return grouped(metric, pred, human, groups, num_groups=num_groups, weights=w)

    else:

        def stat(pred, human, groups, w):
            del groups
            return metric(pred, human, weights=w)

    return stat


@functools.lru_cache(maxsize=64)
def _difference_stat(metric: Callable, per_group: bool, num_groups: int) -> StatFn:
    single = _metric_stat(metric, per_group, num_groups)

    def stat(pred_a, pred_b, human, groups, w):
        return single(pred_a, human, groups, w) - single(pred_b, human, groups, w)

    return stat


def _metric_inputs(preds, human, groups, mask, per_group):
    n = _checks.check_vector(human, "human scores")
    for name, p in preds:
        _checks.check_vector(p, name, n)
    sel = np.ones(n, bool) if mask is None else np.asarray(mask)
    if mask is not None:
        _checks.check_vector(mask, "mask", n)
        if sel.dtype != bool:
            raise TypeError(f"mask must be a boolean array, got dtype {sel.dtype}")
    if not sel.any():
        raise ValueError("the mask selects no rows")
    _checks.check_finite(human, "human scores", sel)
    for name, p in preds:
        _checks.check_finite(p, name, sel)
    if groups is None:
        if per_group:
            raise ValueError("per_group=True needs groups")
        codes, num_groups = np.zeros(n, np.int32), 1
    else:
        _checks.check_vector(groups, "groups", n)
        codes, num_groups, _ = encode_groups(groups)
    return codes, num_groups


def _grouped_metric_ci(make_stat, metric, preds, human, groups, mask, per_group, n_boot, alpha, seed) -> Interval:
    """`bootstrap_ci` of ``make_stat(metric, per_group, num_groups)`` on the named `[N]`
    prediction arrays ``preds``, the human scores and the group codes."""
    fn = _resolve(metric)
    codes, num_groups = _metric_inputs(preds, human, groups, mask, per_group)
    stat = make_stat(fn, per_group, num_groups)
    arrays = (*(jnp.asarray(p, jnp.float32) for _, p in preds), jnp.asarray(human, jnp.float32), jnp.asarray(codes))
    return bootstrap_ci(stat, arrays, None if groups is None else codes, n_boot, alpha, seed, mask=mask)


def metric_ci(
    metric: str | Callable,
    pred: Any,
    human: Any,
    groups: Any | None = None,
    *,
    mask: Any | None = None,
    per_group: bool = False,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> Interval:
    """Bootstrap interval of one metric, resampling groups (source documents).

    Args:
      metric: a registered name (`METRICS`) or a metric function taking `weights=`.
      pred: predictions `[N]`; human: human scores `[N]`.
      groups: `[N]` group ids (any type), or None for the iid bootstrap.
      mask: bool `[N]` or None.
      per_group: False for the dataset-level metric, True for the summary-level one (mean
        over groups of the within-group metric, see `grouped`).
      n_boot, alpha, seed: as `bootstrap_ci`.

    Returns:
      `Interval(estimate, low, high)`.
    """
    return _grouped_metric_ci(
        _metric_stat, metric, [("predictions", pred)], human, groups, mask, per_group, n_boot, alpha, seed
    )


def paired_difference_ci(
    metric: str | Callable,
    pred_a: Any,
    pred_b: Any,
    human: Any,
    groups: Any | None = None,
    *,
    mask: Any | None = None,
    per_group: bool = False,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> Interval:
    """Interval for metric(pred_a, human) - metric(pred_b, human), paired over resamples.

    Both methods are scored on the same resample each time, so the interval reflects how
    consistently a beats b, not the (much larger) spread of each metric alone. An interval
    excluding 0 means the difference is significant at level alpha.

    Args: as `metric_ci`, with two prediction arrays `[N]`.

    Returns:
      `Interval(estimate, low, high)` of the difference.
    """
    return _grouped_metric_ci(
        _difference_stat, metric, [("pred_a", pred_a), ("pred_b", pred_b)], human, groups, mask, per_group,
        n_boot, alpha, seed,
    )
