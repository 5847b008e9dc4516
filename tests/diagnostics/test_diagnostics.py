"""Diagnostics against hand-computed cases, scipy, independent loop implementations and
simulation (interval coverage)."""

import json
import math
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.stats

import jaxjudge.diagnostics as D
from jaxjudge.diagnostics import _stats

DATA = Path(__file__).resolve().parents[3] / "shared" / "data"
Z95 = 1.959963984540054

# --------------------------------------------------------------------------------------------
# Bias-corrected accuracy


def test_worked_example_is_one_sixth():
    assert D.corrected_accuracy(0.4, 0.7, 0.9) == pytest.approx(1 / 6, rel=1e-12)
    exact = D.corrected_accuracy(Fraction(2, 5), Fraction(7, 10), Fraction(9, 10))
    assert exact == Fraction(1, 6)


def _hand_se(p, q0, q1, n, m0, m1):
    d = q0 + q1 - 1
    th = (p + q0 - 1) / d
    return math.sqrt((p * (1 - p) / n + (1 - th) ** 2 * q0 * (1 - q0) / m0 + th**2 * q1 * (1 - q1) / m1) / d**2)


def test_worked_example_interval():
    n, m0, m1 = 1000, 200, 200
    se = _hand_se(0.4, 0.7, 0.9, n, m0, m1)
    low, high = D.corrected_accuracy_ci(0.4, 0.7, 0.9, n, m0, m1, method="wald")
    print(f"worked example 1/6: Wald 95% CI ({low:.4f}, {high:.4f}), se {se:.4f}")
    assert low == pytest.approx(1 / 6 - Z95 * se, abs=1e-12)
    assert high == pytest.approx(1 / 6 + Z95 * se, abs=1e-12)
    alow, ahigh = D.corrected_accuracy_ci(0.4, 0.7, 0.9, n, m0, m1)
    print(f"worked example 1/6: adjusted 95% CI ({alow:.4f}, {ahigh:.4f})")
    assert 0.0 <= alow < 1 / 6 < ahigh <= 1.0
    # At these sizes the pseudo-counts move the ends by well under a hundredth.
    assert abs(alow - low) < 0.01 and abs(ahigh - high) < 0.01
    # Calibration uncertainty is most of the width here: test-set-only width would be far smaller.
    test_only = 2 * Z95 * math.sqrt(0.4 * 0.6 / n) / 0.6
    assert high - low > 1.5 * test_only
    # Narrower with more data, and a 90% interval sits inside the 95% one.
    l2, h2 = D.corrected_accuracy_ci(0.4, 0.7, 0.9, 4 * n, 4 * m0, 4 * m1)
    assert h2 - l2 < ahigh - alow
    l90, h90 = D.corrected_accuracy_ci(0.4, 0.7, 0.9, n, m0, m1, alpha=0.10)
    assert alow < l90 < h90 < ahigh


def _lee_interval_numpy(p, q0, q1, n, m0, m1, alpha=0.05):
    """Lee et al. (2025) eqs. 5-7 written out in numpy, independently of the library."""
    z = scipy.stats.norm.ppf(1 - alpha / 2)
    p, q0, q1, n, m0, m1 = (np.asarray(v, np.float64) for v in (p, q0, q1, n, m0, m1))
    n_t, m0_t, m1_t = n + z**2, m0 + 2, m1 + 2
    p_t = (n * p + z**2 / 2) / n_t
    q0_t = (m0 * q0 + 1) / m0_t
    q1_t = (m1 * q1 + 1) / m1_t
    th = (p_t + q0_t - 1) / (q0_t + q1_t - 1)
    dth = 2 * z**2 * (-(1 - th) * q0_t * (1 - q0_t) / m0_t + th * q1_t * (1 - q1_t) / m1_t)
    half = z * np.sqrt(p_t * (1 - p_t) / n_t + (1 - th) ** 2 * q0_t * (1 - q0_t) / m0_t
                       + th**2 * q1_t * (1 - q1_t) / m1_t) / (q0_t + q1_t - 1)
    return np.clip(th + dth - half, 0, 1), np.clip(th + dth + half, 0, 1)


def test_lee_interval_reproduces_reference_worked_example():
    # The authors' example (p = 0.4, q0 = 0.7, q1 = 0.9, n = 1000, m0 = m1 = 200): [0.056, 0.263].
    low, high = D.corrected_accuracy_ci(0.4, 0.7, 0.9, 1000, 200, 200)
    assert (round(low, 3), round(high, 3)) == (0.056, 0.263)
    # By hand: z^2 = 3.8415; p~ = 401.92/1003.84, q0~ = 141/202, q1~ = 181/202.
    z2 = Z95**2
    p_t, q0_t, q1_t = (400 + z2 / 2) / (1000 + z2), 141 / 202, 181 / 202
    th = (p_t + q0_t - 1) / (q0_t + q1_t - 1)
    shift = 2 * z2 * (th * q1_t * (1 - q1_t) / 202 - (1 - th) * q0_t * (1 - q0_t) / 202)
    se = _hand_se(p_t, q0_t, q1_t, 1000 + z2, 202, 202)
    assert shift == pytest.approx(-0.006102, abs=1e-6)  # the centre moves down from theta~ = 0.1656
    assert low == pytest.approx(th + shift - Z95 * se, abs=1e-12)
    assert high == pytest.approx(th + shift + Z95 * se, abs=1e-12)
    # The earlier Jeffreys variant, kept as a named option, gives the old figures.
    jl, jh = D.corrected_accuracy_ci(0.4, 0.7, 0.9, 1000, 200, 200, method="jeffreys")
    assert (round(jl, 3), round(jh, 3)) == (0.064, 0.269)
    with pytest.raises(ValueError, match="method"):
        D.corrected_accuracy_ci(0.4, 0.7, 0.9, 1000, 200, 200, method="agresti")


