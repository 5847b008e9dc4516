"""Verdicts on the papers' claims by a stated rule, read from committed runs' ``results.json``.

A claim names a comparison of a run (a method against a comparator, on a statistic over or on a
range, at one reading) and the direction the paper states. Its verdict follows one rule
(`RULE`), applied to the interval the report already holds, and the table quotes that interval:

* **holds**: the 95% interval lies on the claimed side of 0 and, for a secondary comparison,
  its Holm-adjusted p-value (`jaxjudge.report.ranges`) is below 0.05;
* **contradicted**: the same on the other side;
* **not shown**: anything else (the interval covers 0, or only the unadjusted one clears it);
* an *equivalence* claim ("barely matters") holds when the interval lies within +-margin and is
  contradicted when it lies outside it;
* "the range matters" holds when some pair of ranges differs (the vanilla judge's range
  differences, Holm-adjusted): the pair with the smallest adjusted p-value is quoted.

    python -m jaxjudge.report.claims experiments/claims.py --write results/README.md   # rewrite
    python -m jaxjudge.report.claims experiments/claims.py --check results/README.md   # verify

The table goes between the markers ``<!-- claims: begin -->`` and ``<!-- claims: end -->``, and
every number of the prose quoted as ``<!-- q:NAME -->...<!-- /q -->`` is rewritten from the
claims file's ``QUOTES`` (`jaxjudge.report.quotes`); ``--check`` exits 1 when the file's block
or any quoted number differs from what the runs give.
"""

from __future__ import annotations

import argparse
import importlib.util
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxjudge.metrics.multiplicity import holm
from jaxjudge.report.endpoint_tables import interval_p
from jaxjudge.report.intervals_text import format_p
from jaxjudge.report.quotes import QUOTE, splice
from jaxjudge.report.ranges import nested_comparisons, typed_comparisons
from jaxjudge.report.results import Results
from jaxjudge.store.registration import REGISTERED

__all__ = ["Claim", "Run", "RULE", "claims_table", "main", "plan", "verdict"]

BEGIN, END = "<!-- claims: begin -->", "<!-- claims: end -->"

RULE = (
    "Verdicts by rule, from the runs' own intervals: **holds** where the 95% interval lies on the "
    "claimed side of 0 and (for a secondary comparison) its Holm-adjusted p-value is below 0.05; "
    "**contradicted** where the same holds on the other side; **not shown** otherwise. An "
    "equivalence claim holds where the interval lies within the stated margin, and is "
    "contradicted where it lies outside it. \"The range matters\" holds where some pair of ranges "
    "differs by the same rule (the pair with the smallest adjusted p-value is quoted). Each run's "
    "primary endpoint is read unadjusted (marked *primary*), its interval redoing the dev-side "
    "choice in every resample where a side is tuned; everything else is secondary, read with the "
    "hyper-parameters held at the dev choice, except where a claim is marked *nested*: its interval "
    "then redoes the choice in every resample too, and its Holm-adjusted p-value is that of the "
    "held-fixed comparison in the run's secondary family (both must clear). A primary endpoint "
    "registered before extraction (column *plan*) is given the verdict its registration defines, "
    "the one its run's `results.json` holds (with a declared margin: **better** where the interval "
    "lies above +margin, **worse** below -margin, **equivalent** within it, **inconclusive** "
    "otherwise; an endpoint of a confirmatory plan registered across runs: **holds** where Holm "
    "over its family, at the margin and across the runs, rejects, then **equivalent**, **reversed** or "
    "**inconclusive**, its Holm p the one at the margin); every other row is *post hoc*: chosen or read "
    "after the data were seen. Holm across "
    "runs adjusts each run's p-value of its own interval (below 0.05 exactly where it excludes 0)."
)


@dataclass(frozen=True)
class Run:
    """A committed run a claim is read on, and which of its judges (needed where it has several)."""

    path: str
    judge: str | None = None

    def label(self) -> str:
        return self.path if self.judge is None else f"{self.path} ({self.judge})"


