"""`jaxjudge.report.power`: the endpoint statistic against scipy (weights as repeated rows) and
the planned numbers against the formulas."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st

from jaxjudge.metrics.power import detectable_effect, power_at
from jaxjudge.report.power import PilotRows, endpoint_statistic, plan_power


def _rows(seed=0, n=60, s=3):
    rng = np.random.default_rng(seed)
    human = rng.normal(size=n)
    a = human[None] + rng.normal(0, 0.7, (s, n))
    b = human[None] + rng.normal(0, 1.0, (s, n))
    codes = np.arange(n) // 2
    return PilotRows(method=a, versus=b, human=human, codes=codes, num_groups=n // 2, n_rows=n)


def test_statistic_is_the_mean_over_ranges_of_scipy_differences():
    rows = _rows()
    rng = np.random.default_rng(1)
    w = np.stack([np.ones(rows.n_rows), rng.integers(0, 3, rows.n_rows)]).astype(float)
    got = endpoint_statistic(rows)(w)
    for i, wi in enumerate(w):
        reps = wi.astype(int)
        want = np.mean([st.spearmanr(np.repeat(rows.method[r], reps), np.repeat(rows.human, reps))[0]
                        - st.spearmanr(np.repeat(rows.versus[r], reps), np.repeat(rows.human, reps))[0]
                        for r in range(3)])
        assert got[i] == pytest.approx(want, abs=1e-5)


def test_plan_power_is_the_formulas_at_the_planned_se():
    out = plan_power(0.36, 900, 0.02, {"a": 0.038, "b": 0.066}, alpha=0.0125, inflation=1.1)
    se = 1.1 * 0.36 / 30
    assert out["se"] == pytest.approx(se)
    assert out["half_width"] == pytest.approx(st.norm.ppf(1 - 0.0125) * se)
    assert out["detectable"] == pytest.approx(detectable_effect(se, 0.02, 0.0125))
    assert out["power"]["b"] == pytest.approx(power_at(0.066, se, 0.02, 0.0125))
    assert out["power"]["a"] < out["power"]["b"]


def _results(registration):
    from jaxjudge.report.results import Results

    desc = {"judge": "j", "task": "stsb", "aspect": "similarity", "score": "expected@1", "method": "contrastive",
            "versus": "temperature", "statistic": "mean", "metric": "spearman", "selection": "nested"}
    iv = {"estimate": 0.05, "low": 0.03, "high": 0.07, "n_boot": 1000, "p": 0.001}
    return Results(experiment="x", endpoints={
        "primary": {"spec": {"margin": 0.02}, "endpoints": [{"description": desc, "interval": iv, "verdict": "better"}]},
        "secondary": {"adjustment": "holm", "count": 3, "alpha": 0.05, "significant": 1}}, registration=registration)


def test_results_md_prints_the_registered_power_beside_the_verdict():
    from jaxjudge.report.endpoint_tables import primary_line

    entry = {"method": "contrastive", "versus": "temperature", "family": "primary", "alpha_one_sided": 0.0125,
             "planned_pairs": 800, "planned_groups": 780, "half_width": 0.0287, "detectable_80": 0.0594,
             "power": {"stsb_confirm": 0.2023}, "effects": {"stsb_confirm": 0.038}}
    second = dict(entry, method="contrastive", versus="ensemble", family="secondary", power={"x": 0.5}, effects={})
    reg = {"status": "registered before extraction", "plan_sha256": "a" * 64, "registered_plan_sha256": "a" * 64,
           "registered_utc": "2026-12-07T06:08:38+00:00", "power": [entry, second]}
    text = primary_line(_results(reg))
    assert ("better at the declared margin ±0.02; registered power (primary family, one-sided level 0.0125, 800 pairs "
            "in 780 groups): planned half-width 0.029, 80% power from +0.059; power 0.20 at +0.038 (stsb_confirm)") in text
    assert "- contrastive − ensemble; registered power (secondary family" in text and "power 0.50 at x" in text
    without = primary_line(_results({k: v for k, v in reg.items() if k != "power"}))
    assert "registered power" not in without and "Registered secondary" not in without