def test_lee_interval_matches_numpy_formulas():
    rng = np.random.default_rng(21)
    size = 500
    q0 = rng.uniform(0.6, 1.0, size)
    q1 = rng.uniform(0.6, 1.0, size)
    p = rng.uniform(0.0, 1.0, size)
    n = rng.integers(20, 3000, size)
    m0 = rng.integers(10, 400, size)
    m1 = rng.integers(10, 400, size)
    for alpha in (0.05, 0.1):
        low, high = D.corrected_accuracy_ci(p, q0, q1, n, m0, m1, alpha)
        want_low, want_high = _lee_interval_numpy(p, q0, q1, n, m0, m1, alpha)
        np.testing.assert_allclose(low, want_low, atol=1e-12, rtol=0)
        np.testing.assert_allclose(high, want_high, atol=1e-12, rtol=0)
        assert np.all((0 <= low) & (low <= high) & (high <= 1))
    # End to end: verdicts -> counts -> the same interval.
    res = D.bias_corrected_accuracy([1] * 40 + [0] * 60, [0] * 14 + [1] * 6 + [1] * 18 + [0] * 2,
                                    [0] * 20 + [1] * 20)
    want = _lee_interval_numpy(0.4, 0.7, 0.9, 100, 20, 20)
    assert (res.low, res.high) == (pytest.approx(float(want[0]), abs=1e-12), pytest.approx(float(want[1]), abs=1e-12))


def _simulate_coverage(theta, q0, q1, n, m0, m1, reps, seed, method="lee"):
    rng = np.random.default_rng(seed)
    p_true = theta * q1 + (1 - theta) * (1 - q0)
    p = rng.binomial(n, p_true, reps) / n
    q0_hat = rng.binomial(m0, q0, reps) / m0
    q1_hat = rng.binomial(m1, q1, reps) / m1
    assert np.all(q0_hat + q1_hat > 1.05)  # the settings below never produce a useless judge
    low, high = D.corrected_accuracy_ci(p, q0_hat, q1_hat, n, m0, m1, method=method)
    assert low.shape == (reps,) and np.all(low <= high)
    return float(np.mean((low <= theta) & (theta <= high)))


@pytest.mark.parametrize(
    "theta,q0,q1,n,m0,m1,seed",
    [
        (1 / 6, 0.7, 0.9, 1000, 200, 200, 1),  # the worked example's population
        (0.5, 0.85, 0.8, 500, 100, 150, 2),
        (0.8, 0.9, 0.95, 300, 60, 80, 3),
        (0.93, 0.9, 0.97, 500, 50, 100, 4),  # near the boundary, small calibration set
    ],
)
def test_interval_coverage(theta, q0, q1, n, m0, m1, seed):
    cover = _simulate_coverage(theta, q0, q1, n, m0, m1, reps=2000, seed=seed)
    print(f"coverage theta={theta:.3f} n={n} m0={m0} m1={m1}: {cover:.3f}")
    assert 0.93 <= cover <= 0.97


def test_wald_coverage_large_sample():
    cover = _simulate_coverage(1 / 6, 0.7, 0.9, 1000, 200, 200, reps=2000, seed=5, method="wald")
    assert 0.93 <= cover <= 0.97


def test_delta_se_matches_monte_carlo_spread():
    # Independent check of the variance derivation: spread of the raw estimator over many
    # simulated datasets against the formula at the true rates.
    rng = np.random.default_rng(7)
    theta, q0, q1, n, m0, m1, reps = 0.6, 0.8, 0.85, 800, 300, 300, 40_000
    p = rng.binomial(n, theta * q1 + (1 - theta) * (1 - q0), reps) / n
    est = D.corrected_accuracy(p, rng.binomial(m0, q0, reps) / m0, rng.binomial(m1, q1, reps) / m1, clip=False)
    p_true = theta * q1 + (1 - theta) * (1 - q0)
    se = D.corrected_accuracy_se(p_true, q0, q1, n, m0, m1)
    assert se == pytest.approx(_hand_se(p_true, q0, q1, n, m0, m1), rel=1e-12)
    assert np.std(est) == pytest.approx(se, rel=0.04)
    assert np.mean(est) == pytest.approx(theta, abs=0.003)


def test_corrected_accuracy_errors_and_clip():
    with pytest.raises(ValueError, match=r"q0 \+ q1"):
        D.corrected_accuracy(0.4, 0.5, 0.5)
    with pytest.raises(ValueError, match=r"q0 \+ q1"):
        D.corrected_accuracy_ci(0.4, 0.3, 0.6, 100, 50, 50)
    with pytest.raises(ValueError, match="m0"):
        D.corrected_accuracy_ci(0.4, 0.7, 0.9, 100, 0, 50)
    with pytest.raises(ValueError, match="m1"):
        D.corrected_accuracy_ci(0.4, 0.7, 0.9, 100, 50, 0)
    with pytest.raises(ValueError, match="p "):
        D.corrected_accuracy(1.2, 0.7, 0.9)
    with pytest.raises(ValueError, match="alpha"):
        D.corrected_accuracy_ci(0.4, 0.7, 0.9, 100, 50, 50, alpha=1.5)
    with pytest.raises(ValueError, match="q1"):
        D.corrected_accuracy(0.4, 0.7, float("nan"))
    # p below the false-pass rate 1 - q0: the raw estimate is negative, the default clips to 0.
    assert D.corrected_accuracy(0.2, 0.7, 0.9, clip=False) == pytest.approx(-1 / 6)
    assert D.corrected_accuracy(0.2, 0.7, 0.9) == 0.0 and isinstance(D.corrected_accuracy(0.2, 0.7, 0.9), float)
    assert D.corrected_accuracy(Fraction(9, 10), Fraction(7, 10), Fraction(9, 10)) == 1
    low, high = D.corrected_accuracy_ci(0.2, 0.7, 0.9, 100, 30, 30)
    assert 0.0 == low < high <= 1.0
    # Perfect calibration rates: the adjusted interval stays non-degenerate.
    low, high = D.corrected_accuracy_ci(0.5, 1.0, 1.0, 200, 30, 30)
    assert high - low > 2 * Z95 * math.sqrt(0.25 / 200) * 0.9


def test_allocate_calibration_exact_rule_is_optimal():
    for budget, p, q0, q1 in [(400, 0.4, 0.7, 0.9), (101, 0.7, 0.85, 0.8), (60, 0.9, 0.95, 0.7), (10, 0.5, 0.8, 0.8)]:
        m0, m1 = D.allocate_calibration(budget, p, q0, q1, rule="exact")
        assert m0 + m1 == budget and m0 >= 1 and m1 >= 1
        theta = min(max((p + q0 - 1) / (q0 + q1 - 1), 0.0), 1.0)

        def var(k):  # brute force over every split, computed independently
            return _hand_se(p, q0, q1, 1e12, k, budget - k) ** 2

        best = min(range(1, budget), key=var)
        assert var(m0) == pytest.approx(var(best), rel=1e-12), (budget, p, m0, best, theta)
    # Mostly-failing test set: specificity (negatives) matters more.
    m0, m1 = D.allocate_calibration(400, 0.4, 0.7, 0.9, rule="exact")
    assert m0 > m1
    # Degenerate pilot (no errors in either class): even split, not a crash.
    assert D.allocate_calibration(11, 0.5, 1.0, 1.0, rule="exact") in {(5, 6), (6, 5)}
    assert D.allocate_calibration(100, 0.5, 1.0, 0.8, min_per_class=10, rule="exact") == (10, 90)
    # A pilot whose corrected accuracy is 0 sends everything but one item to the negatives.
    assert D.allocate_calibration(200, 0.3, 0.7, 0.9, rule="exact") == (199, 1)
    with pytest.raises(ValueError, match="budget"):
        D.allocate_calibration(1, 0.5, 0.8, 0.8)
    with pytest.raises(ValueError, match=r"q0 \+ q1"):
        D.allocate_calibration(100, 0.5, 0.4, 0.5)
    with pytest.raises(ValueError, match="rule"):
        D.allocate_calibration(100, 0.5, 0.8, 0.8, rule="even")


