"""The inputs of the report's cell statistic (`jaxjudge.metrics.fold_stat`), as typed pytrees.

`FoldArrays` holds the reported rows in the per-fold layout of `fold_layout` (each fold's test
rows, padded to the largest fold) and `FoldPrepared` what the statistic computes from them once,
before any resample. Both are frozen dataclasses registered as JAX pytrees whose every field is
an array (a child, never static), so they go through `jax.jit`, `jax.vmap` and the bootstrap as
one argument each: a jitted function is traced once per field shapes, as for the same arrays
passed one by one.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import numpy as np

__all__ = ["FoldArrays", "FoldPrepared", "fold_arrays", "fold_layout", "over_folds"]


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FoldArrays:
    """The reported rows of a cell in the per-fold layout (`fold_arrays`).

    F folds, M slots a fold (its test rows, then padding), G groups, K scores. ``pred`` and
    ``probs`` may carry leading method axes ``[...]`` (several methods scored at once); every
    other field is shared by the methods.

    Attributes:
      index: `[F, M]` int32, the row of fold f's s-th test row (0 for a padding slot).
      pad: `[F, M]` 1 on real slots, 0 on padding.
      pred: `[..., F, M]` predictions.
      base: `[F, M]` the baseline's predictions (for deltas).
      human: `[F, M]` human scores on the scale.
      hrel: `[F, M]` human scores minus the scale's lowest score (SDD).
      probs: `[..., F, M, K]` log-probabilities of the scores.
      ok: `[F, M]` 1 where the prediction is finite.
      valid: `[F, M]` 1 where the judge's output was a valid score.
      codes: `[F, M]` int32 group codes (the groups the bootstrap resamples).
      rep: `[F, G]` int32, a row of each group among fold f's test rows (row 0 where the fold
        has none), whose weight is the group's multiplicity.
    """

    index: Any
    pad: Any
    pred: Any
    base: Any
    human: Any
    hrel: Any
    probs: Any
    ok: Any
    valid: Any
    codes: Any
    rep: Any

    def methods(self, part: slice, probs_per_method: bool) -> FoldArrays:
        """The same layout for the methods ``part`` of ``pred``'s (and, when
        ``probs_per_method``, ``probs``') leading method axis."""
        probs = self.probs[part] if probs_per_method else self.probs
        return dataclasses.replace(self, pred=self.pred[part], probs=probs)

    @classmethod
    def method_axes(cls, probs_per_method: bool) -> FoldArrays:
        """`jax.vmap` ``in_axes`` over the methods: 0 for ``pred`` (and ``probs`` when
        ``probs_per_method``), None (shared) for every other field."""
        shared = dict.fromkeys((f.name for f in dataclasses.fields(cls)), None)
        return cls(**{**shared, "pred": 0, "probs": 0 if probs_per_method else None})


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class FoldPrepared:
    """What no resample changes, computed once from `FoldArrays` (`fold_stat.fold_prepare` and
    `fold_stat.shared_prepare`).

    The first four fields are a method's (with a leading method axis ``[...]`` when several
    methods are prepared at once); ``shared`` is shared by every method.

    Attributes:
      doc: `[..., F, D, G]` each fold's per-group values of the ``_doc`` statistics (NaN where a
        group is undefined or has no test row in the fold), in `fold_stat.doc_columns` order.
      pairs: `[..., F, P, G, G]` Kendall's group-level pair sums (P = 3 or 0).
      ranks: `[..., F, Q, M, G]` the prediction's rank matrix (Q = 1 or 0).
      sums: `[..., F, S, G]` the group sums of the pooled Pearson, MSE and SDD (S = 0 when none).
      shared: `[F, R, M, G]` the rank matrices of the human scores and the baseline (R = 0, 1
        or 2), or None where only a method's own arrays were prepared (`fold_stat.fold_prepare`).
    """

    doc: Any
    pairs: Any
    ranks: Any
    sums: Any
    shared: Any = None

    @classmethod
    def method_axes(cls) -> FoldPrepared:
        """`jax.vmap` ``in_axes`` over the methods: 0 for a method's fields, None for ``shared``."""
        return cls(doc=0, pairs=0, ranks=0, sums=0, shared=None)


def over_folds(fn: Any, *trees: Any) -> Any:
    """``fn(*fold_trees)`` for each fold of ``trees`` (pytrees whose leaves lead with the fold
    axis `[F, ...]`), the results stacked along a new leading fold axis.

    One traced body for every fold (`jax.lax.map`), not F copies of it: the report's statistics
    then compile in about the time of one fold's (their programs were F times one fold's
    operations when the folds were a Python loop). Not a `jax.vmap` over the folds: under the
    bootstrap's batching over resamples and a report's over methods, a third vmap level made
    XLA's CPU code about five times slower (benchmarks/bench_report_stats.py); a loop keeps
    each fold's operations as they were. One fold is a plain call.

    Raises:
      ValueError: the leaves' first axes differ (e.g. a method axis left in front of the folds).
    """
    leaves = jax.tree.leaves(trees)
    if len({leaf.shape[0] for leaf in leaves}) > 1:
        raise ValueError(f"every leaf must lead with the fold axis, got shapes {[leaf.shape for leaf in leaves]}")
    if leaves and leaves[0].shape[0] == 1:
        one = fn(*jax.tree.map(lambda leaf: leaf[0], trees))
        return jax.tree.map(lambda leaf: leaf[None], one)
    return jax.lax.map(lambda folds: fn(*folds), trees)


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


def fold_arrays(pred_nf, base_nf, human, hrel, probs_nfk, test_nf, ok, valid, codes) -> FoldArrays:
    """The statistic's inputs in the per-fold layout of `fold_layout` (numpy in, numpy out).

    `codes` are the groups the bootstrap resamples (and the per-document metrics group by):
    the statistic assumes every row of a group has the same weight.

    Args (row axis N): pred `[..., N, F]` (leading axes: several methods scored at once),
    base `[N, F]` (for deltas), human on the scale `[N]`, human minus lo `[N]` (SDD), log-probs
    `[..., N, F, K]` (the same leading axes as pred, or none), test `[N, F]`, ok `[N]` (finite
    prediction), valid `[N]`, group codes `[N]`.

    Returns:
      `FoldArrays`, each field `[F, M, ...]` (pred and probs with pred's leading axes), except
      ``rep`` `[F, G]`.
    """
    index, pad = fold_layout(test_nf)
    f = index.shape[0]
    cols = np.arange(f)[:, None]
    codes = np.asarray(codes, np.int32)
    num_groups = int(codes.max()) + 1 if codes.size else 0
    rep = np.zeros((f, num_groups), np.int32)
    for i in range(f):
        rows = index[i][pad[i] > 0]
        rep[i, codes[rows[::-1]]] = rows[::-1]  # the first test row of each group wins
    return FoldArrays(
        index=index, pad=pad, pred=np.asarray(pred_nf, np.float32)[..., index, cols],
        base=np.asarray(base_nf, np.float32)[index, cols], human=np.asarray(human, np.float32)[index],
        hrel=np.asarray(hrel, np.float32)[index], probs=np.asarray(probs_nfk, np.float32)[..., index, cols, :],
        ok=np.asarray(ok, np.float32)[index], valid=np.asarray(valid, np.float32)[index], codes=codes[index],
        rep=rep,
    )
