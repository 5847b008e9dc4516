"""Statistics over score ranges, the primary endpoint, and Holm's adjustment of the rest.

The score-range papers ask whether a method is better *on average over ranges* and whether it
is *more stable across ranges*. Both are statistics of several cells (one per range) of the same
items, so their intervals need the cells' bootstrap replicates drawn on the same resamples: the
cells of one (judge, task, aspect) report the same groups with the same seed, so resample b of
the 0-4 cell and resample b of the 1-5 cell are the same draw of groups
(`jaxjudge.report.cell_stats.resample_key` checks it; cells resampled differently get no
interval, with the reason). From each row's replicates of the selection metric, for every
(judge, task, aspect, reading, method):

* ``mean``: the mean of the metric over ranges; ``spread``: its heterogeneity over ranges, the
  standard deviation of the ranges' true values, estimated median-unbiased with a
  profile-likelihood interval that reaches 0 (`jaxjudge.metrics.heterogeneity`; the noise is the
  covariance of the ranges' paired replicates); ``max_min``, the plain max - min of the
  estimates, is kept beside it as a description (no interval: noise alone pushes it up);
* for the vanilla judge, ``range_diffs``: the difference between every pair of ranges (does
  the range matter? each is a secondary comparison);
* against each comparator (the vanilla judge read the same way, the method's matched baseline,
  the calibration baseline with the best dev metric, and any pair the config lists):
  ``mean_diff`` (difference of the means), ``spread_diff`` (difference of the heterogeneities,
  each the moment estimate ``sqrt(max(0, |C x|^2 - tr(C Sigma C)) / (K - 1))`` rather than the
  median-unbiased one ``spread`` prints, with a percentile interval: negative is more stable;
  each replicate's heterogeneity is netted of twice the noise, so that the replicates centre on
  the estimate rather than above it) and ``relative`` (the papers'
  headline figure: the relative improvement of the mean over ranges, a ratio of means
  ``(mean m - mean b) / |mean b|``), each with its interval.

`endpoints` then picks the config's primary endpoint (read at its own level, unadjusted) and
adjusts every other paired comparison of the report (per-range differences from vanilla and from
matched baselines, ``mean_diff`` and ``spread_diff``) together with Holm's procedure: each gets
``p_holm`` beside its ``p`` (Wald, from the bootstrap standard error: `jaxjudge.metrics.multiplicity`); ``relative`` is
descriptive (its test is that of ``mean_diff``) and carries no p-value. Each ``p`` has a
``p_interval`` beside it: the p-value of the printed interval itself (the smallest alpha at which
it excludes 0 on the same resamples, `jaxjudge.metrics.multiplicity.interval_p_value`), the one
printed beside an unadjusted interval; Holm adjusts the Wald ``p``, which a family this large
needs (a percentile p-value cannot go below about 1/B).
"""

from __future__ import annotations

import math
import warnings
from collections import defaultdict
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from jaxjudge.metrics.bootstrap import expanded_levels
from jaxjudge.metrics.heterogeneity import heterogeneity_interval, net_sd, noise_covariance
from jaxjudge.metrics.intervals import NAN_SHARE_MAX, interval_summary
from jaxjudge.metrics.multiplicity import bootstrap_p_value, holm, interval_p_value, margin_p_values
from jaxjudge.report.methods import REFERENCE, Role, role_of

__all__ = ["REFERENCE_ROLE", "all_comparisons", "comparisons", "endpoints", "find_primary", "nested_comparisons",
           "range_statistics", "three_way", "typed_comparisons"]

REFERENCE_ROLE = "vanilla"
"""The ``role`` label of the comparison with the reference judge in a record's ``versus``
(the others: ``"matched"``, ``"calibration"``, ``"listed"``)."""


def _scale_key(name: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in name.split("-"))
    except ValueError:
        return (math.inf,)


