"""The report as a terminal reads it: the primary endpoint, then narrow tables with footnotes.

`results.md` in the run folder holds every number; what the command prints is the part a
reader looks at first, kept within a terminal's width (100 columns by default): per reading, the
metric on each range with its 95% interval, and the mean and spread over ranges with the
difference of the mean from the vanilla judge. A cell that has no interval says why once, in a
footnote (``(a) no interval: too few groups (4 < 10)``), not in every cell.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence
from typing import Any

from jaxjudge.report.results import Results
from jaxjudge.report.endpoint_tables import primary_line
from jaxjudge.report.methods import PARSED
from jaxjudge.report.ranges import REFERENCE_ROLE

__all__ = ["terminal_report"]

_GENERATED = PARSED


class _Notes:
    """Footnote letters, one per distinct note, in order of first use."""

    def __init__(self) -> None:
        self.notes: dict[str, str] = {}

    def mark(self, note: str) -> str:
        if note not in self.notes:
            i = len(self.notes)
            self.notes[note] = chr(ord("a") + i) if i < 26 else str(i)
        return f"({self.notes[note]})"

    def lines(self, width: int) -> list[str]:
        out = []
        for note, key in self.notes.items():
            out += textwrap.wrap(f"({key}) {note}", width, subsequent_indent="    ")
        return out


def _short(x: float) -> str:
    """An interval bound in two decimals without the leading zero (``.35``, ``-.04``, ``1.00``)."""
    text = f"{x:.2f}"
    return text.replace("0.", ".", 1) if text.startswith(("0.", "-0.")) else text


def _cell(iv: dict[str, Any] | None, notes: _Notes, extra: str | None = None) -> str:
    """``0.41 [.35,.47]``; the estimate and a footnote mark where no interval is given."""
    marks = [notes.mark(extra)] if extra else []
    if not iv or iv.get("estimate") is None:
        why = None if not iv or iv.get("docs") is None else f"{iv['docs_defined']}/{iv['docs']} documents defined"
        return " ".join(["-", *marks, *([notes.mark(why)] if why else [])])
    text = f"{iv['estimate']:.2f}"
    if iv.get("low") is not None and iv.get("high") is not None and not iv.get("reason"):
        text += f" [{_short(iv['low'])},{_short(iv['high'])}]"
    else:
        marks.append(notes.mark(f"no interval: {iv.get('reason') or 'not computed'}"))
    return " ".join([text, *marks])


def _table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    return [fmt.format(*head).rstrip(), *(fmt.format(*r).rstrip() for r in rows)]


def _parse_note(r: dict[str, Any]) -> str | None:
    n, fails = ((r.get("n_test"), r.get("parse_failures_test")) if r.get("parse_failures_test") is not None
                else (r.get("n"), r.get("parse_failures")))
    if n is None or fails is None or (fails == 0 and r.get("n_distinct_parsed") != 1):
        return None  # every generation parsed: nothing to say
    note = f"{n - fails}/{n} generations parsed"
    if n - fails > 0 and r.get("n_distinct_parsed") == 1:
        note += ", all the same score"
    return note


def terminal_report(results: Results, metric: str = "spearman", scores: Sequence[str] | None = None,
                    width: int = 100) -> str:
    """The printed summary of a report (see the module docstring).

    Args:
      results: the report.
      metric: the metric shown per range (the selection metric's name, e.g. ``"spearman"``).
      scores: readings to show (default: every reading of the rows).
      width: wrap prose at this many columns (the tables fit 100 columns for up to 4 ranges).
    """
    out = textwrap.wrap(primary_line(results).replace("**", ""), width) if results.endpoints else []
    notes = _Notes()
    keys = list(dict.fromkeys((r.get("judge"), r.get("task"), r.get("aspect")) for r in results.rows))
    readings = [s for s in dict.fromkeys(r["score"] for r in results.rows if r["method"] not in _GENERATED)
                if scores is None or s in scores]
    for judge, task, aspect in keys:
        rows = [r for r in results.rows if (r.get("judge"), r.get("task"), r.get("aspect")) == (judge, task, aspect)]
        scales = list(dict.fromkeys(r["scale"] for r in rows))
        for score in readings:
            mine = [r for r in rows if r["score"] == score or r["method"] in _GENERATED]
            methods = list(dict.fromkeys(r["method"] for r in mine))
            index = {(r["method"], r["scale"]): r for r in mine}
            body = []
            for m in methods:
                cells = [m]
                for s in scales:
                    r = index.get((m, s))
                    extra = _parse_note(r) if r and m in _GENERATED else None
                    cells.append(_cell((r or {}).get("metrics", {}).get(metric), notes, extra) if r else "")
                body.append(cells)
            out += ["", f"{judge}, {task} {aspect}: {metric} by score range, reading {score} (95% intervals)", ""]
            out += _table(["method", *scales], body)
            over = [g for g in results.ranges if (g["judge"], g["task"], g["aspect"], g["score"]) ==
                    (judge, task, aspect, score) and g.get("metric") == metric]
            if over:
                body = []
                for g in over:
                    van = next((v for v in g["versus"] if v["role"] == REFERENCE_ROLE), None)
                    body.append([g["method"], _cell(g["mean"], notes), _cell(g["spread"], notes),
                                 _cell(van["mean_diff"], notes) if van else ""])
                out += ["", f"over the ranges {scales[0]} .. {scales[-1]}:", ""]
                out += _table(["method", "mean", "spread (sd of true values)", "mean - vanilla's"], body)
    if notes.notes:
        out += [""] + notes.lines(width)
    return "\n".join(out)
