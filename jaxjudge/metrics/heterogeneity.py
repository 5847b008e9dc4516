"""How much a metric differs across score ranges, net of sampling noise, with an interval that
covers down to no difference at all.

The score-range question is how far apart a judge's metric lies on K ranges of the same items.
The plain max - min of the K estimates answers it with a statistic that sampling noise alone
pushes up (K noisy values spread even when the true ones are equal), and its percentile
bootstrap interval sits above the truth when the true spread is small: with 4 ranges and a true
max - min of 0.01, it covered 16% in a simulation (issue 44). Here:

* the **heterogeneity** ``tau`` is the standard deviation of the K true values,
  ``sqrt(|C theta|^2 / (K - 1))`` with ``C`` the centring matrix;
* its **estimate** subtracts the noise: ``E|C theta_hat|^2 = |C theta|^2 + tr(C Sigma C)``, with
  ``Sigma`` the covariance of the K estimates from their paired bootstrap replicates (the ranges
  of one report are resampled together, so the covariance carries the pairing), and the result
  is truncated at 0: ``tau_hat = sqrt(max(0, |C theta_hat|^2 - tr(C Sigma C)) / (K - 1))``;
* its **interval** inverts the test of ``tau = tau0``: under normal noise,
  ``|C theta_hat|^2 = |a u + z|^2`` with ``a = tau0 sqrt(K - 1)``, ``u`` the unit direction of
  the true deviations and ``z ~ N(0, C Sigma C)``. The interval holds every ``tau0`` whose
  distribution of that statistic puts the observed value between its ``alpha/2`` and
  ``1 - alpha/2`` quantiles, the direction ``u`` taken as the observed one (where the
  deviations are small beside the noise the direction matters little; where they are large it
  is estimated well). Quantiles come from ``n_draws`` normal draws with a fixed seed, the same
  draws for every ``tau0``, so the bounds are reproducible.

When the observed deviations are smaller than the noise the lower bound is 0; when they are
smaller than even the no-difference distribution's ``alpha/2`` quantile the set is empty and the
interval is ``[0, 0]``, flagged ``empty`` (a chance of at most ``alpha/2`` when the true values
are equal; the tables print ``[0, 0]`` with a note that the set is empty, the convention of
test-inversion intervals for a heterogeneity, so that it does not read as a certainty). The
estimate lies inside its interval whenever the statistic's mean lies between those quantiles.
Two references check it (``tests/metrics/test_heterogeneity.py``): with two ranges it is the
inversion of a folded normal, and with ``Sigma = s^2 I`` that of a noncentral chi-square with
K - 1 degrees of freedom, both solved with scipy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["heterogeneity", "heterogeneity_interval", "net_sd", "noise_covariance"]


def _centred(k: int) -> np.ndarray:
    return np.eye(k) - np.full((k, k), 1.0 / k)


def heterogeneity(estimates: np.ndarray, cov: np.ndarray) -> float:
    """``tau_hat``: the standard deviation of the K values net of the noise ``cov`` ([K, K])."""
    est = np.asarray(estimates, np.float64)
    k = est.shape[0]
    c = _centred(k)
    raw = float(np.sum((c @ est) ** 2))
    noise = float(np.trace(c @ np.asarray(cov, np.float64) @ c))
    return math.sqrt(max(0.0, raw - noise) / (k - 1))


def _noise_draws(v: np.ndarray, n_draws: int, seed: int) -> np.ndarray:
    """``n_draws`` draws of ``N(0, v)`` ([n_draws, K]) for a symmetric positive semi-definite v."""
    w, q = np.linalg.eigh((v + v.T) / 2)
    w = np.clip(w, 0.0, None)
    g = np.random.default_rng(seed).standard_normal((n_draws, v.shape[0]))
    return (g * np.sqrt(w)) @ q.T


def heterogeneity_interval(
    estimates: Any, replicates: Any, alpha: float = 0.05, *, n_draws: int = 4000, seed: int = 0,
    cov: Any = None,
) -> dict[str, Any]:
    """The heterogeneity of K paired estimates, with its test-inversion interval.

    Args:
      estimates: ``[K]`` point estimates (one per range).
      replicates: ``[K, B]`` bootstrap replicates drawn on the same resamples for every range;
        resamples undefined on any range (NaN) are left out of the covariance. Ignored when
        ``cov`` is given.
      alpha: 1 - the interval's level.
      n_draws: normal draws behind the quantiles.
      seed: their seed.
      cov: ``[K, K]`` noise covariance to use instead of the replicates' (for references).

    Returns:
      ``{estimate, low, high, raw, noise}``: ``raw`` is the plain standard deviation of the
      estimates and ``noise`` the root mean noise variance of their deviations
      (``sqrt(tr(C Sigma C) / (K - 1))``); ``reason`` instead of bounds where the estimates
      are not all finite or fewer than two replicates are; ``empty: True`` (bounds ``[0, 0]``)
      where no ``tau0`` fits: the deviations are smaller than noise alone gives with
      probability ``1 - alpha/2``.
    """
    est = np.asarray(estimates, np.float64)
    if est.ndim != 1 or est.shape[0] < 2:
        raise ValueError(f"estimates must be [K] with K >= 2, got shape {est.shape}")
    k = est.shape[0]
    if not np.all(np.isfinite(est)):
        return {"estimate": None, "low": None, "high": None, "reason": "a range's estimate is undefined"}
    if cov is None:
        reps = np.asarray(replicates, np.float64)
        if reps.ndim != 2 or reps.shape[0] != k:
            raise ValueError(f"replicates must be [K={k}, B], got shape {reps.shape}")
        reps = reps[:, np.all(np.isfinite(reps), axis=0)]
        if reps.shape[1] < 2:
            return {"estimate": None, "low": None, "high": None, "reason": "fewer than 2 defined resamples"}
        sigma = np.cov(reps)
    else:
        sigma = np.asarray(cov, np.float64)
        if sigma.shape != (k, k):
            raise ValueError(f"cov must be [{k}, {k}], got shape {sigma.shape}")
    c = _centred(k)
    v = c @ sigma @ c
    dev = c @ est
    t_obs = float(dev @ dev)
    noise = float(np.trace(v))
    z = _noise_draws(v, n_draws, seed)  # [M, K], in the centred space
    norm = math.sqrt(t_obs)
    if norm > 0:
        u = dev / norm
    else:  # no observed direction: the noise's main one
        u = np.linalg.eigh(v)[1][:, -1]
    uz = z @ u  # [M]
    zz = np.sum(z * z, axis=1)  # [M]
    lo_q, hi_q = alpha / 2, 1 - alpha / 2

    def quantile(a: float, q: float) -> float:
        return float(np.quantile(a * a + 2 * a * uz + zz, q))

    def solve(q: float) -> float:
        """The ``a >= 0`` where the q-quantile of the statistic reaches ``t_obs``."""
        lo, hi = 0.0, norm + 1e-12
        while quantile(hi, q) < t_obs:
            hi = 2 * hi + math.sqrt(max(noise, 1e-30))
        for _ in range(60):
            mid = (lo + hi) / 2
            if quantile(mid, q) < t_obs:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    scale = math.sqrt(k - 1)
    low = 0.0 if quantile(0.0, hi_q) >= t_obs else solve(hi_q) / scale
    empty = quantile(0.0, lo_q) > t_obs
    high = 0.0 if empty else solve(lo_q) / scale
    out = {"estimate": heterogeneity(est, sigma), "low": low, "high": high,
           "raw": math.sqrt(t_obs / (k - 1)), "noise": math.sqrt(noise / (k - 1))}
    return {**out, "empty": True} if empty else out


def noise_covariance(reps: np.ndarray) -> tuple[np.ndarray, float]:
    """The covariance across ranges of the replicates defined on every range (``[S, S]`` from
    ``[S, B]``; NaN where fewer than two are), and its trace in the centred space: how much noise
    adds to the squared deviations in expectation."""
    ok = reps[:, np.all(np.isfinite(reps), axis=0)]
    s = reps.shape[0]
    sigma = np.cov(ok) if ok.shape[1] >= 2 else np.full((s, s), np.nan)
    c = _centred(s)
    return sigma, float(np.trace(c @ sigma @ c))


def net_sd(x: np.ndarray, noise: float, times: float) -> np.ndarray:
    """``sqrt(max(0, |C x|^2 - times * noise) / (S - 1))`` over the first axis of ``[S]`` or
    ``[S, B]``: the heterogeneity with ``times`` the noise taken out (1 for an estimate, 2 for a
    bootstrap replicate, which sits one noise further out than the estimate it is drawn around)."""
    dev = x - np.mean(x, axis=0)
    with np.errstate(invalid="ignore"):
        return np.sqrt(np.maximum(np.sum(dev * dev, axis=0) - times * noise, 0.0) / (x.shape[0] - 1))
