"""A method's metrics on the reported (test) side of a cell, with grouped bootstrap intervals.

The bootstrap describes the reported side only: it resamples whole groups among those with a
test row in some fold (a fixed split: the test groups; k-fold: every group, each fold's test
metric recomputed on the resampled groups with the folds' hyper-parameters held as chosen), so
an interval is conditional on the selection. Deltas from the vanilla judge use the same
resamples (paired). Undefined resamples are counted (``n_boot_nan``, ``nan_share``); above
`jaxjudge.metrics.intervals.NAN_SHARE_MAX` of them, or with fewer than ``min_ci_groups``
reported groups, no interval is given and ``reason`` says why. Per-document means state how
many test documents had a defined metric (``docs_defined`` of ``docs``, fewest over folds).
Methods compared in one cell and reading average their per-document metrics over the same
documents: those where every one of them is defined (`common_docs`), so that two methods are
never compared on different documents.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import warnings
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from jaxjudge import metrics as M
from jaxjudge.metrics.fold_stat import (
    FoldArrays, FoldPrepared, doc_columns, fold_arrays, methods_point, methods_prepare, methods_stat, needs_signs,
)
from jaxjudge.metrics.intervals import interval_summary
from jaxjudge.metrics.multiplicity import bootstrap_p_value, interval_p_value
from jaxjudge.report.cell_inputs import MethodOptions
from jaxjudge.select import Splits

__all__ = [
    "common_docs", "docs_defined", "resample_key", "score_stats", "score_stats_batch", "stat_names", "stats_context",
    "test_side_intervals",
]

_GROUPABLE = ("pearson", "spearman", "kendall", "mse")


def stat_names(options: MethodOptions, has_probs: bool, has_delta: bool, subset: Sequence[str]) -> tuple[str, ...]:
    names = []
    for m in subset:
        if m == "sdd" and not has_probs:
            continue
        names.append(m)
        if options.per_group and m in _GROUPABLE:
            names.append(f"{m}_doc")
    if has_delta:
        sel = options.select_metric if options.select_metric in _GROUPABLE else "spearman"
        names.append(f"delta_{sel}_doc" if options.select_per_group else f"delta_{sel}")
    return tuple(names)


def resample_key(codes: M.GroupCodes, options: MethodOptions) -> str:
    """What fixes a cell's bootstrap resamples: its reported groups' codes, the seed and the
    number of resamples. Two cells with the same key were resampled identically, so their
    replicates pair (resample b of one with resample b of the other)."""
    h = hashlib.sha256(np.asarray(codes.codes, np.int64).tobytes())
    h.update(f"|{codes.num_groups}|{options.seed}|{options.n_boot}".encode())
    return h.hexdigest()


def docs_defined(doc_fg: np.ndarray, docs_in_fold: Sequence[int], usable: Sequence[bool]) -> dict[str, int]:
    """How many test documents have a defined within-document metric (fewest over folds).

    Args:
      doc_fg: `[F, G]` a method's per-document values of one metric in each fold (NaN where
        undefined or not a test document of the fold; `jaxjudge.metrics.fold_stat.fold_prepare`).
      docs_in_fold: `[F]` test documents of each fold.
      usable: `[F]` whether the fold has a test row with a finite prediction (others are skipped).
    """
    best = None
    for vals, n_docs, use in zip(doc_fg, docs_in_fold, usable):
        if not use:
            continue
        cand = {"docs_defined": int(np.isfinite(vals).sum()), "docs": int(n_docs)}
        if best is None or cand["docs_defined"] - cand["docs"] < best["docs_defined"] - best["docs"]:
            best = cand
    return best or {"docs_defined": 0, "docs": 0}


def stats_context(human, groups, test, k, lo, valid, labels=None) -> dict[str, Any]:
    """What `score_stats` needs of a cell: human scores on the scale, groups, test masks."""
    test = np.asarray(test, bool)
    f, n = test.shape
    report_rows = np.flatnonzero(test.any(0))
    if report_rows.size == 0:
        raise ValueError(f"no test example in any fold for {labels or 'this cell'}")
    groups = np.asarray(groups)
    return dict(
        n=n, f=f, k=k, human=human, hrel=np.clip(human - lo, 0, k - 1),
        test=test.astype(np.float32), codes=M.encode_groups(groups), valid=np.asarray(valid, np.float32),
        report_rows=report_rows, report_codes=M.encode_groups(groups[report_rows]),
    )



def test_side_intervals(
    pred: np.ndarray,
    human: np.ndarray,
    groups: np.ndarray,
    splits: Splits,
    options: MethodOptions,
    *,
    base: np.ndarray | None = None,
) -> tuple[dict[str, dict], dict[str, dict]]:
    """The report's metrics and intervals for predictions already made, as `evaluate_cell`
    computes them for each method (the same code path).

    Args:
      pred: `[F, N]` (or `[N]`, shared by all folds) predictions, NaN where undefined.
      human: `[N]` human scores (on the prediction's scale).
      groups: `[N]` group ids.
      splits: dev/test masks `[F, N]`; only the test side enters.
      options: metrics, per_group, n_boot, alpha, seed, min_ci_groups (SDD is not computed).
      base: `[F, N]` or `[N]` predictions of a baseline for the paired difference
        ``delta_<select_metric>``, or None.

    Returns:
      ``(metrics, deltas)``: name -> ``{estimate, low, high, n_boot_nan, nan_share, reason?}``.
    """
    test = np.asarray(splits.test, bool)
    f, n = test.shape
    pred = np.broadcast_to(np.asarray(pred, np.float64), (f, n))
    base = None if base is None else np.broadcast_to(np.asarray(base, np.float64), (f, n))
    human = np.asarray(human, np.float64)
    ok = np.isfinite(pred).all(0).astype(np.float32)
    ctx = stats_context(human, groups, test, 1, float(np.min(human)), np.ones(n))
    opts = dataclasses.replace(options, metrics=tuple(m for m in options.metrics if m not in ("sdd",)))
    return score_stats(pred, base, None, ok, ctx, opts)


def score_stats(
    pred_fn: np.ndarray,
    base_fn: np.ndarray | None,
    probs_fnk: np.ndarray | None,
    ok: np.ndarray,
    ctx: dict[str, Any],
    options: MethodOptions,
    replicates: list[dict[str, np.ndarray]] | None = None,
    keep: Sequence[str] = (),
) -> tuple[dict[str, dict], dict[str, dict]]:
    """(metrics, deltas): name -> {estimate, low, high, ...} for one method read one way.

    The bootstrap describes the reported side only: it resamples whole groups among those with
    a test row in some fold (a fixed split: the test groups; k-fold: every group, each fold's
    test metric recomputed on the resampled groups with the folds' hyper-parameters held as
    chosen). Deltas use the same resamples as the metric (paired).
    """
    probs = None if probs_fnk is None else probs_fnk[None]
    return score_stats_batch(pred_fn[None], base_fn, probs, ok, ctx, options, [base_fn is not None],
                             replicates=replicates, keep=keep)[0]


def common_docs(preds_mfn: np.ndarray, probs_mfnk: np.ndarray | None, ok: np.ndarray, ctx: dict[str, Any],
                options: MethodOptions) -> dict[str, np.ndarray] | None:
    """The documents every one of M methods is defined on, per metric.

    Args:
      preds_mfn, probs_mfnk, ok, ctx, options: as `score_stats_batch`.

    Returns:
      ``metric -> [F, G]`` bool over the reported groups (``ctx["report_codes"]``): whether
      the group's own ``metric`` (``<metric>_doc``) is defined for every method in fold f;
      None when ``options`` has no per-document metric.
    """
    names = tuple(n for n in stat_names(options, True, False, options.metrics) if n.endswith("_doc"))
    if not names:
        return None
    layout = _layout(preds_mfn, None, probs_mfnk, ok, ctx)
    prep = methods_prepare(names, ctx["report_codes"].num_groups, probs_mfnk is not None, resampled=False)
    doc = np.asarray(prep(layout).doc)  # [M, F, D, G]
    return {m: np.isfinite(doc[:, :, i]).all(0) for i, (src, m) in enumerate(doc_columns(names)) if src == "pred"}


def _keep_common(prepared: FoldPrepared, names: tuple[str, ...], common: dict[str, np.ndarray] | None
                 ) -> FoldPrepared:
    """``prepared`` with each ``_doc`` column's per-group values outside ``common`` set to NaN
    (left out of the per-document mean, in the estimate and in every resample)."""
    cols = doc_columns(names)
    if common is None or not cols:
        return prepared
    doc = np.asarray(prepared.doc)  # [M, F, D, G]
    keep = np.stack([common[metric] for _, metric in cols], axis=1)  # [F, D, G]
    return dataclasses.replace(prepared, doc=np.where(keep[None], doc, np.nan).astype(doc.dtype))


@functools.lru_cache(maxsize=64)
def _point_stat(names: tuple[str, ...], num_groups: int, has_probs: bool):
    """`methods_point` from arrays already prepared: `(arrays, prepared) -> [M, S]`."""
    stat = methods_stat(names, num_groups, has_probs)
    return jax.jit(lambda arrays, prepared: stat(arrays, prepared, None))


def _doc_values(names: tuple[str, ...], doc: Any) -> dict[str, np.ndarray]:
    """``<metric>_doc`` -> `[M, F, G]` per-document values, from a prepared ``doc`` array."""
    doc = np.asarray(doc)
    return {f"{m}_doc": doc[:, :, i] for i, (src, m) in enumerate(doc_columns(names)) if src == "pred"}


def _layout(preds_mfn: np.ndarray, base_fn: np.ndarray | None, probs_mfnk: np.ndarray | None, ok: np.ndarray,
            ctx: dict[str, Any]) -> FoldArrays:
    """`jaxjudge.metrics.fold_stat.fold_arrays` of the reported rows of M methods (the first
    method stands in for a missing base)."""
    rows = ctx["report_rows"]
    n, f, k = rows.size, ctx["f"], ctx["k"]
    pred_r = preds_mfn[:, :, rows]  # [M, F, n]
    base_r = pred_r[0] if base_fn is None else base_fn[:, rows]  # [F, n]
    return fold_arrays(
        np.transpose(np.nan_to_num(pred_r), (0, 2, 1)),  # [M, n, F]; NaN rows (parse failures) carry weight 0
        base_r.T,
        ctx["human"][rows],
        ctx["hrel"][rows],
        np.zeros((n, f, k), np.float32) if probs_mfnk is None else np.transpose(probs_mfnk[:, :, rows], (0, 2, 1, 3)),
        ctx["test"][:, rows].T,
        ok[rows],
        ctx["valid"][rows],
        ctx["report_codes"].codes,
    )


_KENDALL_BUDGET = 1 << 26
"""Most Kendall pair-matrix entries (methods x folds x M x M) one batched call holds."""


@dataclasses.dataclass(frozen=True)
class _Bootstrapped:
    """The bootstrapped statistics of m methods (`_ci_chunk`), or of one (`method`: no m axis).

    Attributes:
      estimates: `[m, S]` point estimates.
      replicates: `[B, m, S]` bootstrap replicates.
      jackknife: `[G, m, S]` leave-one-group-out values (``ci_method == "bca"`` only), or None.
    """

    estimates: np.ndarray
    replicates: np.ndarray
    jackknife: np.ndarray | None

    def method(self, j: int) -> _Bootstrapped:
        """Method ``j``'s statistics: estimates `[S]`, replicates `[B, S]`, jackknife `[G, S]`."""
        jack = None if self.jackknife is None else self.jackknife[:, j]
        return _Bootstrapped(self.estimates[j], self.replicates[:, j], jack)


def _ci_chunk(names: tuple[str, ...], arrays: FoldArrays, num_groups: int, codes: np.ndarray, has_probs: bool,
              common: dict[str, np.ndarray] | None, options: MethodOptions
              ) -> tuple[_Bootstrapped, dict[str, np.ndarray]]:
    """The bootstrapped statistics of one chunk of methods.

    Args:
      names: the statistics with an interval (`stat_names`).
      arrays: `_layout` of the chunk's methods.
      num_groups, codes: the reported groups (the codes the bootstrap resamples).
      has_probs, common, options: as `score_stats_batch`.

    Returns:
      ``(statistics, docs)``: the chunk's `_Bootstrapped` (the jackknife only for
      ``options.ci_method == "bca"``) and its per-document values (`_doc_values`).
    """
    stat = methods_stat(names, num_groups, has_probs)
    # What no resample changes (per-document values, group pair sums, rank matrices): once.
    prepared = _keep_common(methods_prepare(names, num_groups, has_probs)(arrays), names, common)
    consts = (arrays, prepared)
    jack = None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        e, r = M.bootstrap_distribution(stat, (), codes, n_boot=options.n_boot, seed=options.seed, consts=consts)
        if options.ci_method == "bca":
            jack = np.asarray(M.jackknife_distribution(stat, (), codes, consts=consts))
    return _Bootstrapped(np.asarray(e), np.asarray(r), jack), _doc_values(names, prepared.doc)


def _point_chunk(names: tuple[str, ...], arrays: FoldArrays, num_groups: int, has_probs: bool,
                 common: dict[str, np.ndarray] | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The point-only statistics of one chunk of methods: ``(estimates [m, S], docs)``.

    Args: as `_ci_chunk` (the statistics without an interval in ``names``).
    """
    has_doc = any(name.endswith("_doc") for name in names)
    if common is not None and has_doc:
        prepared = _keep_common(methods_prepare(names, num_groups, has_probs, resampled=False)(arrays), names,
                                common)
        est = np.asarray(_point_stat(names, num_groups, has_probs)(arrays, prepared))
    else:
        est = np.asarray(methods_point(names, num_groups, has_probs)(arrays))
    if not has_doc:
        return est, {}
    if common is None:
        prepared = methods_prepare(names, num_groups, has_probs, resampled=False)(arrays)
    return est, _doc_values(names, prepared.doc)


def _method_stats(ci: _Bootstrapped | None, point: np.ndarray | None, docs: dict[str, np.ndarray],
                  ci_names: tuple[str, ...], point_names: tuple[str, ...], options: MethodOptions,
                  num_groups: int, docs_in_fold: Sequence[int], usable: Sequence[bool]) -> dict[str, dict]:
    """One method's summaries, statistic name -> ``{estimate, low, high, ...}``.

    Args:
      ci: the method's statistics of ``ci_names`` (`_Bootstrapped.method`), or None when there
        are none.
      point: `[S']` estimates of ``point_names``, or None when there are none.
      docs: ``<metric>_doc`` -> `[F, G]` the method's per-document values.
      ci_names, point_names, options: as in `score_stats_batch`.
      num_groups: reported groups.
      docs_in_fold, usable: as `docs_defined`.
    """
    out: dict[str, dict] = {}
    for i, name in enumerate(ci_names):
        est, reps = ci.estimates[i], ci.replicates[:, i]
        out[name] = interval_summary(est, reps, options.alpha, num_groups=num_groups,
                                     min_groups=options.min_ci_groups,
                                     jack=None if ci.jackknife is None else ci.jackknife[:, i],
                                     method=options.ci_method)
        if name.startswith("delta_") and out[name].get("low") is not None:
            # Two-sided (Wald, bootstrap SE) p-value of the paired difference, for Holm.
            out[name]["p"] = bootstrap_p_value(est, reps)
            if options.ci_method in ("percentile", "expanded"):  # the p-value of the interval itself
                out[name]["p_interval"] = interval_p_value(est, reps, method=options.ci_method, num_groups=num_groups)
    for i, name in enumerate(point_names):
        out[name] = interval_summary(point[i], None, options.alpha)
    for name, iv in out.items():
        if name.endswith("_doc") and not name.startswith("delta_"):
            # Also where no document is left to average over: the count says so.
            iv.update(docs_defined(docs[name], docs_in_fold, usable))
    return out


def _metrics_and_deltas(out: dict[str, dict], has_probs: bool, with_delta: bool,
                        metric_names: Sequence[str]) -> tuple[dict[str, dict], dict[str, dict]]:
    """A method's summaries split as `score_stats` returns them, ``(metrics, deltas)``.

    ``delta_<metric>`` goes to ``deltas[<metric>]`` when ``with_delta`` (else it is dropped),
    ``sdd`` is dropped without scored probabilities, and every name of ``metric_names`` is in
    ``metrics`` (``{estimate: None, low: None, high: None}`` where this reading leaves it
    undefined).
    """
    if not has_probs:
        out = {k_: v for k_, v in out.items() if k_ != "sdd"}
    deltas = {k_[len("delta_"):]: v for k_, v in out.items() if k_.startswith("delta_") and with_delta}
    metrics = {k_: v for k_, v in out.items() if not k_.startswith("delta_")}
    for m in metric_names:  # undefined for this reading (e.g. SDD of a greedy score)
        metrics.setdefault(m, {"estimate": None, "low": None, "high": None})
    return metrics, deltas


def score_stats_batch(
    preds_mfn: np.ndarray,
    base_fn: np.ndarray | None,
    probs_mfnk: np.ndarray | None,
    ok: np.ndarray,
    ctx: dict[str, Any],
    options: MethodOptions,
    with_delta: Sequence[bool],
    common: dict[str, np.ndarray] | None = None,
    replicates: list[dict[str, np.ndarray]] | None = None,
    keep: Sequence[str] = (),
) -> list[tuple[dict[str, dict], dict[str, dict]]]:
    """`score_stats` of several methods read the same way, on the same bootstrap resamples.

    Every method is resampled with the same seed, so its numbers equal those of its own
    `score_stats` call; scoring them together shares the work that does not depend on the
    method (the human scores' and the base's ranks under each resample).

    Args:
      preds_mfn: `[M, F, N]` predictions of M methods.
      base_fn: `[F, N]` the baseline every delta is taken from, or None (no deltas: the
        first method stands in for the base).
      probs_mfnk: `[M, F, N, K]` scored log-probabilities, or None.
      ok, ctx, options: as `score_stats`.
      with_delta: `[M]` whether each method reports its delta from the base.
      common: `common_docs` of the methods compared (``metric -> [F, G]``): the documents the
        per-document metrics average over (``docs_defined`` counts them); None: each method's
        own defined documents.
      replicates: if a list, one dict per method is appended: metric name in ``keep`` -> its
        `[B]` bootstrap replicates (for statistics across cells drawn on the same resamples,
        `jaxjudge.report.ranges`); names without an interval are left out.
      keep: metric names whose replicates go into ``replicates``.
    """
    codes = ctx["report_codes"]
    n_methods = preds_mfn.shape[0]
    has_probs = probs_mfnk is not None
    ci_set = set(options.ci_metrics if options.ci_metrics is not None else options.metrics)
    # One statistic for every reading and method (SDD and the delta always computed, then
    # dropped where undefined): a cell's shape then compiles the bootstrap once, not per method.
    ci_names = stat_names(options, True, True, [m for m in options.metrics if m in ci_set])
    point_names = stat_names(options, True, False, [m for m in options.metrics if m not in ci_set])
    kendall = needs_signs(ci_names + point_names)
    layout = _layout(preds_mfn, base_fn, probs_mfnk, ok, ctx)
    chunks = []  # per chunk of methods: (ci statistics or None, point estimates or None, docs)
    index, pad = layout.index, layout.pad
    docs_in_fold = [np.unique(codes.codes[index[i][pad[i] > 0]]).size for i in range(index.shape[0])]
    usable = [bool(np.any(pad[i] * layout.ok[i] > 0)) for i in range(index.shape[0])]
    step = max(1, _KENDALL_BUDGET // (index.size * index.shape[1])) if kendall else n_methods
    for lo in range(0, n_methods, step):
        arrays = layout.methods(slice(lo, lo + step), has_probs)
        ci, point, chunk_docs = None, None, {}
        if ci_names:
            ci, ci_docs = _ci_chunk(ci_names, arrays, codes.num_groups, codes.codes, has_probs, common, options)
            chunk_docs.update(ci_docs)
        if point_names:
            point, point_docs = _point_chunk(point_names, arrays, codes.num_groups, has_probs, common)
            chunk_docs.update(point_docs)
        chunks.append((ci, point, chunk_docs))
    results = []
    for j in range(n_methods):
        c, i_part = divmod(j, step)
        ci, point, docs = chunks[c]
        ci_j = None if ci is None else ci.method(i_part)
        out = _method_stats(ci_j, None if point is None else point[i_part], {k_: v[i_part] for k_, v in docs.items()},
                            ci_names, point_names, options, codes.num_groups, docs_in_fold, usable)
        if replicates is not None:
            replicates.append({name: np.asarray(ci_j.replicates[:, i]) for i, name in enumerate(ci_names)
                               if name in keep})
        results.append(_metrics_and_deltas(out, has_probs, with_delta[j], options.metrics))
    return results