def _iv(estimate: float, reps: np.ndarray | None, options: Any, num_groups: int, *, p: bool) -> dict[str, Any]:
    method = "expanded" if options.ci_method == "bca" else options.ci_method  # no jackknife across cells
    out = interval_summary(estimate, reps, options.alpha, num_groups=num_groups, min_groups=options.min_ci_groups,
                           method=method)
    if p and reps is not None and out.get("low") is not None:
        out["p"] = bootstrap_p_value(estimate, reps)
        out["p_interval"] = interval_p_value(estimate, reps, method=method, num_groups=num_groups)
        if getattr(options, "margins", ()):  # a confirmatory plan's registered margins
            out["p_margin"] = margin_p_values(reps, options.margins)
    return out


def _dev_score(rows: Sequence[dict[str, Any]], minimize: bool) -> float:
    """The mean dev metric over ranges and folds (higher is better; NaN where undefined)."""
    vals = [v for r in rows for v in (r.get("dev_metric") or []) if v is not None]
    if not vals:
        return -math.inf
    m = float(np.mean(vals))
    return -m if minimize else m


def _mean(x: np.ndarray) -> np.ndarray:
    return np.mean(x, axis=0)


def _max_min(x: np.ndarray) -> np.ndarray:
    return np.max(x, axis=0) - np.min(x, axis=0)


def _finite(x: Any) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None


