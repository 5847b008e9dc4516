"""Choices at the edge of their grid: where a tuned method's selected value is its grid's end.

A value chosen at the bottom or the top of its grid may sit there because the best value lies
beyond it: the grid then limits the method, and a finding about the method is a finding about
its grid. `grid_edges` counts, from a report's rows and figure extras alone (no recomputation),
every fold's choice of each hyper-parameter of each tuned method at each reading: how many sit
at the bottom, how many at the top.

A choice made among ties is no choice: where the dev metric is the same at every value of the
parameter (with the other parameters held where they were chosen), the first value of the
grid wins the tie, and it is counted as ``flat`` rather than as an edge (a temperature does not
move the greedy score, say). The dev metric read for that is the one the report keeps for its
figures: the mean over folds at each grid point (for a fixed split, the fold's own).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["edge_table", "grid_edges"]


def _line(params: dict[str, list[float]], dev: Sequence[float | None], chosen: dict[str, float], p: str) -> list:
    """The dev metric at every grid point whose parameters other than ``p`` are as chosen."""
    return [d for _, d in _line_points(params, dev, chosen, p)]


def _line_points(params, dev, chosen, p) -> list[tuple[float, float | None]]:
    """``(value of p, dev metric)`` along that line, in increasing value of ``p``."""
    pts = [(params[p][i], dev[i]) for i in range(len(dev))
           if all(params[q][i] == chosen[q] for q in params if q != p)]
    return sorted(pts, key=lambda x: x[0])


def _last_step(points: list[tuple[float, float | None]], at_top: bool) -> float | None:
    """|dev metric at the edge - at its neighbour on the line|: how much the last step of the
    grid still moved the metric (near 0: a plateau, the grid's end is not what limits)."""
    if len(points) < 2:
        return None
    a, b = (points[-1][1], points[-2][1]) if at_top else (points[0][1], points[1][1])
    return None if a is None or b is None else abs(a - b)


def grid_edges(results: Any) -> list[dict[str, Any]]:
    """One record per (judge, method, reading, parameter) of a tuned method with a grid.

    Args:
      results: a `jaxjudge.report.results.Results` (rows with ``hparams``; ``aux`` with the
        ``grids`` of every cell).

    Returns:
      dicts with ``judge``, ``method``, ``score``, ``param``, ``low`` and ``high`` (the grid's
      ends), ``at_low``, ``at_high``, ``flat`` (choices among ties over the whole line of the
      parameter, counted in neither end), ``choices`` (folds x cells with a choice) and
      ``last_step`` (largest over the edge choices of how much the dev metric moved between the
      edge and its neighbour on the line, the mean over folds the figures keep; None: no edge
      choice), in the rows' order.
    """
    grids = {}
    for a in results.aux:
        for key, g in (a.get("grids") or {}).items():
            variant, kind = key.split("|", 1)
            grids[(a.get("judge"), a.get("task"), a.get("aspect"), a.get("scale"), variant, kind)] = g
    out: dict[tuple, dict[str, Any]] = {}
    for r in results.rows:
        g = grids.get((r.get("judge"), r.get("task"), r.get("aspect"), r.get("scale"), r["method"], r["score"]))
        if g is None:
            continue
        params = g["params"]
        for p, values in params.items():
            lo, hi = min(values), max(values)
            if lo == hi:
                continue  # a fixed value, not a choice
            rec = out.setdefault((r.get("judge"), r["method"], r["score"], p), {
                "judge": r.get("judge"), "method": r["method"], "score": r["score"], "param": p,
                "low": lo, "high": hi, "at_low": 0, "at_high": 0, "flat": 0, "choices": 0, "last_step": None,
            })
            for chosen in r.get("hparams") or []:
                if p not in chosen:
                    continue
                rec["choices"] += 1
                line = _line(params, g["dev"], chosen, p)
                if len(line) > 1 and all(v is not None and v == line[0] for v in line):
                    rec["flat"] += 1
                elif chosen[p] in (lo, hi):
                    rec["at_low" if chosen[p] == lo else "at_high"] += 1
                    step = _last_step(_line_points(params, g["dev"], chosen, p), chosen[p] == hi)
                    if step is not None:
                        rec["last_step"] = step if rec["last_step"] is None else max(rec["last_step"], step)
    return list(out.values())


def edge_table(results: Any) -> str:
    """Markdown: every (judge, method, reading, parameter) with a choice at an edge of its grid,
    and how many of its choices (folds x cells) sit at each end; "" when none does."""
    recs = [e for e in grid_edges(results) if e["at_low"] or e["at_high"]]
    if not recs:
        return ""
    lines = ["| judge | method | score | parameter | grid | at the bottom | at the top | flat | choices "
             "| dev change over the last step (largest) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for e in recs:
        step = "-" if e.get("last_step") is None else f"{e['last_step']:.4f}"
        lines.append(
            f"| {e['judge']} | {e['method']} | {e['score']} | {e['param']} | {e['low']:g} .. {e['high']:g} "
            f"| {e['at_low']} of {e['choices']} | {e['at_high']} of {e['choices']} | {e['flat']} | {e['choices']} "
            f"| {step} |"
        )
    return "\n".join(lines)
