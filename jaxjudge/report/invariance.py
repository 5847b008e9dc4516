"""Range invariance measured on items: how much one item's score moves when only the range does.

The score-range papers' claim is that the range asked for should not matter to a score. The
spread of *correlations* across ranges (`jaxjudge.report.ranges`) is only its shadow: two
ranges can correlate equally with humans while scoring every item differently. Here each
item's score is mapped linearly from the prompt's range onto the human scale (the per-item
``score_human_scale`` of `jaxjudge.report.items`), and for every (judge, task, aspect,
reading, method):

* ``item_sd``: the mean over the reported items of each item's standard deviation across the
  ranges (``ddof = 1``: with ranges r = 1..R, ``sqrt(sum_r (x_r - mean x)^2 / (R - 1))``), in
  human-scale units; 0 where every range gives each item the same mapped score;
* against each comparator (the vanilla judge read the same way, and the method's matched
  baseline): the difference of the two methods' ``item_sd`` (negative: more invariant), with a
  grouped bootstrap interval drawn on the same resamples for both methods (paired), its Wald
  ``p`` and ``p_interval`` (`jaxjudge.metrics.multiplicity`).

The items are those on the reported side (``split == "test"``) with a defined score on every
range for every method of the reading (a parse failure of ``generate`` leaves its item out of
the whole reading, so that every comparison is paired); groups are resampled whole with the
report's seed and number of resamples. Nothing here needs a forward pass: the scores are the
ones the report's metrics were computed from.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import jax.numpy as jnp
import numpy as np

from jaxjudge.metrics.bootstrap import bootstrap_distribution
from jaxjudge.metrics.intervals import interval_summary
from jaxjudge.metrics.multiplicity import bootstrap_p_value, interval_p_value
from jaxjudge.report.intervals_text import format_interval, format_p

__all__ = ["INVARIANCE_NOTE", "invariance_table", "item_sd", "range_invariance", "report_invariance"]

_PANEL = ("model", "task", "aspect", "reading")


def item_sd(scores_rn: np.ndarray) -> np.ndarray:
    """`[N]` each item's standard deviation (ddof 1) of its human-scale scores `[R, N]` across
    the R ranges; NaN where a range has none."""
    x = np.asarray(scores_rn, np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"item_sd needs scores [R >= 2, N], got shape {x.shape}")
    return np.std(x, axis=0, ddof=1)


def _weighted_means(s_nm: jnp.ndarray, weights: jnp.ndarray) -> jnp.ndarray:
    """`[M]` the methods' weighted mean item sd (integer weights: a resample's multiplicities)."""
    return weights @ s_nm / jnp.sum(weights)


def _columns(items: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> dict[str, np.ndarray]:
    if isinstance(items, Mapping):
        return {k: np.asarray(v) for k, v in items.items()}
    cells = list(items)
    return {k: np.concatenate([np.asarray(c[k]) for c in cells]) for k in cells[0]} if cells else {}


def _panel_sd(cols: dict[str, np.ndarray], idx: np.ndarray) -> tuple[list[str], list[str], np.ndarray, np.ndarray]:
    """One panel's methods, ranges, `[N, M]` item sds (common items) and `[N]` groups."""
    sub = {k: v[idx] for k, v in cols.items()}
    methods = list(dict.fromkeys(sub["method"].tolist()))
    ranges = sorted(set(sub["range"].tolist()), key=lambda s: tuple(float(x) for x in s.split("-")))
    ids = list(dict.fromkeys(sub["item_id"].tolist()))
    pos = {i: k for k, i in enumerate(ids)}
    grid = np.full((len(methods), len(ranges), len(ids)), np.nan)
    m_at, r_at = {m: k for k, m in enumerate(methods)}, {r: k for k, r in enumerate(ranges)}
    rows = np.array([pos[i] for i in sub["item_id"].tolist()])
    grid[[m_at[m] for m in sub["method"].tolist()], [r_at[r] for r in sub["range"].tolist()], rows] = \
        sub["score_human_scale"].astype(np.float64)
    group_of = dict(zip(sub["item_id"].tolist(), sub["group"].tolist()))
    if len(ranges) < 2:  # one range: no spread to measure
        return methods, ranges, np.zeros((0, len(methods))), np.zeros(0)
    sd = np.stack([item_sd(grid[m]) for m in range(len(methods))], axis=1)  # [N, M]
    keep = np.all(np.isfinite(sd), axis=1)
    return methods, ranges, sd[keep], np.asarray([group_of[i] for i in ids])[keep]


def _diff(est: np.ndarray, reps: np.ndarray, i: int, j: int, summary: dict[str, Any]) -> dict[str, Any]:
    value, r = float(est[i] - est[j]), reps[:, i] - reps[:, j]
    out = interval_summary(value, r, summary["alpha"], num_groups=summary["num_groups"],
                           min_groups=summary["min_groups"], method=summary["method"])
    if out.get("low") is not None:
        out["p"] = bootstrap_p_value(value, r)
        out["p_interval"] = interval_p_value(value, r, method=summary["method"], num_groups=summary["num_groups"])
    return out


