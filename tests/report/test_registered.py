"""A confirmatory plan's registered verdicts across runs (`jaxjudge.report.registered`), checked
against hand-computed Holm adjustments and shares of resamples, and read by the claims table."""

from __future__ import annotations

import json

import numpy as np
import pytest

from jaxjudge.metrics.multiplicity import margin_p_values
from jaxjudge.report import Results, write_run
from jaxjudge.report.claims import Claim, plan, verdict
from jaxjudge.report.quotes import Quote, quote_text
from jaxjudge.report.registered import family_verdicts, rule_verdict, settle
from jaxjudge.report.run import rewrite_run
from jaxjudge.store.registration import REGISTERED

DESC = {"judge": "j", "task": "t", "aspect": "a", "score": "expected@1", "statistic": "mean", "metric": "spearman",
        "selection": "nested"}


def _iv(est, lo, hi):
    return {"estimate": est, "low": lo, "high": hi, "n_boot": 1000}


def _entry(family, method, versus, p, iv, endpoint=None):
    return {"endpoint": endpoint or f"{method} − {versus}", "family": family, "margin": 0.02,
            "description": {**DESC, "method": method, "versus": versus}, "interval": iv, "p_margin": p}


def test_margin_p_values_share_of_defined_resamples_at_or_below():
    reps = np.array([0.0, 0.01, 0.02, 0.03, np.nan, 0.05])
    # at or below 0.02: 0.0, 0.01, 0.02 of the 5 defined; at or below 0: 1 of 5
    assert margin_p_values(reps, (0.02, 0.0)) == {"0.02": pytest.approx(3 / 5), "0": pytest.approx(1 / 5)}
    assert margin_p_values(np.array([np.nan]), (0.02,)) == {"0.02": None}


@pytest.mark.parametrize("iv, rejected, want", [
    (_iv(0.05, 0.03, 0.07), True, "holds"),
    (_iv(0.05, 0.03, 0.07), False, "inconclusive"),  # the interval clears the margin, Holm does not
    (_iv(0.0, -0.015, 0.02), False, "equivalent"),
    (_iv(-0.05, -0.07, -0.03), False, "reversed"),
    (_iv(0.01, -0.03, 0.05), False, "inconclusive"),
    ({"estimate": 0.1, "low": None, "high": None, "reason": "too few groups"}, False, "inconclusive"),
])
def test_rule_verdict(iv, rejected, want):
    assert rule_verdict(iv, 0.02, rejected) == want


def test_family_verdicts_holm_per_family_across_runs_hand_computed():
    a = [_entry("primary", "c", "temperature", 0.004, _iv(0.08, 0.04, 0.12)),
         _entry("secondary", "cd", "d", 0.001, _iv(0.09, 0.05, 0.13)),
         _entry("secondary", "c", "ensemble", 0.012, _iv(0.06, 0.03, 0.09)),
         _entry("secondary", "c", "mix", 0.9, _iv(0.0, -0.01, 0.015))]
    b = [_entry("primary", "c", "temperature", 0.03, _iv(0.05, 0.015, 0.08)),
         _entry("secondary", "cd", "d", 0.006, _iv(0.07, 0.03, 0.11)),
         _entry("secondary", "c", "ensemble", 0.5, _iv(0.02, -0.02, 0.06)),
         _entry("secondary", "c", "mix", 1.0, _iv(-0.06, -0.09, -0.03))]
    got = family_verdicts({"A": a, "B": b})
    # Primary, 2 hypotheses: sorted 0.004, 0.03 -> 2 * 0.004 = 0.008, max(0.008, 1 * 0.03) = 0.03.
    assert [got["A"][0]["p_holm"], got["B"][0]["p_holm"]] == pytest.approx([0.008, 0.03])
    assert [got["A"][0]["verdict"], got["B"][0]["verdict"]] == ["holds", "inconclusive"]
    # Secondary, 6 hypotheses: sorted 0.001 (A cd), 0.006 (B cd), 0.012 (A ens), 0.5, 0.9, 1.0 ->
    # 6 * 0.001 = 0.006; 5 * 0.006 = 0.03; max(0.03, 4 * 0.012 = 0.048) = 0.048; 3 * 0.5 = 1 (capped) ...
    sec = {(run, e["description"]["method"], e["description"]["versus"]): e for run in "AB" for e in got[run][1:]}
    assert sec[("A", "cd", "d")]["p_holm"] == pytest.approx(0.006)
    assert sec[("B", "cd", "d")]["p_holm"] == pytest.approx(0.03)
    assert sec[("A", "c", "ensemble")]["p_holm"] == pytest.approx(0.048)
    assert sec[("B", "c", "ensemble")]["p_holm"] == pytest.approx(1.0)
    assert {k: e["verdict"] for k, e in sec.items()} == {
        ("A", "cd", "d"): "holds", ("B", "cd", "d"): "inconclusive", ("A", "c", "ensemble"): "inconclusive",
        ("B", "c", "ensemble"): "inconclusive", ("A", "c", "mix"): "equivalent", ("B", "c", "mix"): "reversed"}
    assert "verdict" not in a[0]  # the inputs are left as they were


