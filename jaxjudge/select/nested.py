"""Selection inside the interval: a grouped bootstrap that redoes the dev-side choice per resample.

The report's bootstrap (`jaxjudge.metrics.fold_stat`) resamples the reported (test) groups with
each fold's hyper-parameters held at the values chosen on the full dev side, so its interval is
conditional on that choice. `nested_bootstrap` resamples whole groups on both sides instead and,
in every resample, chooses again on the resample's dev rows and scores the new choice on the
resample's test rows: the interval then also carries the selection's variability. Its target
is the procedure's expected test metric (choose on a dev set of this size, report on test),
not the population metric of the one value chosen here (`jaxjudge.report.coverage` measures it).

The adjustments the report tunes are per-row transforms with fixed hyper-parameters, so a
procedure's predictions at every grid point, `[G, F, N]`, do not depend on the resample. They
are computed once; a resample is row multiplicities (weights) and costs only weighted metrics,
vectorised over grid points, folds and a batch of resamples.

Resamples. Groups with a test row in some fold (the reported groups) are drawn exactly as the
report's bootstrap draws them: the same seed gives the same multiplicities of the reported
groups as `jaxjudge.metrics.bootstrap_distribution` over the reported rows. Groups that are
only ever on the dev side (a fixed split's dev documents) are drawn among themselves with a
key derived from the same resample's key, so a fixed split keeps its dev and test sizes. Under
k-fold every group is reported and one draw serves both sides. Every procedure of a call, and
of any call with the same seed, groups and splits, sees the same resamples: the difference of
two procedures' replicates is a paired difference, each re-selected inside each resample.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge import metrics as M
from jaxjudge.metrics.bootstrap import resample_weights
from jaxjudge.select.grid import _resolve_metric

__all__ = ["TIE_TOLERANCE", "NestedReplicates", "nested_bootstrap", "nested_weights"]


TIE_TOLERANCE = 1e-6
"""Dev metrics within this (relative to max(1, |best|)) of the best count as tied, and the first
of them is chosen. Two grid points that rank the dev rows alike have equal correlations in
exact arithmetic, but float32 sums over differently laid out rows can split them by a few
1e-8; the tolerance keeps such ties ties. (`grid_search` compares exactly: where its own
rounding splits an exact tie towards a later grid point, the two choose differently.)"""


class NestedReplicates(NamedTuple):
    """One procedure's result of `nested_bootstrap`.

    Attributes:
      estimate: the test-side metric, mean over folds, with the selection made on the full
        dev side (what `jaxjudge.select.grid_search` gives as ``mean_test``).
      replicates: `[B]` the same, each resample choosing on its own dev rows (NaN where the
        metric is undefined on some fold's resampled test rows).
      chosen_index: `[F]` grid index chosen on the full dev side of each fold (0 for a fixed
        procedure; ties within `TIE_TOLERANCE` go to the first).
      chosen_replicates: `[B, F]` grid index chosen in each resample.
    """

    estimate: float
    replicates: np.ndarray
    chosen_index: np.ndarray
    chosen_replicates: np.ndarray


class _Layout(NamedTuple):
    """Each fold's rows of one side, padded to the largest fold: `index [F, M]`, `pad [F, M]`."""

    index: np.ndarray
    pad: np.ndarray


def _side(mask_fn: np.ndarray) -> _Layout:
    members = [np.flatnonzero(m) for m in mask_fn]
    m = max(len(r) for r in members)
    index = np.zeros((len(members), m), np.int32)
    pad = np.zeros((len(members), m), np.float32)
    for f, rows in enumerate(members):
        index[f, : len(rows)] = rows
        pad[f, : len(rows)] = 1.0
    return _Layout(index, pad)


class _Strata(NamedTuple):
    """Group strata of a split: `codes [N]` over all groups (sorted ids), the reported
    groups' rank `[G]` (-1 elsewhere) and the dev-only groups' rank `[G]` (-1 elsewhere)."""

    codes: np.ndarray
    num_groups: int
    report_rank: np.ndarray
    dev_rank: np.ndarray
    n_report: int
    n_dev_only: int


def _strata(groups, dev: np.ndarray, test: np.ndarray) -> _Strata:
    codes = M.encode_groups(groups, name="groups", n=dev.shape[1])
    g = codes.num_groups
    reported = np.zeros(g, bool)
    reported[codes.codes[test.any(0)]] = True
    dev_only = np.zeros(g, bool)
    dev_only[codes.codes[dev.any(0)]] = True
    dev_only &= ~reported
    # Sorted group ids in both: the reported groups' ranks are the codes the report's bootstrap
    # gives its reported rows (`encode_groups` of their ids).
    report_rank = np.where(reported, np.cumsum(reported) - 1, -1).astype(np.int32)
    dev_rank = np.where(dev_only, np.cumsum(dev_only) - 1, -1).astype(np.int32)
    return _Strata(codes.codes, g, report_rank, dev_rank, int(reported.sum()), int(dev_only.sum()))


def _group_counts(key: jax.Array, report_rank, dev_rank, n_report: int, n_dev_only: int) -> jax.Array:
    """`[G]` multiplicity of every group in the resample of `key` (0 for groups in no fold)."""
    rep = resample_weights(key, jnp.arange(n_report), n_report)  # [G_report]
    counts = jnp.where(report_rank >= 0, rep[jnp.maximum(report_rank, 0)], 0.0)
    if n_dev_only:
        dev = resample_weights(jax.random.fold_in(key, 1), jnp.arange(n_dev_only), n_dev_only)
        counts = jnp.where(dev_rank >= 0, dev[jnp.maximum(dev_rank, 0)], counts)
    return counts


def nested_weights(groups, dev_masks, test_masks, n_boot: int, seed: int = 0) -> np.ndarray:
    """`[B, N]` row multiplicities of `nested_bootstrap`'s resamples (for checks and loops).

    Args:
      groups: `[N]` group ids.
      dev_masks, test_masks: `[F, N]` bool.
      n_boot: B.
      seed: as `nested_bootstrap`.

    Returns:
      float32 `[B, N]`.
    """
    dev, test = _masks(dev_masks, test_masks)
    st = _strata(groups, dev, test)
    keys = jax.random.split(jax.random.key(seed), n_boot + 1)[1:]
    counts = jax.vmap(lambda k: _group_counts(k, jnp.asarray(st.report_rank), jnp.asarray(st.dev_rank),
                                              st.n_report, st.n_dev_only))(keys)  # [B, G]
    return np.asarray(counts)[:, st.codes]


def _masks(dev_masks, test_masks) -> tuple[np.ndarray, np.ndarray]:
    out = []
    for name, m in (("dev_masks", dev_masks), ("test_masks", test_masks)):
        m = np.asarray(m)
        if m.dtype != np.bool_:
            raise TypeError(f"{name} must be bool, got dtype {m.dtype}")
        m = m[None] if m.ndim == 1 else m
        if m.ndim != 2:
            raise ValueError(f"{name} must be [F, N], got shape {m.shape}")
        out.append(m)
    dev, test = out
    if dev.shape != test.shape:
        raise ValueError(f"dev_masks {dev.shape} and test_masks {test.shape} differ in shape")
    for f in range(dev.shape[0]):
        for name, m in (("dev", dev), ("test", test)):
            if not m[f].any():
                raise ValueError(f"fold {f}: the {name} mask is empty")
    return dev, test


def _metric_values(metric_name: str, per_group: bool, num_groups: int):
    """`(x [M], y [M], codes [M], w [M]) -> scalar`: the weighted metric, pooled or the mean of
    the per-group values."""
    if per_group:
        def value(x, y, codes, w):
            return M.grouped(metric_name, x, y, codes, num_groups=num_groups, weights=w)
    else:
        fn = M.get_metric(metric_name)

        def value(x, y, codes, w):
            del codes
            return fn(x, y, weights=w)
    return value


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _Rows:
    """What every procedure of a `nested_bootstrap` call shares: each fold's dev slots (Md of
    them) and test slots (Mt; `_side`) and the group strata (`_Strata`). Every field an array.

    Attributes:
      human_dev, human_test: float32 `[F, Md]`, `[F, Mt]` human scores of the slots.
      codes_dev, codes_test: int32 `[F, Md]`, `[F, Mt]` group codes of the slots.
      dev_pad, test_pad: `[F, Md]`, `[F, Mt]` 1 on real slots, 0 on padding.
      report_rank, dev_rank: int32 `[G_all]` (`_Strata`).
    """

    human_dev: Any
    human_test: Any
    codes_dev: Any
    codes_test: Any
    dev_pad: Any
    test_pad: Any
    report_rank: Any
    dev_rank: Any


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class _Draws:
    """`_nested_jit`'s result for one procedure (`NestedReplicates`' fields, as JAX arrays)."""

    estimate: jax.Array
    replicates: jax.Array
    chosen_index: jax.Array
    chosen_replicates: jax.Array


@functools.partial(
    jax.jit,
    static_argnames=("metric_name", "per_group", "num_groups", "minimize", "n_report", "n_dev_only", "n_boot",
                     "batch_size"),
)
def _nested_jit(pred_dev, pred_test, rows: _Rows, key, *, metric_name, per_group, num_groups, minimize, n_report,
                n_dev_only, n_boot, batch_size) -> _Draws:
    # pred_dev [G, F, Md], pred_test [G, F, Mt].
    value = _metric_values(metric_name, per_group, num_groups)
    over_folds = jax.vmap(value)  # [F, M] each -> [F]
    over_grid = jax.vmap(over_folds, in_axes=(0, None, None, None))  # [G, F, M] -> [G, F]
    folds = jnp.arange(pred_dev.shape[1])
    bad = jnp.inf if minimize else -jnp.inf

    def one(args):
        k, is_estimate = args
        c = _group_counts(k, rows.report_rank, rows.dev_rank, n_report, n_dev_only)  # [G_all]
        c = jnp.where(is_estimate, 1.0, c)
        # A row's multiplicity is its group's; padding slots weigh 0.
        w_dev = c[rows.codes_dev] * rows.dev_pad  # [F, Md]
        w_test = c[rows.codes_test] * rows.test_pad  # [F, Mt]
        dev_gf = over_grid(pred_dev, rows.human_dev, rows.codes_dev, w_dev)  # [G, F]
        # A NaN dev metric is never chosen; ties go to the first grid point (as grid_search),
        # ties up to float32 rounding included (see TIE_TOLERANCE).
        ranked = jnp.where(jnp.isnan(dev_gf), bad, dev_gf)
        best = jnp.min(ranked, axis=0) if minimize else jnp.max(ranked, axis=0)  # [F]
        tol = TIE_TOLERANCE * jnp.maximum(1.0, jnp.abs(best))
        near = ranked <= best + tol if minimize else ranked >= best - tol  # [G, F]
        idx = jnp.argmax(near, axis=0)  # [F] the first grid point within the tolerance
        # Every grid point's test metric, then the chosen one's: the predictions stay the same
        # for every resample, so their sorts are shared by the batch (`jaxjudge.metrics`'s
        # mid-ranks); gathering the chosen predictions first would sort once per resample.
        test_gf = over_grid(pred_test, rows.human_test, rows.codes_test, w_test)  # [G, F]
        return jnp.mean(test_gf[idx, folds]), idx

    keys = jax.random.split(key, n_boot + 1)
    # Pad to whole batches (a remainder batch would compile again), as the report's bootstrap.
    pad = -(n_boot + 1) % batch_size
    keys = jnp.concatenate([keys, keys[:pad]]) if pad else keys
    is_estimate = jnp.arange(keys.shape[0]) == 0
    values, idx = jax.lax.map(one, (keys, is_estimate), batch_size=batch_size)
    return _Draws(values[0], values[1 : n_boot + 1], idx[0], idx[1 : n_boot + 1])


def nested_bootstrap(
    procedures: Mapping[str, Any],
    human,
    groups,
    dev_masks,
    test_masks,
    metric: str = "spearman",
    *,
    per_group: bool = False,
    minimize: bool | None = None,
    n_boot: int = 1000,
    seed: int = 0,
    batch_size: int = 32,
) -> dict[str, NestedReplicates]:
    """Point estimate and nested-bootstrap replicates of each procedure's test-side metric.

    A procedure is either fixed predictions `[F, N]` (or `[N]`, shared by every fold), scored
    as they are, or a tuned one, its predictions at every grid point `[G, F, N]` (or
    `[G, 1, N]`, shared by every fold): in the full data and in every resample, each fold chooses the grid point of best ``metric`` on its dev rows (the first
    on ties, never one whose dev metric is NaN, as `jaxjudge.select.grid_search`) and is scored
    there on its test rows; the statistic is the mean over folds. Each resample draws whole
    groups on both sides (see the module docstring), the same resamples for every procedure.

    Args:
      procedures: name -> `[N]` or `[F, N]` (fixed), `[G, 1, N]` or `[G, F, N]` (tuned)
        predictions, finite on every row of some fold's dev or test side.
      human: `[N]` human scores (finite).
      groups: `[N]` group ids (source documents): resampled whole, and the groups of a
        per-group metric.
      dev_masks, test_masks: `[F, N]` (or `[N]`) bool, as `grid_search`'s.
      metric: a registered metric name (`jaxjudge.metrics.METRICS`), the selection metric and
        the reported one.
      per_group: the mean over groups of the within-group metric (the report's ``<metric>_doc``
        with every document defined, and the selector of ``select_per_group``) instead of the
        pooled metric.
      minimize: whether lower is better; by default from the metric (``mse`` is minimised).
      n_boot: B, resamples.
      seed: the bootstrap's seed: with the same seed, the reported groups' multiplicities are
        those of the report's bootstrap (`jaxjudge.metrics.bootstrap_distribution`).
      batch_size: resamples evaluated together (memory: about batch x G x F x rows floats).

    Returns:
      name -> `NestedReplicates`, in the order of ``procedures``.
    """
    minimize = _check_options(metric, minimize, n_boot, batch_size, procedures)
    dev, test = _masks(dev_masks, test_masks)
    f, n = dev.shape
    h = _check_human(human, n)
    st = _strata(groups, dev, test)
    if st.n_report < 2:
        raise ValueError(f"the bootstrap needs at least 2 reported groups, got {st.n_report}")
    dl, tl = _side(dev), _side(test)
    used = dev.any(0) | test.any(0)
    human_f32 = h.astype(np.float32)
    shared = _Rows(
        human_dev=human_f32[dl.index], human_test=human_f32[tl.index], codes_dev=st.codes[dl.index],
        codes_test=st.codes[tl.index], dev_pad=dl.pad, test_pad=tl.pad, report_rank=st.report_rank,
        dev_rank=st.dev_rank,
    )
    static = dict(metric_name=metric, per_group=bool(per_group), num_groups=st.num_groups, minimize=minimize,
                  n_report=st.n_report, n_dev_only=st.n_dev_only, n_boot=int(n_boot),
                  batch_size=int(min(batch_size, n_boot + 1)))
    out = {}
    for name, pred in procedures.items():
        p = _procedure_grid(name, pred, f, n, used)
        cols = np.arange(f)[:, None]
        draws = _nested_jit(p[:, cols, dl.index], p[:, cols, tl.index], shared, jax.random.key(seed), **static)
        out[name] = NestedReplicates(
            estimate=float(draws.estimate), replicates=np.asarray(draws.replicates),
            chosen_index=np.asarray(draws.chosen_index), chosen_replicates=np.asarray(draws.chosen_replicates),
        )
    return out


def _check_options(metric: Any, minimize: bool | None, n_boot: Any, batch_size: Any,
                   procedures: Mapping[str, Any]) -> bool:
    """`nested_bootstrap`'s scalar arguments checked; returns whether the metric is minimised.

    Raises:
      TypeError: ``metric`` is not a name.
      ValueError: an unknown metric, ``n_boot`` or ``batch_size`` not a positive integer, or no
        procedure.
    """
    if not isinstance(metric, str):
        raise TypeError(f"metric must be a registered metric name, got {type(metric).__name__}")
    _, minimize = _resolve_metric(metric, minimize)
    if not isinstance(n_boot, (int, np.integer)) or n_boot < 1:
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    if not procedures:
        raise ValueError("procedures is empty: pass at least one name -> predictions")
    return minimize


def _check_human(human: Any, n: int) -> np.ndarray:
    """`[N]` float64 human scores, refused unless finite and as long as the masks' rows."""
    h = np.asarray(human, np.float64)
    if h.shape != (n,):
        raise ValueError(f"human must be [N]=[{n}] like the masks, got shape {h.shape}")
    if not np.isfinite(h).all():
        raise ValueError(f"human scores contain NaN/inf at rows {np.flatnonzero(~np.isfinite(h))[:10].tolist()}")
    return h


def _procedure_grid(name: str, pred: Any, f: int, n: int, used: np.ndarray) -> np.ndarray:
    """A procedure's predictions as float32 `[G, F, N]` (a fixed one: G = 1; shared by every
    fold: broadcast), refused unless finite on every ``used`` row (some fold's dev or test side)."""
    p = np.asarray(pred, np.float32)
    if p.ndim == 1:
        p = p[None]
    if p.ndim == 2:
        p = np.broadcast_to(p, (f, n))[None]  # a fixed procedure: one grid point
    if p.ndim != 3 or p.shape[1:] not in ((f, n), (1, n)):
        raise ValueError(
            f"procedure {name!r}: predictions must be [F, N] or [G, F, N] with F={f}, N={n} (from the "
            f"masks), got shape {np.shape(pred)}"
        )
    p = np.broadcast_to(p, (p.shape[0], f, n))
    bad = ~np.isfinite(p[:, :, used]).all((0, 1))
    if bad.any():
        raise ValueError(
            f"procedure {name!r}: predictions are not finite at rows "
            f"{np.flatnonzero(used)[bad][:10].tolist()} (rows on some fold's dev or test side)"
        )
    return p