def range_invariance(items: Mapping[str, Any] | Sequence[Mapping[str, Any]], matched: Mapping[str, str | None],
                     options: Any, reference: str = "vanilla") -> list[dict[str, Any]]:
    """The per-item spread across ranges of every method, and its paired differences.

    Args:
      items: per-item columns (`jaxjudge.report.items.COLUMNS`: at least model, task, aspect,
        range, reading, method, item_id, group, split, score_human_scale), one mapping or one
        per cell.
      matched: method -> its matched baseline's row (None: none), as the report's rows give it.
      options: ``n_boot``, ``seed``, ``alpha``, ``ci_method`` (``"bca"`` is read as
        ``"expanded"``: no jackknife here) and ``min_ci_groups``.
      reference: the comparator every method is compared with.

    Returns:
      one dict per (judge, task, aspect, reading) with two or more ranges: ``judge``, ``task``,
      ``aspect``, ``score``, ``scales``, ``n_items``, ``n_groups`` and ``methods``: a list of
      ``{method, item_sd: interval, versus: [{baseline, role, diff: interval with p}]}``.
    """
    cols = _columns(items)
    if not cols:
        return []
    test = cols["split"].astype(str) == "test"
    panels: dict[tuple, list[int]] = defaultdict(list)
    for k in np.flatnonzero(test):
        panels[tuple(cols[c][k] for c in _PANEL)].append(k)
    method = "expanded" if options.ci_method == "bca" else options.ci_method
    out = []
    for (judge, task, aspect, reading), idx in panels.items():
        methods, ranges, sd, groups = _panel_sd(cols, np.asarray(idx))
        if len(ranges) < 2 or sd.shape[0] == 0:
            continue
        n_groups = len(set(groups.tolist()))
        summary = {"alpha": options.alpha, "num_groups": n_groups, "min_groups": options.min_ci_groups,
                   "method": method}
        est, reps = sd.mean(axis=0), None  # [M]
        if n_groups >= 2:
            _, reps = bootstrap_distribution(_weighted_means, (jnp.asarray(sd, jnp.float32),), groups,
                                             n_boot=options.n_boot, seed=options.seed)
            reps = np.asarray(reps, np.float64)  # [B, M]
        rec = {"judge": judge, "task": task, "aspect": aspect, "score": reading, "scales": ranges,
               "n_items": int(sd.shape[0]), "n_groups": n_groups, "methods": []}
        for i, m in enumerate(methods):
            entry = {"method": m, "item_sd": interval_summary(float(est[i]), None if reps is None else reps[:, i],
                                                              options.alpha, num_groups=n_groups,
                                                              min_groups=options.min_ci_groups, method=method),
                     "versus": []}
            for base, role in ((reference, "vanilla"), (matched.get(m), "matched")):
                seen = [v["baseline"] for v in entry["versus"]]
                if base and base != m and base in methods and base not in seen and reps is not None:
                    entry["versus"].append({"baseline": base, "role": role,
                                            "diff": _diff(est, reps, i, methods.index(base), summary)})
            rec["methods"].append(entry)
        out.append(rec)
    return out


def report_invariance(results: Any, cfg: Any) -> list[dict[str, Any]]:
    """`range_invariance` of a report's own per-item scores (``results.items``; none: empty), with
    each method's matched baseline from its rows and the bootstrap settings of ``cfg``."""
    items = getattr(results, "items", None)
    if not items:
        return []
    matched = {r["method"]: r.get("matched_baseline") for r in results.rows}
    return range_invariance(items, matched, cfg)


INVARIANCE_NOTE = (
    "How far one item's score moves when only the range does: each item's score mapped linearly "
    "from the prompt's range onto the human scale, its standard deviation across the ranges "
    "(ddof 1), averaged over the reported items that every method of the reading scores on every "
    "range (human-scale units; 0: the range does not matter to any item). Δ: the method's value "
    "minus its comparator's on the same resamples of groups (negative: more invariant), with the "
    "interval's own p-value."
)


def invariance_table(invariance: Sequence[Mapping[str, Any]]) -> str:
    """Markdown of `range_invariance`'s records, one table per (judge, task, aspect, reading)."""
    parts: list[str] = []
    for rec in invariance:
        parts += [f"{rec['judge']}, {rec['task']} {rec['aspect']}, {rec['score']}: {rec['n_items']} items "
                  f"({rec['n_groups']} groups), ranges {', '.join(rec['scales'])}", "",
                  "| method | item sd across ranges | versus | Δ item sd |", "|---|---|---|---|"]
        for m in rec["methods"]:
            first = [m["method"], format_interval(m["item_sd"])]
            if not m["versus"]:
                parts.append(f"| {' | '.join(first + ['', ''])} |")
            for i, v in enumerate(m["versus"]):
                d = v["diff"]
                p = f" (p {format_p(d['p_interval'], d.get('n_boot'))})" if d.get("p_interval") is not None else ""
                cells = (first if i == 0 else ["", ""]) + [f"{v['baseline']} ({v['role']})", format_interval(d) + p]
                parts.append(f"| {' | '.join(cells)} |")
        parts.append("")
    return "\n".join(parts)
