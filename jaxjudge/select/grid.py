"""Hyper-parameter search over a grid and over folds as ONE compiled computation.

For each grid point the adjusted candidate log-probabilities are reduced to a score per
example (the expected score at a temperature, or the greedy score), and the metric against
the human scores is computed on every fold's dev and test masks: a `vmap` over folds inside a
`vmap` (or a batched `lax.map`) over the grid. The best grid point on each fold's dev set is
then chosen and its test metric read off, all inside the same `jax.jit`.

A grid is a pytree whose leaves share a leading axis G (e.g. `{"lam": [G]}`); `adjust_fn`
receives one grid point (the same pytree without the leading axis) and returns `[N, K]`
adjusted log-probabilities. Pass the arrays it needs through `data` rather than closing over
them: a closure embeds its arrays in the compiled program as constants and a new closure
compiles again, whereas `adjust_fn(params, data)` with a module-level function compiles once
per shape and is reused for every data set of that shape.

Corrections estimated from human labels (distribution calibration's Beta prior) must come from
each fold's dev set only. `fold_data` carries such per-fold arrays (leading axis F); it is
vmapped over together with the fold masks and handed to `adjust_fn(params, data, fold)`.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge import metrics
from jaxjudge.debias.scores import expected_score, greedy_score

Array = jax.Array
PyTree = Any

# Metrics that measure an error (lower is better); any other metric name is maximised.
MINIMISED_METRICS = frozenset({"mse", "rmse", "mae", "sdd"})
SCORE_KINDS = ("expected", "greedy")


class GridSearchResult(NamedTuple):
    """Result of `grid_search` over G grid points and F folds.

    Attributes:
        chosen: the grid pytree indexed at each fold's chosen point (leaves `[F, ...]`).
        chosen_index: `[F]` int index of the chosen grid point per fold.
        dev: `[G, F]` metric on each fold's dev set for every grid point.
        test: `[G, F]` metric on each fold's test set for every grid point (for plots and
            oracle analyses; selection never looks at it).
        dev_metric: `[F]` dev metric at the chosen point.
        test_metric: `[F]` test metric at the chosen point.
        mean_test: scalar mean of `test_metric` over folds.
    """

    chosen: PyTree
    chosen_index: Array
    dev: Array
    test: Array
    dev_metric: Array
    test_metric: Array
    mean_test: Array


# --- grids --------------------------------------------------------------------------------


def lambda_grid(lams) -> dict[str, Array]:
    """Grid over the correction strength alone.

    Args:
        lams: `[G]` values of lambda.

    Returns:
        `{"lam": [G]}`.
    """
    lams = jnp.asarray(lams, jnp.float32)
    if lams.ndim != 1 or lams.shape[0] == 0:
        raise ValueError(f"lams must be a non-empty [G] vector, got shape {lams.shape}")
    return {"lam": lams}


def product_grid(**axes) -> dict[str, Array]:
    """Cartesian product of named 1-D axes, flattened to a leading axis.

    The first axis varies slowest: with axes `lam=[G1]`, `t_main=[G2]`, point `i * G2 + j` is
    `(lam[i], t_main[j])`, so a `[G1 * G2, F]` table reshapes to `[G1, G2, F]`.

    Args:
        **axes: name -> `[G_i]` values.

    Returns:
        name -> `[prod(G_i)]` values.
    """
    if not axes:
        raise ValueError("product_grid needs at least one axis")
    cols = {}
    for name, v in axes.items():
        v = np.asarray(v, np.float32)
        if v.ndim != 1 or v.shape[0] == 0:
            raise ValueError(
                f"grid axis {name!r} must be a non-empty 1-D vector, got shape {v.shape}"
            )
        cols[name] = v
    points = list(itertools.product(*cols.values()))
    return {name: jnp.asarray([p[i] for p in points]) for i, name in enumerate(cols)}


def lambda_temperature_grid(lams, temperatures, name: str = "t_main") -> dict[str, Array]:
    """Grid over lambda x a temperature (contrastive decoding), lambda varying slowest.

    Args:
        lams: `[G1]` values of lambda.
        temperatures: `[G2]` values of the temperature.
        name: key of the temperature, `"t_main"` (divides the main model's logits, as in the
            contrastive-decoding public code) or `"t_asst"`.

    Returns:
        `{"lam": [G1 * G2], name: [G1 * G2]}`.
    """
    if np.any(np.asarray(temperatures) <= 0):
        raise ValueError(f"temperatures must be positive, got {np.asarray(temperatures).tolist()}")
    return product_grid(lam=lams, **{name: temperatures})


# --- the search ---------------------------------------------------------------------------


def _resolve_metric(metric, minimize: bool | None) -> tuple[Callable, bool]:
    """(metric callable, whether to minimise it); unknown names raise ValueError."""
    if callable(metric):
        fn, name = metric, getattr(metric, "__name__", "")
    elif isinstance(metric, str):
        try:
            fn = metrics.get_metric(metric)
        except (KeyError, ValueError) as e:
            raise ValueError(f"unknown metric {metric!r}: {e}") from None
        name = metric
    else:
        raise TypeError(f"metric must be a metric name or a callable, got {type(metric).__name__}")
    if minimize is None:
        # The callable's own `higher_is_better`, then the metrics registry; failing both,
        # error-type names (also as "grouped_mse" etc.) are minimised.
        hib = getattr(fn, "higher_is_better", None)
        if hib is None:
            hib = getattr(metrics, "HIGHER_IS_BETTER", {}).get(name)
        base = name.lower().removeprefix("grouped_")
        minimize = (not hib) if hib is not None else base in MINIMISED_METRICS
    return fn, bool(minimize)


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _Targets:
    """What every grid point is scored against (`_check_inputs`); every field an array.

    Attributes:
        human: `[N]` float32 human scores.
        dev: `[F, N]` bool, where each fold chooses.
        test: `[F, N]` bool, where each fold is evaluated.
        values: `[K]` float32 value of each score candidate.
        temperature: float32 scalar, of the expected score.
    """

    human: Array
    dev: Array
    test: Array
    values: Array
    temperature: Array


def _point_metrics(params, data, fold_data, targets: _Targets, *, adjust_fn, metric_fn, score) -> tuple[Array, Array]:
    """(dev [F], test [F]) metrics of one grid point."""
    human, values, temperature = targets.human, targets.values, targets.temperature
    n, k = human.shape[0], values.shape[0]

    def predict(adj):
        if adj.shape != (n, k):
            raise ValueError(
                f"adjust_fn returned shape {adj.shape}; expected [N, K] = {(n, k)} "
                f"(N from human scores, K from values)"
            )
        if score == "expected":
            return expected_score(adj, values, temperature)  # [N]
        return greedy_score(adj, values)  # [N]

    def fold_metrics(pred, d, t):
        return metric_fn(pred, human, d), metric_fn(pred, human, t)

    if fold_data is None:
        adj = adjust_fn(params) if data is None else adjust_fn(params, data)
        pred = predict(adj)
        return jax.vmap(fold_metrics, in_axes=(None, 0, 0))(pred, targets.dev, targets.test)

    def one_fold(fold, d, t):
        return fold_metrics(predict(adjust_fn(params, data, fold)), d, t)

    return jax.vmap(one_fold)(fold_data, targets.dev, targets.test)


_STATIC = ("adjust_fn", "metric_fn", "score")


@partial(jax.jit, static_argnames=_STATIC)
def _evaluate_point_jit(params, data, fold_data, targets: _Targets, **static):
    return _point_metrics(params, data, fold_data, targets, **static)


@partial(jax.jit, static_argnames=(*_STATIC, "minimize", "batch_size"))
def _grid_search_jit(grid, data, fold_data, targets: _Targets, *, minimize, batch_size, **static) -> GridSearchResult:
    point = partial(_point_metrics, data=data, fold_data=fold_data, targets=targets, **static)
    if batch_size is None:
        dev_gf, test_gf = jax.vmap(point)(grid)  # [G, F] each
    else:
        dev_gf, test_gf = jax.lax.map(point, grid, batch_size=batch_size)  # [G, F] each
    # A NaN dev metric (e.g. a correlation of constant predictions) must never be chosen.
    bad = jnp.inf if minimize else -jnp.inf
    ranked = jnp.where(jnp.isnan(dev_gf), bad, dev_gf)
    idx = jnp.argmin(ranked, axis=0) if minimize else jnp.argmax(ranked, axis=0)  # [F]
    folds = jnp.arange(dev_gf.shape[1])
    test_metric = test_gf[idx, folds]
    return GridSearchResult(
        chosen=jax.tree.map(lambda x: x[idx], grid),
        chosen_index=idx,
        dev=dev_gf,
        test=test_gf,
        dev_metric=dev_gf[idx, folds],
        test_metric=test_metric,
        mean_test=jnp.mean(test_metric),
    )


def _check_inputs(
    grid, fold_data, human, dev_masks, test_masks, values, temperature, score, allow_overlap
) -> _Targets:
    """Eager validation; returns the checked arrays as JAX arrays (a `[N]` mask as one fold)."""
    if score not in SCORE_KINDS:
        raise ValueError(f"score must be one of {SCORE_KINDS}, got {score!r}")
    h = np.asarray(human)
    if h.ndim != 1 or h.shape[0] == 0:
        raise ValueError(f"human scores must be a non-empty [N] vector, got shape {h.shape}")
    if not np.issubdtype(h.dtype, np.number):
        raise TypeError(f"human scores must be numeric, got dtype {h.dtype}")
    nan_rows = np.flatnonzero(~np.isfinite(h))
    if nan_rows.size:
        raise ValueError(
            f"human scores contain NaN/inf at {nan_rows.size} rows "
            f"(first: row {int(nan_rows[0])})"
        )
    n = h.shape[0]
    v = np.asarray(values, np.float32)
    if v.ndim != 1 or v.shape[0] < 2:
        raise ValueError(f"values must be a [K] vector with K >= 2, got shape {v.shape}")
    t = np.asarray(temperature, np.float32)
    if t.shape != () or not t > 0:
        raise ValueError(f"temperature must be a positive scalar, got {temperature!r}")

    masks = []
    for name, m in (("dev_masks", dev_masks), ("test_masks", test_masks)):
        m = np.asarray(m)
        if m.dtype != np.bool_:
            raise TypeError(f"{name} must be bool, got dtype {m.dtype}")
        m = m[None, :] if m.ndim == 1 else m
        if m.ndim != 2 or m.shape[1] != n:
            raise ValueError(
                f"{name} must be [F, N] with N={n} (from human scores), got {m.shape}"
            )
        masks.append(m)
    dev, test = masks
    if dev.shape != test.shape:
        raise ValueError(f"dev_masks {dev.shape} and test_masks {test.shape} differ in shape")
    for f in range(dev.shape[0]):
        for name, m in (("dev", dev), ("test", test)):
            if not m[f].any():
                raise ValueError(f"fold {f}: the {name} mask is empty")
        if not allow_overlap and (dev[f] & test[f]).any():
            raise ValueError(
                f"fold {f}: dev and test masks overlap on "
                f"{int((dev[f] & test[f]).sum())} examples "
                f"(pass allow_overlap=True for an oracle analysis)"
            )

    leaves = jax.tree.leaves(grid)
    if not leaves:
        raise ValueError("grid is empty: expected a pytree of arrays with a leading grid axis")
    sizes = {np.shape(x)[0] if np.ndim(x) else None for x in leaves}
    if None in sizes or len(sizes) != 1 or 0 in sizes:
        raise ValueError(
            f"grid leaves must share a non-zero leading axis, got shapes "
            f"{[np.shape(x) for x in leaves]}"
        )
    if fold_data is not None:
        shapes = [np.shape(x) for x in jax.tree.leaves(fold_data)]
        if not shapes or any(not s or s[0] != dev.shape[0] for s in shapes):
            raise ValueError(
                f"fold_data leaves must have a leading fold axis F={dev.shape[0]} (from the "
                f"masks), got shapes {shapes}"
            )
    return _Targets(
        human=jnp.asarray(h, jnp.float32), dev=jnp.asarray(dev), test=jnp.asarray(test),
        values=jnp.asarray(v), temperature=jnp.asarray(t),
    )


def grid_search(
    adjust_fn: Callable,
    grid: PyTree,
    human,
    dev_masks,
    test_masks,
    metric: str | Callable = "spearman",
    *,
    values,
    temperature: float = 1.0,
    data: PyTree = None,
    fold_data: PyTree = None,
    score: str = "expected",
    minimize: bool | None = None,
    batch_size: int | None = None,
    allow_overlap: bool = False,
) -> GridSearchResult:
    """Choose a hyper-parameter per fold on dev, report it on test: one compiled call.

    Inputs are validated eagerly (shapes, NaN in the human scores, empty folds, unknown
    metric), then a single `jax.jit`-compiled function evaluates every (grid point, fold) pair,
    picks the best dev value per fold (the first on ties; NaN dev metrics are never picked) and
    gathers the test metric there. Repeated calls with the same `adjust_fn`, metric and shapes
    reuse the compilation.

    Args:
        adjust_fn: `adjust_fn(params) -> [N, K]`, or `adjust_fn(params, data)` when `data` is
            given, or `adjust_fn(params, data, fold)` when `fold_data` is given (`data` may
            then be None); adjusted candidate log-probabilities for one grid point (and
            fold). Must be jittable.
        grid: pytree of arrays with a shared leading axis G (see `lambda_grid`,
            `lambda_temperature_grid`, `product_grid`), or a `[G]` array.
        human: `[N]` human scores (no NaN).
        dev_masks: `[F, N]` (or `[N]`) bool, where each fold chooses (see `kfold_splits`).
        test_masks: `[F, N]` (or `[N]`) bool, where each fold is evaluated.
        metric: metric name for `jaxjudge.metrics.get_metric` or a callable
            `metric(pred [N], human [N], mask [N]) -> scalar`, e.g. a summary-level
            `jaxjudge.metrics.grouped_metric("spearman", doc_ids, num_docs)`.
        values: `[K]` numeric value of each score candidate.
        temperature: temperature of the expected score (e.g. 0.2 as in the random-number paper).
        data: optional pytree of arrays passed to `adjust_fn` as its second argument.
        fold_data: optional pytree of per-fold arrays, leaves `[F, ...]`; fold f's slice is
            passed to `adjust_fn` as its third argument (e.g. corrections fitted on each
            fold's dev labels).
        score: `"expected"` (probability-weighted, at `temperature`) or `"greedy"`.
        minimize: whether lower metric values are better; by default inferred from the metric
            (its `higher_is_better` attribute, the metrics registry, else `mse`-type names are
            minimised and everything else maximised).
        batch_size: None vectorises the whole grid at once; an integer evaluates the grid with
            `jax.lax.map` in batches of that many points to bound memory.
        allow_overlap: permit dev and test masks that share examples (oracle analyses).

    Returns:
        `GridSearchResult`.
    """
    metric_fn, minimize = _resolve_metric(metric, minimize)
    targets = _check_inputs(
        grid, fold_data, human, dev_masks, test_masks, values, temperature, score, allow_overlap
    )
    if batch_size is not None and (not isinstance(batch_size, int) or batch_size < 1):
        raise ValueError(f"batch_size must be None or a positive integer, got {batch_size!r}")
    return _grid_search_jit(
        jax.tree.map(jnp.asarray, grid), data, fold_data, targets,
        adjust_fn=adjust_fn, metric_fn=metric_fn, score=score, minimize=minimize,
        batch_size=batch_size,
    )


def evaluate_point(
    adjust_fn: Callable,
    params: PyTree,
    human,
    dev_masks,
    test_masks,
    metric: str | Callable = "spearman",
    *,
    values,
    temperature: float = 1.0,
    data: PyTree = None,
    fold_data: PyTree = None,
    score: str = "expected",
) -> tuple[Array, Array]:
    """Dev and test metrics of a single grid point, per fold (the body `grid_search` vmaps).

    Does no input validation beyond resolving the metric (it is meant for loops and
    benchmarks; `grid_search` validates).

    Args:
        adjust_fn, human, metric, values, temperature, data, fold_data, score: as in
            `grid_search`.
        params: one grid point (the grid pytree without its leading axis).
        dev_masks: `[F, N]` bool.
        test_masks: `[F, N]` bool.

    Returns:
        (`[F]` dev metrics, `[F]` test metrics).
    """
    metric_fn, _ = _resolve_metric(metric, None)
    targets = _Targets(
        human=jnp.asarray(human, jnp.float32), dev=jnp.asarray(dev_masks), test=jnp.asarray(test_masks),
        values=jnp.asarray(values, jnp.float32), temperature=jnp.asarray(temperature, jnp.float32),
    )
    return _evaluate_point_jit(
        params, data, fold_data, targets,
        adjust_fn=adjust_fn, metric_fn=metric_fn, score=score,
    )