@dataclass(frozen=True)
class Claim:
    """One claim of the papers, as a comparison of committed runs, by typed keys
    (`jaxjudge.report.ranges.typed_comparisons`), never by display text.

    Attributes:
      text: the claim as stated.
      runs: the runs (`Run`, or a run folder under the results root such as
        ``"contrastive/stsb"`` for a run of one judge); one verdict each.
      method: the row (method variant) the claim is about.
      versus: its comparator's row name, or None (the method's own range differences).
      role: instead of ``versus``, the comparator's role in the report (``"calibration"``: the
        calibration baseline with the best dev metric, as the report picks it).
      statistic: ``"mean"``, ``"spread"``, ``"relative"``, a range (``"1-5"``) or
        ``"range pairs"`` (with neither ``versus`` nor ``role``).
      score: the reading, e.g. ``"expected@0.2"``.
      expect: ``"higher"``, ``"lower"`` or ``"equivalent"`` (the difference, method minus
        comparator; for ``"range pairs"``: ``"differs"``).
      margin: the equivalence margin.
      holm_across_runs: the claim is one family over its runs (confirmatory primaries on several
        data sets): each run's p-value is Holm-adjusted across them and read at 0.05.
      nested: read a secondary comparison with its nested interval (the dev-side choice redone
        in every resample on both sides; the run's config lists both rows in ``nested_rows``);
        its Holm p-value is the held-fixed comparison's. A run without that interval is refused.
    """

    text: str
    runs: tuple[Run | str, ...]
    method: str
    versus: str | None
    statistic: str
    score: str
    expect: str
    margin: float = 0.05
    role: str | None = None
    holm_across_runs: bool = False
    nested: bool = False

    def run_refs(self) -> tuple[Run, ...]:
        return tuple(Run(r) if isinstance(r, str) else r for r in self.runs)  # (a Run of `python -m` is __main__.Run)


def _fmt(iv: dict[str, Any]) -> str:
    if iv.get("estimate") is None:
        return "undefined"
    text = f"{iv['estimate']:+.3f}"
    if iv.get("low") is not None and not iv.get("reason"):
        text += f" [{iv['low']:+.3f}, {iv['high']:+.3f}]"
    else:
        text += f" (no interval: {iv.get('reason')})"
    if iv.get("p_holm") is not None:
        text += f", Holm p {format_p(iv['p_holm'], iv.get('n_boot'))}"
    return text


def _side(iv: dict[str, Any], primary: bool, alpha: float = 0.05) -> int:
    """+1 / -1 where the interval clears 0 above / below (and a secondary's Holm p < alpha), else 0."""
    if iv.get("low") is None or iv.get("reason"):
        return 0
    if not primary and not (iv.get("p_holm") is not None and iv["p_holm"] < alpha):
        return 0
    return 1 if iv["low"] > 0 else -1 if iv["high"] < 0 else 0


def _find(res: Results, claim: Claim, judge: str | None) -> list[tuple[dict, dict]]:
    hits = []
    for d, iv in typed_comparisons(res.rows, res.ranges):
        if (d["method"], d["score"]) != (claim.method, claim.score) or (judge is not None and d["judge"] != judge):
            continue
        if claim.statistic == "range pairs":
            if d["kind"] == "range pair":
                hits.append((d, iv))
        elif d["kind"] in ("range", "over ranges") and d["statistic"] == claim.statistic and (
                d["role"] == claim.role if claim.role is not None else d["versus"] == claim.versus):
            hits.append((d, iv))
    judges = sorted({d["judge"] for d, _ in hits})
    if len(judges) > 1:
        raise ValueError(f"claim {claim.text!r}: a run of experiment {res.experiment} has judges {judges}; name one "
                         "(Run(path, judge))")
    return hits


