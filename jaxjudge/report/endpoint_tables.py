"""Markdown of the primary endpoint, the statistics over ranges and the secondary comparisons
(`jaxjudge.report.ranges`), as `results.md` prints them."""

from __future__ import annotations

from typing import Any

from jaxjudge.report.intervals_text import format_interval, format_p
from jaxjudge.report.power import power_words, secondary_power_lines
from jaxjudge.report.ranges import comparisons
from jaxjudge.report.results import Results

__all__ = ["RANGES_NOTE", "REGISTERED_NOTE", "SECONDARY_NOTE", "interval_p", "primary_line", "ranges_table",
           "registered_table", "secondary_table"]

RANGES_NOTE = (
    "Mean and spread of the selection metric over the score ranges, and each method's "
    "paired differences from its comparators: the vanilla judge read the same way, its matched "
    "baseline, and the calibration baseline with the best dev metric (role in parentheses). "
    "The ranges' cells resample the same groups with the same seed, so every statistic here is "
    "computed on each resample (a negative Δ spread is more stable). The spread is the standard "
    "deviation of the ranges' true values (the noise from the ranges' bootstrap covariance), "
    "estimated median-unbiased, its interval from inverting the profile likelihood-ratio test (it "
    "reaches 0); Δ spread takes each side's sd net of the noise, its replicates netted of twice "
    "the noise. \"relative\" is the papers' figure as a ratio of means: (mean of the method - "
    "mean of the baseline) / |mean of the baseline| over the ranges. "
    "p: the interval's own p-value (the smallest alpha at which the interval, on the same "
    "resamples, excludes 0: below 0.05 exactly where the 95% interval lies on one side of 0) where "
    "the run has it, else the Wald p-value of the bootstrap standard error; Holm: the Wald "
    "p-values adjusted over the secondary family."
)

SECONDARY_NOTE = (
    "Every paired comparison other than the primary endpoint: {count} in all, adjusted together "
    "with Holm's step-down procedure (family-wise error rate {alpha:g}); {significant} have an "
    "adjusted p-value below {alpha:g}. The p-values are Wald ones from the bootstrap standard "
    "error (a percentile-bootstrap p-value cannot go below 2/(B+1), which Holm over this many "
    "comparisons could never reject); the intervals are the unadjusted 95% ones, and \"p (interval)\" "
    "is the interval's own p-value (below 0.05 exactly where it excludes 0; empty for results "
    "that predate it)."
)



def interval_p(iv: dict[str, Any]) -> float | None:
    """The p-value that agrees with the interval printed beside it: ``p_interval`` (the interval
    inverted on the same resamples, `jaxjudge.metrics.multiplicity.interval_p_value`) where the
    results have it, else the Wald ``p`` of older results."""
    return iv["p_interval"] if iv.get("p_interval") is not None else iv.get("p")


def _p(iv: dict[str, Any] | None) -> str:
    if not iv or iv.get("p") is None:
        return ""
    held = f", Holm {format_p(iv['p_holm'], iv.get('n_boot'))}" if iv.get("p_holm") is not None else ""
    return f" (p {format_p(interval_p(iv), iv.get('n_boot'))}{held})"


def _describe(d: dict[str, Any]) -> str:
    stat = {"mean": "mean over ranges", "spread": "spread over ranges",
            "relative": "relative improvement of the mean over ranges"}.get(d["statistic"], f"range {d['statistic']}")
    if " − " in d["statistic"]:
        stat = f"ranges {d['statistic']}"
    where = ", ".join(str(d[k]) for k in ("judge", "task", "aspect") if d.get(k))
    what = d["method"] if d.get("versus") is None else f"{d['method']} − {d['versus']}"
    nested = "; selection redone in each resample" if d.get("selection") == "nested" else ""
    return f"{what}, {d['metric']}, {stat}, {d['score']} ({where}{nested})"


def primary_line(results: Results) -> str:
    """The primary endpoint(s) with (unadjusted) intervals, and the secondary count."""
    ep = results.endpoints or {}
    sec = ep.get("secondary") or {}
    count = (f"{sec['count']} secondary comparisons, Holm-adjusted: {sec['significant']} with adjusted p < "
             f"{sec['alpha']:g}." if sec else "")
    prim = ep.get("primary")
    if not prim:
        return ("No primary endpoint is declared (config field `primary`): every comparison is secondary. "
                + count).strip()
    lines = []
    for e in prim["endpoints"]:
        iv = e["interval"]
        text = f"{_describe(e['description'])}: {format_interval(iv)}"
        if iv.get("p") is not None:
            text += f", p {format_p(interval_p(iv), iv.get('n_boot'))}"
            if iv.get("p_holm") is not None:
                text += (f" (Holm over the {len(prim['endpoints'])} co-primary: "
                         f"{format_p(iv['p_holm'], iv.get('n_boot'))})")
        if e.get("verdict"):
            text += f"; {e['verdict']} at the declared margin ±{prim['spec']['margin']:g}"
        text += power_words(results.registration, e["description"]["method"], e["description"].get("versus"))
        lines.append(text)
    reg = registration_words(results.registration)
    power = secondary_power_lines(results.registration)
    if power:  # the registered secondary endpoints' power, below the count of secondary comparisons
        count += "\n\nRegistered secondary endpoints (their rows are among the secondary comparisons below):\n\n"
        count += "\n".join(power)
    if len(lines) == 1:
        return f"**Primary endpoint** ({reg}95% interval, unadjusted): {lines[0]}. {count}"
    return "\n".join([f"**Primary endpoint**, once per judge, task and aspect ({reg}95% intervals, unadjusted):", ""]
                     + [f"- {t}" for t in lines] + ["", count])