def _lee_allocation_loop(m, p, q0, q1, m_pilot):
    """Algorithm 1 of Lee et al. (2025) step by step, independently of the library."""
    if m_pilot > 0:  # Laplace-smoothed pilot accuracies (correct + 1) / (m_pilot + 2)
        q0_t = (round(m_pilot * q0) + 1) / (m_pilot + 2)
        q1_t = (round(m_pilot * q1) + 1) / (m_pilot + 2)
        kappa = (1 - q0_t) / (1 - q1_t)
    else:
        kappa = (1 - q0) / max(1 - q1, 1e-6)
    m1_star = round(m / (1 + (1 / p - 1) * math.sqrt(kappa)))
    m1 = min(max(m1_star, m_pilot, 1), m - max(m_pilot, 1))
    return m - m1, m1


def test_allocate_calibration_reproduces_reference():
    # Budget 200, p = 0.3, q0 = 0.7, q1 = 0.9. No pilot: kappa = 0.3 / 0.1 = 3,
    # m1 = 200 / (1 + (1/0.3 - 1) sqrt 3) = 39.67 -> 40.
    assert D.allocate_calibration(200, 0.3, 0.7, 0.9) == (160, 40)
    # Ten pilot labels per class (3 and 1 errors): kappa = (3 + 1) / (1 + 1) = 2,
    # m1 = 200 / (1 + (7/3) sqrt 2) = 46.51 -> 47.
    assert D.allocate_calibration(200, 0.3, 0.7, 0.9, m_pilot=10) == (153, 47)
    # The README example of the reference (p = 0.4, m = 200, m_pilot = 10).
    assert D.allocate_calibration(200, 0.4, 0.7, 0.9, m_pilot=10) == _lee_allocation_loop(200, 0.4, 0.7, 0.9, 10)
    rng = np.random.default_rng(8)
    for _ in range(400):
        m_pilot = int(rng.choice([0, 5, 10, 20]))
        m = int(rng.integers(max(2, 2 * m_pilot), 1000))
        if m_pilot:
            q0, q1 = (rng.integers(0, m_pilot + 1, 2) / m_pilot).tolist()
        else:
            q0, q1 = rng.uniform(0.5, 1.0, 2).tolist()
        if q0 + q1 <= 1:
            continue
        p = float(rng.uniform(0.01, 1.0))
        got = D.allocate_calibration(m, p, q0, q1, m_pilot=m_pilot)
        assert got == _lee_allocation_loop(m, p, q0, q1, m_pilot), (m, p, q0, q1, m_pilot)
        assert sum(got) == m and min(got) >= max(m_pilot, 1)
    # p = 0: the formula's limit, the fewest positives allowed.
    assert D.allocate_calibration(100, 0.0, 0.8, 0.9, m_pilot=10) == (90, 10)
    with pytest.raises(ValueError, match="m_pilot"):
        D.allocate_calibration(30, 0.5, 0.8, 0.9, m_pilot=20)


def test_calibration_rates_and_end_to_end():
    human = [1, 1, 1, 1, 0, 0, 0]
    judge = [1, 1, 1, 0, 0, 1, 0]
    r = D.calibration_rates(judge, human)
    assert (r.q0, r.q1, r.m0, r.m1) == (pytest.approx(2 / 3), pytest.approx(3 / 4), 3, 4)
    with pytest.raises(ValueError, match="m0 = 0"):
        D.calibration_rates([1, 0, 1], [1, 1, 1])
    with pytest.raises(ValueError, match="m1 = 0"):
        D.calibration_rates([1, 0, 1], [0, 0, 0])
    with pytest.raises(ValueError, match="row 1"):
        D.calibration_rates([1, 2, 1], [0, 1, 0])

    rng = np.random.default_rng(11)
    theta, q0, q1 = 0.35, 0.8, 0.9
    truth = rng.random(3000) < theta
    test_judge = np.where(truth, rng.random(3000) < q1, rng.random(3000) > q0)
    cal_h = rng.random(600) < 0.5
    cal_j = np.where(cal_h, rng.random(600) < q1, rng.random(600) > q0)
    res = D.bias_corrected_accuracy(test_judge, cal_j, cal_h)
    assert res.naive == pytest.approx(test_judge.mean())
    assert res.estimate == pytest.approx(
        (res.naive + res.calib.q0 - 1) / (res.calib.q0 + res.calib.q1 - 1), rel=1e-12)
    assert res.low < theta < res.high
    assert abs(res.naive - theta) > 0.05  # the naive rate is visibly biased here


# --------------------------------------------------------------------------------------------
# Intervals for rates


def _wilson_closed_form(x, n, z):
    """Wilson (1927): the roots in pi of (x/n - pi)^2 = z^2 pi (1 - pi) / n, by the quadratic formula."""
    p = x / n
    a = 1 + z**2 / n
    b = -(2 * p + z**2 / n)
    c = p**2
    disc = math.sqrt(max(b * b - 4 * a * c, 0.0))
    return (-b - disc) / (2 * a), (-b + disc) / (2 * a)


