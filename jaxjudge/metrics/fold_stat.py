"""One jitted statistic for every metric of a method read one way, averaged over folds.

The report evaluates every method of a cell with the same compiled statistic: the arrays of
the reported rows go in once, the bootstrap (`jaxjudge.metrics.bootstrap_distribution`)
resamples whole groups by re-weighting the rows, and the statistic returns every metric of
`names`, each fold's test-side value averaged over the folds.

The bootstrap resamples whole groups, and the per-document metrics group by the same codes,
so every row of a group carries the same multiplicity c_g. Two things then do not change
from one resample to the next and are computed once per call (`fold_prepare`):

- a group's own metric (``<metric>_doc``): Pearson, Spearman, Kendall and MSE are unchanged
  when every row of the group is repeated c times, so a resample only re-weights the fixed
  per-group values by c (`jaxjudge.metrics.grouped` weighs a group by its mean row weight);
- Kendall's pair sums: with row weights `A c` (A the row-to-group indicator times the fixed
  row weights) each sum `w^T S w` is `c^T (A^T S A) c`, a `[G, G]` form instead of `[M, M]`;
- the weighted mid-ranks of the pooled Spearman: linear in c, `L c` for a fixed `[M, G]`
  matrix (`_rank_matrix`), a matrix product per batch of resamples instead of a sort order's
  cumulative sums and gathers per resample; their weighted mean is known (half the total
  weight), so the correlation of two rank vectors is three dot products
  (`jaxjudge.metrics.group_sums.midrank_pearson`);
- the pooled Pearson, MSE and SDD: every weighted sum they need is `c . S` for fixed group
  sums S (`jaxjudge.metrics.group_sums`), when a fold has several rows a group.

A resample then costs the pooled metrics over the rows and a few products over groups. The
numbers equal those of the plain metrics on the repeated rows (tests/report/test_report.py).

The statistic's inputs, `FoldArrays` (`fold_arrays`) and what is prepared from them once,
`FoldPrepared`, are pytree dataclasses of `jaxjudge.metrics.fold_inputs`, re-exported here with
`fold_arrays` and `fold_layout`. The interval the report prints from the replicates,
`interval_summary` (with `MIN_CI_GROUPS` and `NAN_SHARE_MAX`), lives in
`jaxjudge.metrics.intervals` and is re-exported here.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from jaxjudge.metrics.correlation import get_metric
from jaxjudge.metrics.distribution import sdd_from_logprobs
from jaxjudge.metrics.fold_inputs import FoldArrays, FoldPrepared, fold_arrays, fold_layout, over_folds
from jaxjudge.metrics.group_sums import (
    PEARSON_SUMS, kl_sums, mean_from_sums, midrank_pearson, pearson_from_sums, pearson_sums, sq_error_sums,
)
from jaxjudge.metrics.summary_level import per_group
from jaxjudge.metrics.intervals import MIN_CI_GROUPS, NAN_SHARE_MAX, interval_summary
from jaxjudge.metrics.tau_b import pair_matrices, sign_matrix, tau_from_sums

__all__ = [
    "MIN_CI_GROUPS", "NAN_SHARE_MAX", "FoldArrays", "FoldPrepared", "doc_columns", "fold_arrays", "fold_layout",
    "fold_mean_stat", "fold_prepare", "interval_summary", "methods_point", "methods_prepare", "methods_stat",
    "needs_signs", "shared_prepare",
]


def needs_signs(names: tuple[str, ...] | list[str]) -> bool:
    """Whether the statistic of `names` reads the Kendall sign matrices."""
    return any(n in ("kendall", "kendall_doc") for n in names)


def doc_columns(names: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The per-group values the ``_doc`` statistics of `names` read: ``(source, metric)``, the
    source ``"pred"`` or ``"base"`` (a ``delta_<metric>_doc`` reads both)."""
    cols = []
    for name in names:
        if name.endswith("_doc"):
            metric = name[: -len("_doc")]
            if metric.startswith("delta_"):
                cols += [("pred", metric[len("delta_"):]), ("base", metric[len("delta_"):])]
            else:
                cols.append(("pred", metric))
    return tuple(dict.fromkeys(cols))


