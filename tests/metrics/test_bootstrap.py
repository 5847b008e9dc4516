"""Grouped, paired bootstrap: resampling, equivalence with literal resamples, coverage."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats

from jaxjudge import metrics as jm


def weighted_mean(x, w):
    return jnp.sum(w * x) / jnp.sum(w)


def weighted_pearson(x, y, w):
    return jm.pearson(x, y, weights=w)


def test_resample_weights_respect_groups():
    groups = jnp.asarray(np.repeat(np.arange(6), [1, 2, 3, 4, 5, 6]))  # unequal group sizes
    keys = jax.random.split(jax.random.key(0), 200)
    w = np.asarray(jax.vmap(lambda k: jm.resample_weights(k, groups, 6))(keys))  # [B, N]
    g = np.asarray(groups)
    for row in w:
        counts = np.array([row[g == k][0] for k in range(6)])
        for k in range(6):
            assert (row[g == k] == counts[k]).all()  # a group is drawn whole
        assert counts.sum() == 6 and (counts == np.round(counts)).all()
    # Every group gets drawn sometimes, and the average multiplicity is about 1.
    assert np.all(w.mean(0) > 0.7) and np.all(w.mean(0) < 1.3)


def test_weighted_replicate_equals_literal_resample():
    rng = np.random.default_rng(0)
    groups = np.repeat(np.arange(8), 5)
    x = rng.integers(1, 6, 40).astype(np.float32)  # ties, so ranks of duplicates matter
    y = (x + rng.normal(size=40)).astype(np.float32)
    for seed in range(5):
        w = np.asarray(jm.resample_weights(jax.random.key(seed), jnp.asarray(groups), 8))
        rows = np.repeat(np.arange(40), w.astype(int))  # the resampled data set, built
        got = float(jm.spearman(x, y, weights=w))
        assert got == pytest.approx(scipy.stats.spearmanr(x[rows], y[rows])[0], abs=1e-6)
        got = float(jm.kendall(x, y, weights=w))
        assert got == pytest.approx(scipy.stats.kendalltau(x[rows], y[rows])[0], abs=1e-6)


def test_interval_is_percentile_of_replicates_and_deterministic():
    rng = np.random.default_rng(1)
    x = rng.normal(size=30).astype(np.float32)
    est, reps = jm.bootstrap_distribution(weighted_mean, (x,), None, n_boot=300, seed=7)
    assert float(est) == pytest.approx(x.mean(), rel=1e-6)
    ci = jm.bootstrap_ci(weighted_mean, (x,), None, n_boot=300, alpha=0.1, seed=7)
    lo, hi = np.quantile(np.asarray(reps, np.float64), [0.05, 0.95])
    assert (ci.low, ci.high) == pytest.approx((lo, hi), rel=1e-6)
    # The bootstrap spread of a mean is about its standard error.
    assert np.std(reps) == pytest.approx(x.std() / np.sqrt(30), rel=0.2)
    assert jm.bootstrap_ci(weighted_mean, (x,), None, n_boot=300, alpha=0.1, seed=7) == ci
    assert jm.bootstrap_ci(weighted_mean, (x,), None, n_boot=300, alpha=0.1, seed=8) != ci


def test_coverage_of_pearson_interval():
    # Bivariate normal with rho = 0.5: the 95% interval should contain 0.5 about 95% of the time.
    rng = np.random.default_rng(2)
    rho, n, sims = 0.5, 60, 150
    cov = [[1.0, rho], [rho, 1.0]]
    hits = 0
    for s in range(sims):
        x, y = rng.multivariate_normal([0, 0], cov, size=n).T.astype(np.float32)
        ci = jm.bootstrap_ci(weighted_pearson, (x, y), None, n_boot=400, seed=s)
        assert ci.low <= ci.estimate <= ci.high
        hits += ci.low <= rho <= ci.high
    # Binomial sd at 150 draws is ~0.018; percentile intervals under-cover slightly.
    assert 0.86 <= hits / sims <= 0.99, hits / sims


def test_coverage_of_grouped_mean_needs_group_resampling():
    # Strongly clustered data: 15 documents x 8 items, between-document sd 1, within 0.2.
    rng = np.random.default_rng(3)
    n_groups, per, sims = 15, 8, 100
    groups = np.repeat(np.arange(n_groups), per)
    hits_grouped = hits_iid = 0
    widths = []
    for s in range(sims):
        x = (rng.normal(size=n_groups)[groups] + 0.2 * rng.normal(size=groups.size)).astype(
            np.float32
        )
        ci_g = jm.bootstrap_ci(weighted_mean, (x,), groups, n_boot=400, seed=s)
        ci_i = jm.bootstrap_ci(weighted_mean, (x,), None, n_boot=400, seed=s)
        hits_grouped += ci_g.low <= 0.0 <= ci_g.high
        hits_iid += ci_i.low <= 0.0 <= ci_i.high
        widths.append((ci_g.high - ci_g.low) / (ci_i.high - ci_i.low))
    # Resampling documents gives honest intervals; resampling items ignores the clustering
    # (design effect ~ 1 + (8-1) * 0.96 ~ 7.7, so iid intervals are ~2.8x too narrow).
    assert np.median(widths) > 2.0
    assert hits_grouped / sims >= 0.80  # ~0.88 measured: few clusters under-cover a little
    assert hits_iid / sims < 0.7


def test_paired_difference_is_narrower_than_each_interval():
    rng = np.random.default_rng(4)
    n_docs, per = 20, 8
    docs = np.repeat([f"d{i}" for i in range(n_docs)], per)
    human = rng.normal(size=n_docs * per).astype(np.float32)
    pred_a = (human + rng.normal(size=human.size)).astype(np.float32)
    pred_b = (pred_a + 0.3 * rng.normal(size=human.size)).astype(np.float32)
    diff = jm.paired_difference_ci("spearman", pred_a, pred_b, human, docs, n_boot=500)
    want = scipy.stats.spearmanr(pred_a, human)[0] - scipy.stats.spearmanr(pred_b, human)[0]
    assert diff.estimate == pytest.approx(want, abs=1e-6)
    single = jm.metric_ci("spearman", pred_a, human, docs, n_boot=500)
    assert single.estimate == pytest.approx(scipy.stats.spearmanr(pred_a, human)[0], abs=1e-6)
    # Pairing cancels the shared resampling noise of the two correlations.
    assert (diff.high - diff.low) < 0.5 * (single.high - single.low)
    assert diff.low <= diff.estimate <= diff.high


def test_summary_level_interval_and_mask():
    rng = np.random.default_rng(5)
    groups = np.repeat(np.arange(12), 6)
    human = rng.integers(1, 6, 72).astype(np.float32)
    pred = (human + rng.normal(size=72)).astype(np.float32)
    ci = jm.metric_ci("pearson", pred, human, groups, per_group=True, n_boot=200)
    assert ci.estimate == pytest.approx(float(jm.grouped("pearson", pred, human, groups)), abs=1e-6)
    assert ci.low < ci.estimate < ci.high

    # A mask equals running on the selected rows (groups re-encoded, same seed).
    mask = groups % 3 != 0
    masked = jm.bootstrap_ci(weighted_pearson, (pred, human), groups, n_boot=200, mask=mask)
    subset = jm.bootstrap_ci(
        weighted_pearson, (pred[mask], human[mask]), groups[mask], n_boot=200
    )
    assert masked == pytest.approx(subset, abs=1e-6)


def test_bootstrap_bad_inputs():
    x = np.arange(10, dtype=np.float32)
    with pytest.raises(ValueError, match=r"arrays\[1\] has shape \(9,\)"):
        jm.bootstrap_ci(weighted_pearson, (x, x[:9]), None)
    with pytest.raises(ValueError, match="at least 2 groups"):
        jm.bootstrap_ci(weighted_mean, (x,), np.zeros(10, int))
    with pytest.raises(ValueError, match="alpha must be in"):
        jm.bootstrap_ci(weighted_mean, (x,), None, alpha=1.5)
    with pytest.raises(ValueError, match="selects no rows"):
        jm.bootstrap_ci(weighted_mean, (x,), None, mask=np.zeros(10, bool))
    human = x.copy()
    human[4] = np.nan
    with pytest.raises(ValueError, match=r"human scores contain NaN at rows \[4\]"):
        jm.paired_difference_ci("pearson", x, x, human, np.arange(10) // 2)
    with pytest.raises(ValueError, match="unknown metric"):
        jm.metric_ci("rho", x, x)
    with pytest.raises(ValueError, match="per_group=True needs groups"):
        jm.metric_ci("pearson", x, x, per_group=True)
    # A resample where the statistic is undefined is dropped, with a warning.
    xs = np.array([0, 0, 0, 0, 0, 0, 0, 1], np.float32)
    with pytest.warns(RuntimeWarning, match="resamples gave NaN"):
        ci = jm.bootstrap_ci(weighted_pearson, (xs, xs), None, n_boot=200)
    assert ci.estimate == pytest.approx(1.0) and np.isfinite(ci.low)


def test_consts_reach_the_statistic_untouched_and_arrays_may_be_empty():
    """A statistic reading its rows through an index table (`consts`) sees the same resamples
    as the same statistic given the rows as arrays."""
    rng = np.random.default_rng(2)
    x = rng.normal(size=40).astype(np.float32)
    groups = np.repeat(np.arange(10), 4)
    order = rng.permutation(40).astype(np.int32)  # any layout of the rows

    def by_rows(v, w):
        return jnp.sum(v * w) / jnp.sum(w)

    def by_index(index, v_laid_out, w):
        return jnp.sum(v_laid_out * w[index]) / jnp.sum(w[index])

    est_a, reps_a = jm.bootstrap_distribution(by_rows, (x,), groups, n_boot=50, seed=4)
    est_b, reps_b = jm.bootstrap_distribution(by_index, (), groups, n_boot=50, seed=4, consts=(order, x[order]))
    np.testing.assert_allclose(np.asarray(reps_b), np.asarray(reps_a), rtol=1e-5)
    assert float(est_b) == pytest.approx(float(est_a), abs=1e-6)
    assert float(est_a) == pytest.approx(float(x.mean()), abs=1e-6)
    with pytest.raises(TypeError, match="non-empty"):
        jm.bootstrap_distribution(by_rows, (), None, n_boot=5)
