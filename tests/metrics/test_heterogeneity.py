"""The heterogeneity across ranges and its profile-likelihood interval, against scipy: with two
ranges, or isotropic noise, the nearest point of the sphere |phi| = a is the radial one and the
calibration draws' radius is a folded normal's or a noncentral chi's, whatever the deviations'
direction; with anisotropic noise the deviance against scipy's minimiser on the sphere."""

import math

import numpy as np
import pytest
from scipy import optimize, stats

from jaxjudge.metrics.heterogeneity import heterogeneity_interval, net_sd, profile_deviance


def test_net_sd_hand_computed():
    # Deviations from the mean 0.25: -0.15, -0.05, 0.05, 0.15 -> squared sum 0.05; noise 0.003
    # (tr(C 0.001 I C) = 0.001 * 3) is taken out once for an estimate, twice for a replicate.
    est = np.array([0.1, 0.2, 0.3, 0.4])
    assert net_sd(est, 0.003, 1.0) == pytest.approx(math.sqrt((0.05 - 0.003) / 3), rel=1e-12)
    assert net_sd(est, 0.003, 2.0) == pytest.approx(math.sqrt((0.05 - 0.006) / 3), rel=1e-12)
    assert net_sd(est, 0.06, 1.0) == 0.0  # noise larger than the observed deviations


def _radial_reference(norm: float, sd: float, radius, alpha: float = 0.05):
    """Bounds and median-unbiased estimate of a = |phi| when D(a) = (norm - a)^2 / sd^2 and the
    calibration draws' radius |phi~(a) + z| has the scipy distribution ``radius(a)``."""

    def half_width(a):  # r with P(|R - a| <= r) = 1 - alpha
        dist = radius(a)
        return optimize.brentq(lambda r: dist.cdf(a + r) - dist.cdf(max(a - r, 0.0)) - (1 - alpha),
                               0.0, a + 50 * sd, xtol=1e-14)

    big = norm + 50 * sd
    low = 0.0 if norm <= half_width(0.0) else optimize.brentq(
        lambda a: (norm - a) - half_width(a), 0.0, norm, xtol=1e-14)
    high = optimize.brentq(lambda a: (a - norm) - half_width(a), norm, big, xtol=1e-14)
    # r(a) = median r*(a)  <=>  norm = median of R (R - a has the sign of r*, the same order).
    est = 0.0 if norm <= radius(0.0).median() else optimize.brentq(
        lambda a: radius(a).median() - norm, 0.0, big, xtol=1e-14)
    return low, high, est


@pytest.mark.parametrize("est", [[0.40, 0.22], [0.40, 0.385], [0.40, 0.3999]])
def test_two_ranges_against_a_folded_normal(est):
    est = np.asarray(est)
    cov = np.array([[0.0020, 0.0012], [0.0012, 0.0025]])
    # The one centred coordinate is (x1 - x2) / sqrt(2), its variance var(x1 - x2) / 2; tau is
    # |x1 - x2| / sqrt(2) itself (K - 1 = 1).
    sd = math.sqrt((cov[0, 0] + cov[1, 1] - 2 * cov[0, 1]) / 2)
    norm = abs(est[0] - est[1]) / math.sqrt(2)
    low, high, point = _radial_reference(norm, sd, lambda a: stats.foldnorm(a / sd, scale=sd))
    got = heterogeneity_interval(est, None, cov=cov, n_draws=200_000, seed=1)
    assert got["low"] == pytest.approx(low, abs=5e-3 * sd)
    assert got["high"] == pytest.approx(high, abs=5e-3 * sd)
    assert got["estimate"] == pytest.approx(point, abs=5e-3 * sd)
    assert got["low"] <= got["estimate"] <= got["high"]


@pytest.mark.parametrize("est", [
    [0.60, 0.62, 0.41, 0.55],   # clearly heterogeneous
    [0.50, 0.51, 0.49, 0.505],  # deviations about the noise's size: the lower bound is 0
    [0.50, 0.5001, 0.4999, 0.5],  # far below the noise: still a set, [0, high], estimate 0
])
def test_isotropic_noise_against_a_noncentral_chi(est):
    est = np.asarray(est)
    s2 = 0.0004
    s = math.sqrt(s2)
    dev = est - est.mean()
    norm = float(np.linalg.norm(dev))

    def radius(a):  # |phi + z| / s ~ sqrt(ncx2(3, (a / s)^2)); as a scipy distribution of the radius
        class R:
            @staticmethod
            def cdf(x):
                return stats.chi2.cdf((x / s) ** 2, 3) if a == 0 else stats.ncx2.cdf((x / s) ** 2, 3, (a / s) ** 2)

            @staticmethod
            def median():
                q = stats.chi2.median(3) if a == 0 else stats.ncx2.median(3, (a / s) ** 2)
                return s * math.sqrt(q)
        return R

    low, high, point = _radial_reference(norm, s, radius)
    got = heterogeneity_interval(est, None, cov=s2 * np.eye(4), n_draws=200_000, seed=2)
    for key, want in (("low", low), ("high", high), ("estimate", point)):
        assert got[key] == pytest.approx(want / math.sqrt(3), abs=5e-3 * s), key
    assert got["low"] <= got["estimate"] <= got["high"]
    assert got["noise"] == pytest.approx(s, rel=1e-9)
    assert got["raw"] == pytest.approx(norm / math.sqrt(3), rel=1e-12)


