"""The nested bootstrap (`jaxjudge.select.nested_bootstrap`): selection redone in each resample.

References are independent of the code under test: the report itself (`evaluate_cell`, its
point estimates and chosen hyper-parameters), the library's plain grouped bootstrap
(`bootstrap_distribution`, whose resamples the nested one shares), `grid_search` run on
literally resampled data (repeated rows), and an explicit loop with scipy's Spearman.
"""

from __future__ import annotations

import copy

import jax.numpy as jnp
import numpy as np
import pytest
import scipy.stats as st

from jaxjudge.debias import expected_score, rectify, rectify_adjust
from jaxjudge.metrics import bootstrap_distribution, grouped_metric, spearman
from jaxjudge.prompts import ScoreScale
from jaxjudge.report import CellArrays, MethodOptions, evaluate_cell, make_splits
from jaxjudge.report.cell import grid_predictions
from jaxjudge.report.methods import METHODS, CellContext
from jaxjudge.select import fixed_split, grid_search, kfold_splits, lambda_grid, nested_bootstrap, nested_weights

SCALE = ScoreScale(1, 5)
LAMS = (0.0, 0.5, 1.0, 2.0, 4.0)


def deb_like(seed=0, n_docs=12, per_doc=6):
    """A judge whose candidate distribution leans towards high scores, and a prior correction
    `B` that undoes part of the lean: Deb-R's ``rectify(logits, B, lam)`` over `LAMS`."""
    rng = np.random.default_rng(seed)
    n = n_docs * per_doc
    groups = np.repeat(np.arange(n_docs), per_doc)
    human = np.clip(rng.normal(3, 1, n) + rng.normal(0, 0.7, n_docs)[groups], 1, 5)
    quality = human + rng.normal(0, 1.0, n)
    logits = -((SCALE.values[None] - quality[:, None]) ** 2) / 2.0 + 0.8 * SCALE.values[None]
    logits = logits + rng.normal(0, 0.8, (n, SCALE.size))
    logprobs = logits - np.log(np.exp(logits).sum(1, keepdims=True))
    correction = -0.5 * (SCALE.values - SCALE.values.mean())
    return human, groups, logprobs.astype(np.float32), correction.astype(np.float32)


def predictions(logprobs, correction, lams=LAMS):
    """`[G, N]` Deb-R expected scores at temperature 1, one row per lambda."""
    return np.stack([np.asarray(expected_score(rectify(jnp.asarray(logprobs), jnp.asarray(correction), lam),
                                               SCALE.values, 1.0)) for lam in lams])


def realise(weights, *arrays):
    """Each row repeated as many times as its weight (the literally resampled data)."""
    reps = np.rint(weights).astype(int)
    return [np.repeat(a, reps, axis=-1) for a in arrays]


# -- resamples -------------------------------------------------------------------------------


def test_reported_groups_are_drawn_as_the_reports_bootstrap_draws_them():
    """Same seed: the reported rows' multiplicities equal `bootstrap_distribution`'s."""
    human, groups, _, _ = deb_like()
    identity = lambda w: w  # noqa: E731  (the statistic is the resample's weights)
    for splits in (kfold_splits(groups, 4, 0), fixed_split(groups, [0, 3, 5, 7])):
        report = splits.test.any(0)
        _, plain = bootstrap_distribution(identity, (), groups[report], n_boot=30, seed=7)
        w = nested_weights(groups, splits.dev, splits.test, 30, seed=7)
        np.testing.assert_array_equal(w[:, report], np.asarray(plain))


def test_a_fixed_split_redraws_its_dev_groups_among_themselves():
    human, groups, _, _ = deb_like()
    dev_docs = [0, 3, 5, 7]
    splits = fixed_split(groups, dev_docs)
    w = nested_weights(groups, splits.dev, splits.test, 200, seed=1)
    dev = splits.dev[0]
    per_doc = np.bincount(groups)[0]
    # Whole groups, as many draws as dev groups, and not the test side's draws again.
    assert np.all(w[:, dev].sum(1) == len(dev_docs) * per_doc)
    for d in dev_docs:
        assert np.all(w[:, groups == d] == w[:, groups == d][:, :1])
    assert np.all(w[:, ~dev].sum(1) == (12 - len(dev_docs)) * per_doc)
    # Resampled, not held: a dev group's multiplicity varies, with mean 1 (sd 0.87 / sqrt(200)).
    first = w[:, groups == 0][:, 0]
    assert first.std() > 0.5 and first.mean() == pytest.approx(1.0, abs=0.25)


