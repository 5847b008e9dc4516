"""Numbers of a findings page's prose, read from committed runs' ``results.json`` by typed keys.

A `Quote` names one number (or interval, p-value, count) of a run the way a claim names its
comparison (`jaxjudge.report.claims`): by the fields of the records (`typed_comparisons`,
a row's metric on one range, the primary endpoint, the secondary family), never by display
text. In the Markdown each quoted number sits between markers,
``<!-- q:NAME -->+0.012 [0.002, 0.023]<!-- /q -->`` (invisible once rendered), and
`splice` rewrites every such span from the runs; ``python -m jaxjudge.report.claims ...
--check`` fails where a span differs from what the runs give, so a stale number fails the
suite.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxjudge.report.intervals_text import format_p
from jaxjudge.report.ranges import nested_comparisons, typed_comparisons
from jaxjudge.report.results import Results

__all__ = ["Quote", "QUOTE", "quote_text", "splice"]

QUOTE = re.compile(r"<!-- q:([\w.\-]+) -->(.*?)<!-- /q -->", re.DOTALL)

@dataclass(frozen=True)
class Quote:
    """One number of a run, by typed keys.

    Attributes:
      run: the run folder under the results root (``"contrastive/stsb"``).
      method: the row (method variant).
      versus: the comparator's row (None: the method's own statistic, or a row's metric).
      statistic: ``"mean"``, ``"spread"``, ``"relative"`` or a range (``"2-6"``).
      score: the reading (``"expected@1"``).
      kind: ``"over ranges"`` or ``"range"`` (a comparison, `typed_comparisons`), ``"own"``
        (the method's own mean or spread), ``"metric"`` (a row's metric on the range
        ``statistic``), ``"primary"`` (the run's primary endpoint), ``"registered"`` (an endpoint
        of a confirmatory plan, `jaxjudge.report.registered`), ``"nested"`` (a comparison
        over ranges with the selection redone in every resample), ``"invariance"`` (the item sd
        across ranges of `jaxjudge.report.invariance`, or with ``versus`` its paired difference)
        or ``"secondary count"``.
      role: the comparator's role, where ``versus`` is not named.
      judge: the judge, where the run has several.
      show: ``"interval"`` (``+0.012 [0.002, 0.023]``), ``"estimate"``, ``"p"`` (Wald),
        ``"p_interval"`` (the interval's own), ``"p_holm"``, ``"verdict"`` (the primary's or a
        registered endpoint's registered verdict), ``"p_margin"`` (a registered endpoint's p at its
        margin; its ``"p_holm"`` is Holm's over its family at the margin) or ``"count"``.
      digits: decimals of an estimate and its bounds.
      metric: the metric (``"spearman"``).
    """

    run: str
    method: str | None = None
    versus: str | None = None
    statistic: str = "mean"
    score: str = "expected@1"
    kind: str = "over ranges"
    role: str | None = None
    judge: str | None = None
    show: str = "interval"
    digits: int = 3
    metric: str = "spearman"

    def label(self) -> str:
        what = self.method if self.versus is None else f"{self.method} − {self.versus}"
        return f"{self.run}: {what}, {self.statistic}, {self.score} ({self.kind})"


def _matches(q: Quote, d: Mapping[str, Any]) -> bool:
    want = {"method": q.method, "score": q.score, "statistic": q.statistic, "metric": q.metric}
    if q.judge is not None:
        want["judge"] = q.judge
    if q.role is not None:
        want["role"] = q.role
    else:
        want["versus"] = q.versus
    return all(d.get(k) == v for k, v in want.items())


def _entry(q: Quote, res: Results) -> Any:
    """The interval dict (or entry) a quote reads."""
    if q.kind == "secondary count":
        return res.endpoints["secondary"]
    if q.kind in ("primary", "registered"):
        ep = res.endpoints or {}
        entries = (ep.get("primary") or {}).get("endpoints", []) if q.kind == "primary" else ep.get("registered", [])
        hits = [e for e in entries if _matches(q, e["description"])]
        return hits[0] if len(hits) == 1 else _refuse(q, len(hits))
    if q.kind == "metric":
        hits = [r for r in res.rows if (r["method"], r["score"], r["scale"]) == (q.method, q.score, q.statistic)
                and (q.judge is None or r["judge"] == q.judge)]
        return hits[0]["metrics"][q.metric] if len(hits) == 1 else _refuse(q, len(hits))
    if q.kind == "invariance":
        return _invariance(q, res)
    if q.kind == "nested":
        hits = [iv for d, iv in nested_comparisons(res.ranges) if _matches(q, d)]
    else:
        hits = [iv for d, iv in typed_comparisons(res.rows, res.ranges) if d["kind"] == q.kind and _matches(q, d)]
    return hits[0] if len(hits) == 1 else _refuse(q, len(hits))


def _invariance(q: Quote, res: Results) -> dict[str, Any]:
    """A method's item sd across ranges (``versus`` None) or its difference from ``versus``."""
    recs = [r for r in res.invariance if r["score"] == q.score and (q.judge is None or r["judge"] == q.judge)]
    if len(recs) != 1:
        return _refuse(q, len(recs))
    hits = [m for m in recs[0]["methods"] if m["method"] == q.method]
    if q.versus is None:
        return hits[0]["item_sd"] if len(hits) == 1 else _refuse(q, len(hits))
    diffs = [v["diff"] for m in hits for v in m["versus"] if v["baseline"] == q.versus]
    return diffs[0] if len(diffs) == 1 else _refuse(q, len(diffs))


def _refuse(q: Quote, n: int) -> Any:
    raise ValueError(f"quote {q.label()}: {n} records match (want exactly 1)")


def quote_text(q: Quote, res: Results) -> str:
    """The quote as the prose prints it."""
    got = _entry(q, res)
    if q.show == "count":
        return f"{got['count']:,}"
    if q.kind in ("primary", "registered"):
        if q.show == "verdict":
            return got["verdict"]
        if q.kind == "registered" and q.show in ("p_holm", "p_margin"):  # the registered rule's, at the margin
            return format_p(got.get(q.show), got["interval"].get("n_boot"))
        got = got["interval"]
    d = q.digits
    if q.show in ("p", "p_holm", "p_interval"):
        return format_p(got.get(q.show), got.get("n_boot"))
    if got.get("estimate") is None:
        return "undefined"
    unsigned = q.kind in ("metric", "own") or (q.kind == "invariance" and q.versus is None)
    est = f"{got['estimate']:.{d}f}" if unsigned else f"{got['estimate']:+.{d}f}"
    if q.show == "estimate" or got.get("low") is None or got.get("reason"):
        return est
    return f"{est} [{got['low']:.{d}f}, {got['high']:.{d}f}]"


def splice(text: str, quotes: Mapping[str, Quote], results_root: str | Path = "results") -> str:
    """``text`` with every ``<!-- q:NAME -->...<!-- /q -->`` span rewritten from the runs.

    Raises:
      ValueError: a span names no quote in ``quotes``, or a quote is defined and never used.
    """
    cache: dict[str, Results] = {}

    def one(m: re.Match) -> str:
        name = m.group(1)
        if name not in quotes:
            raise ValueError(f"quotes: the text quotes {name!r}, which the claims file does not define")
        q = quotes[name]
        if q.run not in cache:
            cache[q.run] = Results.load_json(Path(results_root) / q.run / "results.json")
        return f"<!-- q:{name} -->{quote_text(q, cache[q.run])}<!-- /q -->"

    unused = sorted(set(quotes) - {name for name, _ in QUOTE.findall(text)})
    if unused:
        raise ValueError(f"quotes: defined but not in the text: {unused}")
    return QUOTE.sub(one, text)
