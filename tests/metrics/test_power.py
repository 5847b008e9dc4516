"""`jaxjudge.metrics.power`: the formulas against scipy and hand-computed values, the grouped
jackknife against the closed form for a mean, and the sqrt(G) law against group resampling."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st

from jaxjudge.metrics.power import (
    detectable_effect, group_weights, half_width, per_group_sd, power_at, resampled_se,
)


def test_formulas_by_hand_and_against_scipy():
    # se 0.01, margin 0.02, true effect 0.038, one-sided 0.025: Phi(1.8 - 1.959964) = Phi(-0.159964)
    assert power_at(0.038, 0.01, 0.02) == pytest.approx(0.43645, abs=5e-5)
    assert power_at(0.038, 0.01, 0.02) == pytest.approx(st.norm.cdf(1.8 - st.norm.ppf(0.975)), abs=1e-12)
    # 80% at margin + (1.959964 + 0.841621) se
    assert detectable_effect(0.01, 0.02) == pytest.approx(0.02 + 0.0280159, abs=1e-6)
    assert power_at(detectable_effect(0.013, 0.02, 0.025 / 6), 0.013, 0.02, 0.025 / 6) == pytest.approx(0.8, abs=1e-12)
    assert half_width(0.01) == pytest.approx(0.0195996, abs=1e-7)
    assert half_width(0.01, 0.025 / 2) == pytest.approx(st.norm.ppf(1 - 0.0125) * 0.01, abs=1e-12)
    assert power_at(0.02, 0.01, 0.02) == pytest.approx(0.025, abs=1e-12)  # at the margin: the level
    with pytest.raises(ValueError):
        power_at(0.1, 0.0, 0.02)


def test_jackknife_of_a_mean_is_the_sample_sd():
    """For the mean of one value per group the jackknife variance is exactly s^2 / G."""
    rng = np.random.default_rng(0)
    d = rng.normal(0.05, 0.3, 57)
    codes = np.arange(57)

    def stat(w):  # [B, N] -> [B]: weighted mean
        return (w * d).sum(-1) / w.sum(-1)

    assert per_group_sd(stat, codes, 57) == pytest.approx(np.std(d, ddof=1), rel=1e-10)


def test_group_weights_repeat_a_groups_count_on_its_rows():
    codes = np.array([0, 0, 2, 1])
    assert group_weights(codes, np.array([[2.0, 0.0, 1.0]])).tolist() == [[2.0, 2.0, 1.0, 0.0]]


def _spearman_difference_rows(seed=1, g=150, per=2):
    rng = np.random.default_rng(seed)
    n = g * per
    codes = np.repeat(np.arange(g), per)
    human = rng.normal(size=n) + np.repeat(rng.normal(size=g), per)
    a = human + rng.normal(0, 0.8, n)
    b = human + rng.normal(0, 1.0, n)
    return codes, human, a, b


def _weighted_spearman_difference(codes, human, a, b):
    def spearman_w(x, y, w):  # repeat rows by their integer weights, then scipy
        reps = w.astype(int)
        return st.spearmanr(np.repeat(x, reps), np.repeat(y, reps))[0]

    return lambda weights: np.array([spearman_w(a, human, w) - spearman_w(b, human, w) for w in np.atleast_2d(weights)])


@pytest.mark.parametrize("mult", [1, 3])
def test_sqrt_law_matches_group_resampling(mult):
    """sigma / sqrt(m) (grouped jackknife on G groups) against the sd over draws of m groups."""
    codes, human, a, b = _spearman_difference_rows()
    stat = _weighted_spearman_difference(codes, human, a, b)
    sigma = per_group_sd(stat, codes, 150)
    m = 150 * mult
    simulated = resampled_se(stat, codes, 150, m, n_draws=300, seed=2)
    assert sigma / np.sqrt(m) == pytest.approx(simulated, rel=0.15)