# -- the point estimate ----------------------------------------------------------------------


@pytest.mark.parametrize("per_group", [False, True])
def test_estimate_and_choice_equal_grid_search_on_the_full_data(per_group):
    human, groups, logprobs, correction = deb_like(seed=3)
    splits = kfold_splits(groups, 4, 0)
    metric = grouped_metric("spearman", groups, 12) if per_group else "spearman"
    res = grid_search(rectify_adjust, lambda_grid(LAMS), human, splits.dev, splits.test, metric,
                      values=SCALE.values, data={"logits": logprobs, "correction": correction})
    pred = predictions(logprobs, correction)[:, None]  # [G, 1, N]
    out = nested_bootstrap({"deb": pred}, human, groups, splits.dev, splits.test, per_group=per_group, n_boot=5)
    np.testing.assert_array_equal(out["deb"].chosen_index, np.asarray(res.chosen_index))
    assert out["deb"].estimate == pytest.approx(float(res.mean_test), abs=1e-6)
    assert len(set(np.asarray(res.chosen_index).tolist())) > 1 or per_group  # folds choose differently


@pytest.fixture(scope="module")
def cell():
    human, groups, logprobs, _ = deb_like(seed=5, n_docs=20, per_doc=8)
    rng = np.random.default_rng(5)
    assistant = (logprobs + rng.normal(0, 1.0, logprobs.shape)).astype(np.float32)
    arrays = CellArrays(scale=SCALE, logprobs=logprobs, human=human, human_range=(1.0, 5.0),
                        groups=np.asarray([f"d{g:02d}" for g in groups]), assistant=assistant)
    return arrays, make_splits("kfold", arrays.groups, n_folds=4, seed=0)


def _options(**kw):
    return MethodOptions(methods=("vanilla", "temperature", "contrastive"), temperatures=(1.0,), greedy=True,
                         metrics=("spearman",), contrastive_lams=(0.1, 0.5), contrastive_temps=(0.5, 1.0, 3.0),
                         n_boot=60, seed=4, **kw)


# The three tests through evaluate_cell compile the report's own bootstrap: 10-70 s each. The
# reports they share are computed once for the module (evaluate_cell is deterministic given its
# options and seed; each test reads its own copy).
_REPORTS: dict = {}


def _report(cell, **kw):
    key = tuple(sorted(kw.items()))
    if key not in _REPORTS:
        arrays, splits = cell
        _REPORTS[key] = evaluate_cell(arrays, splits, _options(**kw))
    return copy.deepcopy(_REPORTS[key])


@pytest.mark.slow
@pytest.mark.parametrize("select_per_group", [False, True])
def test_nested_estimate_is_the_reports_own(cell, select_per_group):
    on = _report(cell, nested=True, select_per_group=select_per_group, per_group=select_per_group)
    name = "spearman_doc" if select_per_group else "spearman"
    tuned = [r for r in on.rows if r["method"] in ("temperature", "contrastive")]
    assert len(tuned) == 4  # two methods, read two ways
    for row in tuned:
        report = row["metrics"][name]
        assert row["nested"]["metric"] == name
        assert row["nested"]["estimate"] == pytest.approx(report["estimate"], abs=1e-5), row["method"]
        assert row["nested"]["low"] < row["nested"]["estimate"] < row["nested"]["high"]
        assert row["delta_nested"]["estimate"] == pytest.approx(row["delta"][name]["estimate"], abs=1e-5)
    con = [r for r in tuned if r["method"] == "contrastive"]
    assert all(r["delta_matched_nested"]["estimate"] == pytest.approx(r["delta_matched"][name]["estimate"], abs=1e-5)
               for r in con)
    assert all("delta_matched_nested" not in r for r in tuned if r["method"] == "temperature")