def test_wilson_interval_hand_computed():
    # 3 of 10 at 95%: centre (0.3 + 1.9207/10) / 1.38415 = 0.35551, half 0.24772.
    low, high = D.wilson_interval(3, 10)
    assert (round(low, 4), round(high, 4)) == (0.1078, 0.6032)
    for x, n, alpha in [(3, 10, 0.05), (0, 10, 0.05), (10, 10, 0.05), (2, 240, 0.05), (57, 91, 0.1), (1, 1, 0.2)]:
        z = scipy.stats.norm.ppf(1 - alpha / 2)
        want = _wilson_closed_form(x, n, z)
        got = D.wilson_interval(x, n, alpha)
        assert got == (pytest.approx(want[0], abs=1e-12), pytest.approx(want[1], abs=1e-12)), (x, n)
        assert 0.0 <= got[0] <= x / n <= got[1] <= 1.0
    assert D.wilson_interval(0, 10)[0] == 0.0 and D.wilson_interval(10, 10)[1] == 1.0
    # The Wald interval of 2 / 240 goes below 0; Wilson's does not.
    assert 2 / 240 - Z95 * math.sqrt((2 / 240) * (238 / 240) / 240) < 0 < D.wilson_interval(2, 240)[0]
    with pytest.raises(ValueError, match="successes"):
        D.wilson_interval(11, 10)
    with pytest.raises(ValueError, match="n must be"):
        D.wilson_interval(0, 0)
    with pytest.raises(ValueError, match="alpha"):
        D.wilson_interval(3, 10, alpha=0.0)


def test_clustered_wilson_interval():
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(12), 5)  # 12 documents of 5 items
    values = (rng.random(60) < 0.1 + 0.05 * (groups % 3)).astype(float)
    r = D.clustered_wilson_interval(values, groups)
    m, se = D.clustered_mean_se(values, groups)
    t = scipy.stats.t.ppf(0.975, df=11)
    n_eff = m * (1 - m) / se**2
    assert (r.estimate, r.se, r.n_eff, r.df) == (m, se, pytest.approx(n_eff, rel=1e-12), 11)
    want = _wilson_closed_form(m * n_eff, n_eff, t)
    assert (r.low, r.high) == (pytest.approx(want[0], abs=1e-12), pytest.approx(want[1], abs=1e-12))
    # A rare event, clustered: Wald (m - t se) would be negative, the Wilson bound is not.
    rare = np.zeros(60)
    rare[[0, 1]] = 1.0  # both in document 0
    r = D.clustered_wilson_interval(rare, groups)
    assert r.estimate - t * r.se < 0 < r.low < r.estimate < r.high < 1
    # No spread to measure (every value 0): Wilson at the item count, [0, t^2 / (N + t^2)].
    r = D.clustered_wilson_interval(np.zeros(60), groups)
    assert (r.low, r.high) == (0.0, pytest.approx(t**2 / (60 + t**2), rel=1e-12))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        D.clustered_wilson_interval(values * 2, groups)


# --------------------------------------------------------------------------------------------
# Cohen's kappa


def _kappa_loops(a, b, labels, weights):
    """Straightforward reference: confusion matrix by loops, then the kappa definition."""
    k = len(labels)
    pos = {v: i for i, v in enumerate(labels)}
    conf = [[0.0] * k for _ in range(k)]
    for x, y in zip(a, b):
        conf[pos[x]][pos[y]] += 1
    n = len(a)
    rows = [sum(conf[i]) for i in range(k)]
    cols = [sum(conf[i][j] for i in range(k)) for j in range(k)]
    obs = exp = 0.0
    for i in range(k):
        for j in range(k):
            if weights is None:
                w = 0.0 if i == j else 1.0
            elif weights == "linear":
                w = abs(i - j) / (k - 1)
            else:
                w = (i - j) ** 2 / (k - 1) ** 2
            obs += w * conf[i][j]
            exp += w * rows[i] * cols[j] / n
    return 1 - obs / exp


def test_kappa_hand_examples():
    # 2x2: 20 yes/yes, 5 yes/no, 10 no/yes, 15 no/no. po = .7, pe = .5*.6 + .5*.4 = .5.
    a = [1] * 25 + [0] * 25
    b = [1] * 20 + [0] * 5 + [1] * 10 + [0] * 15
    assert D.cohen_kappa(a, b) == pytest.approx(0.4, abs=1e-12)
    # 3 labels. Pairs (1,1) (1,2) (2,2) (2,2) (3,3) (3,1): row totals 2,2,2, column totals
    # 2,3,1, so E_ij = 2 c_j / 6 = (2/3, 1, 1/3) in every row. Weighted disagreement sums:
    # unweighted O = 2, E = 6 - (2/3 + 1 + 1/3) = 4;
    # linear (w = 1/2 per step) O = 1/2 + 1 = 1.5, E = (1/2 + 1/3) + (1/3 + 1/6) + (2/3 + 1/2) = 2.5;
    # quadratic (w = 1/4, 1) O = 1/4 + 1 = 1.25, E = 7/12 + 3/12 + 11/12 = 1.75.
    a = [1, 1, 2, 2, 3, 3]
    b = [1, 2, 2, 2, 3, 1]
    assert D.cohen_kappa(a, b) == pytest.approx(0.5, abs=1e-12)  # 1 - 2/4
    assert D.cohen_kappa(a, b, weights="linear") == pytest.approx(0.4, abs=1e-12)  # 1 - 1.5/2.5
    assert D.cohen_kappa(a, b, weights="quadratic") == pytest.approx(2 / 7, abs=1e-12)  # 1 - 1.25/1.75
    counts, scale = D.confusion_matrix(a, b)
    np.testing.assert_array_equal(counts, [[1, 1, 0], [0, 2, 0], [1, 0, 1]])
    np.testing.assert_array_equal(scale, [1, 2, 3])


def test_kappa_matches_reference_implementations():
    try:
        from sklearn.metrics import cohen_kappa_score
    except ImportError:
        cohen_kappa_score = None
    rng = np.random.default_rng(3)
    for trial in range(30):
        a = rng.integers(1, 6, 40)
        b = np.clip(a + rng.integers(-2, 3, 40), 1, 5)
        labels = sorted(set(a) | set(b))
        for w in (None, "linear", "quadratic"):
            ours = D.cohen_kappa(a, b, weights=w)
            assert ours == pytest.approx(_kappa_loops(a.tolist(), b.tolist(), labels, w), abs=1e-12)
            if cohen_kappa_score is not None:
                assert ours == pytest.approx(cohen_kappa_score(a, b, weights=w), abs=1e-12)
    # A stated scale changes weighted kappa when the data skip an inner label (3 and 4 here).
    a, b = [1, 2, 5, 2, 1, 5], [1, 5, 5, 2, 2, 5]
    full = D.cohen_kappa(a, b, weights="linear", lo=1, hi=5)
    assert full == pytest.approx(_kappa_loops(a, b, [1, 2, 3, 4, 5], "linear"), abs=1e-12)
    assert full != pytest.approx(D.cohen_kappa(a, b, weights="linear"))
    assert D.cohen_kappa(a, b, labels=[1, 2, 3, 4, 5], weights="linear") == pytest.approx(full)
    assert D.cohen_kappa(a, b, lo=1, hi=5) == pytest.approx(D.cohen_kappa(a, b))  # unweighted: no change
    assert D.cohen_kappa(a, a, weights="quadratic") == pytest.approx(1.0)


