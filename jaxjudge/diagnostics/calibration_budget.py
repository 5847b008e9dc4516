"""How to split a calibration budget between human-negative and human-positive items, for the
bias-corrected accuracy of `jaxjudge.diagnostics.corrected` (its module docstring has the
estimator and its variance).

Calibration budget (Lee et al. 2025, Proposition A.2 and Algorithm 1). Minimising the interval
length over m0 + m1 = m (a / m0 + b / m1 is smallest at m0 / m1 = sqrt(a / b)) gives

    m0 / m1 = (1 - theta) sqrt(q0 (1 - q0)) / (theta sqrt(q1 (1 - q1)))
            = (q1 - p) sqrt(q0 (1 - q0)) / ((p + q0 - 1) sqrt(q1 (1 - q1))),

and for q0, q1 near 1 (q1 - p ~ 1 - p, p + q0 - 1 ~ p, q0 / q1 ~ 1)

    m0 / m1 ~= (1 / p - 1) sqrt(kappa),   kappa = (1 - q0) / (1 - q1),

which depends on theta only through the judge's pass rate p and stays informative when a
noisy pilot puts theta at 0 or 1. `allocate_calibration` uses it by default.
"""

from __future__ import annotations

import math

from jaxjudge.diagnostics.corrected import _check_better_than_chance, _check_rate, corrected_accuracy

__all__ = ["ALLOCATION_RULES", "allocate_calibration"]


ALLOCATION_RULES = ("lee", "exact")
"""Calibration-budget rules of `allocate_calibration`; "lee" is the default."""


def allocate_calibration(
    budget: int,
    p_pilot: float,
    q0_pilot: float,
    q1_pilot: float,
    *,
    m_pilot: int = 0,
    rule: str = "lee",
    min_per_class: int = 1,
) -> tuple[int, int]:
    """Splits a calibration budget between human-negative and human-positive items.

    Rules:

    * "lee" (default): Algorithm 1 of Lee et al. (2025), as their reference implementation
      (`allocate_calibration_sample`) computes it:

          m1 = round(budget / (1 + (1 / p - 1) sqrt(kappa))),   m0 = budget - m1,

      with the error ratio kappa = (1 - q0) / (1 - q1). With pilot labels (`m_pilot` > 0
      items of each class, whose judge accuracies are `q0_pilot`, `q1_pilot`) the rates are
      Laplace-smoothed first, (errors + 1) / (m_pilot + 2) per class, so kappa =
      (m_pilot (1 - q0) + 1) / (m_pilot (1 - q1) + 1). With no pilot the given rates are used
      as they are (1 - q1 floored at 1e-6). Examples: budget 200, p = 0.3, q0 = 0.7, q1 = 0.9
      gives (160, 40) (kappa = 3); with m_pilot = 10, kappa = 4 / 2 and (153, 47).
      The rule is the approximation of the length-optimal split for q0, q1 near 1 (module
      docstring); it needs only the judge's pass rate p, not theta.
      At p = 0 the formula's limit (m1 as small as allowed) is returned; the reference code's
      `p < eps` branch returns the opposite split (all but the pilot to positives).
    * "exact": this module's earlier rule, kept for reproducing splits computed before the
      switch. It minimises the calibration part of the delta-method variance at the pilot's
      unclipped corrected accuracy theta (Lagrange: m0 / m1 = (1 - theta) sqrt(q0 (1 - q0)) /
      (theta sqrt(q1 (1 - q1))), rounded to the better neighbouring integer split; an even
      split when both terms vanish). It is exact for the given rates but degenerates when a
      noisy pilot puts theta at 0 or 1: p = 0.3, q0 = 0.7, q1 = 0.9 has theta = 0 and gives
      (199, 1) of 200, a calibration set that cannot estimate q1. `m_pilot` is ignored.

    Both rules then clip m1 to [lo, budget - lo] with lo = max(m_pilot, min_per_class).

    Args:
      budget: total number of calibration items to label, m0 + m1, pilot items included
        (collect m0 - m_pilot more negatives and m1 - m_pilot more positives).
      p_pilot: judge pass rate on the test set (or a pilot of it).
      q0_pilot: pilot (or assumed) specificity.
      q1_pilot: pilot (or assumed) sensitivity.
      m_pilot: pilot items already labelled in each class (0: the rates are beliefs).
      rule: "lee" or "exact" (see above).
      min_per_class: the least either class gets (>= 1, so both rates stay estimable).

    Returns:
      (m0, m1), positive integers summing to `budget`.

    Raises:
      TypeError: budget, m_pilot or min_per_class not an integer.
      ValueError: budget < 2 * max(m_pilot, min_per_class), min_per_class < 1, m_pilot < 0, a
        rate outside [0, 1], q0_pilot + q1_pilot <= 1, or an unknown rule.
    """
    budget, m_pilot, floor = _check_counts(budget, m_pilot, min_per_class, rule)
    p, q0, q1 = float(p_pilot), float(q0_pilot), float(q1_pilot)
    _check_rate(p, "p_pilot")
    _check_rate(q0, "q0_pilot")
    _check_rate(q1, "q1_pilot")
    _check_better_than_chance(q0, q1)
    lo, hi = floor, budget - floor
    if rule == "exact":
        m0 = _allocate_exact(budget, p, q0, q1, lo, hi)
        return m0, budget - m0
    m1 = _allocate_lee(budget, p, q0, q1, m_pilot, lo, hi)
    return budget - m1, m1


