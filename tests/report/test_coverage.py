"""Coverage of the report's 95% intervals on synthetic judges of known correlation.

A short version of `experiments/coverage.py`: 200 replicates per design, so the tolerance is
about three binomial standard errors (1.5 points at 95%). The full script's figures (400+
replicates per design, 10 to 100 groups) are in the README of results/.
"""

from __future__ import annotations

import pytest

from jaxjudge.metrics import expanded_levels
from jaxjudge.report.coverage import interval_coverage

# Its time goes into running programs (see tests/conftest.py): full XLA optimisation.
pytestmark = pytest.mark.optimized


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


# -- the nested bootstrap: a tuned judge, selection redone inside the interval ----------------


def test_combined_judge_has_the_stated_population_correlation():
    """`combined_pearson` against a large draw, scipy's Pearson and Spearman."""
    import numpy as np  # noqa: PLC0415
    import scipy.stats as st  # noqa: PLC0415

    from jaxjudge.metrics.synthetic import clustered_judges, combined_pearson, spearman_of_normal  # noqa: PLC0415

    lams = [0.0, 0.5, 2.0, -1.0]
    d = clustered_judges(np.random.default_rng(1), 6000, 16, (0.6, 0.3), (0.4, 0.3))
    r = combined_pearson(lams, (0.6, 0.3), (0.4, 0.3))
    # lambda = 0 is judge 0 alone; lambda = 0.5 by hand: (0.5 + 0.15) / sqrt(1.25 + 0.15)
    assert r[0] == pytest.approx(0.5) and r[1] == pytest.approx(0.65 / 1.4**0.5)
    for lam, want in zip(lams, r):
        x = d.judges[0] + lam * d.judges[1]
        assert st.pearsonr(x, d.human)[0] == pytest.approx(want, abs=0.015)
        assert st.spearmanr(x, d.human)[0] == pytest.approx(spearman_of_normal(want), abs=0.015)


def test_expected_selected_spearman_between_its_bounds():
    """One grid point: the expectation is that point's Spearman; a larger dev set chooses
    better on average, and never better than the best point of the grid."""
    import numpy as np  # noqa: PLC0415

    from jaxjudge.metrics.synthetic import combined_pearson, spearman_of_normal  # noqa: PLC0415
    from jaxjudge.report.coverage import TUNED_LAMS, expected_selected  # noqa: PLC0415

    one, se = expected_selected(4, 200, lams=(0.5,))
    assert one == pytest.approx(spearman_of_normal(combined_pearson([0.5], (0.6, 0.3), (0.4, 0.3))[0]))
    assert se == pytest.approx(0.0, abs=1e-12)
    truth = [spearman_of_normal(r) for r in combined_pearson(TUNED_LAMS, (0.6, 0.3), (0.4, 0.3))]
    small, se_small = expected_selected(2, 4000, seed=1)
    large, se_large = expected_selected(40, 4000, seed=1)
    assert small + 4 * np.hypot(se_small, se_large) < large < max(truth)
    assert min(truth) < small


def test_nested_coverage_smoke():
    from jaxjudge.report.coverage import nested_coverage  # noqa: PLC0415

    c = nested_coverage("fixed", 10, 3, n_boot=100, n_draws=500, seed=2)
    assert c.n == 3
    assert 0.40 < c.expected < 0.53 and c.expected_se > 0
    assert 0.0 < c.changed < 1.0  # some resamples choose another lambda, most keep it
    assert c.width_nested > 0 and c.width_conditional > 0
    with pytest.raises(ValueError, match="ci_method"):
        nested_coverage("kfold", 10, 1, ci_method="bca")
    with pytest.raises(ValueError, match="design"):
        nested_coverage("loo", 10, 1)


@pytest.mark.slow
@pytest.mark.parametrize("design", ["fixed", "kfold"])
def test_nested_interval_covers_about_95_percent_with_20_groups(design):
    # The first 100 replicates of `experiments/coverage.py --nested` (seed 11); its 400
    # replicates, and 600 more of seed 21, are in results/README.md. The nested interval is a
    # little conservative (fixed split: 0.973 over those 1,000; this stream's first 200 gave
    # 0.995, its conditional interval 0.990), so it is held from below, and from being too
    # wide by its width relative to the conditional interval (1.04-1.11 in those runs).
    from jaxjudge.report.coverage import nested_coverage  # noqa: PLC0415

    c = nested_coverage(design, 20, 100, n_boot=1000, seed=11)
    assert c.n == 100
    # About three binomial standard errors of 100 replicates under 95%.
    assert c.nested >= 0.885, c
    assert c.conditional >= 0.885, c
    assert 1.0 < c.width_nested / c.width_conditional < 1.2, c
