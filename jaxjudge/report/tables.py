"""Results as tables: a flat CSV (one line per row, every number), JSON, and Markdown.

CSV columns: the row labels (experiment, judge, task, aspect, scale, method, score), the
counts (n, n_folds, n_test, parse_failures over every row and parse_failures_test over the
reported ones), ``<metric>``, ``<metric>_low``, ``<metric>_high``
for every metric (``*_doc``: per-document means), with ``<metric>_nan_share`` (share of bootstrap
resamples where it was undefined), ``<metric>_reason`` (why no interval is given, if none) and,
for ``*_doc``, ``<metric>_docs_defined`` of ``<metric>_docs`` (test documents whose metric is
defined, fewest over folds), ``delta_<metric>`` with its interval, in a run where some method's
matched baseline was run ``matched_baseline`` and ``delta_matched_<metric>`` (the paired
difference from it) with its interval, and the
per-fold fields (``hparams``, ``dev_metric``, ``test_metric``) as JSON text. Numbers are written
with ``repr``, so `read_csv` gives back exactly the values of `flat_rows`.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jaxjudge.report.edges import edge_table, grid_edges
from jaxjudge.report.intervals_text import format_interval
from jaxjudge.report.invariance import INVARIANCE_NOTE, invariance_table
from jaxjudge.report.methods import PARSED
from jaxjudge.report.endpoint_tables import (RANGES_NOTE, REGISTERED_NOTE, SECONDARY_NOTE, primary_line, ranges_table,
                                             registered_table, secondary_table)
from jaxjudge.report.results import Results

__all__ = [
    "LABELS",
    "flat_rows",
    "write_csv",
    "read_csv",
    "format_interval",
    "headline_table",
    "markdown_report",
    "paired_table",
]

LABELS = ("experiment", "judge", "task", "aspect", "scale", "method", "score")
_COUNTS = ("n", "n_folds", "n_test", "n_truncated", "n_tokens_cut", "parse_failures", "parse_failures_test",
           "n_distinct_parsed", "n_distinct_parsed_test")
_JSON_FIELDS = ("hparams", "dev_metric", "test_metric")
_GENERATED = PARSED  # parsed replies: one row per cell, shown with each reading


def _metric_names(rows: Sequence[dict[str, Any]], key: str = "delta") -> tuple[list[str], list[str]]:
    """(metric names, names in each row's ``key`` table: ``"delta"`` or ``"delta_matched"``)."""
    metrics: list[str] = []
    deltas: list[str] = []
    for r in rows:
        for m in r.get("metrics") or {}:
            if m not in metrics:
                metrics.append(m)
        for m in r.get(key) or {}:
            if m not in deltas:
                deltas.append(m)
    return metrics, deltas


def flat_rows(results: Results) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows) of the CSV: one flat dict per result row."""
    metrics, deltas = _metric_names(results.rows)
    columns = list(LABELS) + list(_COUNTS)
    for m in metrics:
        columns += [m, f"{m}_low", f"{m}_high", f"{m}_nan_share", f"{m}_reason"]
        if m.endswith("_doc"):
            columns += [f"{m}_docs_defined", f"{m}_docs"]
    for m in deltas:
        columns += [f"delta_{m}", f"delta_{m}_low", f"delta_{m}_high", f"delta_{m}_nan_share", f"delta_{m}_reason"]
    _, matched = _metric_names(results.rows, "delta_matched")
    if matched:
        columns.append("matched_baseline")
    for m in matched:
        columns += [f"delta_matched_{m}", f"delta_matched_{m}_low", f"delta_matched_{m}_high",
                    f"delta_matched_{m}_nan_share", f"delta_matched_{m}_reason"]
    columns += ["rel_vs_vanilla", "rel_vs_generate", *_JSON_FIELDS]
    out = []
    for r in results.rows:
        flat: dict[str, Any] = {c: r.get(c) for c in LABELS + _COUNTS}
        if matched:
            flat["matched_baseline"] = r.get("matched_baseline")
        for prefix, table, names in (("", r.get("metrics") or {}, metrics), ("delta_", r.get("delta") or {}, deltas),
                                     ("delta_matched_", r.get("delta_matched") or {}, matched)):
            for m in names:
                iv = table.get(m) or {}
                flat[f"{prefix}{m}"] = iv.get("estimate")
                flat[f"{prefix}{m}_low"] = iv.get("low")
                flat[f"{prefix}{m}_high"] = iv.get("high")
                flat[f"{prefix}{m}_nan_share"] = iv.get("nan_share")
                flat[f"{prefix}{m}_reason"] = iv.get("reason")
                if m.endswith("_doc") and not prefix:
                    flat[f"{m}_docs_defined"], flat[f"{m}_docs"] = iv.get("docs_defined"), iv.get("docs")
        rel = r.get("relative") or {}
        flat["rel_vs_vanilla"], flat["rel_vs_generate"] = rel.get("vs_vanilla"), rel.get("vs_generate")
        for c in _JSON_FIELDS:
            flat[c] = json.dumps(r.get(c), sort_keys=True)
        out.append(flat)
    return columns, out


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return repr(v)
    return str(v)


def write_csv(results: Results, path: str | os.PathLike) -> Path:
    """Write the flat table (see the module docstring)."""
    columns, rows = flat_rows(results)
    path = Path(path)
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(columns)
        for r in rows:
            w.writerow([_cell(r.get(c)) for c in columns])
    return path


def read_csv(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Read a table written by `write_csv` back into the values of `flat_rows`."""
    out = []
    with open(path, newline="", encoding="utf-8") as f:
        for rec in csv.DictReader(f):
            row: dict[str, Any] = {}
            for k, v in rec.items():
                if k in LABELS or k == "matched_baseline" or k.endswith("_reason"):
                    row[k] = v if v != "" else None
                elif k in _JSON_FIELDS:
                    row[k] = v
                elif v == "":
                    row[k] = None
                elif k in _COUNTS or k.endswith(("_docs_defined", "_docs")):
                    row[k] = int(v)
                else:
                    row[k] = float(v)
            out.append(row)
    return out