def _to_groups(s, fixed, codes, num_groups: int):
    """`A^T S A` `[G, G]` for `A = onehot(codes) * fixed` `[M, G]`, by two segment sums (M^2
    additions, not the M^2 G of a product with the one-hot matrix)."""
    rows = jax.ops.segment_sum(s * fixed[:, None], codes, num_segments=num_groups)  # [G, M]
    return jax.ops.segment_sum((rows * fixed[None, :]).T, codes, num_segments=num_groups).T


def _rank_matrix(v, fixed, codes, num_groups: int):
    """`[M, G]` L with `L c` = each row's weighted mid-rank when group g's rows weigh `c_g * fixed`.

    L[i, g] = sum over rows j of group g of fixed_j ([v_j < v_i] + [v_j == v_i] / 2), the rank
    `jaxjudge.metrics.spearman` gives (weight below plus half the tie block's weight). With
    0/1 `fixed` and integer multiplicities every entry and product is a multiple of 1/2, exact
    in float32, so the ranks equal those of the sort-based `spearman`.
    """
    signs = sign_matrix(v).astype(jnp.float32) * fixed[None, :]  # [M, M] sign(v_i - v_j) f_j
    below = jax.ops.segment_sum(signs.T, codes, num_segments=num_groups).T  # [M, G]
    weight = jax.ops.segment_sum(fixed, codes, num_segments=num_groups)  # [G]
    return 0.5 * (weight[None, :] + below)


RANK_MATRIX_ROWS_PER_GROUP = 8
"""The pooled Spearman reads its ranks from `_rank_matrix` (M x G multiply-adds a resample)
when a fold has at least this many test rows per resampled group, else from the sort-based
`jaxjudge.metrics.spearman` (a cumulative sum and gathers over the M rows, about as costly as
some 150 multiply-adds a row on a CPU): with whole documents of 16 summaries resampled the
product wins, with single rows resampled (G = M) the sort does."""


def _kendall_by_group(names: tuple[str, ...], rows: int, num_groups: int) -> bool:
    """Whether the pooled Kendall reads `[G, G]` group pair sums (fewer groups than rows), not
    the `[M, M]` row pair matrices under each resample's row weights."""
    return "kendall" in names and num_groups < rows


def _pooled_spearman(names: tuple[str, ...], rows: int, num_groups: int) -> tuple[bool, bool]:
    """Whether the statistic reads rank matrices for the pooled Spearman of the prediction,
    and of the baseline, for folds of `rows` test rows and `num_groups` groups."""
    if rows < RANK_MATRIX_ROWS_PER_GROUP * num_groups:
        return False, False
    return any(n in ("spearman", "delta_spearman") for n in names), "delta_spearman" in names


SUM_ROWS_PER_GROUP = 4
"""The pooled Pearson, MSE and SDD read group sums (`jaxjudge.metrics.group_sums`) when a fold
has at least this many test rows per resampled group (SummEval: 16 summaries a document), and
the rows under each resample's weights otherwise (STS-B: about one pair a group)."""


def _sum_layout(names: tuple[str, ...], rows: int, num_groups: int) -> dict[tuple[str, str], slice]:
    """Where `fold_prepare`'s ``sums`` hold the group sums (`jaxjudge.metrics.group_sums`) of
    each pooled metric read from them: ``(source, metric) -> rows``, source ``"pred"`` or
    ``"base"`` (a delta). Empty unless a fold has at least `SUM_ROWS_PER_GROUP` test rows a
    group (with about one row a group the sums are the rows, and the row-wise two-pass Pearson
    is the more accurate in float32)."""
    if rows < SUM_ROWS_PER_GROUP * num_groups:
        return {}
    want = []
    for name in names:
        metric = name[len("delta_"):] if name.startswith("delta_") else name
        if metric not in ("pearson", "mse", "sdd"):
            continue
        want.append(("pred", metric))
        if name.startswith("delta_") and metric != "sdd":
            want.append(("base", metric))
    layout, at = {}, 0
    for key in dict.fromkeys(want):
        size = PEARSON_SUMS if key[1] == "pearson" else 2
        layout[key] = slice(at, at + size)
        at += size
    return layout


