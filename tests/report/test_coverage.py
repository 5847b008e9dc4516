"""Coverage of the report's 95% intervals on synthetic judges of known correlation.

A short version of `experiments/coverage.py`: 200 replicates per design, so the tolerance is
about three binomial standard errors (1.5 points at 95%). The full script's figures (400+
replicates per design, 10 to 100 groups) are in the README of results/.
"""

from __future__ import annotations

import pytest

from jaxjudge.metrics import expanded_levels
from jaxjudge.report.coverage import interval_coverage


def test_expanded_levels_hand_computed():
    # G = 20: sqrt(20/19) * t_19(0.975) = 1.02598 * 2.09302 = 2.14739; Phi(-2.14739) = 0.01588
    lo, hi = expanded_levels(20)
    assert lo == pytest.approx(0.01588, abs=2e-5) and hi == pytest.approx(1 - lo)
    # tends to the percentile levels with many groups
    assert expanded_levels(100_000)[0] == pytest.approx(0.025, abs=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("design", ["fixed", "kfold"])
def test_intervals_cover_about_95_percent_with_20_groups(design):
    # The first 200 replicates of `experiments/coverage.py`'s default run (seed 11). Longer runs
    # of the same code, fixed split and 20 groups: 1,000 replicates (seed 21) cover 0.959 for
    # Spearman and 0.959 for the difference; `experiments/coverage_reference.py`, an independent
    # numpy reimplementation, 2,200 replicates: 0.946 for the difference. One 200-replicate
    # stream (seed 5) gave 0.880 for the difference, 4 binomial standard errors under those
    # figures: a low draw, which is why the bound is not set from a single short stream.
    cov = interval_coverage(design, 20, 200, n_boot=1000, seed=11)
    assert cov.n == 200
    # About three binomial standard errors of 200 replicates around 95%.
    assert 0.905 <= cov.spearman <= 0.99, cov
    assert 0.905 <= cov.difference <= 0.99, cov


@pytest.mark.slow
def test_percentile_interval_undercovers_where_the_expanded_one_does_not():
    """Fixed split, 10 reported groups: the plain percentile interval is too narrow."""
    exp = interval_coverage("fixed", 10, 200, n_boot=1000, seed=6)
    pct = interval_coverage("fixed", 10, 200, n_boot=1000, seed=6, ci_method="percentile")
    assert exp.width > pct.width
    assert exp.spearman >= 0.905 and exp.difference >= 0.905, exp
    assert pct.spearman < exp.spearman, (pct, exp)


def test_synthetic_judges_have_the_stated_population_correlations():
    import numpy as np  # noqa: PLC0415
    import scipy.stats as st  # noqa: PLC0415

    from jaxjudge.metrics.synthetic import clustered_judges  # noqa: PLC0415

    d = clustered_judges(np.random.default_rng(0), 4000, 16, (0.6, 0.2), (0.4, 0.1))
    assert d.pearson.tolist() == pytest.approx([0.5, 0.15])
    for j in range(2):
        assert st.pearsonr(d.judges[j], d.human)[0] == pytest.approx(d.pearson[j], abs=0.02)
        assert st.spearmanr(d.judges[j], d.human)[0] == pytest.approx(d.spearman[j], abs=0.02)


def test_bca_levels_hand_computed():
    """With no bias (z0 = 0) and no acceleration BCa is the percentile interval; a positive
    z0 moves both levels up by the same normal shift."""
    import numpy as np  # noqa: PLC0415
    from scipy.stats import norm  # noqa: PLC0415

    from jaxjudge.metrics import bca_quantiles  # noqa: PLC0415

    reps = np.linspace(-1, 1, 100_001)
    jack = np.asarray([-1.0, 0.0, 1.0])  # symmetric: a = 0
    lo, hi = bca_quantiles(0.0, reps, jack)
    assert (lo, hi) == pytest.approx(tuple(np.quantile(reps, [0.025, 0.975])), abs=1e-4)
    est = float(np.quantile(reps, norm.cdf(0.5)))  # z0 = 0.5
    lo, hi = bca_quantiles(est, reps, jack)
    want = np.quantile(reps, norm.cdf([2 * 0.5 + norm.ppf(0.025), 2 * 0.5 + norm.ppf(0.975)]))
    assert (lo, hi) == pytest.approx(tuple(want), abs=1e-4)