def test_kappa_degenerate_and_errors():
    with pytest.raises(ValueError, match="same label"):
        D.cohen_kappa([3, 3, 3], [3, 3, 3], lo=1, hi=5)
    with pytest.raises(ValueError, match="at least two labels"):
        D.cohen_kappa([3, 3, 3], [3, 3, 3])
    # One constant rater against a varying one is defined and not above 0.
    k = D.cohen_kappa([3, 3, 3, 3], [2, 3, 4, 3], weights="linear")
    assert k == pytest.approx(_kappa_loops([3] * 4, [2, 3, 4, 3], [2, 3, 4], "linear"))
    assert k <= 0.0
    with pytest.raises(ValueError, match="rater_b row 2"):
        D.cohen_kappa([1, 2, 3], [1, 2, 3.5], lo=1, hi=5)
    with pytest.raises(ValueError, match="length mismatch"):
        D.cohen_kappa([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="weights"):
        D.cohen_kappa([1, 2], [2, 1], weights="cubic")
    np.testing.assert_array_equal(D.to_integer_scale([0.2, 2.5, 3.51, 9.0], 1, 5), [1, 2, 4, 5])


# --------------------------------------------------------------------------------------------
# Position bias


def _lp(pa, pb):
    return [math.log(pa), math.log(pb)]


def test_position_bias_hand_case():
    # Columns: (log p("A"), log p("B")). Forward: pair's first in slot A; swapped: second in A.
    fwd = np.array([_lp(0.8, 0.1), _lp(0.7, 0.2), _lp(0.3, 0.6), _lp(0.9, 0.05)])
    swp = np.array([_lp(0.2, 0.7), _lp(0.6, 0.3), _lp(0.8, 0.1), _lp(0.55, 0.4)])
    human = np.array([1, -1, -1, 1])
    r = D.position_bias(fwd, swp, human)
    # Slot choices: forward A, A, B, A; swapped B, A, A, A.
    np.testing.assert_array_equal(r.verdict_forward, [1, 1, -1, 1])
    np.testing.assert_array_equal(r.verdict_swapped, [1, -1, -1, -1])
    np.testing.assert_array_equal(r.combined, [1, 0, -1, 0])
    assert r.consistency == 0.5
    assert r.first_slot_rate == 6 / 8
    assert (r.n_inconsistent_first, r.n_inconsistent_second) == (2, 0)
    assert r.accuracy == pytest.approx((1 + 0.5 + 1 + 0.5) / 4)
    assert r.tie_rate == 0.5 and r.accuracy_decisive == 1.0
    assert r.accuracy_forward == 0.75 and r.accuracy_swapped == 0.75
    pf = [0.5 * (0.8 / 0.9 + 0.7 / 0.9), 0.5 * (0.7 / 0.9 + 0.3 / 0.9), 0.5 * (1 / 3 + 1 / 9),
          0.5 * (0.9 / 0.95 + 0.4 / 0.95)]
    np.testing.assert_allclose(r.prob_first, pf, rtol=1e-12)
    # Soft verdicts: first, first, second, first -> vs human 1, 0, 1, 1.
    assert r.accuracy_soft == 0.75
    mass = np.mean([0.9, 0.9, 0.9, 0.95, 0.9, 0.9, 0.9, 0.95])
    assert r.answer_mass == pytest.approx(mass)
    credit = np.array([1, 0.5, 1, 0.5])
    assert r.accuracy_se == pytest.approx(credit.std(ddof=1) / 2)
    s = r.summary()
    assert s["consistency"] == 0.5 and "combined" not in s


def test_position_bias_symmetry_and_extremes():
    rng = np.random.default_rng(0)
    fwd = np.log(rng.dirichlet([1, 1], 50))
    swp = np.log(rng.dirichlet([1, 1], 50))
    human = rng.choice([-1, 1], 50)
    r1 = D.position_bias(fwd, swp, human)
    # Relabelling which item is "first" swaps the two orders and flips the human preference.
    r2 = D.position_bias(swp, fwd, -human)
    for f in ("consistency", "first_slot_rate", "accuracy", "tie_rate", "accuracy_soft"):
        assert getattr(r1, f) == pytest.approx(getattr(r2, f)), f
    np.testing.assert_allclose(r1.prob_first, 1 - r2.prob_first)
    # A judge that always answers A: never consistent, all ties, chance accuracy.
    always_a = np.tile(_lp(0.9, 0.1), (50, 1))
    r = D.position_bias(always_a, always_a, human)
    assert (r.consistency, r.first_slot_rate, r.tie_rate, r.accuracy) == (0.0, 1.0, 1.0, 0.5)
    assert r.accuracy_decisive is None and r.n_inconsistent_first == 50
    # A zero-probability answer (-inf) is a valid, decisive reading.
    r = D.position_bias([[0.0, -np.inf]], [[-np.inf, 0.0]], [1])
    assert r.consistency == 1.0 and r.accuracy == 1.0
    # Margin turns near-ties into ties.
    r = D.position_bias([_lp(0.5, 0.49)], [_lp(0.49, 0.5)], [1], margin=0.1)
    assert r.combined[0] == 0 and r.first_slot_rate == 0.5
    np.testing.assert_array_equal(D.slot_verdicts([_lp(0.6, 0.4), _lp(0.4, 0.6), [-1.0, -1.0]]), [1, -1, 0])


def test_position_bias_clustered_se_and_errors():
    rng = np.random.default_rng(1)
    fwd = np.log(rng.dirichlet([1, 1], 30))
    swp = np.log(rng.dirichlet([1, 1], 30))
    human = rng.choice([-1, 1], 30)
    groups = np.repeat(np.arange(6), 5)
    r = D.position_bias(fwd, swp, human, groups=groups)
    credit = np.where(r.combined == 0, 0.5, (r.combined == human).astype(float))
    assert r.accuracy_se == pytest.approx(_clustered_se_loops(credit, groups))
    with pytest.raises(ValueError, match="at least one pair"):
        D.position_bias(np.zeros((0, 2)), np.zeros((0, 2)))
    with pytest.raises(ValueError, match=r"shape \[P, 2\]"):
        D.position_bias(np.zeros((3, 3)), np.zeros((3, 3)))
    with pytest.raises(ValueError, match="logp_swapped has NaN"):
        D.position_bias([[0.0, -1.0]], [[np.nan, -1.0]])
    with pytest.raises(ValueError, match="both answer tokens"):
        D.position_bias([[-np.inf, -np.inf]], [[0.0, -1.0]])
    with pytest.raises(ValueError, match="human_pref must be"):
        D.position_bias([[0.0, -1.0]], [[0.0, -1.0]], [0])
    with pytest.raises(ValueError, match="length mismatch"):
        D.position_bias([[0.0, -1.0]], [[0.0, -1.0], [0.0, -1.0]])


# --------------------------------------------------------------------------------------------
# Pair construction and the prompt


def _brute_pairs(groups, scores, min_gap):
    out = set()
    for i in range(len(groups)):
        for j in range(i + 1, len(groups)):
            if groups[i] == groups[j] and abs(scores[i] - scores[j]) >= min_gap - 1e-9 and scores[i] != scores[j]:
                out.add(frozenset((i, j)))
    return out


def test_build_pairs_hand_case():
    groups = ["d1", "d1", "d1", "d2", "d2", "d3"]
    ids = ["m1", "m2", "m3", "m1", "m2", "m1"]
    # SummEval-style thirds: 13/3 - 10/3 is one point up to rounding.
    scores = [13 / 3, 10 / 3, 4.0, 2.0, 2.5, 5.0]
    p = D.build_pairs(groups, ids, scores, min_gap=1.0, seed=0)
    assert {frozenset((int(a), int(b))) for a, b in zip(p.first, p.second)} == {frozenset((0, 1))}
    s = np.asarray(scores)
    np.testing.assert_array_equal(p.human_pref, np.sign(s[p.first] - s[p.second]))
    p = D.build_pairs(groups, ids, scores, min_gap=0.5, seed=0)
    assert {frozenset((int(a), int(b))) for a, b in zip(p.first, p.second)} == _brute_pairs(groups, scores, 0.5)
    assert len(p) == 3 and set(p.group) == {"d1", "d2"}
    assert all(g == groups[int(f)] == groups[int(t)] for g, f, t in zip(p.group, p.first, p.second))
    assert list(p.first_id) == [ids[int(i)] for i in p.first]
    np.testing.assert_allclose(p.gap, np.abs(s[p.first] - s[p.second]))
    # Zero qualifying pairs is a defined, empty result.
    assert len(D.build_pairs(groups, ids, scores, min_gap=10.0)) == 0
    # Equal scores never pair, even with min_gap 0.
    assert len(D.build_pairs(["a", "a"], ["x", "y"], [3.0, 3.0], min_gap=0.0)) == 0


def test_build_pairs_subsampling_is_deterministic():
    rng = np.random.default_rng(0)
    groups = np.repeat([f"doc{i}" for i in range(20)], 8)
    ids = np.tile([f"m{j}" for j in range(8)], 20)
    scores = rng.integers(3, 16, 160) / 3.0
    full = D.build_pairs(groups, ids, scores, min_gap=1.0, seed=0)
    assert {frozenset((int(a), int(b))) for a, b in zip(full.first, full.second)} == _brute_pairs(
        list(groups), list(scores), 1.0)
    # Orientation is randomised: humans prefer slot A in about half the pairs.
    assert 0.4 < np.mean(full.human_pref == 1) < 0.6
    a = D.build_pairs(groups, ids, scores, n_pairs=100, seed=3)
    b = D.build_pairs(groups, ids, scores, n_pairs=100, seed=3)
    c = D.build_pairs(groups, ids, scores, n_pairs=100, seed=4)
    np.testing.assert_array_equal(a.first, b.first)
    np.testing.assert_array_equal(a.second, b.second)
    assert len(a) == 100
    assert not (np.array_equal(a.first, c.first) and np.array_equal(a.second, c.second))
    sub = {frozenset((int(x), int(y))) for x, y in zip(a.first, a.second)}
    assert len(sub) == 100 and sub <= {frozenset((int(x), int(y))) for x, y in zip(full.first, full.second)}
    with pytest.raises(ValueError, match=f"only {len(full)} pairs"):
        D.build_pairs(groups, ids, scores, n_pairs=len(full) + 1)
    with pytest.raises(ValueError, match="duplicate item id 'm1' in group 'd'"):
        D.build_pairs(["d", "d"], ["m1", "m1"], [1.0, 3.0])
    with pytest.raises(ValueError, match="human_scores has a non-finite"):
        D.build_pairs(["d", "d"], ["m1", "m2"], [1.0, np.nan])
    with pytest.raises(ValueError, match="length mismatch"):
        D.build_pairs(["d", "d"], ["m1"], [1.0, 2.0])


def test_pairs_from_examples():
    exs = [SimpleNamespace(id=f"d/{k}", group="d", scores={"coherence": s}) for k, s in enumerate([1.0, 2.0, 4.0])]
    p = D.pairs_from_examples(exs, "coherence", min_gap=1.5)
    assert {frozenset((int(a), int(b))) for a, b in zip(p.first, p.second)} == {frozenset((0, 2)), frozenset((1, 2))}
    with pytest.raises(ValueError, match="no human score 'fluency'"):
        D.pairs_from_examples(exs, "fluency")


@pytest.mark.skipif(not (DATA / "summeval" / "summeval_summaries.jsonl").is_file(), reason="shared data absent")
def test_build_pairs_on_summeval():
    rows = [json.loads(line) for line in open(DATA / "summeval" / "summeval_summaries.jsonl")]
    groups = [r["doc_id"] for r in rows]
    ids = [r["model_id"] for r in rows]
    scores = np.array([r["coherence"] for r in rows])
    full = D.build_pairs(groups, ids, scores)
    # Independent count: per document, pairs whose score difference is at least one point.
    expected = 0
    for doc in set(groups):
        s = scores[[g == doc for g in groups]]
        d = np.abs(np.round(3 * s)[:, None] - np.round(3 * s)[None, :])  # integer thirds
        expected += int(np.triu(d >= 3, k=1).sum())
    assert len(full) == expected
    p = D.build_pairs(groups, ids, scores, n_pairs=200, seed=0)
    assert len(p) == 200 and np.all(p.gap > 0.99) and len(set(p.group)) > 50


def test_pairwise_template():
    t = D.SUMMARY_PAIRWISE
    assert t.placeholders == {"document", "summary_a", "summary_b", "aspect", "aspect_definition"}
    assert t.choices == ("A", "B")
    text = t.format_user(document="THE ARTICLE", summary_a="FIRST TEXT", summary_b="SECOND TEXT", aspect="relevance")
    assert text.index("THE ARTICLE") < text.index("FIRST TEXT") < text.index("SECOND TEXT")
    assert "Which of the two summaries" in text and "Answer with A or B" in text
    assert D.ASPECT_DEFINITIONS["relevance"] in text
    assert set(D.ASPECT_DEFINITIONS) == {"coherence", "consistency", "fluency", "relevance"}
    with pytest.raises(ValueError, match="no definition for aspect 'humour'"):
        t.format_user(document="x", summary_a="a", summary_b="b", aspect="humour")
    assert "be funny" in t.format_user(document="x", summary_a="a", summary_b="b", aspect="humour",
                                       aspect_definition="be funny")


def test_render_pair_prompts():
    groups, ids, scores = ["d", "d", "e", "e"], ["x", "y", "x", "y"], [1.0, 3.0, 4.0, 2.0]
    docs = ["DOC D", "DOC D", "DOC E", "DOC E"]
    summ = ["sum dx", "sum dy", "sum ex", "sum ey"]
    pairs = D.build_pairs(groups, ids, scores, seed=1)
    fwd, swp = D.render_pair_prompts(pairs, docs, summ, "coherence")
    assert len(fwd) == len(swp) == 2
    for k, (f, t) in enumerate(zip(pairs.first, pairs.second)):
        assert fwd[k].index(summ[f]) < fwd[k].index(summ[t]) and docs[f] in fwd[k]
        assert swp[k].index(summ[t]) < swp[k].index(summ[f])
    with pytest.raises(ValueError, match="mixes two different documents"):
        D.render_pair_prompts(pairs, ["a", "b", "c", "d"], summ, "coherence")


# --------------------------------------------------------------------------------------------
# Length bias


def test_correlation_helpers_hand_computed():
    # Centred x = (-1.5, -.5, .5, 1.5), y = (-1.5, .5, -.5, 1.5): sxy = 4, sxx = syy = 5.
    x, y = np.array([1.0, 2.0, 3.0, 4.0]), np.array([1.0, 3.0, 2.0, 4.0])
    assert _stats.pearson(x, y) == pytest.approx(0.8, abs=1e-12)
    assert _stats.spearman(x ** 3, np.exp(y)) == pytest.approx(0.8, abs=1e-12)  # ranks only
    # Ties take their average rank: (1, 1, 2, 3) -> (1.5, 1.5, 3, 4).
    np.testing.assert_array_equal(_stats.average_ranks(np.array([1.0, 1.0, 2.0, 3.0])), [1.5, 1.5, 3.0, 4.0])
    # Spearman with ties is Pearson on the average ranks: (1.5, 1.5, 3, 4) vs (1, 2, 3, 4):
    # centred (-1, -1, .5, 1.5) and (-1.5, -.5, .5, 1.5): sxy = 4.5, sxx = 4.5, syy = 5.
    assert _stats.spearman(np.array([1.0, 1.0, 2.0, 3.0]), x) == pytest.approx(np.sqrt(0.9), abs=1e-12)
    with pytest.raises(ValueError, match="y is constant"):
        _stats.pearson(x, np.ones(4))
    with pytest.raises(ValueError, match="lengths is constant"):
        _stats.spearman(np.full(4, 2.0), y, x_name="lengths")


def test_length_bias_against_numpy_reference():
    rng = np.random.default_rng(4)
    n = 300
    human = rng.normal(3, 1, n)
    length = rng.integers(20, 120, n).astype(float)
    judge = human + 0.02 * length + rng.normal(0, 0.5, n)
    r = D.length_bias(length, judge, human)
    slope, intercept = np.polyfit(length, judge, 1)
    assert (r.slope, r.intercept) == (pytest.approx(slope, rel=1e-9), pytest.approx(intercept, rel=1e-9))
    assert r.pearson_length == pytest.approx(scipy.stats.pearsonr(length, judge)[0], abs=1e-12)
    assert r.spearman_length == pytest.approx(scipy.stats.spearmanr(length, judge)[0], abs=1e-12)
    assert r.r_squared == pytest.approx(r.pearson_length**2)
    resid = judge - (intercept + slope * length)
    assert r.residual_pearson == pytest.approx(scipy.stats.pearsonr(resid, human)[0], abs=1e-9)
    assert r.residual_spearman == pytest.approx(scipy.stats.spearmanr(resid, human)[0], abs=1e-9)
    assert r.raw_pearson == pytest.approx(scipy.stats.pearsonr(judge, human)[0], abs=1e-12)
    assert r.human_pearson_length == pytest.approx(scipy.stats.pearsonr(length, human)[0], abs=1e-12)
    # Removing the length trend removes the noise it added: agreement with humans improves.
    assert r.residual_pearson > r.raw_pearson
    assert D.length_bias(length, judge).raw_pearson is None


def test_length_controlled_difference():
    rng = np.random.default_rng(5)
    n = 400
    is_b = np.repeat([0, 1], n // 2)
    length = rng.normal(60, 10, n) + 30 * is_b  # system B writes longer texts
    quality = rng.normal(3, 1, n)  # but is no better
    judge = quality + 0.03 * length
    r = D.length_controlled_difference(length, judge, is_b)
    a, b = is_b == 0, is_b == 1
    # Independent formula: pooled within-group slope, then adjust the raw difference.
    sxy = sum(np.sum((length[g] - length[g].mean()) * (judge[g] - judge[g].mean())) for g in (a, b))
    sxx = sum(np.sum((length[g] - length[g].mean()) ** 2) for g in (a, b))
    beta = sxy / sxx
    raw = judge[b].mean() - judge[a].mean()
    assert r.slope == pytest.approx(beta, rel=1e-9)
    assert r.raw_difference == pytest.approx(raw, rel=1e-12)
    assert r.controlled_difference == pytest.approx(raw - beta * (length[b].mean() - length[a].mean()), abs=1e-9)
    assert raw > 0.6 and abs(r.controlled_difference) < 3 * r.se
    pooled = D.length_controlled_difference(length, judge, is_b, slope="pooled")
    ps = np.polyfit(length, judge, 1)[0]
    assert pooled.controlled_difference == pytest.approx(raw - ps * (length[b].mean() - length[a].mean()), abs=1e-9)


def test_length_degenerate_inputs():
    with pytest.raises(ValueError, match="lengths are all equal"):
        D.length_bias([50, 50, 50, 50], [1, 2, 3, 4])
    with pytest.raises(ValueError, match="at least 3"):
        D.length_bias([1, 2], [1, 2])
    with pytest.raises(ValueError, match="judge_scores is constant"):
        D.length_bias([1, 2, 3, 4], [2, 2, 2, 2])
    length = np.arange(10.0)
    with pytest.raises(ValueError, match="judge residual after length is constant"):
        D.length_bias(length, 1 + 0.5 * length, np.arange(10.0) % 3)
    with pytest.raises(ValueError, match="constant within each group"):
        D.length_controlled_difference([1, 1, 2, 2], [1, 2, 3, 4], [0, 0, 1, 1])
    with pytest.raises(ValueError, match="at least 2 items"):
        D.length_controlled_difference([1, 2, 3, 4], [1, 2, 3, 4], [0, 0, 0, 1])


# --------------------------------------------------------------------------------------------
# Paired comparisons


def _clustered_se_loops(values, groups):
    """Independent CR1 reference: explicit cluster loop."""
    values = [float(v) for v in values]
    n = len(values)
    mean = sum(values) / n
    sums: dict = {}
    for v, g in zip(values, groups):
        sums[g] = sums.get(g, 0.0) + (v - mean)
    g = len(sums)
    return math.sqrt(g / (g - 1) * sum(s * s for s in sums.values()) / n**2)


def test_clustered_mean_se():
    # Hand case: residuals -1.5, -0.5 | 0.5, 1.5 -> cluster sums -2, 2 -> 2/1 * 8 / 16 = 1.
    assert D.clustered_mean_se([1, 2, 3, 4], ["a", "a", "b", "b"]) == (2.5, pytest.approx(1.0))
    rng = np.random.default_rng(6)
    groups = rng.integers(0, 12, 90)
    v = rng.normal(size=90) + groups * 0.1
    assert D.clustered_mean_se(v, groups)[1] == pytest.approx(_clustered_se_loops(v, groups), rel=1e-12)
    # Every item its own cluster: the textbook standard error of a mean.
    assert D.clustered_mean_se(v, np.arange(90))[1] == pytest.approx(v.std(ddof=1) / math.sqrt(90), rel=1e-12)
    with pytest.raises(ValueError, match="at least 2 clusters"):
        D.clustered_mean_se([1.0, 2.0], ["a", "a"])


def test_paired_difference_against_scipy_t():
    rng = np.random.default_rng(8)
    groups = np.repeat(np.arange(9), 4)
    doc_effect = rng.normal(0, 1, 9)[groups]
    a = doc_effect + rng.normal(0, 0.3, 36) + 0.2
    b = doc_effect + rng.normal(0, 0.3, 36)
    r = D.paired_difference(a, b, groups)
    se = _clustered_se_loops(a - b, groups)
    t = scipy.stats.t.ppf(0.975, 8)
    assert r.difference == pytest.approx(np.mean(a - b), rel=1e-12)
    assert r.se == pytest.approx(se, rel=1e-12)
    assert (r.low, r.high) == (pytest.approx(r.difference - t * se, rel=1e-9), pytest.approx(r.difference + t * se, rel=1e-9))
    assert r.p_value == pytest.approx(2 * scipy.stats.t.sf(abs(r.difference / se), 8), rel=1e-7)
    assert (r.df, r.n_items, r.n_clusters) == (8, 36, 9)
    for df in (1, 2, 5, 30, 200):
        assert _stats.t_quantile(0.975, df) == pytest.approx(scipy.stats.t.ppf(0.975, df), rel=1e-9)
    # Identical per-item differences: zero spread is a defined result.
    r0 = D.paired_difference([1.0, 2.0, 3.0], [0.0, 1.0, 2.0], ["x", "y", "y"])
    assert (r0.difference, r0.se, r0.p_value, r0.t_stat) == (1.0, 0.0, 0.0, math.inf)


def test_weighted_bootstrap_helpers_match_explicit_resample():
    rng = np.random.default_rng(9)
    x = rng.integers(0, 5, 12).astype(float)
    y = x + rng.normal(0, 1, 12)
    w = rng.integers(0, 3, (4, 12)).astype(float)
    w[:, 0] += 1
    ranks_x = _stats.weighted_average_ranks(x, w)
    ranks_y = _stats.weighted_average_ranks(y, w)
    r = _stats.weighted_pearson(ranks_x, ranks_y, w)
    for b in range(4):
        xs, ys = np.repeat(x, w[b].astype(int)), np.repeat(y, w[b].astype(int))
        assert r[b] == pytest.approx(scipy.stats.spearmanr(xs, ys)[0], abs=1e-12)


def test_paired_correlation_difference():
    rng = np.random.default_rng(10)
    groups = np.repeat(np.arange(25), 6)
    human = rng.normal(size=150) + rng.normal(size=25)[groups]
    pred_a = human + rng.normal(0, 0.5, 150)
    pred_b = human + rng.normal(0, 1.5, 150)
    r = D.paired_correlation_difference(pred_a, pred_b, human, groups, method="spearman", n_boot=1000, seed=0)
    ref = scipy.stats.spearmanr(pred_a, human)[0] - scipy.stats.spearmanr(pred_b, human)[0]
    assert r.difference == pytest.approx(ref, abs=1e-12)
    assert r.n_boot_valid == 1000 and r.low < r.difference < r.high and r.low > 0
    # Independent bootstrap by explicit document resampling, its own random stream.
    rng2 = np.random.default_rng(123)
    diffs = []
    for _ in range(400):
        docs = rng2.integers(0, 25, 25)
        idx = np.concatenate([np.flatnonzero(groups == d) for d in docs])
        diffs.append(scipy.stats.spearmanr(pred_a[idx], human[idx])[0] - scipy.stats.spearmanr(pred_b[idx], human[idx])[0])
    assert r.se == pytest.approx(np.std(diffs, ddof=1), rel=0.2)
    same = D.paired_correlation_difference(pred_a, pred_a, human, groups, method="pearson", n_boot=50)
    assert same.difference == 0.0 and same.se == 0.0
    with pytest.raises(ValueError, match="at least 2 groups"):
        D.paired_correlation_difference(pred_a, pred_b, human, np.zeros(150), n_boot=10)
    with pytest.raises(ValueError, match="method"):
        D.paired_correlation_difference(pred_a, pred_b, human, groups, method="kendall")