def _run_results(name, entries):
    primary = next(e for e in entries if e["family"] == "primary")
    endpoints = {"primary": {"spec": {"margin": 0.02}, "endpoints": [
        {"description": primary["description"], "interval": primary["interval"], "verdict": "better"}]},
        "registered": entries}
    ranges = [{"judge": "j", "task": "t", "aspect": "a", "score": "expected@1", "method": e["description"]["method"],
               "metric": "spearman", "scales": ["1-5", "3-7"], "mean": _iv(0.5, 0.4, 0.6), "spread": _iv(0.1, 0.0, 0.2),
               "versus": [{"baseline": e["description"]["versus"], "role": "listed", "mean_diff": _iv(0.0, -1, 1),
                           "spread_diff": _iv(0.0, -1, 1), "relative": _iv(0.0, -1, 1)}]} for e in entries]
    return Results(name, rows=[], ranges=ranges, endpoints=endpoints,
                   registration={"status": REGISTERED, "registered_utc": None})


def test_settle_pending_until_every_run_then_rewrites_the_earlier_run(tmp_path):
    runs = ("A", "B")
    first = _run_results("A", [_entry("primary", "c", "temperature", 0.004, _iv(0.08, 0.04, 0.12)),
                               _entry("secondary", "c", "ensemble", 0.3, _iv(0.03, -0.01, 0.07))])
    assert settle(first, tmp_path / "A", runs) == []
    assert {e["verdict"] for e in first.endpoints["registered"]} == {"pending"}
    assert first.endpoints["registered"][0]["pending"] == "not reported yet: B"
    assert first.endpoints["primary"]["endpoints"][0]["verdict"] == "pending"
    write_run(first, tmp_path / "A", {"command": "report A"})
    assert "**pending** at ±0.02 (not reported yet: B)" in (tmp_path / "A" / "results.md").read_text()

    second = _run_results("B", [_entry("primary", "c", "temperature", 0.011, _iv(0.06, 0.03, 0.1)),
                                _entry("secondary", "c", "ensemble", 0.001, _iv(0.09, 0.05, 0.13))])
    others = settle(second, tmp_path / "B", runs)
    assert [folder.name for folder, _ in others] == ["A"]
    for folder, res in others:
        rewrite_run(folder, res)
    saved = json.loads((tmp_path / "A" / "results.json").read_text())["endpoints"]
    # Primary: 0.004, 0.011 -> 0.008, 0.011; secondary: 0.3, 0.001 -> 0.3, 0.002.
    assert [e["p_holm"] for e in saved["registered"]] == pytest.approx([0.008, 0.3])
    assert [e["verdict"] for e in saved["registered"]] == ["holds", "inconclusive"]
    assert saved["primary"]["endpoints"][0]["verdict"] == "holds"
    assert [e["verdict"] for e in second.endpoints["registered"]] == ["holds", "holds"]
    assert second.endpoints["registered"][1]["p_holm"] == pytest.approx(0.002)
    md = (tmp_path / "A" / "results.md").read_text()
    assert "## Registered endpoints" in md and "**holds** at ±0.02" in md and "Command:" in md
    assert "not reported yet" not in md and not any("pending" in e for e in saved["registered"])  # the earlier note is gone

    # The claims table reads the registered verdict and the Holm p at the margin, and calls the row registered.
    claim = Claim("c beats the ensemble", ("B",), "c", "ensemble", "mean", "expected@1", "higher")
    assert plan(second, claim) == "registered"
    word, label, text = verdict(second, claim)
    assert word == "holds" and label == "c − ensemble, mean (*registered secondary*), registered family (at ±0.02)"
    primary = Claim("c beats temperature", ("B",), "c", "temperature", "mean", "expected@1", "higher")
    assert verdict(second, primary)[:2] == ("holds", "c − temperature, mean (*primary*), registered family (at ±0.02)")
    assert text == "+0.090 [+0.050, +0.130], Holm p 0.002"
    # ... and so do the prose's quotes of it.
    q = {show: quote_text(Quote("B", "c", "ensemble", kind="registered", show=show), second)
         for show in ("interval", "p_margin", "p_holm", "verdict")}
    assert q == {"interval": "+0.090 [0.050, 0.130]", "p_margin": "0.001", "p_holm": "0.002", "verdict": "holds"}