@functools.lru_cache(maxsize=64)
def fold_prepare(names: tuple[str, ...], num_groups: int, resampled: bool = True):
    """`prep(arrays: FoldArrays) -> FoldPrepared`: what does not depend on the resample, for one
    method (``shared`` left None: `shared_prepare` computes it).

    The result's ``doc`` `[F, D, G]` holds each fold's per-group metric values of the ``_doc``
    statistics (NaN where a group is undefined or has no test row in the fold), in
    `doc_columns` order (a group's Kendall from the diagonal of the group pair sums when those
    are computed); ``pairs`` `[F, P, G, G]` Kendall's three group-level pair sums `A^T S A`
    (P = 3 when `names` has ``kendall`` and a fold has more test rows than groups, else 0);
    ``ranks`` `[F, Q, M, G]` the prediction's `_rank_matrix` (Q = 1 when a pooled Spearman is
    read from rank matrices, see `RANK_MATRIX_ROWS_PER_GROUP`; else 0); ``sums`` `[F, S, G]`
    the group sums of the pooled Pearson, MSE and SDD (`_sum_layout`; S = 0 when none).
    Without `resampled` (one evaluation on the original rows) pairs, ranks and sums are left
    empty: reducing them would cost more than the one evaluation it serves.
    """
    cols = doc_columns(names)

    def prep(arrays: FoldArrays) -> FoldPrepared:
        m = arrays.index.shape[1]
        spearman = resampled and _pooled_spearman(names, m, num_groups)[0]
        kendall = resampled and _kendall_by_group(names, m, num_groups)
        layout = _sum_layout(names, m, num_groups) if resampled else {}

        def one_fold(fold: FoldArrays):
            pred, human, codes = fold.pred, fold.human, fold.codes
            fixed = fold.pad * fold.ok  # every row once; a resample scales a group's rows alike
            src = {"pred": pred, "base": fold.base}
            pair = (jnp.stack([_to_groups(s, fixed, codes, num_groups) for s in pair_matrices(pred, human)])
                    if kendall else jnp.zeros((0, num_groups, num_groups), jnp.float32))

            def values(s, c):
                if kendall and (s, c) == ("pred", "kendall"):  # a group's own pairs: the diagonal
                    return tau_from_sums(*(jnp.diagonal(q) for q in pair))
                return per_group(c, src[s], human, codes, weights=fixed, num_groups=num_groups)

            doc = jnp.stack([values(s, c) for s, c in cols]) if cols else jnp.zeros((0, num_groups), jnp.float32)
            rank = (_rank_matrix(pred, fixed, codes, num_groups)[None] if spearman
                    else jnp.zeros((0, m, num_groups), jnp.float32))
            part = []
            for s, metric in layout:
                if metric == "pearson":
                    part.append(pearson_sums(src[s], human, fixed, codes, num_groups))
                elif metric == "mse":
                    part.append(sq_error_sums(src[s], human, fixed, codes, num_groups))
                else:
                    part.append(kl_sums(fold.probs, fold.hrel, fixed, codes, num_groups))
            sums = jnp.concatenate(part) if part else jnp.zeros((0, num_groups), jnp.float32)
            return FoldPrepared(doc=doc, pairs=pair, ranks=rank, sums=sums)

        return over_folds(one_fold, arrays)

    prep.__name__ = "fold_prepare_" + "_".join(names)
    return prep


