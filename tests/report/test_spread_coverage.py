"""`jaxjudge.report.spread_coverage`, the simulations behind ``experiments/coverage.py --spread``:
the true spread it reports against a hand value, the intervals' coverage near the nominal 95%
(binomial bounds for the number of simulated data sets), and its refusal of a direction with the
wrong number of ranges."""

from __future__ import annotations

import math

import numpy as np
import pytest

from jaxjudge.report.spread_coverage import spread_coverage, spread_diff_coverage

# Four ranges with bootstrap sd 0.03 each, correlated 0.5 (a committed run's noise is of this size).
COV = 0.03 ** 2 * (0.5 * np.eye(4) + 0.5)


def test_true_spread_is_the_hand_computed_max_minus_min():
    # direction (-3, -1, 1, 3) scaled to standard deviation 1 (ddof 1): sd sqrt(20/3), so the
    # max - min of the true values is 6 / sqrt(20/3) times tau.
    (row,) = spread_coverage(COV, (0.1,), 2, n_boot=50)
    assert row.tau == 0.1 and row.n == 2
    assert row.max_min == pytest.approx(0.1 * 6 / math.sqrt(20 / 3), rel=1e-12)
    for share in (row.heterogeneity, row.max_min_percentile, row.estimate_inside, row.max_min_inside):
        assert share in (0.0, 0.5, 1.0)


def test_heterogeneity_interval_covers_near_95_percent():
    n = 160
    (row,) = spread_coverage(COV, (0.2,), n, n_boot=200, seed=1)
    # 95% of 160 is 152; three binomial standard errors (8.3) below is 144 (0.90).
    assert row.heterogeneity >= 0.90, row
    assert row.estimate_inside == 1.0  # the estimate lies inside its own interval


def test_spread_diff_interval_covers_near_95_percent():
    n = 160
    ((tm, tb, cover),) = spread_diff_coverage(COV, ((0.2, 0.2),), n, n_boot=200, seed=2)
    assert (tm, tb) == (0.2, 0.2)
    assert 0.85 <= cover <= 1.0, cover


def test_direction_must_have_one_entry_per_range():
    with pytest.raises(ValueError, match="direction must have 4 entries"):
        spread_coverage(COV, (0.1,), 1, direction=(1.0, 2.0))
