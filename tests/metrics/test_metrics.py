"""Metrics against scipy, hand-computed SDD cases, grouped variants and input errors."""

import math
import warnings

import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats
from hypothesis import given, settings

from jaxjudge import metrics as jm

TOL = 1e-6
SIZES = [2, 3, 7, 33, 64]  # few distinct lengths: every new shape is a new compilation

SCIPY = {
    "pearson": lambda a, b: scipy.stats.pearsonr(a, b)[0],
    "spearman": lambda a, b: scipy.stats.spearmanr(a, b)[0],
    "kendall": lambda a, b: scipy.stats.kendalltau(a, b, variant="b")[0],
    "mse": lambda a, b: np.mean((a - b) ** 2),
}


def _reference(name, a, b):
    """scipy on the float32 values, in float64; NaN where scipy calls the input degenerate."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    if name != "mse" and (len(a) < 2 or np.ptp(a) == 0 or np.ptp(b) == 0):
        return math.nan
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(SCIPY[name](a, b))


def _ours(name, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # constant input warning
        return float(jm.get_metric(name)(*args, **kwargs))


def _assert_close(name, got, want):
    if math.isnan(want):
        assert math.isnan(got), (name, got)
    else:
        # MSE is not bounded: compare relative to its size.
        tol = TOL * max(1.0, abs(want)) if name == "mse" else TOL
        assert abs(got - want) <= tol, (name, got, want, got - want)


@st.composite
def paired_data(draw, sizes=SIZES):
    """Float32 (x, y): continuous values, heavy ties, or a large offset with small spread."""
    n = draw(st.sampled_from(sizes))
    kind = draw(st.sampled_from(["float", "ties", "offset", "mixed"]))
    seed = draw(st.integers(0, 2**31 - 1))
    rng = np.random.default_rng(seed)
    if kind == "float":
        x = rng.normal(size=n) * draw(st.sampled_from([1e-3, 1.0, 1e3]))
        y = x * draw(st.floats(-2, 2)) + rng.normal(size=n)
    elif kind == "ties":
        levels = draw(st.integers(1, 5))
        x = rng.integers(0, levels, n)
        y = np.clip(x + rng.integers(-1, 2, n), 0, levels)
    elif kind == "offset":
        x = 1000.0 + rng.normal(size=n) * 0.01
        y = x + rng.normal(size=n) * 0.01
    else:
        x = rng.integers(1, 6, n) + 0.5 * rng.integers(0, 2, n)
        y = rng.normal(size=n)
    return x.astype(np.float32), y.astype(np.float32)


@pytest.mark.parametrize("name", ["pearson", "spearman", "kendall", "mse"])
@settings(max_examples=40, deadline=None)
@given(data=paired_data())
def test_metric_matches_scipy(name, data):
    x, y = data
    _assert_close(name, _ours(name, x, y), _reference(name, x, y))


@pytest.mark.parametrize("name", ["pearson", "spearman", "kendall", "mse"])
@settings(max_examples=30, deadline=None)
@given(data=paired_data(sizes=[33, 64]), mask_seed=st.integers(0, 2**31 - 1))
def test_masked_metric_matches_scipy_on_subset(name, data, mask_seed):
    x, y = data
    rng = np.random.default_rng(mask_seed)
    mask = rng.random(len(x)) < rng.uniform(0.1, 0.9)
    if mask.sum() < 2:
        mask[:2] = True
    # Unselected rows hold NaN and extreme values: they must not leak into ranks or sums.
    x = np.where(mask, x, np.where(rng.random(len(x)) < 0.5, np.nan, -1e30)).astype(np.float32)
    got = _ours(name, x, y, mask)
    _assert_close(name, got, _reference(name, x[mask], y[mask]))


@pytest.mark.parametrize("name", ["pearson", "spearman", "kendall", "mse"])
@settings(max_examples=30, deadline=None)
@given(data=paired_data(sizes=[7, 33]), w_seed=st.integers(0, 2**31 - 1))
def test_integer_weights_equal_repeated_rows(name, data, w_seed):
    x, y = data
    w = np.random.default_rng(w_seed).integers(0, 4, len(x))
    if w.sum() < 2:
        w[:2] = 1
    rows = np.repeat(np.arange(len(x)), w)
    got = _ours(name, x, y, weights=w.astype(np.float32))
    _assert_close(name, got, _reference(name, x[rows], y[rows]))


def test_mask_and_weights_combine():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(2, 20)).astype(np.float32)
    w = rng.integers(1, 4, 20).astype(np.float32)
    mask = rng.random(20) < 0.5
    rows = np.repeat(np.arange(20), np.where(mask, w, 0).astype(int))
    got = float(jm.spearman(x, y, mask, weights=w))
    assert abs(got - scipy.stats.spearmanr(x[rows], y[rows])[0]) <= TOL


def test_constant_input_is_nan_in_jit_and_warns_eagerly():
    x = np.full(10, 0.1, np.float32)  # 0.1 is not exact in float32: the centred sum is not 0
    y = np.arange(10, dtype=np.float32)
    for name in ["pearson", "spearman", "kendall"]:
        fn = jm.get_metric(name)
        assert np.isnan(jax.jit(fn)(x, y))
        assert np.isnan(jax.jit(fn)(y, x))
        with pytest.warns(RuntimeWarning, match="constant"):
            assert np.isnan(fn(x, y))
    # Constant among the selected rows only.
    x2 = np.concatenate([x, [5.0]]).astype(np.float32)
    y2 = np.arange(11, dtype=np.float32)
    assert np.isnan(jax.jit(jm.pearson)(x2, y2, np.arange(11) < 10))
    assert float(jm.mse(x, y)) == pytest.approx(np.mean((x - y) ** 2), rel=1e-6)


def test_jit_vmap_over_grid_and_folds_matches_eager():
    rng = np.random.default_rng(2)
    n, grid, folds = 40, 6, 3
    preds = rng.normal(size=(grid, n)).astype(np.float32)  # [P, N]
    human = rng.integers(1, 6, n).astype(np.float32)
    fold_masks = np.stack([np.arange(n) % folds == f for f in range(folds)])  # [F, N]
    for name in ["pearson", "spearman", "kendall", "neg_mse"]:
        fn = jm.get_metric(name)
        per_fold = jax.vmap(lambda p, m: fn(p, human, m), in_axes=(None, 0))
        table = jax.jit(jax.vmap(per_fold, in_axes=(0, None)))(preds, fold_masks)  # [P, F]
        assert table.shape == (grid, folds) and table.dtype == jnp.float32
        want = np.array([[float(fn(p, human, m)) for m in fold_masks] for p in preds])
        np.testing.assert_allclose(np.asarray(table), want, atol=1e-6)
        if name == "neg_mse":
            want_mse = [[np.mean((p[m] - human[m]) ** 2) for m in fold_masks] for p in preds]
            np.testing.assert_allclose(-np.asarray(table), want_mse, rtol=1e-6)


def test_registry():
    assert set(jm.METRICS) >= {"pearson", "spearman", "kendall", "mse"}
    assert jm.get_metric("spearman") is jm.spearman
    x = np.arange(5, dtype=np.float32)
    assert float(jm.get_metric("neg_mse")(x, x + 2)) == pytest.approx(-4.0)
    assert jm.HIGHER_IS_BETTER["mse"] is False and jm.HIGHER_IS_BETTER["spearman"] is True
    with pytest.raises(ValueError, match=r"unknown metric 'spearmann'.*kendall.*pearson"):
        jm.get_metric("spearmann")


# ------------------------------------------------------------------- grouped (summary level)


def _loop_grouped(name, x, y, groups, mask):
    """Python loop over groups with scipy; skips groups where the metric is undefined."""
    vals = []
    for g in np.unique(groups):
        sel = (groups == g) & mask
        enough = sel.sum() >= (1 if name == "mse" else 2)
        v = _reference(name, x[sel], y[sel]) if enough else math.nan
        if not math.isnan(v):
            vals.append(v)
    return float(np.mean(vals))


@pytest.mark.parametrize("name", ["pearson", "spearman", "kendall", "mse"])
@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), ties=st.booleans())
def test_grouped_matches_loop_over_groups(name, seed, ties):
    rng = np.random.default_rng(seed)
    n, num_groups = 64, 7
    groups = np.sort(rng.integers(0, num_groups, n))
    groups[:num_groups] = np.arange(num_groups)  # every code present
    rng.shuffle(groups)
    if ties:
        x = rng.integers(1, 4, n).astype(np.float32)
        y = rng.integers(1, 4, n).astype(np.float32)
    else:
        x, y = rng.normal(size=(2, n)).astype(np.float32)
    x[groups == 0] = 2.0  # a constant group: skipped by the correlations
    mask = rng.random(n) < 0.8
    got = float(jm.grouped(name, x, y, groups, mask, num_groups=num_groups))
    want = _loop_grouped(name, x, y, groups, mask)
    assert abs(got - want) <= TOL * max(1.0, abs(want)), (got, want)

    values = np.asarray(jm.per_group(name, x, y, groups, mask))
    assert values.shape == (num_groups,)
    if name != "mse":
        assert np.isnan(values[0])


def test_grouped_jit_vmap_over_folds_and_generic_callable():
    rng = np.random.default_rng(3)
    ids = np.array([f"doc{i % 9}" for i in range(72)])
    codes, num_groups, names = jm.encode_groups(ids)
    assert num_groups == 9 and (names[codes] == ids).all()
    x, y = rng.normal(size=(2, 72)).astype(np.float32)
    folds = np.stack([codes % 3 == f for f in range(3)])  # grouped folds: whole documents
    fn = jm.grouped_metric("spearman", codes, num_groups)
    assert fn.higher_is_better is True
    assert jm.grouped_metric("mse", codes, num_groups).higher_is_better is False
    got = jax.jit(jax.vmap(fn, in_axes=(None, None, 0)))(x, y, folds)
    want = [_loop_grouped("spearman", x, y, codes, m) for m in folds]
    np.testing.assert_allclose(np.asarray(got), want, atol=TOL)

    # An arbitrary callable takes the generic (vmap over group masks) path.
    def centred_dot(a, b, mask=None, *, weights=None):
        return jm.pearson(a, b, mask, weights=weights) * 2.0

    got_generic = float(jm.grouped(centred_dot, x, y, codes))
    want_generic = 2 * _loop_grouped("pearson", x, y, codes, np.ones(72, bool))
    assert got_generic == pytest.approx(want_generic, abs=2e-6)


def test_grouped_weights_count_group_multiplicity():
    rng = np.random.default_rng(4)
    groups = np.repeat(np.arange(4), 6)
    x, y = rng.normal(size=(2, 24)).astype(np.float32)
    # Group 1 drawn twice, group 3 not drawn: the summary-level mean counts group 1 twice.
    mult = np.array([1.0, 2.0, 1.0, 0.0], np.float32)
    got = float(jm.grouped("pearson", x, y, groups, weights=mult[groups]))
    per = [scipy.stats.pearsonr(x[groups == g], y[groups == g])[0] for g in range(4)]
    assert got == pytest.approx((per[0] + 2 * per[1] + per[2]) / 4, abs=TOL)


# ------------------------------------------------------------------------------------ SDD


def test_score_targets_hand_cases():
    q = np.asarray(jm.score_targets([3.7, 2.0, 5.0, 1.0, 1.25], lo=1, num_scores=5))
    np.testing.assert_allclose(q[0], [0, 0, 0.3, 0.7, 0], atol=1e-6)
    np.testing.assert_allclose(q[1], [0, 1, 0, 0, 0])
    np.testing.assert_allclose(q[2], [0, 0, 0, 0, 1])
    np.testing.assert_allclose(q[3], [1, 0, 0, 0, 0])
    np.testing.assert_allclose(q[4], [0.75, 0.25, 0, 0, 0])


def test_sdd_hand_computed():
    probs = np.array([[0.1, 0.2, 0.3, 0.2, 0.2], [0.1, 0.2, 0.3, 0.2, 0.2]], np.float32)
    # KL for 3.7: 0.3 ln(0.3/0.3) + 0.7 ln(0.7/0.2); for 2: ln(1/0.2).
    want = (0.7 * math.log(3.5) + math.log(5.0)) / 2
    assert float(jm.sdd(probs, [3.7, 2.0], lo=1)) == pytest.approx(want, abs=1e-6)
    assert float(jm.sdd(probs, [3.7, 2.0], 1, np.array([True, False]))) == pytest.approx(
        0.7 * math.log(3.5), abs=1e-6
    )
    # Zero mass on the human score: the true KL is infinite; the probability path reads the 0 as
    # the smallest normal float32 (the most a float32 probability can say), the legacy eps
    # floor as eps (then renormalised).
    p0 = np.array([[0.0, 0.5, 0.5]], np.float32)
    tiny = float(np.finfo(np.float32).tiny)
    assert float(jm.sdd(p0, [0.0], lo=0)) == pytest.approx(-math.log(tiny), rel=1e-6)  # 87.34
    eps = jm.SDD_EPS
    assert float(jm.sdd(p0, [0.0], lo=0, eps=eps)) == pytest.approx(-math.log(eps / (1 + eps)), rel=1e-5)


def test_sdd_matches_scipy_relative_entropy():
    rng = np.random.default_rng(5)
    n, k, lo = 50, 7, 0
    probs = rng.dirichlet(np.ones(k), size=n).astype(np.float32)
    human = rng.uniform(lo, lo + k - 1, n).astype(np.float32)
    human[:10] = np.round(human[:10])
    probs[0] = [1e-9, 1e-12, 1e-7, 0.3, 0.3, 0.2, 0.2 - 1e-7]  # tiny masses are kept as they are
    human[0] = 1.5
    q = np.asarray(jm.score_targets(human, lo, k), np.float64)
    p = probs.astype(np.float64)
    want = scipy.special.rel_entr(q, p).sum(-1).mean()
    assert float(jm.sdd(probs, human, lo)) == pytest.approx(want, rel=1e-5)
    assert float(jm.sdd(probs, human, lo, weights=np.arange(n, dtype=np.float32))) == pytest.approx(
        np.average(scipy.special.rel_entr(q, p).sum(-1), weights=np.arange(n)), rel=1e-5
    )
    logp = np.log(probs.astype(np.float64)).astype(np.float32)
    assert float(jm.sdd_from_logprobs(logp, human, lo)) == pytest.approx(want, rel=1e-5)
    # The legacy floor: clip at SDD_EPS, renormalise, then the same KL.
    pf = np.maximum(p, jm.SDD_EPS)
    pf /= pf.sum(-1, keepdims=True)
    assert float(jm.sdd(probs, human, lo, eps=jm.SDD_EPS)) == pytest.approx(
        scipy.special.rel_entr(q, pf).sum(-1).mean(), rel=1e-5
    )


def test_sdd_is_not_capped_at_13_8_nats():
    # Scores 3, 4, 5. Human 3.7 puts 0.3 on "3" and 0.7 on "4"; the judge gives them 1e-12 and
    # 1e-9. KL = 0.3 ln(0.3 / 1e-12) + 0.7 ln(0.7 / 1e-9) = 7.928 + 14.256 = 22.18 nats.
    # Human 4 (one-hot on "4") against p("4") = 1e-10: KL = ln(1e10) = 23.03 nats.
    probs = np.array([[1e-12, 1e-9, 1.0], [0.5, 1e-10, 0.5]], np.float32)
    p32 = probs.astype(np.float64)  # the float32 values actually passed
    kl0 = 0.3 * math.log(0.3 / p32[0, 0]) + 0.7 * math.log(0.7 / p32[0, 1])
    kl1 = -math.log(p32[1, 1])
    assert kl0 == pytest.approx(22.184, abs=1e-3) and kl1 == pytest.approx(23.026, abs=1e-3)
    q = np.array([[0.3, 0.7, 0.0], [0.0, 1.0, 0.0]])
    assert scipy.stats.entropy(q[0], p32[0]) == pytest.approx(kl0, rel=1e-9)  # entropy renormalises p
    np.testing.assert_allclose(scipy.special.rel_entr(q, p32).sum(-1), [kl0, kl1], rtol=1e-9)
    human = [3.7, 4.0]
    assert float(jm.sdd(probs, human, lo=3)) == pytest.approx((kl0 + kl1) / 2, rel=1e-6)
    assert float(jm.sdd(probs, human, 3, np.array([True, False]))) == pytest.approx(kl0, rel=1e-6)
    assert float(jm.sdd(probs, human, 3, weights=np.array([1.0, 3.0], np.float32))) == pytest.approx(
        (kl0 + 3 * kl1) / 4, rel=1e-6
    )
    # The same from log-probabilities.
    logp = np.log(p32).astype(np.float32)
    assert float(jm.sdd_from_logprobs(logp, human, lo=3)) == pytest.approx((kl0 + kl1) / 2, rel=1e-6)
    # The old 1e-6 floor capped both rows near 13.8 nats.
    assert float(jm.sdd(probs, human, lo=3, eps=jm.SDD_EPS)) < 13.9


def test_sdd_from_logprobs_beyond_float32_probabilities():
    # log p = log_softmax([0, -30, -250]): p("3") = e^-250 underflows to 0 in float32, its
    # log-probability does not. Human 3 (one-hot): KL = 250 + log(1 + e^-30 + e^-250).
    logits = jnp.array([[-250.0, -30.0, 0.0], [0.0, 1.0, 2.0]], jnp.float32)
    logp = jax.nn.log_softmax(logits, -1)
    want0 = 250.0 + math.log1p(math.exp(-30.0))
    q1 = np.array([0.0, 0.5, 0.5])  # human 4.5
    lp1 = scipy.special.log_softmax(np.array([0.0, 1.0, 2.0]))
    want1 = float(np.sum(q1[1:] * (np.log(q1[1:]) - lp1[1:])))
    human = jnp.array([3.0, 4.5])
    assert float(jm.sdd_from_logprobs(logp, human, 3, np.array([True, False]))) == pytest.approx(want0, rel=1e-6)
    assert float(jm.sdd_from_logprobs(logp, human, 3)) == pytest.approx((want0 + want1) / 2, rel=1e-6)
    # The probability path can say no more than the smallest normal float32: 87.34 nats.
    probs = jax.nn.softmax(logits, -1)
    got = float(jm.sdd(probs, human, 3, np.array([True, False])))
    assert got == pytest.approx(-math.log(float(np.finfo(np.float32).tiny)), rel=1e-6)
    # Under jit and vmap (weights as bootstrap multiplicities), as the report calls it.
    mult = jnp.array([[1.0, 1.0], [2.0, 0.0], [0.0, 5.0]], jnp.float32)
    f = jax.jit(jax.vmap(lambda w: jm.sdd_from_logprobs(logp, human, 3, weights=w)))
    np.testing.assert_allclose(np.asarray(f(mult)), [(want0 + want1) / 2, want0, want1], rtol=1e-6)
    g = jax.jit(jax.vmap(lambda w: jm.sdd(probs, human, 3, weights=w)))
    assert np.all(np.isfinite(np.asarray(g(mult))))
    # -inf on a score the human distribution does not cover contributes 0; on one it covers, inf.
    lp_inf = jnp.array([[-jnp.inf, jnp.log(0.5), jnp.log(0.5)]], jnp.float32)
    assert float(jm.sdd_from_logprobs(lp_inf, [4.0], 3)) == pytest.approx(math.log(2.0), rel=1e-6)
    assert float(jm.sdd_from_logprobs(lp_inf, [3.5], 3)) == math.inf


def test_sdd_from_logprobs_bad_inputs():
    with pytest.raises(ValueError, match=r"logprobs rows \[1\] are not normalised"):
        jm.sdd_from_logprobs(np.log(np.array([[0.5, 0.5], [0.9, 0.9]], np.float32)), [1.0, 2.0], lo=1)
    with pytest.raises(ValueError, match=r"NaN or \+inf at rows \[0\]"):
        jm.sdd_from_logprobs(np.array([[np.nan, 0.0], [0.0, -np.inf]], np.float32), [1.0, 2.0], lo=1)
    with pytest.raises(ValueError, match=r"outside the score range \[1, 2\] at rows \[1\]"):
        jm.sdd_from_logprobs(np.log(np.full((2, 2), 0.5, np.float32)), [1.0, 2.5], lo=1)
    with pytest.raises(ValueError, match=r"logprobs must be \[N, K\]"):
        jm.sdd_from_logprobs(np.zeros(3, np.float32), [1.0, 2.0, 1.0], lo=1)
    with pytest.raises(ValueError, match="eps must be > 0"):
        jm.sdd(np.full((2, 2), 0.5, np.float32), [1.0, 2.0], lo=1, eps=0.0)


def test_sdd_out_of_range_raises_eagerly_and_clips_under_jit():
    probs = np.full((3, 5), 0.2, np.float32)
    with pytest.raises(ValueError, match=r"outside the score range \[1, 5\] at rows \[0, 2\]"):
        jm.sdd(probs, [0.5, 3.0, 5.5], lo=1)
    clipped = jax.jit(jm.sdd, static_argnames="lo")(probs, jnp.array([0.5, 3.0, 5.5]), lo=1)
    assert float(clipped) == pytest.approx(float(jm.sdd(probs, [1.0, 3.0, 5.0], lo=1)), abs=1e-6)
    # Out-of-range rows outside the mask are fine.
    jm.sdd(probs, [0.5, 3.0, 5.5], 1, np.array([False, True, False]))


def test_sdd_bad_probs():
    with pytest.raises(ValueError, match=r"probs rows \[1\] are not distributions"):
        jm.sdd(np.array([[0.5, 0.5], [0.9, 0.9]], np.float32), [1.0, 2.0], lo=1)
    with pytest.raises(ValueError, match=r"probs must be \[N, K\]"):
        jm.sdd(np.ones(3, np.float32), [1.0, 2.0, 1.0], lo=1)
    with pytest.raises(ValueError, match="human scores has length 2"):
        jm.sdd(np.full((3, 2), 0.5, np.float32), [1.0, 2.0], lo=1)


def test_validity_rate():
    valid = np.array([True, False, True, True, False, True])
    assert float(jm.validity_rate(valid)) == pytest.approx(4 / 6)
    mask = np.array([True, True, False, False, True, True])
    assert float(jm.validity_rate(valid, mask)) == pytest.approx(2 / 4)
    assert float(jax.jit(jm.validity_rate)(valid, mask)) == pytest.approx(0.5)
    with pytest.raises(TypeError, match="valid must be a boolean"):
        jm.validity_rate(np.ones(3))
    with pytest.raises(ValueError, match="selects no rows"):
        jm.validity_rate(valid, np.zeros(6, bool))


# ----------------------------------------------------------------------------- bad inputs


def test_bad_inputs_raise_with_names():
    x = np.arange(20, dtype=np.float32)
    human = x.copy()
    human[[3, 17]] = np.nan
    with pytest.raises(ValueError, match=r"human scores\) contain NaN at rows \[3, 17\]"):
        jm.spearman(x, human)
    # The same NaN rows outside the mask are ignored.
    assert float(jm.spearman(x, human, ~np.isnan(human))) == pytest.approx(1.0)
    with pytest.raises(ValueError, match=r"predictions\) contain inf at rows \[1\]"):
        jm.pearson(np.array([0, np.inf, 2], np.float32), np.arange(3.0))
    with pytest.raises(ValueError, match="has length 19 but expected 20"):
        jm.pearson(x, x[:19])
    with pytest.raises(ValueError, match=r"must be 1-D \[N\]"):
        jm.kendall(x.reshape(4, 5), x.reshape(4, 5))
    with pytest.raises(ValueError, match="selects no rows"):
        jm.mse(x, x, np.zeros(20, bool))
    with pytest.raises(ValueError, match="needs at least 2 selected rows"):
        jm.pearson(x, x, np.arange(20) == 4)
    with pytest.raises(TypeError, match="mask must be a boolean"):
        jm.pearson(x, x, np.ones(20))
    with pytest.raises(ValueError, match="weights must be finite and >= 0"):
        jm.pearson(x, x, weights=-np.ones(20))
    # Shape errors are static, so they raise under jit too.
    with pytest.raises(ValueError, match="has length 19"):
        jax.jit(jm.pearson)(x, x[:19])


def test_bad_group_inputs():
    x = np.arange(12, dtype=np.float32)
    with pytest.raises(ValueError, match=r"groups \[1\] have no rows"):
        jm.grouped("pearson", x, x, np.repeat([0, 2, 3], 4))
    with pytest.raises(ValueError, match=r"outside \[0, 2\) at rows \[8, 9, 10, 11\]"):
        jm.grouped("pearson", x, x, np.repeat([0, 1, 2], 4), num_groups=2)
    with pytest.raises(TypeError, match="encode_groups"):
        jm.grouped("pearson", x, x, np.repeat(["a", "b", "c"], 4))
    with pytest.raises(ValueError, match="no group is usable"):
        jm.grouped("pearson", np.repeat([1.0, 2.0, 3.0], 4), x, np.repeat([0, 1, 2], 4))
    with pytest.raises(ValueError, match="unknown metric 'tau'"):
        jm.grouped("tau", x, x, np.repeat([0, 1, 2], 4))
    with pytest.raises(ValueError, match="num_groups must be given"):
        jax.jit(lambda g: jm.grouped("pearson", x, x, g))(np.repeat([0, 1, 2], 4))