@functools.lru_cache(maxsize=64)
def shared_prepare(names: tuple[str, ...], num_groups: int, resampled: bool = True):
    """`prep(arrays: FoldArrays) -> ranks [F, R, M, G]` (`FoldPrepared.shared`): the
    `_rank_matrix` of the human scores and, for ``delta_spearman``, of the baseline (R = 2; 1
    without the delta; 0 without a pooled Spearman read from rank matrices). Shared by every
    method of a batch: it reads no field with a method axis."""
    def prep(arrays: FoldArrays):
        m = arrays.index.shape[1]
        spearman, base_too = _pooled_spearman(names, m, num_groups) if resampled else (False, False)

        def one_fold(real, base, human, ok, codes):
            fixed = real * ok
            vs = ([human] if spearman else []) + ([base] if base_too else [])
            return (jnp.stack([_rank_matrix(v, fixed, codes, num_groups) for v in vs]) if vs
                    else jnp.zeros((0, m, num_groups), jnp.float32))

        return over_folds(one_fold, arrays.pad, arrays.base, arrays.human, arrays.ok, arrays.codes)

    prep.__name__ = "shared_prepare_" + "_".join(names)
    return prep


def _group_mean(values, c):
    """Mean of the defined group values `[G]`, group g counted c_g times (NaN: none defined)."""
    gw = jnp.where(jnp.isnan(values), 0.0, c)
    total = jnp.sum(gw)
    return jnp.where(total > 0, jnp.sum(gw * jnp.nan_to_num(values)) / jnp.where(total > 0, total, 1.0), jnp.nan)


@functools.lru_cache(maxsize=64)
def _fold_mean_core(names: tuple[str, ...]):
    """`stat(arrays: FoldArrays, prepared: FoldPrepared, w) -> [S]` given the prepared arrays
    (``prepared.shared`` included)."""
    cols = {c: i for i, c in enumerate(doc_columns(names))}

    def stat(arrays: FoldArrays, prepared: FoldPrepared, w):
        layout = _sum_layout(names, arrays.index.shape[1], arrays.rep.shape[1]) if prepared.sums.shape[1] else {}

        def per_fold(fold: FoldArrays, prep: FoldPrepared):
            pred, base, human, sums = fold.pred, fold.base, fold.human, prep.sums
            rows = fold.pad if w is None else w[fold.index] * fold.pad  # [M] multiplicity of each test row
            c = jnp.ones(fold.rep.shape, jnp.float32) if w is None else w[fold.rep]  # [G] each group's
            ww = rows * fold.ok
            # Mid-ranks under this resample: pred, human, base (`_rank_matrix`).
            rk = [r @ c for r in prep.ranks] + [r @ c for r in prep.shared]  # empty: sort-based ranks

            memo = {}

            def pooled(metric, x):  # each (metric, prediction) once: a delta reuses the metric
                key = (metric, x is pred)
                src = "pred" if x is pred else "base"
                if key not in memo:
                    if (src, metric) in layout:
                        part = sums[layout[src, metric]]
                        memo[key] = pearson_from_sums(part, c) if metric == "pearson" else mean_from_sums(part, c)
                    elif metric == "spearman" and rk:
                        memo[key] = midrank_pearson(rk[0] if x is pred else rk[2], rk[1], ww)
                    else:
                        memo[key] = get_metric(metric)(x, human, weights=ww)
                return memo[key]

            out = []
            for name in names:
                if name == "validity":
                    out.append(jnp.sum(rows * fold.valid) / jnp.sum(rows))
                elif name == "sdd" and ("pred", "sdd") in layout:
                    out.append(mean_from_sums(sums[layout["pred", "sdd"]], c))
                elif name == "sdd":
                    out.append(sdd_from_logprobs(fold.probs, fold.hrel, 0, weights=ww))
                elif name == "kendall":
                    if prep.pairs.shape[0]:  # group pair sums (`_kendall_by_group`)
                        out.append(tau_from_sums(*(c @ (p @ c) for p in prep.pairs)))
                    else:  # as many groups as rows: the row pair matrices under row weights
                        out.append(tau_from_sums(*(ww @ (p @ ww) for p in pair_matrices(pred, human))))
                elif name.endswith("_doc"):
                    metric = name[: -len("_doc")]
                    if metric.startswith("delta_"):
                        metric = metric[len("delta_"):]
                        out.append(_group_mean(prep.doc[cols["pred", metric]], c)
                                   - _group_mean(prep.doc[cols["base", metric]], c))
                    else:
                        out.append(_group_mean(prep.doc[cols["pred", metric]], c))
                elif name.startswith("delta_"):
                    metric = name[len("delta_"):]
                    out.append(pooled(metric, pred) - pooled(metric, base))
                else:
                    out.append(pooled(name, pred))
            return jnp.stack(out)

        per = over_folds(per_fold, arrays, prepared)  # [F, S]
        return jnp.mean(per, axis=0)

    stat.__name__ = "cell_stat_" + "_".join(names)
    return stat