def _comparison(claim: Claim, res: Results, run: Run) -> tuple[dict, dict, dict | None]:
    """The comparison a (non range-pair) claim reads on a run: ``(description, interval, primary)``
    (``primary``: the run's primary endpoint entry of ``results.json``, with its registered
    ``verdict`` where a margin was declared, or the entry of an endpoint a confirmatory plan
    registered (`jaxjudge.report.registered`); None for a secondary comparison); a run's primary
    endpoint is quoted with its own interval (the selection redone inside it where its config asks)."""
    hits = _find(res, claim, run.judge)
    if not hits:
        raise ValueError(f"claim {claim.text!r}: no comparison {claim.method} vs {claim.versus or claim.role}, "
                         f"{claim.statistic}, {claim.score} in run {run.label()}")
    if len(hits) > 1:
        raise ValueError(f"claim {claim.text!r}: {len(hits)} comparisons match in run {run.label()}; "
                         "the claims name one judge, task and aspect per run")
    d, iv = hits[0]
    keys = ("judge", "task", "aspect", "score", "method", "versus", "statistic")
    ep = res.endpoints or {}
    for e in [*ep.get("registered", []), *(ep.get("primary") or {}).get("endpoints", [])]:
        if all(e["description"].get(k) == d[k] for k in keys) and e["description"].get("metric") == d["metric"]:
            return d, e["interval"], e
    if claim.nested:
        twins = [niv for nd, niv in nested_comparisons(res.ranges)
                 if all(nd.get(k) == d[k] for k in keys) and nd["metric"] == d["metric"]]
        if not twins:
            raise ValueError(f"claim {claim.text!r}: run {run.label()} has no nested interval of {claim.method} vs "
                             f"{claim.versus}, {claim.statistic}, {claim.score} (list both rows in its config's "
                             "nested_rows)")
        return {**d, "selection": "nested"}, {"n_boot": iv.get("n_boot"), **twins[0], "p_holm": iv.get("p_holm")}, None
    return d, iv, None


def plan(res: Results, claim: Claim, run: Run | str | None = None) -> str:
    """``"registered"`` where the claim reads the primary endpoint of a run registered before
    extraction (`jaxjudge.store.registration`), or an endpoint its confirmatory plan registered,
    else ``"post hoc"``."""
    run = Run(res.experiment) if run is None else Run(run) if isinstance(run, str) else run
    if claim.statistic == "range pairs" or (res.registration or {}).get("status") != REGISTERED:
        return "post hoc"
    return "registered" if _comparison(claim, res, run)[2] is not None else "post hoc"


def _rule_word(claim: Claim, iv: dict[str, Any], primary: bool) -> str:
    """The verdict of this module's rule (see `RULE`) on one interval."""
    if claim.expect == "equivalent":
        if iv.get("low") is None or iv.get("reason"):
            return "not shown"
        if -claim.margin < iv["low"] and iv["high"] < claim.margin:
            return f"holds (within ±{claim.margin:g})"
        if iv["low"] > claim.margin or iv["high"] < -claim.margin:
            return f"contradicted (outside ±{claim.margin:g})"
        return "not shown"
    side, want = _side(iv, primary), {"higher": 1, "lower": -1}[claim.expect]
    return "holds" if side == want else "contradicted" if side == -want else "not shown"