@pytest.mark.slow
def test_the_option_off_changes_nothing(cell):
    off = _report(cell)
    on = _report(cell, nested=True, select_per_group=False, per_group=False)
    added = {"nested", "delta_nested", "delta_matched_nested"}
    assert not any(added & set(r) for r in off.rows)
    assert [{k: v for k, v in r.items() if k not in added} for r in on.rows] == off.rows


@pytest.mark.slow
def test_grid_predictions_at_the_chosen_point_are_the_reports_predictions(cell):
    arrays, splits = cell
    opts = _options()
    preds = {}
    evaluate_cell(arrays, splits, opts, predictions=preds)
    report = _report(cell)
    row = next(r for r in report.rows if r["method"] == "contrastive" and r["score"] == "expected@1")
    from jaxjudge.data import to_prompt_range  # noqa: PLC0415

    human = to_prompt_range(arrays.human, SCALE.lo, SCALE.hi, src=arrays.human_range)
    cx = CellContext(arrays, opts, human, splits.dev, splits.test, {"priors": {}})
    method = METHODS["contrastive"]
    variant = next(iter(method.variants(cx)))
    grid = grid_predictions(cx, method, variant, ("expected@1", 1.0))  # [G, F, N]
    assert grid.shape == (6, 4, arrays.n)
    lam, t = np.asarray(variant.grid["lam"]), np.asarray(variant.grid["t_main"])
    for f, hp in enumerate(row["hparams"]):
        g = int(np.flatnonzero(np.isclose(lam, hp["lam"]) & np.isclose(t, hp["t_main"]))[0])
        np.testing.assert_allclose(grid[g, f], preds[("contrastive", "expected@1")][f], rtol=1e-6)


# -- inside the resamples --------------------------------------------------------------------


@pytest.mark.parametrize("design", ["kfold", "fixed"])
def test_selection_in_a_resample_is_grid_search_on_the_repeated_rows(design):
    human, groups, logprobs, correction = deb_like(seed=11, n_docs=16)
    splits = kfold_splits(groups, 4, 2) if design == "kfold" else fixed_split(groups, [1, 4, 6, 9, 12, 15])
    pred = predictions(logprobs, correction)[:, None]
    out = nested_bootstrap({"deb": pred}, human, groups, splits.dev, splits.test, n_boot=6, seed=2)["deb"]
    w = nested_weights(groups, splits.dev, splits.test, 6, seed=2)
    chosen = []
    for b in range(6):
        h, lp, dev, test = realise(w[b], human, logprobs.T, splits.dev, splits.test)
        res = grid_search(rectify_adjust, lambda_grid(LAMS), h, dev, test, "spearman", values=SCALE.values,
                          data={"logits": lp.T, "correction": correction})
        np.testing.assert_array_equal(out.chosen_replicates[b], np.asarray(res.chosen_index))
        assert out.replicates[b] == pytest.approx(float(res.mean_test), abs=2e-6)
        chosen += np.asarray(res.chosen_index).tolist()
    assert len(set(chosen)) > 1  # the resamples do not all choose alike


def _loop_reference(pred_gn, human, w, dev, test, metric):
    """Explicit loop: each fold chooses on its repeated dev rows with scipy, scores on test."""
    values = []
    for f in range(dev.shape[0]):
        h_dev, p_dev = realise(w * dev[f], human, pred_gn)
        h_test, p_test = realise(w * test[f], human, pred_gn)
        dev_g = [metric(p, h_dev) for p in p_dev]
        if metric is mse:
            g = int(np.argmin(dev_g))
        else:
            g = int(np.argmax(dev_g))  # the first on ties
        values.append(metric(p_test[g], h_test))
    return float(np.mean(values))


def scipy_spearman(x, y):
    return st.spearmanr(x, y)[0]


def mse(x, y):
    return float(np.mean((x - y) ** 2))


