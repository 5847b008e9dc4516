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
