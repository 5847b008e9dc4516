"""`interval_p_value`: the p-value of the report's own bootstrap interval (agrees with it)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm
from scipy.stats import t as student_t

from jaxjudge.metrics.intervals import interval_summary
from jaxjudge.metrics.multiplicity import bootstrap_p_value, interval_p_value


def test_hand_computed():
    # sorted [-1, 1, 2, 3]: numpy's quantile crosses 0 at level (0 + 0.5) / 3 = 1/6 -> p = 1/3
    assert interval_p_value(0.1, [3.0, -1.0, 2.0, 1.0]) == pytest.approx(1 / 3)
    # expanded, G = 5: p = 2 T_4(Phi^-1(1/6) / sqrt(5/4))
    want = 2 * student_t.cdf(norm.ppf(1 / 6) / np.sqrt(5 / 4), 4)
    assert interval_p_value(0.1, [3.0, -1.0, 2.0, 1.0], method="expanded", num_groups=5) == pytest.approx(want)
    assert interval_p_value(0.1, [1.0, 2.0, 3.0]) == 0.0  # 0 outside every replicate
    assert interval_p_value(0.0, [0.0, 1e-8, -1e-8]) == 1.0  # float32 rounding of identical predictions
    assert interval_p_value(0.1, [1.0]) is None


@pytest.mark.parametrize("method, groups", [("percentile", 500), ("expanded", 12), ("expanded", 300)])
def test_p_below_alpha_exactly_where_the_interval_excludes_zero(method, groups):
    rng = np.random.default_rng(7)
    for _ in range(40):
        reps = rng.normal(rng.uniform(-0.08, 0.08), 0.04, 1000) + rng.exponential(0.03, 1000)  # skewed
        p = interval_p_value(0.01, reps, method=method, num_groups=groups)
        for alpha in np.linspace(0.002, 0.99, 120):
            iv = interval_summary(0.01, reps, alpha, num_groups=groups, min_groups=2, method=method)
            assert (iv["low"] > 0 or iv["high"] < 0) == (p < alpha)


def test_a_wald_p_can_disagree_with_the_percentile_interval_and_this_one_cannot():
    # A skewed bootstrap distribution whose 2.5% quantile sits just below 0: the Wald p-value
    # (from the replicates' sd) is under 0.05 beside a 95% interval that covers 0.
    rng = np.random.default_rng(0)
    reps = np.concatenate([rng.normal(0.05, 0.012, 960), rng.uniform(-0.03, -0.001, 40)])
    est = 0.05
    iv = interval_summary(est, reps, 0.05, method="percentile")
    assert iv["low"] < 0 < iv["high"]
    assert bootstrap_p_value(est, reps) < 0.05  # the Wald p-value says otherwise
    assert interval_p_value(est, reps) >= 0.05
    # and for large B it is the percentile-bootstrap p-value up to the (hits + 1) / (B + 1) correction and the interpolation
    assert interval_p_value(est, reps) == pytest.approx(bootstrap_p_value(est, reps, method="percentile"), abs=5e-3)
