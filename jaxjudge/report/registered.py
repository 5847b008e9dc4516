"""The verdicts a confirmatory plan registers, read across the runs registered together.

A config with a `jaxjudge.experiment.Confirmation` registers its endpoints (the primary, then the
secondary ones, each with its margin) and one verdict rule (`VERDICT_RULE`) whose Holm families
span every run the plan names: the primary over the data sets, the secondary endpoints over
endpoints x data sets. One run's report cannot give those verdicts alone, so they are settled in
two steps:

* `registered_entries` (each run's report): every registered endpoint's comparison with its
  interval (the dev-side choice redone in each resample) and its p-value at the margin, the share
  of those resamples at or below it (`jaxjudge.metrics.multiplicity.margin_p_values`);
* `settle` (``jaxjudge report``, when the run's folder is written): the entries of every run of
  the family already reported beside it, Holm-adjusted per family at `ALPHA` and given the rule's
  verdict (`rule_verdict`); the primary endpoint's verdict becomes the registered one. Until every
  run of the family is reported, the verdicts read ``"pending"``, naming the runs missing; the
  runs reported before the last are rewritten with the settled verdicts
  (`jaxjudge.report.run.rewrite_run`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from jaxjudge.metrics.multiplicity import holm
from jaxjudge.report.ranges import find_primary
from jaxjudge.report.results import Results

__all__ = ["ALPHA", "family_verdicts", "registered_entries", "rule_verdict", "settle"]

ALPHA = 0.025
"""The one-sided level of the registered rule (`jaxjudge.experiment.confirmation.VERDICT_RULE`)."""

_KEYS = ("judge", "task", "aspect", "score", "method", "versus", "statistic", "metric")


def registered_entries(rows: Sequence[dict], ranges: Sequence[dict], specs: Sequence[Mapping[str, Any]],
                       confirmation: Any) -> list[dict[str, Any]]:
    """One entry per registered endpoint (``specs``: the primary first) and judge, task and aspect:
    ``{"endpoint", "family", "margin", "description", "interval", "p_margin"}`` (``endpoint``: the
    name the plan's power analysis gives it). An endpoint the report has no comparison for raises."""
    out = []
    for i, spec in enumerate(specs):
        hits = find_primary(rows, ranges, spec)
        if not hits:
            raise ValueError(f"registered endpoint {spec['method']} − {spec.get('versus')} matches no comparison "
                             "of this report (a pair no role gives must be in the config's comparisons)")
        power = confirmation.power_of(spec["method"], spec.get("versus")) if confirmation is not None else None
        for d, iv in hits:
            out.append({"endpoint": power.endpoint if power is not None else f"{spec['method']} − {spec.get('versus')}",
                        "family": "primary" if i == 0 else "secondary", "margin": spec["margin"], "description": d,
                        "interval": iv, "p_margin": (iv.get("p_margin") or {}).get(f"{spec['margin']:g}")})
    return out


def rule_verdict(iv: Mapping[str, Any], margin: float, rejected: bool) -> str:
    """The registered rule's word: ``"holds"`` where Holm rejects ``effect <= margin``, else
    ``"equivalent"`` (the interval inside [-margin, +margin]), ``"reversed"`` (its upper end
    below -margin) or ``"inconclusive"`` (also where no interval is given)."""
    if rejected:
        return "holds"
    lo, hi = iv.get("low"), iv.get("high")
    if lo is None or hi is None or iv.get("reason"):
        return "inconclusive"
    if -margin <= lo and hi <= margin:
        return "equivalent"
    return "reversed" if hi < -margin else "inconclusive"


def family_verdicts(by_run: Mapping[str, Sequence[Mapping[str, Any]]], alpha: float = ALPHA
                    ) -> dict[str, list[dict[str, Any]]]:
    """Every run's entries (`registered_entries`) with ``p_holm`` (Holm over the entries of the
    same family across all the runs) and ``verdict`` (`rule_verdict` at ``alpha``); copies, less
    an earlier ``pending`` note."""
    out = {run: [{k: v for k, v in e.items() if k != "pending"} for e in entries] for run, entries in by_run.items()}
    for family in ("primary", "secondary"):
        members = [e for entries in out.values() for e in entries if e["family"] == family]
        for e, p in zip(members, holm([e["p_margin"] for e in members])):
            e["p_holm"] = p
            e["verdict"] = rule_verdict(e["interval"], e["margin"], p is not None and p < alpha)
    return out


def _primary_verdicts(res: Results) -> None:
    """The primary endpoint's entries carry the registered verdict (the claims table reads it)."""
    settled = {tuple(e["description"].get(k) for k in _KEYS): e for e in res.endpoints.get("registered", [])
               if e["family"] == "primary"}
    for e in (res.endpoints.get("primary") or {}).get("endpoints", []):
        got = settled.get(tuple(e["description"].get(k) for k in _KEYS))
        if got is not None:
            e["verdict"] = got["verdict"]


def settle(results: Results, out: Any, runs: Sequence[str]) -> list[tuple[Any, Results]]:
    """Give ``results`` (written to folder ``out``) and the runs of its family already reported
    beside it (``out.parent / run``) the registered verdicts; without every run, ``"pending"``.
    Returns the other runs' ``(folder, results)``, to be rewritten (`jaxjudge.report.run.rewrite_run`)."""
    if "registered" not in results.endpoints:
        return []
    others = {r: Results.load_json(out.parent / r / "results.json") for r in runs
              if r != out.name and (out.parent / r / "results.json").exists()}
    others = {r: res for r, res in others.items() if "registered" in res.endpoints}  # else: reported before this
    missing = [r for r in runs if r != out.name and r not in others]
    if missing:
        for e in results.endpoints["registered"]:
            e.update(verdict="pending", p_holm=None, pending=f"not reported yet: {', '.join(missing)}")
        _primary_verdicts(results)
        return []
    mine = {out.name: results, **others}
    settled = family_verdicts({r: res.endpoints["registered"] for r, res in mine.items()})
    for r, res in mine.items():
        res.endpoints["registered"] = settled[r]
        _primary_verdicts(res)
    return [(out.parent / r, res) for r, res in others.items()]

