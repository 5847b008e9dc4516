"""Ranking S systems by prediction-powered inference, and the labels an interval is worth.

* `ppi_ranking`: S systems scored on the same inputs: Bonferroni-simultaneous intervals for
  the S means (each at level alpha / S, `jaxjudge.metrics.inference.ppi_mean`) and for the
  S (S - 1) / 2 pairwise differences (each at alpha / #pairs, `ppi_difference`), and from the
  latter a rank interval per system (rank 1 = highest mean: 1 + the number of systems surely
  above it, to S - the number surely below it); all of them hold together with probability at
  least 1 - alpha.
* `effective_labels`: the number of human labels alone that would give an interval as narrow.

Inputs and their checks are those of `jaxjudge.metrics.inference`, with a leading system axis.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

import numpy as np

from jaxjudge.metrics._checks import check_all_finite
from jaxjudge.metrics.inference import PPIInterval, ppi_difference, ppi_mean

__all__ = ["Ranking", "effective_labels", "ppi_ranking"]


class Ranking(NamedTuple):
    """Simultaneous (Bonferroni) inference on S systems; see `ppi_ranking`.

    Attributes:
      systems: the S names.
      means: S `PPIInterval`s, each at level 1 - alpha / S.
      differences: ``(i, j) -> PPIInterval`` of mean_i - mean_j for i < j, each at level
        1 - alpha / (S (S - 1) / 2).
      rank_low, rank_high: `[S]` the rank interval of each system (1 = highest mean).
      alpha: the family-wise error rate.
      correction: ``"bonferroni"``.
    """

    systems: tuple[str, ...]
    means: tuple[PPIInterval, ...]
    differences: dict[tuple[int, int], PPIInterval]
    rank_low: np.ndarray
    rank_high: np.ndarray
    alpha: float
    correction: str = "bonferroni"


def ppi_ranking(
    judge: Any,
    human: Any,
    labelled: Any,
    *,
    systems: tuple[str, ...] | None = None,
    method: str = "ppi++",
    alpha: float = 0.05,
    groups: Any | None = None,
    clip: bool = False,
) -> Ranking:
    """Simultaneous intervals for S systems' mean human scores, their differences and ranks.

    Bonferroni: each of the S means at level 1 - alpha / S, each of the S (S - 1) / 2 paired
    differences at level 1 - alpha / (S (S - 1) / 2); every interval of either family holds
    with probability at least 1 - alpha. Rank intervals come from the differences: system s is
    surely above t when the interval of mean_s - mean_t lies above 0.

    Args:
      judge: `[S, N]` judge scores of each system's output on the N shared inputs.
      human: `[S, n]` human scores of the labelled inputs, in the order of ``labelled``.
      labelled: `[n]` int indices of the labelled inputs, or a bool mask `[N]`.
      systems: the S names (default ``"0"``, ``"1"``, ...).
      method, groups, clip: as `ppi_mean`.
      alpha: the family-wise error rate of each family.

    Returns:
      `Ranking`.
    """
    f = np.asarray(judge, np.float64)
    if f.ndim != 2:
        raise ValueError(f"judge must be [S, N] (systems x inputs), got shape {f.shape}")
    s_count, n_items = f.shape
    names = tuple(systems) if systems is not None else tuple(str(i) for i in range(s_count))
    if len(names) != s_count:
        raise ValueError(f"mismatched lengths: {len(names)} system names for {s_count} systems")
    if s_count < 2:
        raise ValueError(f"a ranking needs at least 2 systems, got {s_count}")
    if n_items < 2:
        raise ValueError(f"system {names[0]!r} has {n_items} item(s): at least 2 are needed for an interval")
    h = np.asarray(human, np.float64)
    if h.ndim != 2 or h.shape[0] != s_count:
        raise ValueError(f"mismatched lengths: human must be [S={s_count}, n], got shape {h.shape}")
    for i, nm in enumerate(names):
        check_all_finite(f[i], f"judge of system {nm!r}")
        check_all_finite(h[i], f"human scores of system {nm!r}")
    pairs = list(itertools.combinations(range(s_count), 2))
    means = tuple(
        ppi_mean(f[i], h[i], labelled, method=method, alpha=alpha / s_count, groups=groups, clip=clip,
                 name=f"system {nm!r}")
        for i, nm in enumerate(names))
    diffs = {
        (i, j): ppi_difference(f[i], f[j], h[i], h[j], labelled, method=method, alpha=alpha / len(pairs),
                               groups=groups, clip=clip, names=(names[i], names[j]))
        for i, j in pairs
    }
    above = np.zeros((s_count, s_count), bool)  # above[s, t]: s surely has the higher mean
    for (i, j), iv in diffs.items():
        above[i, j] = iv.low > 0
        above[j, i] = iv.high < 0
    rank_low = 1 + above.sum(0)  # systems surely above s
    rank_high = s_count - above.sum(1)  # minus systems surely below s
    return Ranking(names, means, diffs, rank_low.astype(int), rank_high.astype(int), alpha)


def effective_labels(width: Any, width_classical: Any, n: Any) -> np.ndarray:
    """Human labels alone that would give an interval of width ``width``.

    The classical interval's width falls as 1 / sqrt(n), so ``n * (width_classical / width)^2``.

    Args:
      width: width(s) of the method's interval with n labels.
      width_classical: width(s) of the human-only interval with the same n labels.
      n: the number of labels.

    Returns:
      The effective number of labels (same shape as the broadcast inputs).
    """
    w, wc = np.asarray(width, np.float64), np.asarray(width_classical, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(n, np.float64) * (wc / w) ** 2