def verdict(res: Results, claim: Claim, run: Run | str | None = None,
            p_family: float | None = None) -> tuple[str, str, str]:
    """``(verdict, the comparison quoted, its interval)`` of one claim on one run; ``p_family``:
    the run's p-value Holm-adjusted across the claim's runs (``holm_across_runs``).

    A primary endpoint registered before extraction (`plan`) gets the verdict its registration
    defines, as its run's ``results.json`` records it (`jaxjudge.report.ranges.three_way` at the
    declared margin); without a declared margin, the interval's side of 0."""
    run = Run(res.experiment) if run is None else Run(run) if isinstance(run, str) else run
    if claim.statistic == "range pairs":
        hits = _find(res, claim, run.judge)
        if not hits:
            raise ValueError(f"claim {claim.text!r}: no range pairs of {claim.method}, {claim.score} in run "
                             f"{run.label()}")
        tested = [(d, iv) for d, iv in hits if iv.get("p_holm") is not None]
        d, iv = min(tested or hits, key=lambda h: h[1].get("p_holm") if h[1].get("p_holm") is not None else 2.0)
        word = "holds" if _side(iv, False) != 0 else "not shown"
        return word, f"{d['method']}, ranges {' − '.join(d['scales'])}", _fmt(iv)
    d, iv, entry = _comparison(claim, res, run)
    role = None if entry is None else "primary" if entry.get("family", "primary") == "primary" else "registered secondary"
    label = (f"{d['method']} − {d['versus']}, {d['statistic']}" + (f" (*{role}*)" if role else "")
             + (" (*nested*)" if d.get("selection") == "nested" else ""))
    if p_family is not None and claim.expect != "equivalent":
        iv = {**iv, "p_holm": p_family}
        label += ", Holm across runs"
    if plan(res, claim, run) == "registered" and entry.get("verdict"):
        if "p_holm" in entry:  # a confirmatory plan's: Holm at the margin over its family, across runs
            iv, label = {**iv, "p_holm": entry["p_holm"]}, label + f", registered family (at ±{entry['margin']:g})"
        return entry["verdict"], label, _fmt(iv)
    return _rule_word(claim, iv, entry is not None and p_family is None), label, _fmt(iv)


def claims_table(claims: Sequence[Claim], results_root: str | Path = "results") -> str:
    """The Markdown block: the rule, then one line per (claim, run)."""
    lines = [RULE, "", "| claim | run | plan | reading | comparison | difference [95% interval] | verdict |",
             "|---|---|---|---|---|---|---|"]
    for c in claims:
        refs = c.run_refs()
        results = [Results.load_json(Path(results_root) / r.path / "results.json") for r in refs]
        family: list[float | None] = [None] * len(refs)
        if c.holm_across_runs:
            family = holm([interval_p(_comparison(c, res, r)[1]) for res, r in zip(results, refs)])
        for res, run, p in zip(results, refs, family):
            word, label, interval = verdict(res, c, run, p)
            where = plan(res, c, run)
            lines.append(f"| {c.text} | {run.label()} | {'*post hoc*' if where == 'post hoc' else where} | {c.score} "
                         f"| {label} | {interval} | **{word}** |")
    return "\n".join(lines)


def _load(path: str) -> Any:
    spec = importlib.util.spec_from_file_location("_claims", path)
    if spec is None or spec.loader is None:
        raise SystemExit(f"claims: cannot load {path}")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _load_claims(path: str) -> list[Claim]:
    return list(_load(path).CLAIMS)


def _replace_block(text: str, block: str, where: str) -> str:
    if BEGIN not in text or END not in text:
        raise SystemExit(f"claims: {where} has no {BEGIN} ... {END} block")
    head, rest = text.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    return f"{head}{BEGIN}\n{block}\n{END}{tail}"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("claims", help="a Python file defining CLAIMS, a list of Claim")
    ap.add_argument("--results", default="results", help="results root (default: results)")
    group = ap.add_mutually_exclusive_group()
    group.add_argument("--write", metavar="MARKDOWN", help="rewrite the claims block of this file")
    group.add_argument("--check", metavar="MARKDOWN", help="exit 1 if this file's claims block differs")
    args = ap.parse_args(argv)
    mod = _load(args.claims)
    block = claims_table(list(mod.CLAIMS), args.results)
    if not args.write and not args.check:
        print(block)
        return 0
    path = Path(args.write or args.check)
    old = path.read_text(encoding="utf-8")
    new = splice(_replace_block(old, block, str(path)), getattr(mod, "QUOTES", {}), args.results)
    if args.check:
        if new != old:
            stale = [f"{a!r} -> {b!r}" for a, b in zip(QUOTE.findall(old), QUOTE.findall(new)) if a != b]
            print(f"claims: {path} differs from the runs' results "
                  f"({'quotes: ' + '; '.join(stale) if stale else 'the claims block'})", flush=True)
            return 1
        print(f"claims: {path} is up to date")
        return 0
    path.write_text(new, encoding="utf-8")
    print(f"claims: {path} {'rewritten' if new != old else 'unchanged'}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
