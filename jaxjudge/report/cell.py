"""Every method of the two papers on one cell's cached arrays: select on dev, score on test.

For each method of `jaxjudge.report.methods.METHODS` the configuration asks for, and each way
of reading a score from the distribution (the expected score at each temperature, the greedy
score, or the parsed greedy generation), `evaluate_cell`:

1. builds the adjusted log-probabilities of every fold, `[F, N, K]`: fixed methods need no
   choice; tuned ones choose their hyper-parameters on each fold's dev examples with
   `jaxjudge.select.grid_search` (one compiled call over grid x folds);
2. reads predictions `[F, N]` and, for the expected score, the scored distribution (for SDD),
   under the temperature convention of `jaxjudge.report.methods`;
3. scores the test side of every fold and averages over folds, with a grouped bootstrap 95%
   interval for each metric and for the difference from the vanilla judge read the same way
   (`jaxjudge.report.cell_stats`);
4. with ``options.nested``, also bootstraps every tuned variant's selection metric with the
   choice redone inside each resample (`jaxjudge.select.nested_bootstrap`, its predictions at
   every grid point from `grid_predictions`), and a fixed row the tuple names (not the
   reference) on the same resamples, its predictions as they are.

Human scores are mapped linearly onto the prompt's range before anything is computed
(`jaxjudge.data.to_prompt_range`); correlations are unchanged by that, MSE and SDD are on the
prompt's scale. Correlations and MSE of the ``generate`` method are computed over the parsed
rows only; its validity is the parse rate. The validity of the other methods is the
extraction's ``valid`` flag (the greedy next token starts a score candidate), which no
adjustment changes.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from collections.abc import Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxjudge import metrics as M
from jaxjudge.data import to_prompt_range
from jaxjudge.debias import adjust_per_fold, expected_score, greedy_score
from jaxjudge.metrics.intervals import interval_summary
from jaxjudge.report.cell_inputs import CellArrays, CellReport, MethodOptions, score_kinds
from jaxjudge.report.cell_stats import common_docs, resample_key, score_stats, score_stats_batch, stats_context
from jaxjudge.report.methods import (METHODS, REFERENCE, CellContext, Kind, Method, MethodKind, Role, Variant,
                                     check_needs, role_of)
from jaxjudge.select import Splits, grid_search, nested_bootstrap

__all__ = ["evaluate_cell", "grid_predictions"]


@functools.lru_cache(maxsize=32)
def _grouped_selector(name: str, codes_bytes: bytes, n: int, num_groups: int):
    # Cached so that repeated grid searches hand grid_search the same metric object and reuse
    # its compilation.
    codes = np.frombuffer(codes_bytes, np.int32).reshape(n)
    return M.grouped_metric(name, codes, num_groups)


def _selector(options: MethodOptions, codes: M.GroupCodes):
    name = options.select_metric
    minimize = name == "mse"
    if options.select_per_group:
        return _grouped_selector(name, codes.codes.astype(np.int32).tobytes(), codes.codes.shape[0], codes.num_groups), minimize
    return name, minimize


def _finite_or_none(a) -> list[float | None]:
    return [None if not math.isfinite(v) else float(v) for v in np.asarray(a)]


def _mean_over_folds(a: np.ndarray) -> list[float | None]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        m = np.nanmean(np.asarray(a, np.float64), axis=-1)
    return [None if not np.isfinite(v) else float(v) for v in np.atleast_1d(m)]


def grid_predictions(cx: CellContext, method: Method, variant: Variant, kind_t: Kind) -> np.ndarray:
    """`[G, F, N]` predictions of a tuned variant at every point of its grid, read one way.

    The same adjustment (``method.adjust`` on ``variant.data(kind_t)``) and reading as the
    report's own rows (the expected score at temperature 1 of the tempered distribution, or the
    greedy score); `jaxjudge.select.nested_bootstrap` chooses among them. A tuned variant's
    adjustment does not depend on the fold, so every fold gets the same `[G, N]`.

    Args:
      cx: the cell's context (`jaxjudge.report.methods.CellContext`).
      method: a ``"tuned"`` method family.
      variant: one of its variants (with ``data`` and ``grid``).
      kind_t: the reading, ``("expected@0.2", 0.2)`` or ``("greedy", None)``.

    Returns:
      float32 `[G, F, N]`.
    """
    if method.kind is not MethodKind.TUNED or variant.grid is None or variant.data is None:
        raise ValueError(f"grid_predictions needs a tuned variant with a grid, got {method.name!r} / {variant.name!r}")
    data = variant.data(kind_t)
    adj = jax.vmap(lambda params: method.adjust(params, data))(variant.grid)  # [G, N, K]
    values = cx.values
    pred = greedy_score(adj, values) if kind_t[1] is None else expected_score(adj, values, 1.0)  # [G, N]
    pred = np.asarray(pred, np.float32)
    return np.broadcast_to(pred[:, None], (pred.shape[0], cx.f, pred.shape[1]))


def _bin_counts(scores: np.ndarray, lo: float, step: float, k: int) -> np.ndarray:
    """`[K]` counts of `scores` rounded to the nearest of the K candidates."""
    return np.bincount(np.clip(np.rint((scores - lo) / step), 0, k - 1).astype(int), minlength=k)


@dataclasses.dataclass(frozen=True)
class _Pending:
    """An emitted row awaiting its metrics (`_Cell.emit`, then `_Cell.score_pending`).

    Attributes:
      row: the row, its ``metrics`` and ``delta`` filled in by `_Cell.score_pending`.
      pred: `[F, N]` its predictions.
      probs: `[F, N, K]` its scored log-probabilities, or None.
      with_delta: whether it reports its delta from the vanilla judge read the same way.
      baseline: its matched baseline's row name, or None.
    """

    row: dict[str, Any]
    pred: np.ndarray
    probs: np.ndarray | None
    with_delta: bool
    baseline: str | None


class _Cell:
    """One `evaluate_cell` call: the cell's context, its rows and figure extras."""

    def __init__(self, arrays: CellArrays, splits: Splits, options: MethodOptions, labels: dict[str, Any],
                 predictions: dict | None):
        scale = arrays.scale
        k, n = scale.size, arrays.n
        dev, test = np.asarray(splits.dev, bool), np.asarray(splits.test, bool)
        if dev.ndim != 2 or dev.shape[1] != n or test.shape != dev.shape:
            raise ValueError(f"splits must be [F, N] with N={n}, got dev {dev.shape}, test {test.shape}")
        human = to_prompt_range(arrays.human, scale.lo, scale.hi, src=arrays.human_range)
        self.codes = M.encode_groups(arrays.groups)
        valid = np.ones(n, bool) if arrays.valid is None else arrays.valid
        self.ctx = stats_context(human, arrays.groups, test, k, scale.lo, valid, labels)
        self.selector, self.minimize = _selector(options, self.codes)
        self.options, self.labels, self.predictions = options, labels, {} if predictions is None else predictions
        self.rows: list[dict[str, Any]] = []
        # Emitted rows awaiting their metrics, by score kind.
        self.pending: dict[str, list[_Pending]] = {}
        self.aux: dict[str, Any] = {
            **labels, "scale": scale.name, "values": scale.values.tolist(),
            # Human scores on the prompt's range, rounded to the nearest candidate (for figures).
            "human_counts": _bin_counts(human, scale.lo, scale.step, k).tolist(),
            "priors": {}, "grids": {}, "distributions": {},
        }
        self.cx = CellContext(arrays, options, human, dev, test, self.aux)
        n_truncated = None if arrays.truncated is None else int(np.asarray(arrays.truncated, bool).sum())
        # Where prompts were cut, how many source tokens in all (None: the store predates the count).
        cut = {} if not n_truncated else {
            "n_tokens_cut": None if arrays.truncated_tokens is None else int(np.asarray(arrays.truncated_tokens).sum())}
        self.scale_name = scale.name
        self.counts = {"n": n, "n_folds": self.cx.f, "n_test": int(test.any(0).sum()), "n_truncated": n_truncated, **cut}
        self.kinds = score_kinds(options)
        self.base_pred = {kt[0]: self.read(self.cx.vanilla(kt), kt)[0] for kt in self.kinds}
        self.dist_kind = "greedy" if options.greedy else self.kinds[0][0]
        self.ones = np.ones(n, np.float32)
        # Bootstrap replicates of each row's selection metric, by (method, reading): every row of
        # the cell is resampled the same way (`resample_key`), so `jaxjudge.report.ranges` can
        # combine them across rows and across cells drawn on the same groups.
        self.sel_name = f"{options.select_metric}_doc" if options.select_per_group else options.select_metric
        self.replicates: dict[tuple[str, str], np.ndarray] = {}
        if options.nested and options.ci_method == "bca":
            raise ValueError("MethodOptions.nested: ci_method 'bca' needs a jackknife the nested bootstrap does not "
                             "compute; use 'expanded' or 'percentile'")
        # With options.nested, per reading: the tuned rows and their predictions at every grid point;
        # then (row name, reading) -> the nested replicates (the vanilla judge's among them).
        self.nested_pending: dict[str, list[tuple[dict[str, Any], np.ndarray, str | None]]] = {}
        self.nested_replicates: dict[tuple[str, str], np.ndarray] = {}

    def base_row(self, method: str, kind: str) -> dict[str, Any]:
        return {**self.labels, "scale": self.scale_name, "method": method, "score": kind, **self.counts}

    def read(self, adj_fnk, kind_t: Kind):
        """Predictions `[F, N]` and, for an expected score on a unit-step scale, the scored
        log-probabilities `[F, N, K]` (SDD)."""
        kind, t = kind_t
        values = self.cx.values
        if t is None:
            return np.asarray(greedy_score(adj_fnk, values)), None
        pred = np.asarray(expected_score(adj_fnk, values, 1.0))
        # SDD compares with integer human-score neighbours: defined for unit-step scales only.
        # (log-probabilities: SDD is computed from them, with no floor)
        probs = np.asarray(jax.nn.log_softmax(adj_fnk, axis=-1)) if self.cx.arrays.scale.step == 1 else None
        return pred, probs

    def selection_per_fold(self, pred_fn: np.ndarray, mask: np.ndarray) -> list[float | None]:
        """The selection metric of each fold on `mask`'s rows (None where undefined)."""
        options, human = self.options, self.cx.human
        out = []
        for i in range(self.cx.f):
            sel = mask[i] & np.isfinite(pred_fn[i])
            x = np.nan_to_num(pred_fn[i])
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    if options.select_per_group:
                        v = M.grouped(options.select_metric, x, human, self.codes.codes, sel,
                                      num_groups=self.codes.num_groups)
                    else:
                        v = M.get_metric(options.select_metric)(x, human, sel)
                v = float(v)
            except ValueError:  # too few rows, or no document with a defined metric
                v = float("nan")
            out.append(v if math.isfinite(v) else None)
        return out

    def emit(self, method: str, adj_fnk, kind_t: Kind, hparams=None, dev_metric=None, test_metric=None,
             baseline: str | None = None) -> None:
        """Score one variant read one way and append its row (``baseline``: its matched
        baseline's row name, see `jaxjudge.report.methods`)."""
        kind = kind_t[0]
        f, n, k = self.cx.f, self.cx.n, self.cx.k
        pred, probs = self.read(adj_fnk, kind_t)
        self.predictions[(method, kind)] = pred
        row = self.base_row(method, kind)
        row.update(
            metrics=None, delta=None, hparams=hparams or [{} for _ in range(f)],  # metrics: `score_pending`
            dev_metric=dev_metric if dev_metric is not None else self.selection_per_fold(pred, self.cx.dev),
            test_metric=test_metric if test_metric is not None else self.selection_per_fold(pred, self.cx.test),
        )
        self.rows.append(row)
        with_delta = role_of(method) is not Role.REFERENCE
        self.pending.setdefault(kind, []).append(_Pending(row, pred, probs, with_delta, baseline))
        # Score distribution of this method: argmax over all examples, mean over folds, drawn
        # with the hyper-parameters chosen for the greedy reading (what a judge would output).
        if kind == self.dist_kind:
            top = np.asarray(jnp.argmax(adj_fnk, -1))  # [F, N]
            frac = np.mean([np.bincount(top[i], minlength=k) / n for i in range(f)], axis=0)
            self.aux["distributions"][method] = {
                "argmax_fraction": frac.tolist(),
                "mean_probs": np.asarray(jnp.mean(jax.nn.softmax(adj_fnk, -1), axis=(0, 1))).tolist(),
            }

    def score_pending(self) -> None:
        """Fill the metrics of every emitted row: the rows read the same way are scored in one
        batched call on the same resamples (`score_stats_batch`), their deltas from the vanilla
        judge read that way. A row whose matched baseline was run (read the same way) also gets
        ``matched_baseline`` (its name) and ``delta_matched``: the paired difference from it,
        on the same resamples (the bootstrap's seed and groups are those of every other call)."""
        for kind, items in self.pending.items():
            preds = np.stack([item.pred for item in items])
            probs = None if items[0].probs is None else np.stack([item.probs for item in items])
            # Per-document metrics over the documents where every method read this way is defined.
            common = common_docs(preds, probs, self.ones, self.ctx, self.options)
            reps: list[dict[str, np.ndarray]] = []
            scored = score_stats_batch(preds, self.base_pred[kind], probs, self.ones, self.ctx, self.options,
                                       [item.with_delta for item in items], common, replicates=reps,
                                       keep=(self.sel_name,))
            for item, (mets, deltas), rep in zip(items, scored, reps):
                item.row["metrics"], item.row["delta"] = mets, deltas or None
                if self.sel_name in rep:
                    self.replicates[(item.row["method"], kind)] = rep[self.sel_name]
            by_name = {item.row["method"]: item for item in items}
            for baseline in dict.fromkeys(item.baseline for item in items if item.baseline in by_name):
                matched = [item for item in items if item.baseline == baseline]
                scored = score_stats_batch(np.stack([item.pred for item in matched]), by_name[baseline].pred, None,
                                           self.ones, self.ctx, self.options, [True] * len(matched), common)
                for item, (_, deltas) in zip(matched, scored):
                    item.row["matched_baseline"], item.row["delta_matched"] = baseline, deltas or None
        self.pending = {}

    def tuned(self, method: Method, variant: Variant, kind_t: Kind) -> None:
        """Choose the variant's hyper-parameters on each fold's dev side, then `emit`."""
        kind, t = kind_t
        data, grid, param_names = variant.data(kind_t), variant.grid, method.params(self.options)
        res = grid_search(
            method.adjust, grid, self.cx.human, self.cx.dev, self.cx.test, self.selector, values=self.cx.values,
            temperature=1.0, data=data, score="greedy" if t is None else "expected", minimize=self.minimize,
        )
        chosen = jax.tree.map(np.asarray, res.chosen)
        # Grid values are float32: round so that 0.1 reads 0.1 in the tables.
        hp = [{p: round(float(chosen[p][i]), 6) for p in param_names} for i in range(self.cx.f)]
        adj = adjust_per_fold(res.chosen, data, adjust_fn=method.adjust)
        self.aux["grids"][f"{variant.name}|{kind}"] = {
            "params": {p: [round(v, 6) for v in np.asarray(grid[p]).tolist()] for p in param_names},
            "dev": _mean_over_folds(res.dev), "test": _mean_over_folds(res.test),
        }
        self.emit(variant.name, adj, kind_t, hp, _finite_or_none(res.dev_metric), _finite_or_none(res.test_metric),
                  variant.baseline)
        if self.options.nested_for(variant.name, kind):
            self.nested_pending.setdefault(kind, []).append(
                (self.rows[-1], grid_predictions(self.cx, method, variant, kind_t), variant.baseline))

    def score_nested(self) -> None:
        """With ``options.nested``, give every tuned row the selection metric with the choice redone
        inside each resample: ``nested`` (the variant), ``delta_nested`` (minus the vanilla judge
        read the same way) and, where its matched baseline was run, ``delta_matched_nested``; each
        ``{metric, estimate, low, high, n_boot, n_boot_nan, nan_share, reason?}``, every procedure
        of a reading on the same resamples (`jaxjudge.select.nested_bootstrap`, the report's seed)."""
        options = self.options
        name = f"{options.select_metric}_doc" if options.select_per_group else options.select_metric
        summary = dict(num_groups=self.ctx["report_codes"].num_groups, min_groups=options.min_ci_groups,
                       method=options.ci_method)
        for kind, items in self.nested_pending.items():
            procedures = {"": self.base_pred[kind], **{row["method"]: pred for row, pred, _ in items}}
            reps = nested_bootstrap(procedures, self.cx.human, self.cx.arrays.groups, self.cx.dev, self.cx.test,
                                    options.select_metric, per_group=options.select_per_group,
                                    minimize=self.minimize, n_boot=options.n_boot, seed=options.seed)

            def interval(a, b=None):
                est = a.estimate if b is None else a.estimate - b.estimate
                r = a.replicates if b is None else a.replicates - b.replicates
                return {"metric": name, **interval_summary(est, r, options.alpha, **summary)}

            self.nested_replicates[(REFERENCE, kind)] = reps[""].replicates
            for row, _, baseline in items:
                mine = reps[row["method"]]
                self.nested_replicates[(row["method"], kind)] = mine.replicates
                row["nested"], row["delta_nested"] = interval(mine), interval(mine, reps[""])
                if baseline in reps:
                    row["delta_matched_nested"] = interval(mine, reps[baseline])
        self.nested_pending = {}

    def parsed(self, method: Method) -> None:
        """The row of a parsed-generation method: its validity is the parse rate."""
        f, n, k = self.cx.f, self.cx.n, self.cx.k
        arrays, scale = self.cx.arrays, self.cx.arrays.scale
        generated = method.parsed(arrays)
        gen = np.broadcast_to(generated, (f, n))
        ok = np.isfinite(generated).astype(np.float32)
        self.predictions[(method.name, "generate")] = gen
        reps: list[dict[str, np.ndarray]] = []
        mets, _ = score_stats(gen, None, None, ok, {**self.ctx, "valid": ok}, self.options, replicates=reps,
                              keep=(self.sel_name,))
        if self.sel_name in reps[0]:
            self.replicates[(method.name, "generate")] = reps[0][self.sel_name]
        row = self.base_row(method.name, "generate")
        row.update(metrics=mets, delta=None, hparams=[{} for _ in range(f)],
                   dev_metric=self.selection_per_fold(gen, self.cx.dev),
                   test_metric=self.selection_per_fold(gen, self.cx.test),
                   parse_failures=int((~np.isfinite(generated)).sum()),
                   # Over the reported rows only (those on some fold's test side), as validity.
                   parse_failures_test=int((~np.isfinite(generated[np.asarray(self.cx.test).any(0)])).sum()),
                   n_distinct_parsed=len({float(v) for v in generated[np.isfinite(generated)]}),
                   # The fewest distinct parsed scores on any fold's test side: 1 there leaves
                   # that fold's correlation (and so the mean over folds) undefined.
                   n_distinct_parsed_test=min(
                       len({float(v) for v in generated[t & np.isfinite(generated)]}) for t in self.cx.test))
        self.rows.append(row)
        counts = _bin_counts(generated[np.isfinite(generated)], scale.lo, scale.step, k)
        self.aux["distributions"][method.name] = {"argmax_fraction": (counts / n).tolist(), "mean_probs": None}

    def run(self, method: Method) -> None:
        """Every variant of one method family, read every way."""
        if method.kind is MethodKind.PARSED:
            self.parsed(method)
            return
        for variant in method.variants(self.cx):
            for kt in self.kinds:
                if method.kind is MethodKind.FIXED:
                    self.emit(variant.name, variant.fixed(kt), kt, hparams=variant.hparams)
                    if (self.options.nested is not True and self.options.nested_for(variant.name, kt[0])
                            and role_of(variant.name) is not Role.REFERENCE):  # held fixed in the resamples
                        self.nested_pending.setdefault(kt[0], []).append(
                            (self.rows[-1], self.predictions[(variant.name, kt[0])], variant.baseline))
                else:
                    self.tuned(method, variant, kt)


