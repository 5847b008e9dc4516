"""Batch calibration with a strength chosen on dev (``batch_strength``), against a numpy and
scipy computation written out here, and its options in the config."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import scipy.stats as st
from scipy.special import log_softmax, softmax

from experiments.registry import SMOLLM2
from jaxjudge.experiment import ConfigError, ExperimentConfig, TaskSpec, with_overrides
from jaxjudge.report import evaluate_cell
from jaxjudge.report.cell_inputs import MethodOptions, make_splits
from jaxjudge.report.methods import METHODS, Role, role_of
from jaxjudge.report.methods.batch_strength import BatchStrengthOptions

from tests.report.test_report import simulated_judge


def _by_hand(logprobs, values, human, dev, test, strengths, t):
    """Per fold: the strength with the best dev Spearman, and the test Spearman there."""
    lt = log_softmax(logprobs / t, axis=-1)
    prior = softmax(lt, axis=-1).mean(0)  # every item of the cell, no label
    b = -np.log(len(values)) - np.log(np.maximum(prior, 1e-12))
    preds = [softmax(lt + g * b, axis=-1) @ values for g in strengths]
    out = []
    for d, s in zip(dev, test):
        dev_rho = [st.spearmanr(p[d], human[d])[0] for p in preds]
        best = int(np.argmax(dev_rho))
        out.append((strengths[best], max(dev_rho), st.spearmanr(preds[best][s], human[s])[0], dev_rho))
    return out


# (At T = 0.2 this judge's expected scores come within float32 rounding of each other, and
# ties there make a float64 Spearman differ in the third decimal.)
@pytest.mark.parametrize("t", [0.5, 1.0])
def test_strength_is_chosen_on_dev_as_a_hand_computation_says(t):
    arrays = simulated_judge(seed=3, n_docs=10, per_doc=8, bias=2.0)
    arrays = dataclasses.replace(arrays, valid=np.ones(arrays.n, bool))
    splits = make_splits("kfold", arrays.groups, n_folds=2, seed=0)
    # Without 0 in the grid (this simulated judge's dev data choose 0, the vanilla judge, over
    # any correction), so that the adjustment itself is compared.
    strengths = (0.25, 0.5, 1.0, 1.5, 3.0)
    opts = MethodOptions(methods=("vanilla", "batch_strength"), temperatures=(t,), greedy=False, n_boot=20,
                         family_options=(("batch_strength", BatchStrengthOptions(strengths)),))
    rep = evaluate_cell(arrays, splits, opts)
    row = next(r for r in rep.rows if r["method"] == "batch_strength")
    human = np.asarray(arrays.human, float)
    hand = _by_hand(np.asarray(arrays.logprobs, float), arrays.scale.values, human, splits.dev, splits.test,
                    strengths, t)
    checked = 0
    for i, (g, dev_rho, test_rho, all_dev) in enumerate(hand):
        chosen = row["hparams"][i]["lam"]
        # The chosen strength reaches the best dev Spearman (ties may pick either point).
        assert all_dev[strengths.index(chosen)] == pytest.approx(dev_rho, abs=1e-5)
        assert row["dev_metric"][i] == pytest.approx(dev_rho, abs=1e-5)
        if chosen == g:
            assert row["test_metric"][i] == pytest.approx(test_rho, abs=1e-5)
            checked += 1
    assert checked > 0
    assert rep.aux["grids"][f"batch_strength|expected@{t:g}"]["params"]["lam"] == list(strengths)
    assert row["delta"] is not None and role_of("batch_strength") is Role.METHOD


def test_strength_zero_is_the_vanilla_judge_and_one_is_batch_calibration_over_every_item():
    arrays = simulated_judge(seed=1, n_docs=8, per_doc=6)
    splits = make_splits("kfold", arrays.groups, n_folds=2, seed=0)
    preds = {}
    for g in (0.0, 1.0):
        opts = MethodOptions(methods=("vanilla", "batch_strength"), temperatures=(1.0,), greedy=False, n_boot=20,
                             family_options=(("batch_strength", BatchStrengthOptions((g,))),))
        out: dict = {}
        evaluate_cell(arrays, splits, opts, predictions=out)
        preds[g] = out[("batch_strength", "expected@1")]
        vanilla = out[("vanilla", "expected@1")]
    np.testing.assert_allclose(preds[0.0], vanilla, atol=1e-5)
    lp = log_softmax(np.asarray(arrays.logprobs, float), axis=-1)
    prior = softmax(lp, axis=-1).mean(0)
    by_hand = softmax(lp - np.log(prior), axis=-1) @ arrays.scale.values
    np.testing.assert_allclose(preds[1.0], np.broadcast_to(by_hand, preds[1.0].shape), atol=1e-4)


def test_the_config_sets_the_grid_and_refuses_bad_options(tmp_path):
    base = dict(name="bs", models=(SMOLLM2,), tasks=(TaskSpec("summeval", ("coherence",), data="embedded"),),
                methods=("vanilla", "batch_strength"), store_root=str(tmp_path / "s"))
    cfg = ExperimentConfig(**base)
    assert cfg.family_options() == {"batch_strength": BatchStrengthOptions()}
    assert BatchStrengthOptions().strengths[0] == 0.0 and 1.0 in BatchStrengthOptions().strengths
    cfg = with_overrides(cfg, ["method_options={'batch_strength': {'strengths': [0, 0.5, 2]}}"])
    assert cfg.family_options()["batch_strength"].strengths == (0.0, 0.5, 2.0)
    assert MethodOptions.from_config(cfg, cfg.tasks[0]).family("batch_strength", BatchStrengthOptions).strengths == (
        0.0, 0.5, 2.0)
    with pytest.raises(ConfigError, match=r"method_options\['batch_strength'\]: unknown field 'strenghts'.*"
                                          r"did you mean 'strengths'"):
        ExperimentConfig(**base, method_options={"batch_strength": {"strenghts": [1.0]}})
    with pytest.raises(ConfigError, match=r"method_options\['batch_strength'\]\.strengths\[0\]: must be >= 0"):
        ExperimentConfig(**base, method_options={"batch_strength": {"strengths": [-1.0]}})
    with pytest.raises(ConfigError, match=r"'batch_strenght' is no configured method with options.*"
                                          r"did you mean 'batch_strength'"):
        ExperimentConfig(**base, method_options={"batch_strenght": {}})
    assert METHODS["batch_strength"].options is BatchStrengthOptions
