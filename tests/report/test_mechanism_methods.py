"""The ``contrastive_prior`` and ``contrastive_other`` report methods (contrastive decoding with its
assistant replaced by the judge's content-free prior, or by a judge of another family): each
fold's choice of (lambda, t_main) and its test metric redone by brute force with numpy and scipy,
the adjusted distribution written out from its definition."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st
from scipy.special import log_softmax, softmax

from jaxjudge.debias import expected_score
from jaxjudge.prompts import ScoreScale
from jaxjudge.report import CellArrays, MethodOptions, evaluate_cell, make_splits
from jaxjudge.report.methods import METHODS, CellContext
from jaxjudge.select import grid_search

SCALE = ScoreScale(1, 5)
LAMS, TEMPS = (0.1, 0.5, 2.0), (0.5, 1.0, 3.0)


def judges(seed=0, n_docs=30, per_doc=4):
    """A main judge with a preference for 4 on top of its judgement, three content-free rows that
    hold mostly that preference, and another judge of its own."""
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    groups = np.repeat([f"doc{i}" for i in range(n_docs)], per_doc)
    human = rng.uniform(1, 5, n)
    pref = np.array([0.0, 0.0, 0.0, 1.5, 0.0])
    main = (-((SCALE.values[None] - human[:, None]) ** 2) / 2 + pref + rng.normal(0, 0.5, (n, 5))).astype(np.float32)
    cf = (pref + rng.normal(0, 0.3, (3, 5))).astype(np.float32)
    other = (-((SCALE.values[None] - 3.0) ** 2) / 4 + rng.normal(0, 0.7, (n, 5))).astype(np.float32)
    return CellArrays(scale=SCALE, logprobs=main, human=human, human_range=(1.0, 5.0), groups=groups,
                      content_free=cf, control=other)


def _by_definition(arrays, name, lam, t, temp=1.0):
    """log_softmax(log_softmax(main / (temp t)) - lam * log q) with q the assistant's distribution at
    temp: the content-free rows' mean probability, or the other judge's own."""
    main = log_softmax(arrays.logprobs.astype(np.float64) / temp / t, -1)
    if name == "contrastive_prior":
        q = np.log(softmax(arrays.content_free.astype(np.float64) / temp, -1).mean(0))[None]
    else:
        q = log_softmax(arrays.control.astype(np.float64) / temp, -1)
    return log_softmax(main - lam * q, -1)


@pytest.fixture(scope="module")
def cell():
    arrays = judges()
    splits = make_splits("kfold", arrays.groups, n_folds=2, seed=0)
    options = MethodOptions(methods=("vanilla", "temperature", "contrastive_prior", "contrastive_other"),
                            temperatures=(1.0,), greedy=False, metrics=("spearman",), contrastive_lams=LAMS,
                            contrastive_temps=TEMPS)
    return arrays, splits, CellContext(arrays, options, arrays.human, np.asarray(splits.dev), np.asarray(splits.test), {})


@pytest.mark.parametrize("name", ["contrastive_prior", "contrastive_other"])
def test_choice_test_metric_and_distribution_match_the_definition(cell, name):
    arrays, splits, cx = cell
    method = METHODS[name]
    (variant,) = method.variants(cx)
    assert variant.name == name and variant.baseline == "temperature"
    for temp in (1.0, 0.5):  # the reading's temperature tempers both inputs first
        data = variant.data((f"expected@{temp}", temp))
        res = grid_search(method.adjust, variant.grid, arrays.human, np.asarray(splits.dev), np.asarray(splits.test),
                          "spearman", values=SCALE.values, data=data)
        grid = [(lam, t) for lam in LAMS for t in TEMPS]  # lambda varies slowest; the first best wins
        for f in range(splits.dev.shape[0]):
            dev, test = np.asarray(splits.dev[f]), np.asarray(splits.test[f])
            scores = [np.exp(_by_definition(arrays, name, lam, t, temp)) @ SCALE.values for lam, t in grid]
            rho = [st.spearmanr(s[dev], arrays.human[dev])[0] for s in scores]
            best = int(np.argmax(rho))
            assert (float(res.chosen["lam"][f]), float(res.chosen["t_main"][f])) == pytest.approx(grid[best])
            want = st.spearmanr(scores[best][test], arrays.human[test])[0]
            assert float(res.test_metric[f]) == pytest.approx(want, abs=1e-5)
        lam, t = grid[5]
        got = method.adjust({"lam": lam, "t_main": t}, data)
        np.testing.assert_allclose(np.asarray(got), _by_definition(arrays, name, lam, t, temp), atol=2e-5)
        np.testing.assert_allclose(np.asarray(expected_score(got, SCALE.values)),
                                   np.exp(_by_definition(arrays, name, lam, t, temp)) @ SCALE.values, atol=2e-5)


def test_the_prior_control_removes_the_shared_preference(cell):
    """With the preference for 4 removed the judge ranks better on every fold: the choice is not
    the grid's smallest lambda (a check on the simulated data, so that the test above compares
    choices that matter)."""
    arrays, splits, cx = cell
    method = METHODS["contrastive_prior"]
    (variant,) = method.variants(cx)
    res = grid_search(method.adjust, variant.grid, arrays.human, np.asarray(splits.dev), np.asarray(splits.test),
                      "spearman", values=SCALE.values, data=variant.data(("expected@1", 1.0)))
    assert set(np.asarray(res.chosen["lam"]).tolist()) - {0.1}


def test_a_cell_without_the_control_arrays_is_refused_by_name(cell):
    arrays, splits, _ = cell
    bare = CellArrays(scale=SCALE, logprobs=arrays.logprobs, human=arrays.human, human_range=(1.0, 5.0),
                      groups=arrays.groups)
    for name, what in (("contrastive_prior", r"content-free arrays \(content_free store\)"),
                       ("contrastive_other", r"the other-family assistant's score arrays \(score store\)")):
        opts = MethodOptions(methods=("vanilla", name), temperatures=(1.0,), greedy=False, n_boot=10)
        with pytest.raises(ValueError, match=rf"method '{name}' needs {what}"):
            evaluate_cell(bare, splits, opts)
    with pytest.raises(ValueError, match=r"control must be \[120, 5\], got \[119, 5\]"):
        CellArrays(scale=SCALE, logprobs=arrays.logprobs, human=arrays.human, human_range=(1.0, 5.0),
                   groups=arrays.groups, control=arrays.control[:-1])
