"""The ``ensemble`` control: its per-fold fit against scipy's least squares, and its predictions
against the fitted linear model's (Spearman and Pearson equal, by construction)."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.linalg
import scipy.stats as st
from scipy.special import softmax

from jaxjudge.debias import expected_score
from jaxjudge.prompts import ScoreScale
from jaxjudge.report import CellArrays, MethodOptions, make_splits
from jaxjudge.report.methods import METHODS, CellContext
from jaxjudge.report.methods.ensemble import ensemble_fit, ensemble_mixture

SCALE = ScoreScale(1, 5)


def two_judges(seed=0, n_docs=40, per_doc=3, asst_sign=-1.0):
    """A main judge reading ``human + bias``; an assistant reading ``bias - human / 2`` (the best
    linear use of both subtracts some of it) or ``human / 2`` plus noise of its own (adds some)."""
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    groups = np.repeat([f"doc{i}" for i in range(n_docs)], per_doc)
    human = rng.uniform(1, 5, n)
    bias = rng.normal(0, 1.0, n)

    def judge(centre):
        return (-((SCALE.values[None] - centre[:, None]) ** 2) / 2.0 + rng.normal(0, 0.4, (n, SCALE.size))
                ).astype(np.float32)

    main = judge(human + bias)
    own = bias if asst_sign < 0 else rng.normal(0, 1.0, n)
    assistant = judge(3.0 + asst_sign * (human - 3.0) / 2 + own)
    return CellArrays(scale=SCALE, logprobs=main, human=human, human_range=(1.0, 5.0), groups=groups,
                      assistant=assistant)


def _expected(logits, t=1.0):
    return softmax(np.asarray(logits, np.float64) / t, -1) @ SCALE.values.astype(np.float64)


@pytest.mark.parametrize("asst_sign", [-1.0, 1.0])
def test_fit_and_predictions_match_scipy_least_squares(asst_sign):
    arrays = two_judges(asst_sign=asst_sign)
    splits = make_splits("kfold", arrays.groups, n_folds=2, seed=0)
    options = MethodOptions(methods=("vanilla", "ensemble"), temperatures=(1.0,), greedy=False, metrics=("spearman",))
    dev, test = np.asarray(splits.dev), np.asarray(splits.test)
    cx = CellContext(arrays, options, arrays.human, dev, test, {})
    (variant,) = METHODS["ensemble"].variants(cx)
    adj = np.asarray(variant.fixed(("expected@1", 1.0)))  # [F, N, K]
    e_main, e_asst = _expected(arrays.logprobs), _expected(arrays.assistant)
    for f in range(dev.shape[0]):
        x = np.stack([e_main, e_asst, np.ones_like(e_main)], 1)
        coef, *_ = scipy.linalg.lstsq(x[dev[f]], arrays.human[dev[f]])
        got = variant.hparams[f]
        assert [got["a_main"], got["b_asst"], got["c"]] == pytest.approx(coef, abs=1e-4)
        assert np.sign(coef[1]) == np.sign(asst_sign)
        want = x[test[f]] @ coef  # the linear model's test predictions
        pred = np.asarray(expected_score(adj[f], SCALE.values))[test[f]]
        assert st.spearmanr(pred, arrays.human[test[f]])[0] == pytest.approx(
            st.spearmanr(want, arrays.human[test[f]])[0], abs=1e-5)
        assert st.pearsonr(pred, arrays.human[test[f]])[0] == pytest.approx(
            st.pearsonr(want, arrays.human[test[f]])[0], abs=1e-5)


def test_mixture_expected_score_is_the_affine_map():
    rng = np.random.default_rng(3)
    main = np.log(softmax(rng.normal(size=(7, SCALE.size)), -1))
    asst = np.log(softmax(rng.normal(size=(7, SCALE.size)), -1))
    e_m, e_a = _expected(main), _expected(asst)
    lo_hi = SCALE.values[0] + SCALE.values[-1]
    for a, b in ((0.7, -0.4), (-0.2, 0.5), (1.0, 0.0), (0.0, -2.0)):
        got = np.asarray(expected_score(ensemble_mixture(main, asst, a, b), SCALE.values))
        # (|a| E_main' + |b| E_asst') / (|a| + |b|), E' = lo + hi - E where the coefficient is negative
        m = e_m if a >= 0 else lo_hi - e_m
        s = e_a if b >= 0 else lo_hi - e_a
        assert got == pytest.approx((abs(a) * m + abs(b) * s) / (abs(a) + abs(b)), abs=1e-6)
    assert np.asarray(ensemble_mixture(main, asst, 0.0, 0.0)) == pytest.approx(main)


def test_fit_of_constant_assistant_is_minimum_norm():
    e_main = np.array([1.0, 2.0, 3.0, 4.0])
    human = 2 * e_main + 1
    coef = ensemble_fit(e_main, np.full(4, 2.0), human, np.ones(4, bool))
    # collinear with the intercept: the pseudo-inverse's minimum-norm split of the constant
    want = np.linalg.lstsq(np.stack([e_main, np.full(4, 2.0), np.ones(4)], 1), human, rcond=None)[0]
    assert coef == pytest.approx(want, abs=1e-9)
    assert coef[0] == pytest.approx(2.0)
