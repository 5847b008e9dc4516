"""Debiasing functions against hand-computed cases, numpy/scipy references and invariances."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import scipy.stats
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jaxjudge import debias

VALUES = np.arange(1.0, 6.0, dtype=np.float32)  # a 1..5 scale


def _logits(n=6, k=5, seed=0):
    return np.random.default_rng(seed).normal(0.0, 2.0, (n, k)).astype(np.float32)


# --- scores ---------------------------------------------------------------------------------


def test_renormalize_matches_scipy_log_softmax():
    x = _logits()
    for t in (1.0, 0.2, 3.0):
        np.testing.assert_allclose(
            debias.renormalize(x, t), scipy.special.log_softmax(x / t, axis=-1), atol=1e-5
        )


def test_expected_and_greedy_score_hand_case():
    # Probabilities 0.1, 0.2, 0.3, 0.4 (as log-probabilities with an arbitrary offset).
    lp = np.log(np.array([[0.1, 0.2, 0.3, 0.4]])) - 7.0
    vals = np.array([1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(debias.expected_score(lp, vals), [3.0], atol=1e-5)
    # At T = 0.2 the probabilities are p^5 / sum p^5.
    p5 = np.array([0.1, 0.2, 0.3, 0.4]) ** 5
    np.testing.assert_allclose(
        debias.expected_score(lp, vals, 0.2), [p5 @ vals / p5.sum()], atol=1e-5
    )
    np.testing.assert_allclose(debias.greedy_score(lp, vals), [4.0])
    # Ties go to the lowest candidate.
    np.testing.assert_allclose(debias.greedy_score(np.zeros((1, 4)), vals), [1.0])


# --- prior corrections ----------------------------------------------------------------------


def test_prior_correction_hand_case_and_clamp():
    prior = np.array([0.5, 0.25, 0.25, 0.0])
    b = np.asarray(debias.prior_correction(prior))
    expect = np.log(0.25) - np.log([0.5, 0.25, 0.25, 1e-12])
    np.testing.assert_allclose(b, expect, rtol=1e-5)
    assert np.isfinite(b).all() and b[3] == pytest.approx(np.log(0.25) + 12 * np.log(10), rel=1e-5)
    np.testing.assert_allclose(debias.prior_correction(np.full(5, 0.2)), np.zeros(5), atol=1e-6)


def test_rectify_identity_cases():
    x = _logits()
    ref = scipy.special.log_softmax(x, axis=-1)
    b = debias.prior_correction(np.array([0.6, 0.1, 0.1, 0.1, 0.1]))
    np.testing.assert_allclose(debias.rectify(x, b, 0.0), ref, atol=1e-5)
    uniform_b = debias.prior_correction(np.full(5, 0.2))
    for lam in (0.3, 1.0, 2.5):
        np.testing.assert_allclose(debias.rectify(x, uniform_b, lam), ref, atol=1e-5)


def test_rectify_lam_one_makes_the_prior_uniform():
    prior = np.array([0.6, 0.2, 0.1, 0.05, 0.05])
    out = debias.rectify(np.log(prior)[None], debias.prior_correction(prior), 1.0)
    np.testing.assert_allclose(np.exp(out), np.full((1, 5), 0.2), atol=1e-6)


def test_rectify_vmaps_over_a_lambda_grid():
    x = _logits()
    b = debias.prior_correction(np.array([0.3, 0.3, 0.2, 0.1, 0.1]))
    lams = jnp.linspace(0.0, 2.0, 7)
    grid = jax.jit(jax.vmap(debias.rectify, in_axes=(None, None, 0)))(x, b, lams)
    for i, lam in enumerate(np.asarray(lams)):
        ref = scipy.special.log_softmax(x + lam * np.asarray(b), axis=-1)
        np.testing.assert_allclose(grid[i], ref, atol=1e-5)


def test_adjust_shared_and_per_example_corrections():
    x = _logits()
    rng = np.random.default_rng(1)
    shared = rng.normal(size=(2, 5)).astype(np.float32)
    lams = np.array([0.5, -1.5], np.float32)
    ref = scipy.special.log_softmax(x + 0.5 * shared[0] - 1.5 * shared[1], axis=-1)
    np.testing.assert_allclose(debias.adjust(x, shared, lams), ref, atol=1e-5)
    # Contrastive decoding as a per-example correction: B = -log_softmax(assistant).
    asst = _logits(seed=2)
    per_ex = -scipy.special.log_softmax(asst, axis=-1)[None]  # [1, N, K]
    np.testing.assert_allclose(
        debias.adjust(x, per_ex, np.array([0.7])), debias.contrastive(x, asst, 0.7), atol=1e-5
    )
    with pytest.raises(ValueError, match="lams"):
        debias.adjust(x, shared, np.array([1.0, 2.0, 3.0]))


def test_latent_prior_hand_case():
    # Log-probabilities normalised over a full vocabulary: the candidates hold 0.4 and 0.4 of the
    # mass; over the candidates they are [0.5, 0.5] and [0.75, 0.25].
    lp = np.log(np.array([[0.2, 0.2], [0.3, 0.1]]))
    np.testing.assert_allclose(debias.latent_prior(lp), [0.625, 0.375], atol=1e-6)
    np.testing.assert_allclose(
        debias.latent_prior(lp, mask=np.array([False, True])), [0.75, 0.25], atol=1e-6
    )


def test_least_perplexity():
    nll = np.array([3.0, 1.0, 2.0, 1.0, 5.0])
    np.testing.assert_array_equal(debias.least_perplexity(nll, 2), [1, 3])
    np.testing.assert_array_equal(debias.least_perplexity(nll, tp=3), [1, 3, 2])
    with pytest.raises(ValueError, match="tp"):
        debias.least_perplexity(nll, 6)


# --- contrastive ----------------------------------------------------------------------------


def test_contrastive_lam_zero_is_the_main_distribution():
    main, asst = _logits(seed=3), _logits(seed=4)
    for t in (1.0, 0.7):
        np.testing.assert_allclose(
            debias.contrastive(main, asst, 0.0, t_main=t, t_asst=2.0),
            scipy.special.log_softmax(main / t, axis=-1),
            atol=1e-5,
        )


def test_contrastive_hand_case():
    # Main [0.5, 0.3, 0.2], assistant [0.7, 0.2, 0.1] (each with a full-vocabulary offset).
    main = np.log(np.array([[0.5, 0.3, 0.2]])) - 3.0
    asst = np.log(np.array([[0.7, 0.2, 0.1]])) - 1.0
    raw = np.array([0.5, 0.3, 0.2]) / np.array([0.7, 0.2, 0.1]) ** 0.5
    np.testing.assert_allclose(
        np.exp(debias.contrastive(main, asst, 0.5)), [raw / raw.sum()], atol=1e-6
    )
    # Temperatures divide each model's logits before its own renormalisation.
    pm = np.array([0.5, 0.3, 0.2]) ** (1 / 0.5)
    pa = np.array([0.7, 0.2, 0.1]) ** (1 / 2.0)
    raw = (pm / pm.sum()) / (pa / pa.sum())
    np.testing.assert_allclose(
        np.exp(debias.contrastive(main, asst, 1.0, t_main=0.5, t_asst=2.0)),
        [raw / raw.sum()],
        atol=1e-6,
    )


def test_contrastive_plausibility_constraint_hand_case():
    # Main logits [2, 1, -1]: probabilities relative to the largest 1, e^-1 = 0.37, e^-3 = 0.050.
    # Assistant [3, 1, -3]. With lam = 1 the contrastive score is main - assistant (+ a constant
    # per model): [-1, 0, 2], so the unconstrained argmax is candidate 2, which the main model
    # finds implausible.
    main = np.array([[2.0, 1.0, -1.0]], np.float32) - 4.0  # any per-example offset
    asst = np.array([[3.0, 1.0, -3.0]], np.float32) + 2.0
    free = np.asarray(debias.contrastive(main, asst, 1.0))
    assert int(np.argmax(free)) == 2
    # alpha = 0 is exactly today's formula.
    ref = jax.nn.log_softmax(jax.nn.log_softmax(main, -1) - 1.0 * jax.nn.log_softmax(asst, -1), -1)
    np.testing.assert_array_equal(np.asarray(debias.contrastive(main, asst, 1.0, alpha=0.0)), np.asarray(ref))
    np.testing.assert_array_equal(free, np.asarray(ref))
    # alpha = 0.1 > e^-3: candidate 2 is excluded, the argmax moves to candidate 1, and the
    # remaining two are renormalised between themselves.
    out = np.asarray(debias.contrastive(main, asst, 1.0, alpha=0.1))
    assert out[0, 2] == -np.inf and int(np.argmax(out)) == 1
    np.testing.assert_allclose(np.exp(out[0, :2]), scipy.special.softmax([-1.0, 0.0]), atol=1e-6)
    # alpha = 0.04 < e^-3 keeps it; alpha = 0.5 > e^-1 keeps only the main model's argmax.
    np.testing.assert_allclose(debias.contrastive(main, asst, 1.0, alpha=0.04), free, atol=1e-6)
    only = np.asarray(debias.contrastive(main, asst, 1.0, alpha=0.5))
    np.testing.assert_allclose(only, [[0.0, -np.inf, -np.inf]])
    # The threshold reads the main model at its temperature: at t_main = 3 the ratio of
    # candidate 2 is e^-1 = 0.37, above alpha = 0.1, so it stays plausible.
    hot = np.asarray(debias.contrastive(main, asst, 1.0, t_main=3.0, alpha=0.1))
    assert np.isfinite(hot).all()
    # Traced alpha (vmapped over a grid) gives the same as the scalar calls.
    grid = jax.vmap(lambda a: debias.contrastive(main, asst, 1.0, alpha=a))(jnp.asarray([0.0, 0.1]))
    np.testing.assert_array_equal(np.asarray(grid[0]), free)
    np.testing.assert_array_equal(np.asarray(grid[1]), out)


# --- calibration baselines ------------------------------------------------------------------


def test_contextual_calibration_hand_case():
    cf = np.log(np.array([[0.5, 0.3, 0.2], [0.3, 0.5, 0.2]]))  # mean prior [0.4, 0.4, 0.2]
    np.testing.assert_allclose(debias.contextual_prior(cf), [0.4, 0.4, 0.2], atol=1e-6)
    x = np.log(np.array([[0.2, 0.4, 0.4]]))  # / prior = [0.5, 1, 2]
    np.testing.assert_allclose(
        np.exp(debias.contextual_calibration(x, cf)), [[1 / 7, 2 / 7, 4 / 7]], atol=1e-6
    )
    np.testing.assert_allclose(
        debias.contextual_calibration(x, cf, lam=0.0), np.log([[0.2, 0.4, 0.4]]), atol=1e-6
    )


def test_batch_calibration_hand_case():
    x = np.log(np.array([[0.6, 0.4], [0.2, 0.8]]))  # mean prediction [0.4, 0.6]
    np.testing.assert_allclose(debias.batch_prior(x), [0.4, 0.6], atol=1e-6)
    r0 = np.array([0.6 / 0.4, 0.4 / 0.6])
    r1 = np.array([0.2 / 0.4, 0.8 / 0.6])
    np.testing.assert_allclose(
        np.exp(debias.batch_calibration(x)), [r0 / r0.sum(), r1 / r1.sum()], atol=1e-6
    )
    # Prior from row 0 only: row 0 becomes uniform.
    out = np.exp(debias.batch_calibration(x, mask=np.array([True, False])))
    np.testing.assert_allclose(out[0], [0.5, 0.5], atol=1e-6)


def test_rescale_scores_bin_centres_and_errors():
    np.testing.assert_allclose(
        debias.rescale_scores(np.array([1.0, 3.0, 3.7, 5.0]), VALUES),
        [0.1, 0.5, 0.64, 0.9],
        atol=1e-6,
    )
    # A 0..10 scale in steps of 0.5 (21 candidates): 0 -> 1/42, 10 -> 41/42.
    vals = np.arange(0.0, 10.5, 0.5)
    np.testing.assert_allclose(
        debias.rescale_scores(np.array([0.0, 10.0]), vals), [1 / 42, 41 / 42], atol=1e-6
    )
    with pytest.raises(ValueError, match="row 1"):
        debias.rescale_scores(np.array([2.0, 5.5]), VALUES)
    with pytest.raises(ValueError, match="evenly spaced"):
        debias.rescale_scores(np.array([2.0]), np.array([1.0, 2.0, 4.0]))


def test_beta_mle_recovers_parameters_and_matches_scipy():
    u = np.random.default_rng(0).beta(2.0, 5.0, 5000)
    fit = debias.fit_beta(u.astype(np.float32))
    assert abs(float(fit.a) - 2.0) < 0.2 and abs(float(fit.b) - 5.0) < 0.5
    a_ref, b_ref, _, _ = scipy.stats.beta.fit(u, floc=0, fscale=1)
    np.testing.assert_allclose([fit.a, fit.b], [a_ref, b_ref], rtol=5e-4)
    nll_ref = -scipy.stats.beta.logpdf(u, a_ref, b_ref).mean()
    np.testing.assert_allclose(fit.nll, nll_ref, atol=1e-4)


def test_beta_mle_mask_equals_subset_and_rejects_bad_data():
    u = np.random.default_rng(1).beta(0.8, 1.5, 400).astype(np.float32)
    mask = np.arange(400) % 3 == 0
    full = debias.fit_beta(u, mask)
    sub = debias.fit_beta(u[mask])
    np.testing.assert_allclose([full.a, full.b], [sub.a, sub.b], rtol=1e-4)
    with pytest.raises(ValueError, match="row 2"):
        debias.fit_beta(np.array([0.2, 0.5, 1.0], np.float32))


def test_beta_candidate_prior_is_cdf_differences():
    q = np.asarray(debias.beta_candidate_prior(2.5, 1.3, 5))
    ref = np.diff(scipy.stats.beta.cdf(np.linspace(0, 1, 6), 2.5, 1.3))
    np.testing.assert_allclose(q, ref, atol=1e-6)
    assert q.sum() == pytest.approx(1.0, abs=1e-6)


def test_human_prior_matches_scipy_pipeline():
    rng = np.random.default_rng(2)
    human = np.clip(np.round(rng.normal(3.8, 0.9, 800) * 3) / 3, 1.0, 5.0)  # means of 3 raters
    q = np.asarray(debias.human_prior(human, VALUES))
    u = (human - 1.0 + 0.5) / 5.0
    a, b, _, _ = scipy.stats.beta.fit(u, floc=0, fscale=1)
    ref = np.diff(scipy.stats.beta.cdf(np.linspace(0, 1, 6), a, b))
    np.testing.assert_allclose(q, ref, atol=1e-3)


def test_distribution_calibration_hand_case():
    x = np.log(np.array([[0.6, 0.3, 0.1], [0.2, 0.5, 0.3]]))  # marginal p = [0.4, 0.4, 0.2]
    q = np.array([0.2, 0.3, 0.5])
    w = q / np.array([0.4, 0.4, 0.2])
    ref = np.exp(x) * w
    np.testing.assert_allclose(
        np.exp(debias.distribution_calibration(x, q)),
        ref / ref.sum(-1, keepdims=True),
        atol=1e-6,
    )
    # When the judge's marginal already equals q, nothing changes.
    np.testing.assert_allclose(
        debias.distribution_calibration(x, np.array([0.4, 0.4, 0.2])), x, atol=1e-6
    )


# --- invariance to a per-example constant (hypothesis) --------------------------------------

_N, _K = 4, 5
_logit_arrays = hnp.arrays(np.float32, (_N, _K), elements=st.floats(-15, 15, width=32))
_shifts = hnp.arrays(np.float32, (_N, 1), elements=st.floats(-40, 40, width=32))
_B = debias.prior_correction(np.array([0.5, 0.2, 0.15, 0.1, 0.05]))
_Q = np.array([0.1, 0.2, 0.3, 0.25, 0.15], np.float32)


@jax.jit
def _all_adjustments(x, asst, cf):
    """Every adjustment of x (with the assistant / content-free arrays that go with it)."""
    return jnp.stack([
        debias.renormalize(x, 0.2),
        debias.rectify(x, _B, 0.8),
        debias.adjust(x, jnp.stack([_B, -_B ** 2]), jnp.array([0.4, 0.1])),
        debias.contrastive(x, asst, 0.6, t_main=0.7, t_asst=1.3),
        debias.contextual_calibration(x, cf),
        debias.batch_calibration(x),
        debias.distribution_calibration(x, _Q),
        jnp.broadcast_to(debias.latent_prior(x), x.shape),
        jnp.broadcast_to(debias.expected_score(x, VALUES, 0.2)[:, None], x.shape),
    ])


@settings(max_examples=40, deadline=None)
@given(x=_logit_arrays, asst=_logit_arrays, cf=_logit_arrays, c1=_shifts, c2=_shifts, c3=_shifts)
def test_adjustments_invariant_to_per_example_constants(x, asst, cf, c1, c2, c3):
    base = _all_adjustments(x, asst, cf)
    shifted = _all_adjustments(x + c1, asst + c2, cf + c3)
    np.testing.assert_allclose(shifted, base, atol=2e-4, rtol=1e-4)
