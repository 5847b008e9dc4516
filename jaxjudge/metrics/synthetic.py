"""Synthetic judges with a known population correlation, for checking interval coverage.

Human scores and judge scores are drawn from a clustered Gaussian model: group g (a source
document) has effects ``(a_g, b_g)``, item i of the group has effects ``(e_i, f_i)``, and

    human_i = a_g + e_i,        judge_i = b_g + f_i,

with unit total variance, a share ``between`` of it at the group level, and correlations
``rho_between`` = corr(a, b), ``rho_within`` = corr(e, f). Marginally each (human, judge) pair
is bivariate normal with correlation ``r = between * rho_between + (1 - between) * rho_within``,
so the population Pearson correlation is ``r`` and the population Spearman correlation is
``(6 / pi) * arcsin(r / 2)`` (Pearson's result for the normal distribution). Items of one group
are dependent, which is what a grouped bootstrap must respect.

Several judges can be drawn on the same items (for paired differences); each gets its own
correlations, and its population value is known the same way.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["SyntheticJudges", "clustered_judges", "combined_pearson", "spearman_of_normal"]


def spearman_of_normal(r: float) -> float:
    """Population Spearman correlation of a bivariate normal with correlation ``r``."""
    return 6.0 / math.pi * math.asin(r / 2.0)


@dataclass(frozen=True)
class SyntheticJudges:
    """One synthetic data set.

    Attributes:
      human: `[N]` human scores (standard normal marginally).
      judges: `[J, N]` judge scores.
      groups: `[N]` int group ids.
      pearson: `[J]` population Pearson correlation of each judge with the human scores.
      spearman: `[J]` population Spearman correlation.
    """

    human: np.ndarray
    judges: np.ndarray
    groups: np.ndarray
    pearson: np.ndarray
    spearman: np.ndarray


def clustered_judges(
    rng: np.random.Generator,
    n_groups: int,
    per_group: int,
    rho_between: tuple[float, ...] = (0.6,),
    rho_within: tuple[float, ...] = (0.4,),
    between: float = 0.5,
) -> SyntheticJudges:
    """Draw human scores and ``J = len(rho_between)`` judges on ``n_groups * per_group`` items.

    Args:
      rng: a numpy Generator.
      n_groups, per_group: the design.
      rho_between, rho_within: per judge, the correlation of its group and item effects with
        the human ones (the judges' effects are independent of each other given the human's).
      between: share of every score's variance at the group level, in [0, 1).

    Returns:
      `SyntheticJudges`.
    """
    if len(rho_between) != len(rho_within):
        raise ValueError("rho_between and rho_within need one entry per judge")
    if not 0.0 <= between < 1.0:
        raise ValueError(f"between must be in [0, 1), got {between}")
    for r in (*rho_between, *rho_within):
        if not -1.0 <= r <= 1.0:
            raise ValueError(f"correlations must be in [-1, 1], got {r}")
    sb, sw = math.sqrt(between), math.sqrt(1.0 - between)
    n = n_groups * per_group
    groups = np.repeat(np.arange(n_groups), per_group)
    a = rng.standard_normal(n_groups)  # human group effects
    e = rng.standard_normal(n)  # human item effects
    human = sb * a[groups] + sw * e
    judges, pearson = [], []
    for rb, rw in zip(rho_between, rho_within):
        b = rb * a + math.sqrt(1.0 - rb * rb) * rng.standard_normal(n_groups)
        f = rw * e + math.sqrt(1.0 - rw * rw) * rng.standard_normal(n)
        judges.append(sb * b[groups] + sw * f)
        pearson.append(between * rb + (1.0 - between) * rw)
    pearson_arr = np.asarray(pearson)
    return SyntheticJudges(
        human=human, judges=np.stack(judges), groups=groups, pearson=pearson_arr,
        spearman=np.asarray([spearman_of_normal(r) for r in pearson_arr]),
    )


def combined_pearson(
    lams,
    rho_between: tuple[float, float],
    rho_within: tuple[float, float],
    between: float = 0.5,
) -> np.ndarray:
    """Population Pearson correlation of ``judge_0 + lam * judge_1`` with the human score.

    Both judges of `clustered_judges` and the human score are jointly normal, so every
    ``judge_0 + lam * judge_1`` is too; with unit variances, ``r_j = corr(judge_j, human)`` and
    ``c = corr(judge_0, judge_1) = between * rb_0 * rb_1 + (1 - between) * rw_0 * rw_1`` (the
    judges share only the human's effects), its correlation is
    ``(r_0 + lam r_1) / sqrt(1 + lam^2 + 2 lam c)``; `spearman_of_normal` turns it into the
    population Spearman.

    Args:
      lams: `[G]` weights of the second judge.
      rho_between, rho_within: the two judges' correlations, as `clustered_judges`.
      between: as `clustered_judges`.

    Returns:
      `[G]` population Pearson correlations.
    """
    if len(rho_between) != 2 or len(rho_within) != 2:
        raise ValueError("combined_pearson needs exactly two judges in rho_between and rho_within")
    lams = np.asarray(lams, np.float64)
    r0, r1 = (between * rb + (1.0 - between) * rw for rb, rw in zip(rho_between, rho_within))
    c = between * rho_between[0] * rho_between[1] + (1.0 - between) * rho_within[0] * rho_within[1]
    return (r0 + lams * r1) / np.sqrt(1.0 + lams**2 + 2.0 * lams * c)
