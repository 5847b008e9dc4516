"""Bias-corrected accuracy for pass/fail judging, with intervals that carry calibration error.

A judge says "pass" or "fail" for each of n test items; the naive figure is the fraction p it
passes. With specificity q0 = P(judge fail | truly fail) and sensitivity q1 = P(judge pass |
truly pass), the expected pass rate is p = theta * q1 + (1 - theta) * (1 - q0) for true
accuracy theta, so

    theta = (p + q0 - 1) / (q0 + q1 - 1)                      (Rogan-Gladen estimator)

q0 and q1 are themselves estimated on a human-labelled calibration set of m0 truly-failing and
m1 truly-passing items, independent of the test set. This follows the plug-in framework of Lee
et al. (2025, "How to Correctly Report LLM-as-a-Judge Evaluations"); the formulas below are
derived here.

Delta-method variance. With d = q0 + q1 - 1 the partial derivatives are

    d theta / d p  =  1 / d
    d theta / d q0 = (1 - theta) / d       (since (d - (p + q0 - 1)) / d**2)
    d theta / d q1 = -theta / d            (since -(p + q0 - 1) / d**2)

and p, q0, q1 are independent binomial proportions, so

    Var(theta_hat) ~= [ p (1 - p) / n + (1 - theta)**2 q0 (1 - q0) / m0
                        + theta**2 q1 (1 - q1) / m1 ] / d**2 .

Numbers are computed in float64 numpy rather than JAX: these are a handful of scalars per
report (or a vector of simulated datasets), JAX runs with x64 disabled in this project, and the
worked examples are expected to hold to double precision.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Real

import numpy as np

from jaxjudge.diagnostics._checks import as_float_vector, same_length
from jaxjudge.diagnostics._stats import normal_quantile


def _is_scalar(*xs) -> bool:
    return all(isinstance(x, Real) and not isinstance(x, np.ndarray) for x in xs)


def _check_rate(x, name: str) -> None:
    """Raises unless every value of `x` is a finite number in [0, 1]."""
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {x!r}")
    if np.any((arr < 0.0) | (arr > 1.0)):
        raise ValueError(f"{name} must be a proportion in [0, 1], got {x!r}")


def _check_better_than_chance(q0, q1) -> None:
    bad = np.asarray(q0, dtype=np.float64) + np.asarray(q1, dtype=np.float64) <= 1.0
    if np.any(bad):
        raise ValueError(
            "q0 + q1 must exceed 1 (the judge must beat chance: specificity q0 plus "
            f"sensitivity q1 > 1); got q0 + q1 = {np.asarray(q0) + np.asarray(q1)}"
        )


def _check_count(x, name: str, what: str) -> None:
    arr = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be > 0 ({what}), got {x!r}")


def corrected_accuracy(p, q0, q1, *, clip: bool = True):
    """Rogan-Gladen bias-corrected accuracy `(p + q0 - 1) / (q0 + q1 - 1)`.

    Args:
      p: fraction of test items the judge passes; scalar or array (broadcasts with q0, q1).
      q0: judge specificity, P(judge fail | human fail), from the calibration set.
      q1: judge sensitivity, P(judge pass | human pass), from the calibration set.
      clip: clip the estimate to [0, 1]. The raw estimator leaves [0, 1] when p falls outside
        [1 - q0, q1] by chance; pass clip=False for the unclipped (unbiased-in-the-limit) value,
        e.g. when averaging over simulations.

    Returns:
      The estimate, same shape as the broadcast inputs; a Python number for Python-number
      inputs (exact for `fractions.Fraction` inputs: p=2/5, q0=7/10, q1=9/10 gives 1/6).

    Raises:
      ValueError: a rate outside [0, 1] or non-finite, or q0 + q1 <= 1 (a judge no better than
        chance carries no information about accuracy; the estimator is undefined or reversed).
    """
    _check_rate(p, "p")
    _check_rate(q0, "q0")
    _check_rate(q1, "q1")
    _check_better_than_chance(q0, q1)
    if _is_scalar(p, q0, q1):
        theta = (p + q0 - 1) / (q0 + q1 - 1)
        zero = theta * 0  # keeps the input's number type (float or Fraction) when clipping
        return min(max(theta, zero), zero + 1) if clip else theta
    p, q0, q1 = (np.asarray(v, dtype=np.float64) for v in (p, q0, q1))
    theta = (p + q0 - 1.0) / (q0 + q1 - 1.0)
    return np.clip(theta, 0.0, 1.0) if clip else theta


def corrected_accuracy_se(p, q0, q1, n, m0, m1):
    """Delta-method standard error of the unclipped corrected accuracy (formula in module doc).

    Args:
      p, q0, q1: as in `corrected_accuracy`; scalars or broadcastable arrays.
      n: test-set size behind p.
      m0: calibration items labelled "fail" by humans (behind q0).
      m1: calibration items labelled "pass" by humans (behind q1).

    Returns:
      Standard error, float or array of the broadcast shape.
    """
    _check_rate(p, "p")
    _check_rate(q0, "q0")
    _check_rate(q1, "q1")
    _check_better_than_chance(q0, q1)
    _check_count(n, "n", "number of test items")
    _check_count(m0, "m0", "human-negative calibration items; specificity q0 needs some")
    _check_count(m1, "m1", "human-positive calibration items; sensitivity q1 needs some")
    scalar = _is_scalar(p, q0, q1, n, m0, m1)
    p, q0, q1, n, m0, m1 = (np.asarray(v, dtype=np.float64) for v in (p, q0, q1, n, m0, m1))
    d = q0 + q1 - 1.0
    theta = (p + q0 - 1.0) / d
    var = (
        p * (1.0 - p) / n
        + (1.0 - theta) ** 2 * q0 * (1.0 - q0) / m0
        + theta**2 * q1 * (1.0 - q1) / m1
    ) / d**2
    se = np.sqrt(var)
    return float(se) if scalar else se


def corrected_accuracy_ci(p, q0, q1, n, m0, m1, alpha: float = 0.05, *, adjusted: bool = True):
    """Confidence interval for the bias-corrected accuracy, test and calibration error combined.

    The interval is `theta +- z * se` with the delta-method `se` of the module docstring,
    clipped to [0, 1], z the normal (1 - alpha/2) quantile.

    With `adjusted=True` (default) the three proportions are first shrunk by pseudo-counts and
    the interval is centred on the corrected accuracy of the shrunk rates: Agresti-Coull for
    the test pass rate, the Jeffreys (Beta(1/2, 1/2)) posterior mean for the calibration rates:

        p~  = (n p + z**2 / 2) / (n + z**2),  with n~  = n + z**2
        q0~ = (m0 q0 + 1/2) / (m0 + 1),       with m0~ = m0 + 1
        q1~ = (m1 q1 + 1/2) / (m1 + 1),       with m1~ = m1 + 1

    This keeps the variance away from zero when a calibration rate is 0 or 1 (e.g. a judge that
    made no mistakes on 30 calibration items), which the plain Wald form turns into a falsely
    narrow interval, and it fixes the Wald interval's under-coverage near theta = 0 or 1. For
    large samples the two agree. In a simulation grid (theta 0.1-0.97, q0/q1 0.7-0.95, n 100-1000,
    m0 = m1 30-200) the 95% adjusted interval covered 94-98% of the time (worst cases: smallest
    samples, slightly conservative), the Wald interval 92-97% (worst: theta near 1).
    `adjusted=False` gives the plain delta-method (Wald) interval centred on the raw estimate.

    Args:
      p: fraction of the n test items the judge passes.
      q0: specificity estimated on m0 human-negative calibration items.
      q1: sensitivity estimated on m1 human-positive calibration items.
      n: test-set size (> 0).
      m0: number of human-negative calibration items (> 0).
      m1: number of human-positive calibration items (> 0).
      alpha: 1 - confidence level, in (0, 1).
      adjusted: shrink the rates by pseudo-counts before forming the interval (see above).

    All of p, q0, q1, n, m0, m1 may be arrays that broadcast together (one interval per
    element, e.g. for simulations).

    Returns:
      (low, high): floats for scalar inputs, arrays of the broadcast shape otherwise, with
      0 <= low <= high <= 1.

    Raises:
      ValueError: rate outside [0, 1]; n, m0 or m1 not positive (an empty calibration class
        leaves q0 or q1 unestimated); q0 + q1 <= 1; alpha outside (0, 1).
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    _check_rate(p, "p")
    _check_rate(q0, "q0")
    _check_rate(q1, "q1")
    _check_better_than_chance(q0, q1)
    _check_count(n, "n", "number of test items")
    _check_count(m0, "m0", "human-negative calibration items; specificity q0 needs some")
    _check_count(m1, "m1", "human-positive calibration items; sensitivity q1 needs some")
    scalar = _is_scalar(p, q0, q1, n, m0, m1)
    z = normal_quantile(1.0 - alpha / 2.0)
    p, q0, q1, n, m0, m1 = (np.asarray(v, dtype=np.float64) for v in (p, q0, q1, n, m0, m1))
    if adjusted:
        p = (n * p + z**2 / 2.0) / (n + z**2)
        n = n + z**2
        q0 = (m0 * q0 + 0.5) / (m0 + 1.0)
        m0 = m0 + 1.0
        q1 = (m1 * q1 + 0.5) / (m1 + 1.0)
        m1 = m1 + 1.0
        # Shrinking toward 1/2 can pull a barely-informative judge to q0 + q1 <= 1.
        if np.any(q0 + q1 <= 1.0):
            raise ValueError(
                "q0 + q1 is too close to 1 for the adjusted interval (after pseudo-counts "
                "q0 + q1 <= 1): the calibration set cannot show the judge beats chance; "
                "collect more calibration labels or pass adjusted=False"
            )
    theta = corrected_accuracy(p, q0, q1, clip=False)
    se = corrected_accuracy_se(p, q0, q1, n, m0, m1)
    low = np.clip(theta - z * se, 0.0, 1.0)
    high = np.clip(theta + z * se, 0.0, 1.0)
    if scalar:
        return float(low), float(high)
    return low, high