def evaluate_cell(
    arrays: CellArrays,
    splits: Splits,
    options: MethodOptions,
    labels: Mapping[str, Any] | None = None,
    *,
    predictions: dict | None = None,
) -> CellReport:
    """Run every configured method on one cell.

    Args:
      arrays: the cell's arrays.
      splits: dev/test masks `[F, N]` (see `make_splits`).
      options: methods, grids, metrics, bootstrap settings.
      labels: identifying fields copied into every row (judge, task, aspect, ...).
      predictions: if a dict, filled with ``(method, score kind) -> [F, N]`` predictions of
        every row, NaN where a generation did not parse (`jaxjudge.report.items` and
        `jaxjudge.report.few_labels` build on them).

    Returns:
      `CellReport`. Each row holds the labels and ``scale``, ``method`` (variant name),
      ``score`` (``"expected@0.2"``, ``"greedy"``, ``"generate"``), ``metrics`` (name ->
      ``{"estimate", "low", "high", "n_boot_nan"}``, None where undefined; ``*_doc`` are
      per-document means; ``n_boot_nan`` counts resamples where the metric was undefined, which
      the interval leaves out), ``delta`` (the
      selection metric minus the vanilla judge's, same reading, paired interval),
      ``matched_baseline`` and ``delta_matched`` (only on the rows of a variant whose matched
      baseline was run: its name, and the selection metric minus the baseline's, same reading,
      paired interval), ``hparams`` (the chosen values per fold), ``dev_metric`` / ``test_metric`` (selection
      metric per fold), ``relative`` (relative improvement of the selection metric over the
      vanilla judge and over the greedy generation), ``n``, ``n_folds``, ``n_test``. With
      ``options.nested`` the tuned rows also hold ``nested``, ``delta_nested`` and
      ``delta_matched_nested`` (see `_Cell.score_nested`).
    """
    labels = dict(labels or {})
    cell = _Cell(arrays, splits, options, labels, predictions)
    order = {m: i for i, m in enumerate(options.methods)}
    rank: dict[int, int] = {}  # id(row) -> its family's place in the configured order
    for method in METHODS.values():
        if method.name in options.methods:
            check_needs(method, arrays, labels)
            start = len(cell.rows)
            cell.run(method)
            rank.update((id(row), order[method.name]) for row in cell.rows[start:])
    cell.score_pending()
    cell.score_nested()
    rows = cell.rows

    # Rows in the order the methods were configured (variants of a family together; the sort
    # is stable, so a family's variants keep their own order).
    rows.sort(key=lambda r: rank[id(r)])
    _add_relative(rows, options)
    return CellReport(rows=rows, aux=cell.aux, replicates=cell.replicates, nested=cell.nested_replicates,
                      resample_key=resample_key(cell.ctx["report_codes"], options),
                      num_groups=cell.ctx["report_codes"].num_groups)


def _add_relative(rows: list[dict[str, Any]], options: MethodOptions) -> None:
    """Relative improvement of the selection metric over the vanilla judge read the same way
    and over the parsed greedy generation: ``(m - b) / |b|`` (point estimates; the paired
    interval of the difference from vanilla is in ``delta``)."""
    name = f"{options.select_metric}_doc" if options.select_per_group else options.select_metric

    def est(r):
        return None if r is None else (r["metrics"].get(name) or {}).get("estimate")

    gen = next((r for r in rows if role_of(r["method"]) is Role.GENERATION), None)
    for r in rows:
        van = next((v for v in rows if role_of(v["method"]) is Role.REFERENCE and v["score"] == r["score"]), None)
        rel = {}
        for key, base in (("vs_vanilla", van), ("vs_generate", gen)):
            m, b = est(r), est(base)
            ok = base is not None and base is not r and m is not None and b not in (None, 0.0)
            rel[key] = (m - b) / abs(b) if ok else None
        r["relative"] = {"metric": name, **rel}
