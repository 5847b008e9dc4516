"""The score-level linear mix against numpy: the mixture, its expected score, its ranking."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import softmax

from jaxjudge.debias import expected_score, linear_mix, linear_mix_adjust
from jaxjudge.prompts import ScoreScale

SCALE = ScoreScale(2, 6)  # lo + hi = 8: the reversed assistant's expected score is 8 - E_asst


def _arrays(seed=0, n=40):
    rng = np.random.default_rng(seed)
    # Unnormalised, with a per-row offset, as the engine's full-vocabulary log-probabilities are.
    main = rng.normal(0, 2, (n, SCALE.size)) - rng.uniform(3, 9, (n, 1))
    asst = rng.normal(0, 2, (n, SCALE.size)) - rng.uniform(3, 9, (n, 1))
    return main.astype(np.float32), asst.astype(np.float32)


@pytest.mark.parametrize("w, t", [(0.0, 1.0), (0.5, 1.0), (2.0, 0.25), (5.0, 20.0)])
def test_mixture_and_its_expected_score(w, t):
    main, asst = _arrays()
    values = SCALE.values.astype(np.float64)
    p_main = softmax(main.astype(np.float64) / t, -1)
    p_asst = softmax(asst.astype(np.float64), -1)
    # By hand: candidate k gets p_main(k) and w times the assistant's probability of K - 1 - k.
    q = np.empty_like(p_main)
    for k in range(SCALE.size):
        q[:, k] = (p_main[:, k] + w * p_asst[:, SCALE.size - 1 - k]) / (1 + w)
    got = np.asarray(linear_mix(main, asst, w, t), np.float64)
    np.testing.assert_allclose(np.exp(got), q, atol=1e-6)
    np.testing.assert_allclose(np.exp(got).sum(-1), 1.0, atol=1e-6)
    # Its expected score is the affine map of E_main - w * E_asst the docstring states.
    e_main, e_asst = p_main @ values, p_asst @ values
    mix = e_main - w * e_asst
    want = (mix + w * (SCALE.lo + SCALE.hi)) / (1 + w)
    np.testing.assert_allclose(np.asarray(expected_score(got, values)), want, atol=1e-5)
    # So it ranks the rows as the score-level mix does.
    np.testing.assert_array_equal(np.argsort(np.asarray(expected_score(got, values)), kind="stable"),
                                  np.argsort(want, kind="stable"))


def test_zero_weight_is_the_main_judge_at_its_temperature():
    main, asst = _arrays(seed=1)
    got = np.asarray(linear_mix(main, asst, 0.0, 3.0))
    np.testing.assert_allclose(got, np.log(softmax(main.astype(np.float64) / 3.0, -1)), atol=1e-5)


def test_adjust_reads_its_grid_point():
    main, asst = _arrays(seed=2)
    params = {"w": np.float32(1.5), "t_main": np.float32(2.0)}
    np.testing.assert_allclose(np.asarray(linear_mix_adjust(params, {"main": main, "asst": asst})),
                               np.asarray(linear_mix(main, asst, 1.5, 2.0)), atol=1e-6)