@pytest.mark.parametrize("metric", ["spearman", "mse"])
def test_replicates_equal_an_explicit_loop(metric):
    human, groups, logprobs, correction = deb_like(seed=2)
    splits = fixed_split(groups, [2, 5, 8, 11])
    pred = predictions(logprobs, correction)
    out = nested_bootstrap({"deb": pred[:, None], "vanilla": pred[0]}, human, groups, splits.dev, splits.test,
                           metric, n_boot=25, seed=9)
    w = nested_weights(groups, splits.dev, splits.test, 25, seed=9)
    ref = scipy_spearman if metric == "spearman" else mse
    for b in range(25):
        assert out["deb"].replicates[b] == pytest.approx(
            _loop_reference(pred, human, w[b], splits.dev, splits.test, ref), abs=1e-5)
        assert out["vanilla"].replicates[b] == pytest.approx(
            _loop_reference(pred[:1], human, w[b], splits.dev, splits.test, ref), abs=1e-5)


def test_one_grid_point_is_the_plain_grouped_bootstrap():
    """k-fold resamples every group on both sides; with nothing to choose, the nested
    replicates are the plain bootstrap's of the mean over folds of the test Spearman."""
    human, groups, logprobs, correction = deb_like(seed=4)
    splits = kfold_splits(groups, 3, 1)
    pred = predictions(logprobs, correction, (0.5,))[0]
    test = jnp.asarray(splits.test, jnp.float32)

    def mean_over_folds(p, h, w):
        return jnp.mean(jnp.stack([spearman(p, h, weights=w * test[f]) for f in range(3)]))

    est, plain = bootstrap_distribution(mean_over_folds, (pred, human), groups, n_boot=300, seed=5)
    for form in (pred, pred[None, None]):  # fixed [N] and tuned with a single grid point [1, 1, N]
        out = nested_bootstrap({"p": form}, human, groups, splits.dev, splits.test, n_boot=300, seed=5)["p"]
        assert out.estimate == pytest.approx(float(est), abs=1e-6)
        np.testing.assert_allclose(out.replicates, np.asarray(plain), atol=2e-6)
        assert np.all(out.chosen_replicates == 0)


def test_paired_procedures_share_resamples():
    """A procedure paired with itself differs by exactly 0 in every resample."""
    human, groups, logprobs, correction = deb_like(seed=6)
    splits = kfold_splits(groups, 4, 0)
    pred = predictions(logprobs, correction)[:, None]
    out = nested_bootstrap({"a": pred, "b": pred.copy()}, human, groups, splits.dev, splits.test, n_boot=50)
    np.testing.assert_array_equal(out["a"].replicates, out["b"].replicates)
    again = nested_bootstrap({"b": pred}, human, groups, splits.dev, splits.test, n_boot=50)
    np.testing.assert_array_equal(out["a"].replicates, again["b"].replicates)


# -- bad input -------------------------------------------------------------------------------


def test_bad_input_names_the_field():
    human, groups, logprobs, correction = deb_like()
    splits = kfold_splits(groups, 4, 0)
    pred = predictions(logprobs, correction)[:, None]
    call = lambda procs, **kw: nested_bootstrap(procs, human, groups, splits.dev, splits.test, **kw)  # noqa: E731
    with pytest.raises(ValueError, match="procedure 'deb'.*shape"):
        call({"deb": pred[:, :, :-1]})
    bad = pred.copy()
    bad[2, 0, 5] = np.nan
    with pytest.raises(ValueError, match="procedure 'deb'.*not finite at rows \\[5\\]"):
        call({"deb": bad})
    with pytest.raises(ValueError, match="unknown metric"):
        nested_bootstrap({"deb": pred}, human, groups, splits.dev, splits.test, "spearmann")
    with pytest.raises(ValueError, match="procedures is empty"):
        call({})
    with pytest.raises(ValueError, match="n_boot"):
        call({"deb": pred}, n_boot=0)
    with pytest.raises(TypeError, match="dev_masks must be bool"):
        nested_bootstrap({"deb": pred}, human, groups, splits.dev.astype(int), splits.test)
    with pytest.raises(ValueError, match="human must be"):
        nested_bootstrap({"deb": pred}, human[:-1], groups, splits.dev, splits.test)
    with pytest.raises(ValueError, match="bca"):
        arrays = CellArrays(scale=SCALE, logprobs=logprobs, human=human, human_range=(1.0, 5.0), groups=groups)
        evaluate_cell(arrays, splits, MethodOptions(nested=True, ci_method="bca"))

