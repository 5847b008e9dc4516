"""The heterogeneity across ranges and its test-inversion interval, against hand computation and
scipy's noncentral chi-square (with two ranges, or isotropic noise, the statistic's
distribution is exactly that, whatever the direction of the deviations)."""

import math

import numpy as np
import pytest
from scipy import optimize, stats

from jaxjudge.metrics.heterogeneity import heterogeneity, heterogeneity_interval


def test_estimate_hand_computed():
    # Deviations from the mean 0.25: -0.15, -0.05, 0.05, 0.15 -> squared sum 0.05; the noise
    # 0.001 I adds tr(C 0.001 I C) = 0.001 * 3 to it in expectation.
    est = np.array([0.1, 0.2, 0.3, 0.4])
    assert heterogeneity(est, 0.001 * np.eye(4)) == pytest.approx(math.sqrt((0.05 - 0.003) / 3), rel=1e-12)
    # Noise larger than the observed deviations: 0.
    assert heterogeneity(est, 0.02 * np.eye(4)) == 0.0
    # Perfectly correlated noise moves every range together: nothing to subtract.
    assert heterogeneity(est, 0.02 * np.ones((4, 4))) == pytest.approx(math.sqrt(0.05 / 3), rel=1e-9)


def _ncx2_bounds(t_obs: float, s2: float, df: int, alpha: float = 0.05) -> tuple[float, float]:
    """Bounds on tau from T / s2 ~ ncx2(df, a^2 / s2), a = tau sqrt(df): scipy's inversion."""
    x = t_obs / s2

    def cdf(a):  # P(T <= t_obs) when the deviations have length a
        return stats.chi2.cdf(x, df) if a == 0 else stats.ncx2.cdf(x, df, a * a / s2)

    def root(level):
        hi = math.sqrt(t_obs) + 20 * math.sqrt(s2)
        return optimize.brentq(lambda a: cdf(a) - level, 0.0, hi, xtol=1e-12)

    low = 0.0 if cdf(0.0) <= 1 - alpha / 2 else root(1 - alpha / 2)
    high = 0.0 if cdf(0.0) < alpha / 2 else root(alpha / 2)
    return low / math.sqrt(df), high / math.sqrt(df)


@pytest.mark.parametrize(("est", "cov"), [
    # Two ranges: |theta_1 - theta_2| / sqrt(2) from a folded normal, correlated noise.
    ([0.40, 0.22], [[0.0020, 0.0012], [0.0012, 0.0025]]),
    ([0.40, 0.395], [[0.0020, 0.0012], [0.0012, 0.0025]]),
])
def test_two_ranges_invert_a_folded_normal(est, cov):
    est, cov = np.asarray(est), np.asarray(cov)
    s2 = cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]  # variance of the difference
    # |C theta_hat|^2 = d^2 / 2 and d ~ N(delta, s2): (d^2 / 2) / (s2 / 2) ~ ncx2(1, ...).
    t_obs = float((est[0] - est[1]) ** 2 / 2)
    low, high = _ncx2_bounds(t_obs, s2 / 2, 1)
    got = heterogeneity_interval(est, None, cov=cov, n_draws=200_000, seed=1)
    assert got["low"] == pytest.approx(low, abs=2e-3 * max(high, 1e-3))
    assert got["high"] == pytest.approx(high, rel=1e-2)
    assert got["low"] <= got["estimate"] <= got["high"]


@pytest.mark.parametrize("est", [
    [0.60, 0.62, 0.41, 0.55],   # clearly heterogeneous
    [0.50, 0.51, 0.49, 0.505],  # deviations about the noise's size: the lower bound is 0
    [0.50, 0.5001, 0.4999, 0.5],  # below the noise's lower quantile: [0, 0]
])
def test_isotropic_noise_inverts_a_noncentral_chi_square(est):
    est = np.asarray(est)
    s2 = 0.0004
    dev = est - est.mean()
    low, high = _ncx2_bounds(float(dev @ dev), s2, 3)
    got = heterogeneity_interval(est, None, cov=s2 * np.eye(4), n_draws=200_000, seed=2)
    assert got["low"] == pytest.approx(low, abs=1e-3 * math.sqrt(s2) + 1e-2 * low)
    assert got["high"] == pytest.approx(high, abs=1e-3 * math.sqrt(s2) + 1e-2 * high)
    assert got["low"] <= got["estimate"] <= got["high"]
    assert got["noise"] == pytest.approx(math.sqrt(s2), rel=1e-9)
    # The empty set is flagged exactly where scipy's inversion finds none (P(T <= t) < alpha / 2 at 0).
    empty = stats.chi2.cdf(float(dev @ dev) / s2, 3) < 0.025
    assert got.get("empty", False) == empty and (not empty or (got["low"], got["high"]) == (0.0, 0.0))


def test_an_empty_interval_is_printed_as_0_0_with_a_note_that_it_is_empty():
    from jaxjudge.report.intervals_text import EMPTY_NOTE, format_interval
    from jaxjudge.report.terminal import _cell, _Notes

    iv = {"estimate": 0.0, "low": 0.0, "high": 0.0, "empty": True}
    assert format_interval(iv, 2) == f"0.00 [0.00, 0.00] ({EMPTY_NOTE})"
    notes = _Notes()
    assert _cell(iv, notes) == "0.00 [.00,.00] (a)" and notes.notes == {EMPTY_NOTE: "a"}
    assert format_interval({**iv, "empty": None}, 2) == "0.00 [0.00, 0.00]"


def test_replicates_give_the_covariance_and_undefined_resamples_are_left_out():
    rng = np.random.default_rng(0)
    reps = rng.multivariate_normal([0.5, 0.4, 0.3], [[4, 2, 1], [2, 3, 1], [1, 1, 2]], size=500).T * 1e-3
    est = np.array([0.5, 0.4, 0.3])
    with_nan = np.concatenate([reps, [[np.nan], [0.1], [0.2]]], axis=1)
    a = heterogeneity_interval(est, with_nan)
    b = heterogeneity_interval(est, None, cov=np.cov(reps))
    assert a == b
    assert a["estimate"] == pytest.approx(heterogeneity(est, np.cov(reps)))


def test_undefined_and_bad_input():
    assert heterogeneity_interval([0.1, np.nan], np.zeros((2, 5)))["reason"] == "a range's estimate is undefined"
    assert "fewer than 2" in heterogeneity_interval([0.1, 0.2], np.full((2, 5), np.nan))["reason"]
    with pytest.raises(ValueError, match="K >= 2"):
        heterogeneity_interval([0.1], np.zeros((1, 5)))
    with pytest.raises(ValueError, match=r"replicates must be \[K=3, B\]"):
        heterogeneity_interval([0.1, 0.2, 0.3], np.zeros((2, 5)))