def _methods_in_order(rows: Sequence[dict[str, Any]]) -> list[str]:
    return list(dict.fromkeys(r["method"] for r in rows))


def headline_table(results: Results, metric: str = "spearman", *, score: str | None = None) -> str:
    """Markdown pivot: one line per (judge, task, aspect, scale, score), one column per method.

    Each entry is the metric with its 95% interval. Args: ``metric`` (``"spearman"``,
    ``"spearman_doc"``, ...); ``score``: restrict to one reading (``"expected@0.2"``).
    """
    rows = [r for r in results.rows if score is None or r["score"] == score or r["method"] in _GENERATED]
    methods = _methods_in_order(rows)
    keys = list(dict.fromkeys((r["judge"], r["task"], r["aspect"], r["scale"], r["score"]) for r in rows
                              if r["method"] not in _GENERATED))
    gen = {(r["method"], r["judge"], r["task"], r["aspect"], r["scale"]): r for r in rows if r["method"] in _GENERATED}
    index = {(r["judge"], r["task"], r["aspect"], r["scale"], r["score"], r["method"]): r for r in rows}
    head = ["judge", "task", "aspect", "scale", "score", *methods]
    lines = [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
    for key in keys:
        cells = list(key)
        for m in methods:
            r = gen.get((m, *key[:4])) if m in _GENERATED else index.get((*key, m))
            cell = format_interval((r or {}).get("metrics", {}).get(metric)) if r else ""
            if r and m in _GENERATED:
                cell += _parse_note(r)
            cells.append(cell)
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def paired_table(results: Results) -> str:
    """Markdown pivot of the paired differences of the selection metric: one line per (judge,
    task, aspect, scale, score), for every method with a delta one column ``m − vanilla`` and,
    where its matched baseline was run, one column ``m − <baseline>`` (same resamples)."""
    rows = [r for r in results.rows if r.get("delta")]
    _, deltas = _metric_names(rows)
    if not deltas:
        return ""
    metric = deltas[0]
    cols: list[tuple[str, str, str]] = []  # (method, "delta" / "delta_matched", header)
    for m in _methods_in_order(rows):
        cols.append((m, "delta", f"{m} − vanilla"))
        base = next((r.get("matched_baseline") for r in rows if r["method"] == m and r.get("matched_baseline")), None)
        if base is not None:
            cols.append((m, "delta_matched", f"{m} − {base}"))
    keys = list(dict.fromkeys((r["judge"], r["task"], r["aspect"], r["scale"], r["score"]) for r in rows))
    index = {(r["judge"], r["task"], r["aspect"], r["scale"], r["score"], r["method"]): r for r in rows}
    head = ["judge", "task", "aspect", "scale", "score", *(h for *_, h in cols)]
    lines = [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
    for key in keys:
        cells = list(key)
        for m, field, _ in cols:
            r = index.get((*key, m))
            cells.append(format_interval(((r or {}).get(field) or {}).get(metric)) if r else "")
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def _parse_note(r: dict[str, Any]) -> str:
    """How many generations parsed into a number, and why a correlation may be undefined."""
    # The reported rows (those on a test side) where the row counts them; else every row.
    n, fails = ((r.get("n_test"), r.get("parse_failures_test")) if r.get("parse_failures_test") is not None
                else (r.get("n"), r.get("parse_failures")))
    if n is None or fails is None:
        return ""
    note = f"{n - fails}/{n} parsed"
    if n - fails > 0 and r.get("n_distinct_parsed") == 1:
        note += ", all equal"
    elif r.get("n_distinct_parsed_test") is not None and r["n_distinct_parsed_test"] <= 1:
        note += ", all equal on a test side"
    return f" ({note})"


def _hp(r: dict[str, Any]) -> str:
    hp = r.get("hparams") or []
    if not hp or not any(hp):
        return ""
    keys = [k for k in hp[0] if k != "q"]
    if not keys:
        return "fitted per fold" if "q" in hp[0] else ""
    parts = []
    for k in keys:
        vals = [h[k] for h in hp]
        parts.append(f"{k}=" + "/".join(f"{v:g}" for v in vals))
    return "; ".join(parts)


def _long_table(results: Results) -> str:
    metrics, deltas = _metric_names(results.rows)
    _, matched = _metric_names(results.rows, "delta_matched")
    head = ["judge", "task", "aspect", "scale", "method", "score", *metrics]
    head += [f"Δ{m}" for m in deltas] + [f"Δ{m} vs matched baseline" for m in matched]
    head += ["rel. vs vanilla", "rel. vs generate", "chosen per fold"]
    lines = [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
    for r in results.rows:
        cells = [str(r.get(c)) for c in ("judge", "task", "aspect", "scale", "method", "score")]
        cells += [format_interval(r["metrics"].get(m)) for m in metrics]
        cells += [format_interval((r.get("delta") or {}).get(m)) for m in deltas]
        cells += [f"{format_interval(r['delta_matched'].get(m))} vs {r['matched_baseline']}" if r.get("delta_matched")
                  else "-" for m in matched]
        rel = r.get("relative") or {}
        cells += [f"{rel[k]:+.1%}" if rel.get(k) is not None else "-" for k in ("vs_vanilla", "vs_generate")]
        cells.append(_hp(r))
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


_EDGE_NOTE = (
    "Each tuned method's chosen value, per parameter and reading, counted over folds x cells "
    "(\"choices\"): how many sit at the bottom or the top of its grid, where the best value may lie "
    "beyond the grid. A choice among ties (the dev metric equal at every value of the parameter, "
    "the others held as chosen; mean over folds) is counted as flat, at neither end. The last "
    "column is how much the grid's last step moved the dev metric (mean over folds) for the edge "
    "choices: near 0, the metric has levelled off and the edge is not what limits the method."
)

_MATCHED_NOTE = (
    " A method that tunes a knob the vanilla judge could also use is compared with its matched "
    "baseline too: the same knob chosen the same way on the same dev data with the method's own "
    "effect switched off (`temperature`: contrastive decoding at lambda = 0, its main-model "
    "temperature chosen on dev); \"Δ vs matched baseline\" is that paired difference, on the same resamples."
)


def markdown_report(results: Results, metadata: dict[str, Any] | None = None, *, metric: str = "spearman") -> str:
    """The run's Markdown: command, notes, the headline pivot(s), then every number."""
    parts = [f"# {results.experiment}", ""]
    if results.endpoints:
        parts += [primary_line(results), ""]
    if metadata:
        if metadata.get("command"):
            parts += ["Command:", "", f"    {metadata['command']}", ""]
        if metadata.get("created_utc"):
            parts += [f"Created {metadata['created_utc']} (UTC).", ""]
    tuned = any(any(h for h in (r.get("hparams") or []) if isinstance(h, dict) and set(h) - {"q"}) for r in results.rows)
    tuning = ("Hyper-parameters are chosen on each fold's dev side and held fixed in the resamples, "
              "so the interval is conditional on the selection. " if tuned else "Nothing is tuned. ")
    parts += [
        "Every number is the mean over folds of the test-side metric (one fold for a fixed "
        "split), with a 95% interval (the expanded percentile interval unless metadata.json's config "
        "sets another ci_method) from a bootstrap that resamples whole groups "
        "(documents; pairs for STS-B and SemRel) of the reported side only: the test groups of a "
        "fixed split, every group under k-fold (each fold's test metric recomputed on the "
        "resample). " + tuning + "Where more than 5% of the resamples are undefined, "
        "or fewer groups are reported than the interval needs, the cell gives the estimate and "
        "the reason. `_doc` metrics are per-document (summary-level) means over the documents "
        "where every method read the same way has a defined metric, so that methods are compared "
        "on the same documents (the count is given; a parsed generation's row counts its own); "
        "Δ is the difference from the vanilla "
        "judge read the same way, on the same resamples (paired). Expected scores at "
        "temperature T read every distribution at T before any adjustment (priors measured at "
        "T, lambda in log-probability units)." + _MATCHED_NOTE * any(r.get("delta_matched") for r in results.rows),
        "",
    ]
    if results.notes:
        parts += ["Notes:", ""] + [f"- {n}" for n in results.notes] + [""]
    cut = {}
    for r in results.rows:
        if r.get("n_truncated"):
            cut[(r.get("judge"), r.get("task"), r.get("aspect"), r["scale"])] = (
                r["n_truncated"], r["n"], r.get("n_tokens_cut"))
    if cut:
        parts += ["**Warning: prompts were truncated to fit the context** (their source text was cut; "
                  "the judge did not read all of it):", ""]
        parts += [f"- {' '.join(str(x) for x in k if x)}: {c} of {n} prompts, "
                  + (f"{t:,} source tokens cut" if t is not None else "tokens cut unknown (store predates the count)")
                  for k, (c, n, t) in cut.items()] + [""]
    metrics, _ = _metric_names(results.rows)
    for m in [metric, f"{metric}_doc"]:
        # A headline with no defined cell (per-document metrics of a task without documents)
        # is left out.
        if m in metrics and any((r.get("metrics") or {}).get(m, {}).get("estimate") is not None for r in results.rows):
            parts += [f"## {m} (headline)", "", headline_table(results, m), ""]
    if any(r.get("delta_matched") for r in results.rows):
        parts += ["## Paired differences (headline)", "", paired_table(results), ""]
    if results.endpoints.get("registered"):
        parts += ["## Registered endpoints", "", REGISTERED_NOTE, "", registered_table(results), ""]
    if results.ranges:
        parts += ["## Over ranges", "", RANGES_NOTE, "", ranges_table(results), ""]
    if results.invariance:
        parts += ["## Range invariance on items", "", INVARIANCE_NOTE, "", invariance_table(results.invariance), ""]
    if results.endpoints and (results.endpoints.get("secondary") or {}).get("count"):
        sec = results.endpoints["secondary"]
        parts += ["## Secondary comparisons", "", SECONDARY_NOTE.format(**sec), "", secondary_table(results), ""]
    if any(e["choices"] for e in grid_edges(results)):
        table = edge_table(results)
        parts += ["## Choices at the edge of their grid", ""]
        parts += [_EDGE_NOTE, "", table, ""] if table else ["No tuned choice sits at an edge of its grid.", ""]
    parts += ["## All metrics", "", _long_table(results), ""]
    return "\n".join(parts)

