"""The ``linear_mix`` report method: its choice, test metric and predictions recomputed with numpy and scipy.

The simulated judges share a bias: the main judge reads ``human + b`` and the assistant reads
``b`` (with noise of its own), so subtracting some of the assistant's expected score helps. Each
fold's choice of (w, t_main) is redone here by brute force over the grid, with the mix written
at the score level, ``E_main(t_main) - w * E_asst``.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st
from scipy.special import softmax

from jaxjudge.debias import adjust_per_fold, expected_score
from jaxjudge.prompts import ScoreScale
from jaxjudge.report import CellArrays, MethodOptions, make_splits
from jaxjudge.report.methods import METHODS, CellContext
from jaxjudge.select import grid_search

SCALE = ScoreScale(1, 5)
LAMS, TEMPS = (0.1, 0.5, 2.0), (0.5, 1.0, 3.0)


def shared_bias_judges(seed=0, n_docs=30, per_doc=4):
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    groups = np.repeat([f"doc{i}" for i in range(n_docs)], per_doc)
    human = rng.uniform(1, 5, n)
    bias = rng.normal(0, 1.0, n)

    def judge(centre, width):
        return (-((SCALE.values[None] - centre[:, None]) ** 2) / (2 * width**2)
                + rng.normal(0, 0.5, (n, SCALE.size))).astype(np.float32)

    main = judge(human + bias, 1.0)
    assistant = judge(3.0 + bias + rng.normal(0, 0.3, n), 1.0)
    return CellArrays(scale=SCALE, logprobs=main, human=human, human_range=(1.0, 5.0), groups=groups,
                      assistant=assistant)


@pytest.fixture(scope="module")
def cell():
    """The family's variant from the registry, searched as `evaluate_cell` searches it (the
    bootstrap left out: compiling it would take most of this file's time)."""
    arrays = shared_bias_judges()
    splits = make_splits("kfold", arrays.groups, n_folds=2, seed=0)
    options = MethodOptions(methods=("vanilla", "temperature", "linear_mix"), temperatures=(1.0,), greedy=False,
                            metrics=("spearman",), contrastive_lams=LAMS, contrastive_temps=TEMPS)
    dev, test = np.asarray(splits.dev), np.asarray(splits.test)
    cx = CellContext(arrays, options, arrays.human, dev, test, {})
    method = METHODS["linear_mix"]
    (variant,) = method.variants(cx)
    data = variant.data(("expected@1", 1.0))
    res = grid_search(method.adjust, variant.grid, arrays.human, dev, test, "spearman", values=SCALE.values,
                      data=data)
    pred = np.asarray(expected_score(adjust_per_fold(res.chosen, data, adjust_fn=method.adjust), SCALE.values))
    return arrays, splits, variant, res, pred


def _score_level_mix(arrays, w, t):
    values = SCALE.values.astype(np.float64)
    e_main = softmax(arrays.logprobs.astype(np.float64) / t, -1) @ values
    e_asst = softmax(arrays.assistant.astype(np.float64), -1) @ values
    return e_main - w * e_asst


def test_choice_and_test_metric_match_a_brute_force_search(cell):
    arrays, splits, variant, res, _ = cell
    assert variant.name == "linear_mix" and variant.baseline == "temperature"
    # w varies slowest, as in the report's grid; the first best point wins ties.
    grid = [(w, t) for w in LAMS for t in TEMPS]
    for f in range(splits.dev.shape[0]):
        dev, test = splits.dev[f], splits.test[f]
        dev_rho = [st.spearmanr(_score_level_mix(arrays, w, t)[dev], arrays.human[dev])[0] for w, t in grid]
        w, t = grid[int(np.argmax(dev_rho))]
        assert (float(res.chosen["w"][f]), float(res.chosen["t_main"][f])) == (w, t)
        want = st.spearmanr(_score_level_mix(arrays, w, t)[test], arrays.human[test])[0]
        assert float(res.test_metric[f]) == pytest.approx(want, abs=1e-5)
    # The shared bias is worth subtracting: the choice is not w = 0.1, the grid's smallest.
    assert set(np.asarray(res.chosen["w"]).tolist()) - {0.1}


def test_predictions_are_the_mixture_expected_score(cell):
    arrays, _, _, res, pred = cell
    for f in range(pred.shape[0]):
        w, t = float(res.chosen["w"][f]), float(res.chosen["t_main"][f])
        want = (_score_level_mix(arrays, w, t) + w * (SCALE.lo + SCALE.hi)) / (1 + w)
        np.testing.assert_allclose(pred[f], want, atol=1e-5)