def allocate_calibration(
    budget: int, p_pilot: float, q0_pilot: float, q1_pilot: float, *, min_per_class: int = 1
) -> tuple[int, int]:
    """Splits a calibration budget between human-negative and human-positive items.

    Only the calibration terms of the variance depend on the split:

        V(m0, m1) = [ (1 - theta)**2 q0 (1 - q0) / m0 + theta**2 q1 (1 - q1) / m1 ] / d**2 .

    Minimising a / m0 + b / m1 subject to m0 + m1 = m (Lagrange: a / m0**2 = b / m1**2) gives

        m0 / m1 = sqrt(a) / sqrt(b) = (1 - theta) sqrt(q0 (1 - q0)) / (theta sqrt(q1 (1 - q1))),

    i.e. each class gets labels in proportion to the square root of its variance contribution.
    theta is the pilot's unclipped corrected accuracy, the point where the delta-method
    derivatives are evaluated (as in `corrected_accuracy_se`); clipping a noisy pilot estimate
    to 0 or 1 would zero one class's weight outright. The continuous optimum is rounded
    to the integer split (within [min_per_class, budget - min_per_class]) with the smaller V.
    When both contributions vanish (a pilot with q0 and q1 at 0 or 1) the budget is split
    evenly. A pilot rate of exactly 0 or 1 gives its class only `min_per_class`; smooth pilot
    rates first (e.g. (k + 1) / (m + 2)) if that is not wanted.

    Args:
      budget: total number of calibration items to label, m0 + m1 (the targets include any
        pilot items already labelled: collect max(0, m0 - m0_pilot) more negatives, and so on).
      p_pilot: judge pass rate on the test set (or a pilot of it).
      q0_pilot: pilot specificity.
      q1_pilot: pilot sensitivity.
      min_per_class: the least either class gets (>= 1, so both rates stay estimable).

    Returns:
      (m0, m1), non-negative integers summing to `budget`.

    Raises:
      ValueError: budget < 2 * min_per_class, min_per_class < 1, a rate outside [0, 1], or
        q0_pilot + q1_pilot <= 1.
    """
    if int(budget) != budget or int(min_per_class) != min_per_class:
        raise TypeError(f"budget and min_per_class must be integers, got {budget!r}, {min_per_class!r}")
    budget, min_per_class = int(budget), int(min_per_class)
    if min_per_class < 1:
        raise ValueError(f"min_per_class must be >= 1, got {min_per_class}")
    if budget < 2 * min_per_class:
        raise ValueError(f"budget must be >= 2 * min_per_class = {2 * min_per_class}, got {budget}")
    theta = float(corrected_accuracy(float(p_pilot), float(q0_pilot), float(q1_pilot), clip=False))
    a = (1.0 - theta) ** 2 * q0_pilot * (1.0 - q0_pilot)
    b = theta**2 * q1_pilot * (1.0 - q1_pilot)
    lo, hi = min_per_class, budget - min_per_class
    if a + b == 0.0:
        m0 = min(max(budget // 2, lo), hi)
        return m0, budget - m0
    m0_star = budget * math.sqrt(a) / (math.sqrt(a) + math.sqrt(b))

    def cost(m0: int) -> float:
        return a / m0 + b / (budget - m0)

    candidates = {min(max(c, lo), hi) for c in (math.floor(m0_star), math.ceil(m0_star))}
    m0 = min(sorted(candidates), key=cost)
    return m0, budget - m0


@dataclass(frozen=True)
class CalibrationRates:
    """Judge error rates measured on a human-labelled calibration set.

    Attributes:
      q0: specificity, fraction of human-"fail" items the judge fails.
      q1: sensitivity, fraction of human-"pass" items the judge passes.
      m0: number of human-"fail" items.
      m1: number of human-"pass" items.
    """

    q0: float
    q1: float
    m0: int
    m1: int


def calibration_rates(judge_pass, human_pass) -> CalibrationRates:
    """Specificity and sensitivity of a pass/fail judge against human labels.

    Args:
      judge_pass: judge verdicts [M], bool or 0/1.
      human_pass: human verdicts [M], bool or 0/1.

    Returns:
      CalibrationRates.

    Raises:
      ValueError: non-binary values, length mismatch, or a class without items (an empty class
        leaves its rate undefined; label more items of that class).
    """
    j = _as_binary(judge_pass, "judge_pass")
    h = _as_binary(human_pass, "human_pass")
    same_length(judge_pass=j, human_pass=h)
    m1 = int(h.sum())
    m0 = int(h.shape[0] - m1)
    if m0 == 0:
        raise ValueError("human_pass has no 'fail' items: specificity q0 is undefined (m0 = 0)")
    if m1 == 0:
        raise ValueError("human_pass has no 'pass' items: sensitivity q1 is undefined (m1 = 0)")
    q0 = float(np.sum(~j & ~h) / m0)
    q1 = float(np.sum(j & h) / m1)
    return CalibrationRates(q0=q0, q1=q1, m0=m0, m1=m1)


def _as_binary(x, name: str) -> np.ndarray:
    arr = as_float_vector(x, name)
    if not np.all((arr == 0.0) | (arr == 1.0)):
        row = int(np.argmax((arr != 0.0) & (arr != 1.0)))
        raise ValueError(f"{name} must hold 0/1 or booleans; row {row} is {arr[row]}")
    return arr.astype(bool)


@dataclass(frozen=True)
class CorrectedAccuracy:
    """A bias-corrected accuracy with the inputs it was computed from.

    Attributes:
      naive: the judge's raw pass rate p on the test set.
      estimate: corrected accuracy, clipped to [0, 1].
      low, high: confidence interval (see `corrected_accuracy_ci`).
      alpha: 1 - confidence level.
      n: test items; calib: the calibration rates and class sizes used.
    """

    naive: float
    estimate: float
    low: float
    high: float
    alpha: float
    n: int
    calib: CalibrationRates


def bias_corrected_accuracy(
    test_judge_pass, calib_judge_pass, calib_human_pass, *, alpha: float = 0.05, adjusted: bool = True
) -> CorrectedAccuracy:
    """End to end: judge verdicts on a test set plus a labelled calibration set -> estimate + CI.

    Args:
      test_judge_pass: judge verdicts on the test set [N], bool or 0/1.
      calib_judge_pass: judge verdicts on the calibration set [M].
      calib_human_pass: human verdicts on the calibration set [M].
      alpha: 1 - confidence level.
      adjusted: see `corrected_accuracy_ci`.

    Returns:
      CorrectedAccuracy.
    """
    t = _as_binary(test_judge_pass, "test_judge_pass")
    rates = calibration_rates(calib_judge_pass, calib_human_pass)
    p = float(t.mean())
    est = corrected_accuracy(p, rates.q0, rates.q1)
    low, high = corrected_accuracy_ci(p, rates.q0, rates.q1, t.shape[0], rates.m0, rates.m1, alpha, adjusted=adjusted)
    return CorrectedAccuracy(
        naive=p, estimate=float(est), low=low, high=high, alpha=alpha, n=int(t.shape[0]), calib=rates
    )