def _relative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The relative improvement of the mean over ranges: a ratio of means."""
    return (_mean(a) - _mean(b)) / np.abs(_mean(b))


_DIFFS = (  # (name, statistic of the method's and the comparator's series, has a p-value); spread_diff apart
    ("mean_diff", lambda a, b: _mean(a) - _mean(b), True),
    ("relative", _relative, False),
)


_Series = tuple[np.ndarray, "np.ndarray | None"]  # [S] estimates, [S, B] replicates (None: no interval)


class _Panel:
    """One (judge, task, aspect): its cells over the ranges, rows indexed by (method, reading)."""

    def __init__(self, per_scale: list[tuple[str, Any]], options: Any, metric: str):
        self.scales = [s for s, _ in per_scale]
        self.same = len({rep.resample_key for _, rep in per_scale}) == 1
        self.num_groups = min(rep.num_groups for _, rep in per_scale)
        self.options, self.metric = options, metric
        # (method, reading) -> scale -> (row, replicates or None, nested replicates or None)
        self.table: dict[tuple[str, str], dict[str, tuple[dict, Any, Any]]] = defaultdict(dict)
        for s, rep in per_scale:
            for r in rep.rows:
                key = (r["method"], r["score"])
                self.table[key][s] = (r, rep.replicates.get(key), rep.nested.get(key))

    def series(self, method: str, score: str, nested: bool = False) -> _Series | None:
        """The metric on every range, and its replicates where all ranges share resamples
        (``nested``: the replicates with the selection redone in each resample; None where a
        range has none)."""
        got = self.table.get((method, score))
        if not got or set(got) != set(self.scales):
            return None
        est = np.asarray([((got[s][0].get("metrics") or {}).get(self.metric) or {}).get("estimate")
                          for s in self.scales], dtype=np.float64)  # None -> NaN
        reps = [got[s][2 if nested else 1] for s in self.scales]
        usable = self.same and all(x is not None for x in reps)
        if nested and not usable:
            return None
        return est, (np.stack(reps).astype(np.float64) if usable else None)

    def interval(self, fn, *series: _Series, p: bool) -> dict[str, Any]:
        """``fn`` of the series' estimates, with its interval from ``fn`` of their replicates."""
        est = fn(*(e for e, _ in series))
        reps = None if any(r is None for _, r in series) else fn(*(r for _, r in series))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            iv = _iv(est, reps, self.options, self.num_groups, p=p)
        if not self.same:
            iv["reason"] = "ranges resampled differently"
        return iv

    def _alpha(self) -> float:
        """The level the report's intervals use: widened for few groups under ``expanded``."""
        if self.options.ci_method in ("expanded", "bca"):
            return 2 * expanded_levels(self.num_groups, self.options.alpha)[0]
        return self.options.alpha

    def spread(self, ser: _Series) -> dict[str, Any]:
        """The heterogeneity over ranges with its profile-likelihood interval (see the module)."""
        est, reps = ser
        out: dict[str, Any] = {"estimate": None, "low": None, "high": None}
        if reps is None:
            out["reason"] = "ranges resampled differently" if not self.same else "no replicates on every range"
            return out
        share = float(np.mean(~np.all(np.isfinite(reps), axis=0)))
        got = heterogeneity_interval(est, reps, self._alpha())
        if got["estimate"] is None:
            return {**out, "reason": got["reason"]}
        out.update(estimate=got["estimate"], raw=got["raw"], noise=got["noise"], nan_share=share)
        if self.num_groups < self.options.min_ci_groups:
            out["reason"] = f"too few groups ({self.num_groups} < {self.options.min_ci_groups})"
        elif share > NAN_SHARE_MAX:
            out["reason"] = f"{share:.0%} of resamples undefined"
        else:
            out["low"], out["high"] = got["low"], got["high"]
        return out

    def spread_diff(self, ser: _Series, bser: _Series) -> dict[str, Any]:
        """The method's heterogeneity minus the comparator's, with a bootstrap interval (each
        replicate netted of twice its side's noise, which centres it on the estimate)."""
        (est, reps), (best, breps) = ser, bser
        if reps is None or breps is None:
            reason = "ranges resampled differently" if not self.same else "no replicates on every range"
            return {"estimate": None, "low": None, "high": None, "reason": reason}
        (_, noise), (_, bnoise) = noise_covariance(reps), noise_covariance(breps)
        value = float(net_sd(est, noise, 1.0) - net_sd(best, bnoise, 1.0))
        diffs = net_sd(reps, noise, 2.0) - net_sd(breps, bnoise, 2.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return _iv(value, diffs, self.options, self.num_groups, p=True)

    def diffs(self, ser: _Series, bser: _Series) -> dict[str, Any]:
        out = {name: self.interval(fn, ser, bser, p=p) for name, fn, p in _DIFFS}
        out["spread_diff"] = self.spread_diff(ser, bser)
        if not self.same:
            out["spread_diff"]["reason"] = "ranges resampled differently"
        return {k: out[k] for k in ("mean_diff", "spread_diff", "relative")}

    def comparators(self, method: str, score: str, best_cal: str | None,
                    pairs: Sequence[tuple[str, str]]) -> list[tuple[str, str]]:
        """``(row name, role)`` of everything ``method`` is compared with at this reading."""
        row0 = self.table[(method, score)][self.scales[0]][0]
        comps: list[tuple[str, str]] = []
        if role_of(method) is not Role.REFERENCE and (REFERENCE, score) in self.table:
            comps.append((REFERENCE, REFERENCE_ROLE))
        if row0.get("matched_baseline"):
            comps.append((row0["matched_baseline"], "matched"))
        if best_cal and method != best_cal and role_of(method) is not Role.CALIBRATION:
            comps.append((best_cal, "calibration"))
        comps += [(b, "listed") for m, b in pairs if m == method]
        return list(dict.fromkeys(comps))

    def record(self, method: str, score: str, ser: _Series, comps: list[tuple[str, str]]) -> dict[str, Any]:
        rec: dict[str, Any] = {"score": score, "method": method, "metric": self.metric, "scales": self.scales,
                               "mean": self.interval(_mean, ser, p=False),
                               "spread": self.spread(ser), "max_min": _finite(_max_min(ser[0])), "versus": []}
        nser = self.series(method, score, nested=True)
        for base, role in comps:
            bser = self.series(base, score)
            if bser is not None:
                entry = {"baseline": base, "role": role, **self.diffs(ser, bser)}
                nbser = None if nser is None else self.series(base, score, nested=True)
                if nbser is not None:  # selection redone in each resample, on both sides
                    entry["nested"] = self.diffs(nser, nbser)
                rec["versus"].append(entry)
        if role_of(method) is Role.REFERENCE:  # does the range matter? every pair of ranges, on the same resamples
            rec["range_diffs"] = [
                {"scales": [a, b], "diff": self.interval(lambda x, i=i, j=j: x[i] - x[j], ser, p=True)}
                for i, a in enumerate(self.scales) for j, b in enumerate(self.scales) if j > i
            ]
        return rec


def range_statistics(
    cells: Sequence[tuple[dict[str, Any], Any]],
    options: Any,
    pairs: Sequence[tuple[str, str]] = (),
) -> list[dict[str, Any]]:
    """Mean and spread over ranges, and differences from comparators, with intervals.

    Args:
      cells: ``(labels, report)`` per cell: ``labels`` has judge, task, aspect and scale;
        ``report`` is its `jaxjudge.report.cell_inputs.CellReport` (rows, replicates,
        resample key, number of groups).
      options: the `MethodOptions` of the cells (alpha, ci_method, min_ci_groups,
        select_metric, select_per_group).
      pairs: extra ``(method, comparator)`` comparisons by row name.

    Returns:
      one dict per (judge, task, aspect, reading, method) with at least two ranges: the labels,
      ``metric``, ``scales``, ``mean``, ``spread`` (interval dicts), ``versus``: a list of
      ``{baseline, role, mean_diff, spread_diff, relative}``, and for the vanilla judge
      ``range_diffs``.
    """
    metric = f"{options.select_metric}_doc" if options.select_per_group else options.select_metric
    minimize = options.select_metric == "mse"
    by_key: dict[tuple, list[tuple[str, Any]]] = defaultdict(list)
    for labels, rep in cells:
        by_key[(labels["judge"], labels["task"], labels["aspect"])].append((labels["scale"], rep))
    out = []
    for (judge, task, aspect), per_scale in by_key.items():
        if len(per_scale) < 2:
            continue
        panel = _Panel(sorted(per_scale, key=lambda x: _scale_key(x[0])), options, metric)
        for score in dict.fromkeys(sc for _, sc in panel.table):
            methods = [m for (m, sc) in panel.table if sc == score]
            calib = [m for m in methods if role_of(m) is Role.CALIBRATION]
            best_cal = max(calib, key=lambda m: _dev_score([entry[0] for entry in panel.table[(m, score)].values()],
                                                           minimize), default=None)
            for method in methods:
                ser = panel.series(method, score)
                if ser is not None:
                    rec = panel.record(method, score, ser, panel.comparators(method, score, best_cal, pairs))
                    out.append({"judge": judge, "task": task, "aspect": aspect, **rec})
    return out


def comparisons(rows: Sequence[dict[str, Any]], ranges: Sequence[dict[str, Any]]) -> Iterator[tuple[dict, dict]]:
    """Every paired comparison of a report with a p-value: ``(description, interval dict)``.

    Per-range differences from vanilla (``delta``) and from the matched baseline
    (``delta_matched``) of the selection metric, and over ranges ``mean_diff`` and
    ``spread_diff`` against each comparator. The description has the labels, ``versus``,
    ``statistic`` (a scale name, ``"mean"`` or ``"spread"``) and ``metric``.
    """
    for r in rows:
        labels = {k: r.get(k) for k in ("judge", "task", "aspect", "score", "method")}
        for field, versus in (("delta", REFERENCE), ("delta_matched", r.get("matched_baseline"))):
            for metric, iv in (r.get(field) or {}).items():
                if iv and iv.get("p") is not None:
                    yield {**labels, "versus": versus, "statistic": r["scale"], "metric": metric}, iv
    for rec in ranges:
        labels = {k: rec.get(k) for k in ("judge", "task", "aspect", "score", "method")}
        for d in rec.get("range_diffs", ()):
            if d["diff"].get("p") is not None:
                yield {**labels, "versus": None, "statistic": " − ".join(d["scales"]), "metric": rec["metric"]}, d["diff"]
        for v in rec["versus"]:
            for stat in ("mean", "spread"):
                iv = v[f"{stat}_diff"]
                if iv.get("p") is not None:
                    yield {**labels, "versus": v["baseline"], "statistic": stat, "metric": rec["metric"]}, iv


def find_primary(rows: Sequence[dict[str, Any]], ranges: Sequence[dict[str, Any]], primary: Mapping[str, Any]
                 ) -> list[tuple[dict, dict]]:
    """The comparisons `primary` names (fields as `jaxjudge.experiment.Endpoint`): one per
    (judge, task, aspect) where it is defined unless those are named.

    With ``selection="nested"`` a comparison over ranges whose nested interval was computed
    (`nested_comparisons`) is given by it, its description marked ``"selection": "nested"``;
    the others (no tuned side) keep the report's interval. A spec without ``selection`` is
    ``"conditional"``.
    """
    want = {k: v for k, v in primary.items()
            if k not in ("selection", "margin") and (v is not None or k == "versus")}
    hits = [(d, iv) for d, iv in all_comparisons(rows, ranges) if all(d.get(k) == v for k, v in want.items())]
    if primary.get("selection", "conditional") != "nested":
        return hits
    twins = {_described(d): (d, iv) for d, iv in nested_comparisons(ranges)}
    return [twins.get(_described(d), (d, iv)) for d, iv in hits]


def _described(d: Mapping[str, Any]) -> tuple:
    return tuple(d.get(k) for k in ("judge", "task", "aspect", "score", "method", "versus", "statistic", "metric"))


def nested_comparisons(ranges: Sequence[dict[str, Any]]) -> Iterator[tuple[dict, dict]]:
    """The comparisons over ranges that also have a nested interval (selection redone in each
    resample on both sides): ``(description with "selection": "nested", interval dict)``."""
    for rec in ranges:
        labels = {k: rec.get(k) for k in ("judge", "task", "aspect", "score", "method")}
        for v in rec["versus"]:
            for stat in ("mean", "spread", "relative"):
                key = "relative" if stat == "relative" else f"{stat}_diff"
                if key in v.get("nested", {}):
                    yield ({**labels, "versus": v["baseline"], "statistic": stat, "metric": rec["metric"],
                            "selection": "nested"}, v["nested"][key])


def all_comparisons(rows, ranges) -> Iterator[tuple[dict, dict]]:
    """As `comparisons`, also those without a p-value (an interval withheld), and ``relative``."""
    for r in rows:
        labels = {k: r.get(k) for k in ("judge", "task", "aspect", "score", "method")}
        for field, versus in (("delta", REFERENCE), ("delta_matched", r.get("matched_baseline"))):
            for metric, iv in (r.get(field) or {}).items():
                yield {**labels, "versus": versus, "statistic": r["scale"], "metric": metric}, iv
    for rec in ranges:
        labels = {k: rec.get(k) for k in ("judge", "task", "aspect", "score", "method")}
        for stat in ("mean", "spread"):  # the method's own statistic (not a comparison)
            yield {**labels, "versus": None, "statistic": stat, "metric": rec["metric"]}, rec[stat]
        for d in rec.get("range_diffs", ()):
            yield {**labels, "versus": None, "statistic": " − ".join(d["scales"]), "metric": rec["metric"]}, d["diff"]
        for v in rec["versus"]:
            for stat in ("mean", "spread", "relative"):
                key = "relative" if stat == "relative" else f"{stat}_diff"
                yield {**labels, "versus": v["baseline"], "statistic": stat, "metric": rec["metric"]}, v[key]


def three_way(iv: Mapping[str, Any], margin: float) -> str:
    """The verdict of an interval against a smallest effect of interest ``margin`` (> 0 side:
    the method better): ``"better"`` when the interval lies above +margin, ``"worse"`` below
    -margin, ``"equivalent"`` within [-margin, +margin], ``"inconclusive"`` otherwise (also
    when no interval is given)."""
    lo, hi = iv.get("low"), iv.get("high")
    if lo is None or hi is None or iv.get("reason"):
        return "inconclusive"
    if lo > margin:
        return "better"
    if hi < -margin:
        return "worse"
    if -margin <= lo and hi <= margin:
        return "equivalent"
    return "inconclusive"


def typed_comparisons(rows, ranges) -> Iterator[tuple[dict, dict]]:
    """Every comparison of a report keyed by typed fields, read from the records themselves (no
    display label is parsed): ``judge``, ``task``, ``aspect``, ``score``, ``method``, ``kind``
    (``"range"``: one range against a comparator; ``"over ranges"``: a statistic over ranges
    against a comparator; ``"own"``: the method's own mean or spread; ``"range pair"``: the
    method's difference between two ranges), ``versus`` (the comparator's row, or None),
    ``role`` (the comparator's role: ``"vanilla"``, ``"matched"``, ``"calibration"`` or
    ``"listed"``, a pair of the config's ``comparisons``), ``statistic`` (a range, ``"mean"``, ``"spread"``, ``"relative"``, or
    ``"pair"``), ``scales`` (the two ranges of a pair, else None) and ``metric``."""
    for r in rows:
        labels = {k: r.get(k) for k in ("judge", "task", "aspect", "score", "method")}
        for field, versus, role in (("delta", REFERENCE, REFERENCE_ROLE),
                                    ("delta_matched", r.get("matched_baseline"), "matched")):
            for metric, iv in (r.get(field) or {}).items():
                yield {**labels, "kind": "range", "versus": versus, "role": role, "statistic": r["scale"],
                       "scales": None, "metric": metric}, iv
    for rec in ranges:
        labels = {k: rec.get(k) for k in ("judge", "task", "aspect", "score", "method")}
        for stat in ("mean", "spread"):
            yield {**labels, "kind": "own", "versus": None, "role": None, "statistic": stat, "scales": None,
                   "metric": rec["metric"]}, rec[stat]
        for d in rec.get("range_diffs", ()):
            yield {**labels, "kind": "range pair", "versus": None, "role": None, "statistic": "pair",
                   "scales": tuple(d["scales"]), "metric": rec["metric"]}, d["diff"]
        for v in rec["versus"]:
            for stat in ("mean", "spread", "relative"):
                key = "relative" if stat == "relative" else f"{stat}_diff"
                yield {**labels, "kind": "over ranges", "versus": v["baseline"], "role": v.get("role"),
                       "statistic": stat, "scales": None, "metric": rec["metric"]}, v[key]


def endpoints(rows: list[dict[str, Any]], ranges: list[dict[str, Any]], primary: Mapping[str, Any] | None,
              alpha: float) -> dict[str, Any]:
    """Resolve the primary endpoint and Holm-adjust every other comparison, in place.

    A report of several judges, tasks or aspects has the primary endpoint once in each (unless
    the spec names one): those are co-primary, and where there are several with p-values they
    are Holm-adjusted among themselves (``p_holm``), apart from the secondary family. Each
    secondary comparison's interval dict gains ``p_holm``.

    Returns:
      ``{"primary": {"spec", "endpoints": [{description, interval}]} or None, "secondary":
      {"adjustment": "holm", "count": m, "alpha": alpha, "significant": k}}`` (``k``: how many
      have ``p_holm < alpha``).
    """
    hits = find_primary(rows, ranges, primary) if primary else []
    if primary and not hits:
        raise ValueError(f"primary endpoint {dict(primary)} matches no comparison of this report")
    # A nested primary's conditional twin is the same comparison: it leaves the secondary family too.
    twins = find_primary(rows, ranges, {**primary, "selection": "conditional"}) if primary else []
    prim_ids = {id(iv) for _, iv in hits + twins}
    if len(hits) > 1 and any(iv.get("p") is not None for _, iv in hits):
        for (_, iv), p in zip(hits, holm([iv.get("p") for _, iv in hits])):
            iv["p_holm"] = p
    family = [(d, iv) for d, iv in comparisons(rows, ranges) if id(iv) not in prim_ids]
    adjusted = holm([iv["p"] for _, iv in family])
    for (_, iv), p in zip(family, adjusted):
        iv["p_holm"] = p
    margin = (primary or {}).get("margin")
    return {
        "primary": None if not hits else {
            "spec": dict(primary),
            "endpoints": [{"description": d, "interval": iv,
                           **({"verdict": three_way(iv, margin)} if margin is not None else {})} for d, iv in hits]},
        "secondary": {"adjustment": "holm", "count": len(family), "alpha": alpha,
                      "significant": sum(1 for p in adjusted if p is not None and p < alpha)},
    }