@functools.lru_cache(maxsize=64)
def fold_mean_stat(names: tuple[str, ...], num_groups: int):
    """`stat(arrays: FoldArrays, w) -> [S]`: every statistic of `names`, averaged over folds.

    Names are metric names (`get_metric`), ``<metric>_doc`` (per-document mean, as
    `jaxjudge.metrics.grouped`), ``validity``, ``sdd`` and ``delta_<metric>[_doc]`` (the
    prediction's metric minus the baseline's, on the same weights).

    The inputs are `fold_arrays`' layout (one method: ``pred`` `[F, M]`) and the row weights
    `w` `[N]` (a resample of whole groups of its codes: equal within a group; None for the
    original rows): fold f's slot s weighs `w[index[f, s]]`. This form prepares per call;
    `methods_stat` takes the prepared arrays, so a bootstrap prepares once for all its
    resamples.
    """
    prep, shared, core = fold_prepare(names, num_groups), shared_prepare(names, num_groups), _fold_mean_core(names)

    def stat(arrays: FoldArrays, w):
        return core(arrays, dataclasses.replace(prep(arrays), shared=shared(arrays)), w)

    stat.__name__ = "cell_stat_" + "_".join(names)
    return stat


@functools.lru_cache(maxsize=64)
def methods_prepare(names: tuple[str, ...], num_groups: int, probs_per_method: bool, resampled: bool = True):
    """`fold_prepare` for several methods and `shared_prepare` once, jitted:
    `(arrays: FoldArrays) -> FoldPrepared` (doc, pairs, ranks and sums with a leading method
    axis `[M, ...]`, ``shared`` without)."""
    prep, shared = fold_prepare(names, num_groups, resampled), shared_prepare(names, num_groups, resampled)
    per_method = jax.vmap(prep, in_axes=(FoldArrays.method_axes(probs_per_method),))
    return jax.jit(lambda arrays: dataclasses.replace(per_method(arrays), shared=shared(arrays)))


@functools.lru_cache(maxsize=64)
def methods_stat(names: tuple[str, ...], num_groups: int, probs_per_method: bool):
    """`fold_mean_stat` for several methods on the same resample:
    `stat(arrays: FoldArrays, prepared: FoldPrepared, w) -> [M, S]` (`methods_prepare` gives
    ``prepared``).

    ``arrays.pred`` carries a leading method axis `[M, ...]` (``probs`` too when
    `probs_per_method`; ``prepared``'s doc, pairs, ranks and sums always); everything else
    (human, base, the layout, the shared ranks, the weights) is shared, so the work that does
    not depend on the method (the ranks of the human scores and of the shared base under each
    resample) is done once per resample, not once per method.
    """
    del num_groups  # in the prepared arrays' shapes; kept in the signature for the cache key
    core = _fold_mean_core(names)

    def stat(arrays: FoldArrays, prepared: FoldPrepared, w):
        def per_method(pred, probs, prep):
            return core(dataclasses.replace(arrays, pred=pred, probs=probs), prep, w)

        axes = (0, 0 if probs_per_method else None, FoldPrepared.method_axes())
        return jax.vmap(per_method, in_axes=axes)(arrays.pred, arrays.probs, prepared)

    stat.__name__ = "methods_stat_" + "_".join(names)
    return stat


@functools.lru_cache(maxsize=64)
def methods_point(names: tuple[str, ...], num_groups: int, probs_per_method: bool):
    """`methods_stat` on the original rows (unit weights), jitted: the point estimates `[M, S]`."""
    stat = methods_stat(names, num_groups, probs_per_method)
    prep = methods_prepare(names, num_groups, probs_per_method, resampled=False)
    return jax.jit(lambda arrays: stat(arrays, prep(arrays), None))