def test_profile_deviance_against_a_minimiser_on_the_sphere():
    w = np.array([2e-5, 3e-4, 4e-3])  # a strongly anisotropic noise, as correlated ranges give
    rng = np.random.default_rng(4)
    rows = rng.standard_normal((4, 3)) * np.sqrt(w) * 3
    for a in (0.005, 0.03, 0.2):
        got, phi = profile_deviance(rows, w, a)
        np.testing.assert_allclose(np.linalg.norm(phi, axis=1), a, rtol=1e-9)
        for d, g, p in zip(rows, got, phi):
            def dev(v, d=d):
                x = a * v / np.linalg.norm(v)
                return float(np.sum((d - x) ** 2 / w))
            best = min((optimize.minimize(dev, x0, method="Nelder-Mead",
                                          options={"xatol": 1e-12, "fatol": 1e-14, "maxiter": 20_000})
                        for x0 in (d, -d, np.eye(3)[0], np.eye(3)[2], rng.standard_normal(3))),
                       key=lambda r: r.fun)
            assert g == pytest.approx(best.fun, rel=1e-6, abs=1e-9)
            assert g == pytest.approx(float(np.sum((d - p) ** 2 / w)), rel=1e-9)
    zero, _ = profile_deviance(rows, w, 0.0)
    np.testing.assert_allclose(zero, np.sum(rows**2 / w, axis=1), rtol=1e-12)


def test_anisotropic_sets_are_never_empty_and_hold_their_estimates():
    # Correlated ranges as in the committed runs (0.6-0.95); the lower bound is 0 exactly where
    # the chi-square Wald test of equal ranges does not reject (checked away from its edge).
    sd = np.array([0.033, 0.034, 0.031, 0.031])
    corr = np.array([[1, .88, .92, .84], [.88, 1, .78, .64], [.92, .78, 1, .94], [.84, .64, .94, 1]])
    cov = corr * np.outer(sd, sd)
    c = np.eye(4) - 0.25
    rng = np.random.default_rng(7)
    for i in range(12):
        est = 0.4 + rng.multivariate_normal(np.zeros(4), cov) + rng.normal(0, 0.01 * (i % 4), 4)
        got = heterogeneity_interval(est, None, cov=cov, seed=i)
        assert 0.0 <= got["low"] <= got["estimate"] <= got["high"]
        assert got["low"] <= got["raw"] <= got["high"]  # D(|d|) = 0: the raw value is always in the set
        wald = float((c @ est) @ np.linalg.pinv(c @ cov @ c) @ (c @ est))
        p = stats.chi2.sf(wald, 3)
        if abs(p - 0.05) > 0.01:
            assert (got["low"] == 0.0) == (p > 0.05), (i, p, got)


def test_replicates_give_the_covariance_and_undefined_resamples_are_left_out():
    rng = np.random.default_rng(0)
    reps = rng.multivariate_normal([0.5, 0.4, 0.3], [[4, 2, 1], [2, 3, 1], [1, 1, 2]], size=500).T * 1e-3
    est = np.array([0.5, 0.4, 0.3])
    with_nan = np.concatenate([reps, [[np.nan], [0.1], [0.2]]], axis=1)
    a = heterogeneity_interval(est, with_nan)
    b = heterogeneity_interval(est, None, cov=np.cov(reps))
    assert a == b


def test_no_noise_gives_the_deviations_themselves():
    est = np.array([0.1, 0.2, 0.3, 0.4])
    got = heterogeneity_interval(est, None, cov=np.full((4, 4), 0.02))  # perfectly correlated: none after centring
    assert got["low"] == got["estimate"] == got["high"] == pytest.approx(math.sqrt(0.05 / 3), rel=1e-9)


def test_undefined_and_bad_input():
    assert heterogeneity_interval([0.1, np.nan], np.zeros((2, 5)))["reason"] == "a range's estimate is undefined"
    assert "fewer than 2" in heterogeneity_interval([0.1, 0.2], np.full((2, 5), np.nan))["reason"]
    with pytest.raises(ValueError, match="K >= 2"):
        heterogeneity_interval([0.1], np.zeros((1, 5)))
    with pytest.raises(ValueError, match=r"replicates must be \[K=3, B\]"):
        heterogeneity_interval([0.1, 0.2, 0.3], np.zeros((2, 5)))
