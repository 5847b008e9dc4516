"""Grouped splits and the one-call grid search, against Python loops with scipy references."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats

from jaxjudge import debias, metrics, select

VALUES = np.arange(1.0, 6.0, dtype=np.float32)


# --- splits ---------------------------------------------------------------------------------


def _uneven_groups(seed=0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(1, 20, size=37)
    groups = np.repeat(np.array([f"doc{i:02d}" for i in range(37)]), sizes)
    return groups[rng.permutation(groups.shape[0])], sizes


def test_group_kfold_never_splits_a_group_and_covers_all():
    groups, sizes = _uneven_groups()
    folds = select.group_kfold(groups, n_folds=5, seed=3)
    assert folds.shape == groups.shape
    for g in np.unique(groups):
        assert np.unique(folds[groups == g]).size == 1, g
    counts = np.bincount(folds, minlength=5)
    assert set(np.unique(folds)) == set(range(5))
    # Greedy filling keeps the folds within one largest group of each other.
    assert counts.max() - counts.min() <= sizes.max()
    np.testing.assert_array_equal(select.group_kfold(groups, 5, seed=3), folds)


def test_group_kfold_seed_changes_assignment_of_equal_groups():
    groups = np.repeat(np.arange(50), 16)
    a = select.group_kfold(groups, 5, seed=0)
    b = select.group_kfold(groups, 5, seed=1)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(np.bincount(a), [160] * 5)


def test_group_kfold_bad_input():
    with pytest.raises(ValueError, match="number of groups"):
        select.group_kfold(np.array([1, 1, 2, 2]), n_folds=3)
    with pytest.raises(ValueError, match="NaN"):
        select.group_kfold(np.array([1.0, np.nan, 2.0]), n_folds=2)
    with pytest.raises(ValueError, match="non-empty"):
        select.group_kfold(np.array([]), n_folds=2)


def test_kfold_splits_directions():
    groups = np.repeat(np.arange(20), 4)
    sp = select.kfold_splits(groups, 5, seed=0)
    assert sp.dev.shape == sp.test.shape == (5, 80)
    # Random-number-paper direction: each fold is dev once (1:4), and the dev folds partition.
    np.testing.assert_array_equal(sp.dev.sum(0), np.ones(80))
    np.testing.assert_array_equal(sp.dev.sum(1), [16] * 5)
    np.testing.assert_array_equal(sp.test, ~sp.dev)
    conv = select.kfold_splits(groups, 5, seed=0, train_on_rest=True)
    np.testing.assert_array_equal(conv.test, sp.dev)
    np.testing.assert_array_equal(conv.dev, sp.test)


def test_fixed_split():
    groups = np.array(["a", "a", "b", "c", "c", "d"])
    sp = select.fixed_split(groups, dev_groups=["a", "d"])
    np.testing.assert_array_equal(sp.dev, [[1, 1, 0, 0, 0, 1]])
    np.testing.assert_array_equal(sp.test, [[0, 0, 1, 1, 1, 0]])
    sp2 = select.fixed_split(groups, dev_mask=np.array([0, 0, 1, 0, 0, 0], bool))
    np.testing.assert_array_equal(sp2.dev, [[0, 0, 1, 0, 0, 0]])
    with pytest.raises(ValueError, match="splits group 'c'"):
        select.fixed_split(groups, dev_mask=np.array([0, 0, 0, 1, 0, 0], bool))
    with pytest.raises(ValueError, match="not found"):
        select.fixed_split(groups, dev_groups=["z"])
    with pytest.raises(ValueError, match="dev set is empty"):
        select.fixed_split(dev_mask=np.zeros(6, bool))


# --- grid search against a Python loop with scipy ----------------------------------------


def _synthetic(n=400, n_groups=40, seed=0):
    """Noisy judge logits around the human score plus a skewed prior bias."""
    rng = np.random.default_rng(seed)
    human = rng.uniform(1, 5, n).astype(np.float32)
    clean = -((VALUES[None] - human[:, None]) ** 2)
    prior = np.array([0.05, 0.1, 0.15, 0.3, 0.4])
    logits = (clean + np.log(prior) + rng.normal(0, 1.0, (n, 5))).astype(np.float32)
    groups = rng.integers(0, n_groups, n)
    return logits, human, groups


def _np_expected(adj, t):
    return scipy.special.softmax(adj / t, axis=-1) @ VALUES.astype(np.float64)


@pytest.mark.parametrize("score", ["expected", "greedy"])
def test_grid_search_equals_python_loop_with_scipy(score):
    logits, human, groups = _synthetic()
    b = np.asarray(debias.prior_correction(np.array([0.05, 0.1, 0.15, 0.3, 0.4])))
    sp = select.kfold_splits(groups, 5, seed=1)
    lams = np.linspace(-0.5, 2.0, 21).astype(np.float32)
    res = select.grid_search(
        select.rectify_adjust, select.lambda_grid(lams), human, sp.dev, sp.test, "spearman",
        values=VALUES, temperature=0.7, data={"logits": logits, "correction": b}, score=score,
    )
    ref_dev = np.zeros((21, 5))
    ref_test = np.zeros((21, 5))
    for i, lam in enumerate(lams):
        adj = scipy.special.log_softmax(logits.astype(np.float64) + lam * b, axis=-1)
        pred = _np_expected(adj, 0.7) if score == "expected" else VALUES[adj.argmax(-1)]
        for f in range(5):
            ref_dev[i, f] = scipy.stats.spearmanr(pred[sp.dev[f]], human[sp.dev[f]])[0]
            ref_test[i, f] = scipy.stats.spearmanr(pred[sp.test[f]], human[sp.test[f]])[0]
    np.testing.assert_allclose(res.dev, ref_dev, atol=1e-5)
    np.testing.assert_allclose(res.test, ref_test, atol=1e-5)
    # The chosen point is a dev maximum (up to float32 near-ties); the test value is read there.
    idx = np.asarray(res.chosen_index)
    np.testing.assert_allclose(ref_dev[idx, range(5)], ref_dev.max(0), atol=1e-5)
    np.testing.assert_allclose(res.test_metric, ref_test[idx, range(5)], atol=1e-5)
    np.testing.assert_allclose(res.chosen["lam"], lams[idx])
    assert float(res.mean_test) == pytest.approx(ref_test[idx, range(5)].mean(), abs=1e-5)


def test_fold_data_distribution_calibration_fitted_on_each_dev_fold():
    # Distribution calibration with the Beta prior fitted on each fold's dev labels only,
    # against a loop with scipy's Beta fit, numpy rectification and scipy's Spearman.
    logits, human, groups = _synthetic(seed=11)
    human = np.round(human * 3) / 3  # averages of three raters
    sp = select.kfold_splits(groups, 5, seed=4)
    corrections = np.stack([
        debias.distribution_correction(logits, debias.human_prior(human, VALUES, sp.dev[f]))
        for f in range(5)
    ])  # [F, K]
    lams = np.linspace(0.0, 1.5, 7).astype(np.float32)
    res = select.grid_search(
        select.rectify_adjust, select.lambda_grid(lams), human, sp.dev, sp.test, "spearman",
        values=VALUES, data={"logits": logits}, fold_data={"correction": corrections},
    )
    marginal = scipy.special.softmax(logits.astype(np.float64), axis=-1).mean(0)
    for f in range(5):
        u = (human[sp.dev[f]] - 1.0 + 0.5) / 5.0
        a, b, _, _ = scipy.stats.beta.fit(u, floc=0, fscale=1)
        q = np.diff(scipy.stats.beta.cdf(np.linspace(0, 1, 6), a, b))
        corr = np.log(q) - np.log(marginal)
        for i, lam in enumerate(lams):
            pred = _np_expected(logits + lam * corr, 1.0)
            ref_dev = scipy.stats.spearmanr(pred[sp.dev[f]], human[sp.dev[f]])[0]
            ref_test = scipy.stats.spearmanr(pred[sp.test[f]], human[sp.test[f]])[0]
            assert float(res.dev[i, f]) == pytest.approx(ref_dev, abs=1e-4), (i, f)
            assert float(res.test[i, f]) == pytest.approx(ref_test, abs=1e-4), (i, f)
    with pytest.raises(ValueError, match="fold_data"):
        select.grid_search(
            select.rectify_adjust, select.lambda_grid(lams), human, sp.dev, sp.test,
            values=VALUES, data={"logits": logits}, fold_data={"correction": corrections[:3]},
        )


def test_grid_search_picks_known_lambda_for_contrastive():
    # main = clean + assistant noise: lam = 1 removes the noise exactly, leaving an expected
    # score that is monotone in the human score (Spearman 1); any other lam leaves noise.
    rng = np.random.default_rng(5)
    n = 500
    human = rng.uniform(1, 5, n).astype(np.float32)
    clean = -((VALUES[None] - human[:, None]) ** 2)
    asst = rng.normal(0, 2.0, (n, 5)).astype(np.float32)
    main = (clean + asst).astype(np.float32)
    sp = select.kfold_splits(np.arange(n) // 5, 5, seed=0)
    lams = np.linspace(0.0, 2.0, 21).astype(np.float32)
    res = select.grid_search(
        select.contrastive_adjust, select.lambda_grid(lams), human, sp.dev, sp.test,
        values=VALUES, data={"main": main, "asst": asst},
    )
    np.testing.assert_allclose(res.chosen["lam"], np.ones(5))
    np.testing.assert_allclose(res.test_metric, np.ones(5), atol=1e-5)


def test_contrastive_adjust_takes_the_plausibility_alpha():
    main = np.array([[2.0, 1.0, -1.0]], np.float32)
    asst = np.array([[3.0, 1.0, -3.0]], np.float32)
    data = {"main": main, "asst": asst}
    plain = np.asarray(select.contrastive_adjust({"lam": 1.0}, data))
    np.testing.assert_array_equal(plain, np.asarray(debias.contrastive(main, asst, 1.0)))
    # A fixed alpha in the data, or alpha as a grid parameter: candidate 2 (main ratio e^-3) is cut.
    for params, d in (({"lam": 1.0}, {**data, "alpha": jnp.float32(0.1)}), ({"lam": 1.0, "alpha": 0.1}, data)):
        out = np.asarray(select.contrastive_adjust(params, d))
        assert out[0, 2] == -np.inf and int(np.argmax(out)) == 1
        np.testing.assert_array_equal(out, np.asarray(debias.contrastive(main, asst, 1.0, alpha=0.1)))


def test_grid_search_lambda_temperature_grid_finds_both():
    rng = np.random.default_rng(6)
    n = 400
    human = rng.uniform(1, 5, n).astype(np.float32)
    clean = -((VALUES[None] - human[:, None]) ** 2)
    asst = rng.normal(0, 2.0, (n, 5)).astype(np.float32)
    main = (0.5 * (clean + asst)).astype(np.float32)  # recovered at t_main = 0.5, lam = 1
    sp = select.kfold_splits(np.arange(n) // 4, 5, seed=0)
    # Only lam * t_main = 0.5 cancels the assistant, and only (1.0, 0.5) on this grid does.
    grid = select.lambda_temperature_grid([0.0, 0.75, 1.0, 1.5], [0.25, 0.5, 1.0], name="t_main")
    assert grid["lam"].shape == (12,)
    np.testing.assert_allclose(grid["t_main"][:3], [0.25, 0.5, 1.0])
    res = select.grid_search(
        select.contrastive_adjust, grid, human, sp.dev, sp.test, "spearman",
        values=VALUES, data={"main": main, "asst": asst},
    )
    np.testing.assert_allclose(res.chosen["lam"], np.ones(5))
    np.testing.assert_allclose(res.chosen["t_main"], np.full(5, 0.5))
    assert res.dev.shape == (12, 5)


def _abs_error(x, y, mask):
    w = mask.astype(jnp.float32)
    return jnp.sum(w * jnp.abs(x - y)) / jnp.sum(w)


_abs_error.higher_is_better = False


@pytest.mark.parametrize("metric", ["mse", "neg_mse", "grouped_mse", _abs_error])
def test_grid_search_minimises_mse(metric):
    # Integer human scores 2..4 and a judge peaked on them plus a skewed prior: lam = 1 removes
    # the prior and makes the expected score (nearly) exact; every other lam biases it.
    rng = np.random.default_rng(7)
    n = 300
    human = rng.integers(2, 5, n).astype(np.float32)
    prior = scipy.special.softmax([0.0, 0.5, 1.0, 2.0, 3.0])
    logits = (-3.0 * (VALUES[None] - human[:, None]) ** 2 + np.log(prior)).astype(np.float32)
    b = debias.prior_correction(prior)
    sp = select.kfold_splits(np.arange(n) // 3, 5, seed=2)
    lams = np.linspace(0.0, 2.0, 21).astype(np.float32)
    if metric == "grouped_mse":  # summary level: mean over groups of the within-group MSE
        metric = metrics.grouped_metric("mse", np.arange(n) // 3, n // 3)
    res = select.grid_search(
        select.rectify_adjust, select.lambda_grid(lams), human, sp.dev, sp.test, metric,
        values=VALUES, data={"logits": logits, "correction": b},
    )
    np.testing.assert_allclose(res.chosen["lam"], np.ones(5))
    assert np.all(np.abs(np.asarray(res.test_metric)) < 1e-4)


def test_grid_search_nan_dev_metric_is_never_chosen():
    # Grid point 0 makes every prediction equal: its Spearman is undefined (NaN).
    logits, human, groups = _synthetic(seed=3)
    sp = select.kfold_splits(groups, 5)

    def scaled(lam, data):
        return jax.nn.log_softmax(lam * data, axis=-1)

    res = select.grid_search(
        scaled, jnp.array([0.0, 0.5, 1.0]), human, sp.dev, sp.test, values=VALUES, data=logits
    )
    assert np.isnan(np.asarray(res.dev[0])).all()
    assert np.all(np.asarray(res.chosen_index) > 0)


def test_grid_search_is_one_compiled_call_at_full_size():
    # 100 lambdas x 5 folds x 1,600 examples x 5 candidates.
    rng = np.random.default_rng(8)
    n = 1600
    human = rng.uniform(1, 5, n).astype(np.float32)
    groups = np.arange(n) // 16
    sp = select.kfold_splits(groups, 5)
    grid = select.lambda_grid(np.linspace(0.0, 2.0, 100))
    b = debias.prior_correction(np.array([0.1, 0.1, 0.2, 0.3, 0.3]))
    traces = []

    def counting_rectify(params, data):
        traces.append(1)  # Runs only while jax traces the function.
        return debias.rectify(data["logits"], data["correction"], params["lam"])

    def run(seed):
        logits = np.random.default_rng(seed).normal(0, 2, (n, 5)).astype(np.float32)
        return select.grid_search(
            counting_rectify, grid, human, sp.dev, sp.test, values=VALUES, temperature=0.2,
            data={"logits": logits, "correction": b},
        )

    first = run(0)
    assert len(traces) == 1 and first.dev.shape == (100, 5) and first.test_metric.shape == (5,)
    second = run(1)  # New data of the same shapes: the compiled call is reused as is.
    assert len(traces) == 1
    assert not np.allclose(first.dev, second.dev)


def test_batched_lax_map_equals_full_vmap():
    logits, human, groups = _synthetic(seed=2)
    b = debias.prior_correction(np.array([0.05, 0.1, 0.15, 0.3, 0.4]))
    sp = select.kfold_splits(groups, 5)
    grid = select.lambda_grid(np.linspace(0.0, 2.0, 23))  # 23 = 3 batches of 7 and a rest of 2
    # Pearson: a rank metric could flip float32 near-ties between the two programs.
    kw = dict(values=VALUES, data={"logits": logits, "correction": b}, metric="pearson")
    full = select.grid_search(select.rectify_adjust, grid, human, sp.dev, sp.test, **kw)
    batched = select.grid_search(
        select.rectify_adjust, grid, human, sp.dev, sp.test, batch_size=7, **kw
    )
    np.testing.assert_allclose(batched.dev, full.dev, atol=1e-6)
    np.testing.assert_allclose(batched.test, full.test, atol=1e-6)
    np.testing.assert_array_equal(batched.chosen_index, full.chosen_index)


def test_evaluate_point_matches_a_grid_row():
    logits, human, groups = _synthetic(seed=4)
    b = debias.prior_correction(np.array([0.05, 0.1, 0.15, 0.3, 0.4]))
    sp = select.kfold_splits(groups, 5)
    data = {"logits": logits, "correction": b}
    lams = np.array([0.0, 0.7], np.float32)
    res = select.grid_search(
        select.rectify_adjust, select.lambda_grid(lams), human, sp.dev, sp.test, "pearson",
        values=VALUES, data=data,
    )
    dev, test = select.evaluate_point(
        select.rectify_adjust, {"lam": jnp.float32(0.7)}, human, sp.dev, sp.test, "pearson",
        values=VALUES, data=data,
    )
    np.testing.assert_allclose(dev, res.dev[1], atol=1e-6)
    np.testing.assert_allclose(test, res.test[1], atol=1e-6)


# --- bad input ------------------------------------------------------------------------------


def _args():
    logits, human, groups = _synthetic(n=100, n_groups=20, seed=9)
    sp = select.kfold_splits(groups, 5)
    data = {"logits": logits, "correction": np.zeros(5, np.float32)}
    return human, sp, data


def _search(human, dev, test, data, **kw):
    kw.setdefault("values", VALUES)
    return select.grid_search(
        select.rectify_adjust, select.lambda_grid([0.0, 1.0]), human, dev, test,
        data=data, **kw,
    )


def test_bad_input_nan_human():
    human, sp, data = _args()
    human = human.copy()
    human[17] = np.nan
    with pytest.raises(ValueError, match="NaN.*row 17"):
        _search(human, sp.dev, sp.test, data)


def test_bad_input_shapes():
    human, sp, data = _args()
    with pytest.raises(ValueError, match="dev_masks must be"):
        _search(human, sp.dev[:, :50], sp.test, data)
    with pytest.raises(ValueError, match="differ in shape"):
        _search(human, sp.dev[:3], sp.test, data)
    with pytest.raises(ValueError, match="adjust_fn returned shape"):
        _search(human, sp.dev, sp.test, data, values=np.arange(4.0))
    with pytest.raises(ValueError, match="leading axis"):
        select.grid_search(
            select.contrastive_adjust, {"lam": jnp.zeros(3), "t_main": jnp.ones(4)}, human,
            sp.dev, sp.test, values=VALUES,
            data={"main": data["logits"], "asst": data["logits"]},
        )


def test_bad_input_empty_fold_and_overlap():
    human, sp, data = _args()
    dev = sp.dev.copy()
    dev[2] = False
    with pytest.raises(ValueError, match="fold 2: the dev mask is empty"):
        _search(human, dev, sp.test, data)
    with pytest.raises(ValueError, match="overlap"):
        _search(human, sp.dev, sp.dev | sp.test, data)


def test_bad_input_unknown_metric_and_score():
    human, sp, data = _args()
    with pytest.raises(ValueError, match="unknown metric 'spearmann'"):
        _search(human, sp.dev, sp.test, data, metric="spearmann")
    with pytest.raises(ValueError, match="score"):
        _search(human, sp.dev, sp.test, data, score="mode")
