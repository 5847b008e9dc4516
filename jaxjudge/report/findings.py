"""Score-range findings across committed runs: one table per method, one figure per task.

For every (judge, task, aspect, score reading) of a run and every method, the table gives the
metric (Spearman by default) on each score range with its 95% interval, the spread over ranges
(the report's heterogeneity, the sd of the ranges' true values, with its interval: `jaxjudge.report.ranges`),
the mean over ranges, and on each range the
paired difference from the vanilla judge read the same way (with its interval, from the same
resamples). The figure draws the metric against the range, one line per method, with the
intervals as error bars.

    python -m jaxjudge.report.findings results/score_range_bias/stsb results/random_number_debias/stsb \
        --out results/figures        # Markdown on stdout, PNGs into --out

Everything is read from the runs' ``results.json``: no store and no model is needed.
"""

from __future__ import annotations

import argparse
import os
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from jaxjudge.report.methods import PARSED, Role, role_of
from jaxjudge.report.results import Results
from jaxjudge.report.intervals_text import format_interval

__all__ = ["range_rows", "range_markdown", "plot_range_curves", "main"]


def _scale_key(name: str) -> tuple[float, ...]:
    try:
        return tuple(float(x) for x in name.split("-"))
    except ValueError:
        return (float("inf"),)


def range_rows(results: Results, metric: str = "spearman", scores: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """One dict per (judge, task, aspect, score, method) with the metric on every range.

    Returns:
      dicts with the labels, ``scales`` (sorted), ``per_scale`` (scale -> interval dict),
      ``delta`` (scale -> paired difference from vanilla, or None), ``max_min`` and ``mean``
      (over the scales whose estimate is defined; None when fewer than two are) and ``over``:
      the report's record over ranges (`jaxjudge.report.ranges`: mean and spread with intervals)
      or None.
    """
    groups: dict[tuple, dict[str, dict]] = defaultdict(dict)
    for r in results.rows:
        if scores is not None and r["score"] not in scores and r["method"] not in PARSED:
            continue
        key = (r.get("judge"), r.get("task"), r.get("aspect"), r["score"], r["method"])
        groups[key][r["scale"]] = r
    over = {(g["judge"], g["task"], g["aspect"], g["score"], g["method"]): g for g in results.ranges
            if g.get("metric") == metric}
    out = []
    for (judge, task, aspect, score, method), by_scale in groups.items():
        scales = sorted(by_scale, key=_scale_key)
        per = {s: (by_scale[s].get("metrics") or {}).get(metric) or {} for s in scales}
        delta = {s: ((by_scale[s].get("delta") or {}).get(metric)) for s in scales}
        est = [per[s].get("estimate") for s in scales]
        est = [e for e in est if e is not None]
        out.append({
            "judge": judge, "task": task, "aspect": aspect, "score": score, "method": method, "scales": scales,
            "per_scale": per, "delta": delta,
            "max_min": float(max(est) - min(est)) if len(est) >= 2 else None,
            "mean": float(np.mean(est)) if len(est) >= 2 else None,
            # With intervals where the report computed them over the ranges' shared resamples.
            "over": over.get((judge, task, aspect, score, method)),
        })
    return out


def _range_panels(results: Results, metric: str, scores: Sequence[str] | None) -> dict[tuple, list[dict]]:
    """`range_rows` by (judge, task, aspect, reading), in order of first appearance."""
    panels: dict[tuple, list[dict]] = defaultdict(list)
    for r in range_rows(results, metric, scores):
        panels[(r["judge"], r["task"], r["aspect"], r["score"])].append(r)
    return panels


def range_markdown(results: Results, metric: str = "spearman", scores: Sequence[str] | None = None) -> str:
    """Markdown: per (judge, task, aspect, reading), a table of methods x ranges."""
    panels = _range_panels(results, metric, scores)
    parts = []
    for (judge, task, aspect, score), rs in panels.items():
        scales = sorted({s for r in rs for s in r["scales"]}, key=_scale_key)
        parts += [f"### {results.experiment}: {judge}, {task} {aspect}, {score}", ""]
        head = ["method", *scales, "spread", "mean", *[f"Δ vanilla {s}" for s in scales]]
        parts += [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
        for r in rs:
            cells = [r["method"]] + [format_interval(r["per_scale"].get(s)) for s in scales]
            if r["over"] is not None:
                cells += [format_interval(r["over"]["spread"]), format_interval(r["over"]["mean"])]
            else:  # no shared resamples: no noise to net out, so no spread
                cells += ["-", "-" if r["mean"] is None else f"{r['mean']:.3f}"]
            cells += [format_interval(r["delta"].get(s)) if r["delta"].get(s) else "" for s in scales]
            parts.append(f"| {' | '.join(cells)} |")
        parts.append("")
    return "\n".join(parts)


def plot_range_curves(results: Results, out_dir: str | os.PathLike, metric: str = "spearman",
                      scores: Sequence[str] | None = None) -> list[Path]:
    """One PNG per (judge, task, aspect, reading): the metric against the range per method."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    panels = _range_panels(results, metric, scores)
    paths = []
    for (judge, task, aspect, score), rs in panels.items():
        fig = Figure(figsize=(8.0, 4.0), layout="constrained")
        cmap = matplotlib.colormaps["tab20"]
        ax = fig.subplots()
        scales = sorted({s for r in rs for s in r["scales"]}, key=_scale_key)
        x = np.arange(len(scales))
        width = 0.6 / max(len(rs), 1)
        for i, r in enumerate(rs):
            est = np.asarray([np.nan if r["per_scale"].get(s, {}).get("estimate") is None else r["per_scale"][s]["estimate"]
                              for s in scales])
            lo = np.asarray([r["per_scale"].get(s, {}).get("low") for s in scales], dtype=float)
            hi = np.asarray([r["per_scale"].get(s, {}).get("high") for s in scales], dtype=float)
            off = x + (i - (len(rs) - 1) / 2) * width
            yerr = np.vstack([est - lo, hi - est])
            reference = role_of(r["method"]) is Role.REFERENCE
            color = "black" if reference else cmap(i % 20)
            ax.errorbar(off, est, yerr=np.where(np.isfinite(yerr), yerr, 0), marker="o", ms=4, capsize=2,
                        lw=2 if reference else 1, color=color, label=r["method"])
        ax.set_xticks(x, scales)
        ax.set_xlabel("score range")
        ax.set_ylabel(metric)
        ax.axhline(0, color="0.7", lw=0.8)
        ax.set_title(f"{judge}: {task} {aspect}, {score} (95% intervals)", fontsize=9)
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
        name = "_".join(str(p) for p in (results.experiment, judge, task, aspect, score, metric))
        path = out_dir / (name.replace("@", "at").replace("/", "_") + ".png")
        FigureCanvasAgg(fig)
        fig.savefig(path, dpi=110)
        paths.append(path)
    return paths


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders holding results.json")
    ap.add_argument("--metric", default="spearman")
    ap.add_argument("--scores", nargs="*", default=None, help="readings to keep (default: all)")
    ap.add_argument("--out", default=None, help="folder for the figures (default: none drawn)")
    args = ap.parse_args(argv)
    for run in args.runs:
        res = Results.load_json(Path(run) / "results.json")
        print(range_markdown(res, args.metric, args.scores))
        if args.out:
            for p in plot_range_curves(res, args.out, args.metric, args.scores):
                print(f"![{p.stem}]({os.path.relpath(p, Path(args.out).parent)})\n")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
