"""Pooled metrics of a grouped resample from group sums, against scipy on the repeated rows."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st

from jaxjudge.metrics.group_sums import (
    kl_sums, mean_from_sums, midrank_pearson, pearson_from_sums, pearson_sums, sq_error_sums,
)

G, PER = 8, 6


def _data(seed=0):
    rng = np.random.default_rng(seed)
    codes = np.repeat(np.arange(G), PER).astype(np.int32)
    x = (rng.integers(1, 6, G * PER) + 100.0).astype(np.float32)  # ties, and an offset
    y = (np.round(rng.uniform(1, 5, G * PER) * 3) / 3).astype(np.float32)
    fixed = np.ones(G * PER, np.float32)
    fixed[[2, 17]] = 0  # parse failures
    c = np.array([0, 1, 3, 0, 2, 1, 1, 0], np.float32)  # a resample's multiplicities
    return codes, x, y, fixed, c


def _repeated(v, fixed, c, codes):
    w = (c[codes] * fixed).astype(int)
    return np.repeat(v, w)


def test_pearson_and_mse_from_sums_equal_scipy_on_repeated_rows():
    codes, x, y, fixed, c = _data()
    sums = pearson_sums(jnp.asarray(x), jnp.asarray(y), jnp.asarray(fixed), jnp.asarray(codes), G)
    got = float(pearson_from_sums(sums, jnp.asarray(c)))
    xr, yr = _repeated(x, fixed, c, codes), _repeated(y, fixed, c, codes)
    assert got == pytest.approx(st.pearsonr(xr.astype(float), yr.astype(float)).statistic, abs=1e-6)
    mse = float(mean_from_sums(sq_error_sums(jnp.asarray(x), jnp.asarray(y), jnp.asarray(fixed),
                                             jnp.asarray(codes), G), jnp.asarray(c)))
    assert mse == pytest.approx(np.mean((xr.astype(float) - yr) ** 2), rel=1e-6)


def test_pearson_from_sums_is_nan_when_the_drawn_rows_are_constant():
    codes, x, y, fixed, c = _data()
    x = np.where(c[codes] > 0, 7.3, x).astype(np.float32)  # constant on the drawn groups only
    sums = pearson_sums(jnp.asarray(x), jnp.asarray(y), jnp.asarray(fixed), jnp.asarray(codes), G)
    assert np.isnan(float(pearson_from_sums(sums, jnp.asarray(c))))
    assert np.isfinite(float(pearson_from_sums(sums, jnp.ones(G))))  # all groups: not constant
    assert np.isnan(float(pearson_from_sums(sums, jnp.zeros(G))))  # nothing drawn


def test_kl_mean_ignores_an_infinite_group_that_is_not_drawn():
    codes, _, y, fixed, c = _data()
    k = 5
    hrel = np.clip(y - 1, 0, k - 1).astype(np.float32)
    logp = np.log(np.full((G * PER, k), 1 / k, np.float32))
    logp[codes == 0] = [0.0, -np.inf, -np.inf, -np.inf, -np.inf]  # group 0 (c = 0): KL inf
    sums = kl_sums(jnp.asarray(logp), jnp.asarray(hrel), jnp.asarray(fixed), jnp.asarray(codes), G)
    got = float(mean_from_sums(sums, jnp.asarray(c)))
    q = np.zeros((G * PER, k))
    lo = np.floor(hrel).astype(int)
    q[np.arange(G * PER), lo] = 1 - (hrel - lo)
    q[np.arange(G * PER), np.minimum(lo + 1, k - 1)] += hrel - lo
    kl = np.sum(np.where(q > 0, q * np.log(np.where(q > 0, q, 1) * k), 0), -1)
    assert got == pytest.approx(np.mean(_repeated(kl, fixed, c, codes)), rel=1e-5)
    assert float(mean_from_sums(sums, jnp.ones(G))) == np.inf  # drawn: the true value


def test_midrank_pearson_equals_scipy_spearman_with_ties_and_weights():
    codes, x, y, fixed, c = _data(1)
    w = c[codes] * fixed

    def midranks(v):  # weight below plus half the tie block's weight, by hand
        return np.array([np.sum(w * (v < vi)) + 0.5 * np.sum(w * (v == vi)) for vi in v], np.float32)

    got = float(midrank_pearson(jnp.asarray(midranks(x)), jnp.asarray(midranks(y)), jnp.asarray(w)))
    want = st.spearmanr(_repeated(x, fixed, c, codes), _repeated(y, fixed, c, codes)).statistic
    assert got == pytest.approx(want, abs=1e-6)
    tied = np.full_like(x, 2.0)
    assert np.isnan(float(midrank_pearson(jnp.asarray(midranks(tied)), jnp.asarray(midranks(y)), jnp.asarray(w))))