def _check_counts(budget: int, m_pilot: int, min_per_class: int, rule: str) -> tuple[int, int, int]:
    """`allocate_calibration`'s counts as ints, checked, and the least either class gets."""
    for name, v in (("budget", budget), ("m_pilot", m_pilot), ("min_per_class", min_per_class)):
        if int(v) != v:
            raise TypeError(f"{name} must be an integer, got {v!r}")
    budget, m_pilot, min_per_class = int(budget), int(m_pilot), int(min_per_class)
    if rule not in ALLOCATION_RULES:
        raise ValueError(f"rule must be one of {ALLOCATION_RULES}, got {rule!r}")
    if min_per_class < 1:
        raise ValueError(f"min_per_class must be >= 1, got {min_per_class}")
    if m_pilot < 0:
        raise ValueError(f"m_pilot must be >= 0, got {m_pilot}")
    floor = max(m_pilot, min_per_class)
    if budget < 2 * floor:
        raise ValueError(
            f"budget must be >= 2 * max(m_pilot, min_per_class) = {2 * floor}, got {budget}"
        )
    return budget, m_pilot, floor


def _allocate_lee(budget: int, p: float, q0: float, q1: float, m_pilot: int, lo: int, hi: int) -> int:
    """m1 of the "lee" rule of `allocate_calibration`."""
    if p == 0.0:
        return lo
    if m_pilot == 0:
        kappa = (1.0 - q0) / max(1.0 - q1, 1e-6)
    else:
        kappa = (m_pilot * (1.0 - q0) + 1.0) / (m_pilot * (1.0 - q1) + 1.0)
    # Python's round (half to even), as the reference.
    return min(max(round(budget / (1.0 + (1.0 / p - 1.0) * math.sqrt(kappa))), lo), hi)


def _allocate_exact(budget: int, p: float, q0: float, q1: float, lo: int, hi: int) -> int:
    """m0 of the "exact" rule of `allocate_calibration`."""
    theta = float(corrected_accuracy(p, q0, q1, clip=False))
    a = (1.0 - theta) ** 2 * q0 * (1.0 - q0)
    b = theta**2 * q1 * (1.0 - q1)
    if a + b == 0.0:
        return min(max(budget // 2, lo), hi)
    m0_star = budget * math.sqrt(a) / (math.sqrt(a) + math.sqrt(b))

    def cost(m0: int) -> float:
        return a / m0 + b / (budget - m0)

    candidates = {min(max(c, lo), hi) for c in (math.floor(m0_star), math.ceil(m0_star))}
    return min(sorted(candidates), key=cost)