@pytest.mark.slow
def test_report_gives_each_registered_endpoint_its_nested_interval_and_p_at_the_margin():
    """End to end on the simulated judge of test_ranges: a confirmatory plan registering
    contrastive − temperature and contrastive − ensemble (a fixed row). The ensemble is held fixed
    in the nested resamples, which are then the report's own resamples (its replicates equal the
    conditional ones); p at the margin is the share of the mean-over-ranges difference's
    resamples at or below it, recomputed here from each range's cell."""
    from types import SimpleNamespace

    from test_ranges import _simulated

    from jaxjudge.metrics.intervals import interval_summary
    from jaxjudge.report import MethodOptions, evaluate_cell, report_from_arrays
    from jaxjudge.report.pipeline import _splits_for
    from jaxjudge.report.stores import Cell

    spec = {"method": "contrastive", "statistic": "mean", "score": "expected@1", "selection": "nested", "margin": 0.02}
    primary, second = {**spec, "versus": "temperature"}, {**spec, "versus": "ensemble"}
    arrays, cfg, scales = _simulated(primary)
    cfg.methods += ("ensemble",)
    with pytest.raises(ValueError, match="contrastive − ensemble matches no comparison"):
        report_from_arrays(arrays, SimpleNamespace(**{**cfg.__dict__, "confirmation": SimpleNamespace(
            endpoints=lambda p: (p, second), power_of=lambda m, v: None, runs=("sim",))}))
    cfg.comparisons = (("contrastive", "ensemble"),)
    cfg.confirmation = SimpleNamespace(endpoints=lambda p: (p, second), power_of=lambda m, v: None, runs=("sim",))
    res = report_from_arrays(arrays, cfg)
    got = {e["description"]["versus"]: e for e in res.endpoints["registered"]}
    assert [got[v]["family"] for v in ("temperature", "ensemble")] == ["primary", "secondary"]
    assert got["temperature"]["interval"] is res.endpoints["primary"]["endpoints"][0]["interval"]

    task = cfg.tasks[0]
    opts = MethodOptions.from_config(cfg, task)
    nested = MethodOptions(**{**opts.__dict__, "nested": ("contrastive", "temperature", "ensemble"),
                              "nested_scores": ("expected@1",)})
    diffs, est = {"temperature": [], "ensemble": []}, {"temperature": [], "ensemble": []}
    for s in scales:
        a = arrays[Cell("sim", "stsb", "similarity", s)]
        rep = evaluate_cell(a, _splits_for(task, a, None), nested, {})
        k = "expected@1"
        np.testing.assert_allclose(rep.nested[("ensemble", k)], rep.replicates[("ensemble", k)], atol=1e-5)
        rows = {r["method"]: r["metrics"]["spearman"]["estimate"] for r in rep.rows if r["score"] == k}
        for v in diffs:
            diffs[v].append(rep.nested[("contrastive", k)] - rep.nested[(v, k)])
            est[v].append(rows["contrastive"] - rows[v])
    for v, e in got.items():
        reps = np.mean(diffs[v], axis=0)
        want = interval_summary(float(np.mean(est[v])), reps, 0.05, num_groups=20, min_groups=10, method="expanded")
        assert e["description"]["selection"] == "nested"
        assert [e["interval"]["low"], e["interval"]["high"]] == pytest.approx([want["low"], want["high"]], abs=1e-6)
        assert e["p_margin"] == pytest.approx(np.mean(reps[np.isfinite(reps)] <= 0.02))