def registration_words(reg: dict | None) -> str:
    """``"registered before extraction (plan 1a2b3c4d5e6f, 2026-12-06T03:00:00+00:00); "`` and the
    like, from `jaxjudge.store.registration.registration_status`; empty for results that predate it."""
    if not reg:
        return ""
    status = reg["status"]
    if reg.get("registered_utc") is None:
        return f"{status}; "
    if reg["registered_plan_sha256"] == reg["plan_sha256"]:
        return f"{status}, plan {reg['plan_sha256'][:12]} of {reg['registered_utc']}; "
    return (f"{status}: plan {reg['plan_sha256'][:12]}, the record before extraction {reg['registered_plan_sha256'][:12]} "
            f"of {reg['registered_utc']}; ")


def ranges_table(results: Results, score: str | None = None) -> str:
    """Markdown: per (judge, task, aspect, reading), each method's mean and spread over ranges
    and its paired differences from its comparators (with Holm-adjusted p-values)."""
    parts = []
    recs = [r for r in results.ranges if score is None or r["score"] == score]
    panels: dict[tuple, list[dict[str, Any]]] = {}
    for r in recs:
        panels.setdefault((r["judge"], r["task"], r["aspect"], r["score"]), []).append(r)
    for (judge, task, aspect, sc), rs in panels.items():
        metric = rs[0]["metric"]
        parts += [f"{judge}, {task} {aspect}, {sc}: {metric} over ranges {', '.join(rs[0]['scales'])}", ""]
        head = ["method", "mean", "spread", "versus", "Δ mean", "Δ spread", "relative (mean over ranges)"]
        parts += [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
        for r in rs:
            first = [r["method"], format_interval(r["mean"]), format_interval(r["spread"])]
            if not r["versus"]:
                parts.append(f"| {' | '.join(first + ['', '', '', ''])} |")
            for i, v in enumerate(r["versus"]):
                cells = (first if i == 0 else ["", "", ""]) + [
                    f"{v['baseline']} ({v['role']})",
                    format_interval(v["mean_diff"]) + _p(v["mean_diff"]),
                    format_interval(v["spread_diff"]) + _p(v["spread_diff"]),
                    _relative(v["relative"]),
                ]
                parts.append(f"| {' | '.join(cells)} |")
        parts.append("")
    return "\n".join(parts)


def _relative(iv: dict[str, Any] | None) -> str:
    if not iv or iv.get("estimate") is None:
        return "-"
    text = f"{iv['estimate']:+.1%}"
    if iv.get("reason"):
        return text + f" (no interval: {iv['reason']})"
    if iv.get("low") is not None:
        text += f" [{iv['low']:+.1%}, {iv['high']:+.1%}]"
    return text


def secondary_table(results: Results) -> str:
    """Markdown: every secondary comparison with its interval, p-value and Holm-adjusted p."""
    prim = [e["description"] for e in ((results.endpoints or {}).get("primary") or {}).get("endpoints", [])]
    head = ["comparison", "difference [95% interval]", "p (interval)", "p (Wald)", "Holm p"]
    lines = [f"| {' | '.join(head)} |", "|" + "---|" * len(head)]
    for d, iv in comparisons(results.rows, results.ranges):
        if d in prim:
            continue
        lines.append(f"| {_describe(d)} | {format_interval(iv)} | {format_p(iv.get('p_interval'), iv.get('n_boot'))} | "
                     f"{format_p(iv['p'], iv.get('n_boot'))} | {format_p(iv.get('p_holm'), iv.get('n_boot'))} |")
    return "\n".join(lines)


REGISTERED_NOTE = (
    "The endpoints the confirmatory plan registered before extraction, read by its rule (the "
    "registration record's `rule`): each is a one-sided test of effect <= margin, its p-value the "
    "share of the endpoint's resamples (the dev-side choice redone in each) at or below the margin, "
    "Holm-adjusted over its family across every run registered with this one (the primary over the "
    "data sets, the secondary endpoints over endpoints x data sets) at one-sided 0.025. **holds**: "
    "Holm rejects; **equivalent**: the 95% interval inside [-margin, +margin]; **reversed**: its "
    "upper end below -margin; else **inconclusive**; **pending** until every run of the family is "
    "reported. The power is the registered power analysis's."
)


def registered_table(results: Results) -> str:
    """Markdown: each registered endpoint of a confirmatory plan (`jaxjudge.report.registered`)
    with its interval, its p-values at the margin, its verdict and its registered power."""
    head = ["endpoint", "family", "comparison", "difference [95% interval]", "p at the margin",
            "Holm p (family, all runs)", "verdict", "registered power"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for e in results.endpoints.get("registered", []):
        d, iv, n = e["description"], e["interval"], e["interval"].get("n_boot")
        power = power_words(results.registration, d["method"], d.get("versus")).removeprefix("; registered power ")
        word = f"**{e.get('verdict', 'pending')}** at ±{e['margin']:g}" + (f" ({e['pending']})" if e.get("pending") else "")
        lines.append(f"| {e['endpoint']} | {e['family']} | {_describe(d)} | {format_interval(iv)} | "
                     f"{format_p(e.get('p_margin'), n)} | {format_p(e.get('p_holm'), n)} | {word} | {power or '-'} |")
    return "\n".join(lines)
