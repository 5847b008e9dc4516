"""The report's statistical protocol, checked against direct numpy / scipy references.

- Intervals describe the reported (test) side only: the dev side's data cannot move them.
- Undefined bootstrap resamples are counted and shown; above 5% there is no interval.
- Too few reported groups: no interval, and the reason.
- The temperature convention: a reading at temperature T tempers every distribution first
  (priors at T), then adjusts it: distribution calibration is p_T * q / pbar_T, contextual
  calibration p_T / p_cf,T, Deb-R p_T * (U / P_random,T)^lambda.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st

from jaxjudge.data import to_prompt_range
from jaxjudge.prompts import ScoreScale
from jaxjudge.report import CellArrays, MethodOptions, RandomPrior, Results, evaluate_cell, make_splits
from jaxjudge.report.tables import flat_rows, format_interval, markdown_report

SCALE = ScoreScale(1, 5)
LAB = {"judge": "sim", "task": "summeval", "aspect": "coherence"}


def _softmax(x, axis=-1):
    z = np.exp(x - x.max(axis=axis, keepdims=True))
    return z / z.sum(axis=axis, keepdims=True)


def _judge(rng, n_docs, per_doc=8, noise=0.6):
    n = n_docs * per_doc
    groups = np.repeat([f"d{i:03d}" for i in range(n_docs)], per_doc)
    human = np.round(rng.uniform(1, 5, n) * 3) / 3
    quality = human + rng.normal(0, noise, n)
    v = SCALE.values
    logits = -((v[None] - quality[:, None]) ** 2) / (2 * 0.8**2) + rng.normal(0, 0.3, (n, v.size))
    logits = logits - np.log(np.exp(logits).sum(1, keepdims=True)) - 0.5  # not normalised over K
    return groups, human, logits.astype(np.float32)


def _row(report, method, score):
    (r,) = [r for r in report.rows if r["method"] == method and r["score"] == score]
    return r


# -- 1. the bootstrap resamples the reported side only ------------------------------------------


def test_interval_ignores_the_dev_side():
    """Adding dev documents (never reported) must not change a fixed split's test intervals."""
    rng = np.random.default_rng(0)
    g_test, h_test, l_test = _judge(rng, 12)
    opts = MethodOptions(methods=("vanilla",), temperatures=(1.0,), greedy=False, per_group=True,
                         metrics=("spearman", "pearson"), n_boot=300, seed=3)
    out = []
    for n_dev in (2, 12):
        g_dev, h_dev, l_dev = _judge(np.random.default_rng(100 + n_dev), n_dev)
        g_dev = np.asarray([f"dev-{g}" for g in g_dev])
        arrays = CellArrays(scale=SCALE, logprobs=np.concatenate([l_dev, l_test]), human=np.concatenate([h_dev, h_test]),
                            human_range=(1.0, 5.0), groups=np.concatenate([g_dev, g_test]))
        splits = make_splits("fixed_docs", arrays.groups, dev_groups=sorted(set(g_dev)))
        out.append(_row(evaluate_cell(arrays, splits, opts, LAB), "vanilla", "expected@1")["metrics"])
    for m in ("spearman", "pearson", "spearman_doc"):
        assert out[0][m]["low"] is not None
        assert out[0][m]["low"] == pytest.approx(out[1][m]["low"], abs=1e-6), m
        assert out[0][m]["high"] == pytest.approx(out[1][m]["high"], abs=1e-6), m


def test_too_few_test_groups_give_no_interval_and_say_why():
    rng = np.random.default_rng(1)
    groups, human, logits = _judge(rng, 6, per_doc=16)
    arrays = CellArrays(scale=SCALE, logprobs=logits, human=human, human_range=(1.0, 5.0), groups=groups)
    splits = make_splits("fixed_docs", groups, dev_groups=sorted(set(groups))[:3])
    opts = MethodOptions(methods=("vanilla",), temperatures=(1.0,), greedy=False, metrics=("spearman",), n_boot=100)
    iv = _row(evaluate_cell(arrays, splits, opts, LAB), "vanilla", "expected@1")["metrics"]["spearman"]
    assert iv["low"] is None and iv["high"] is None and iv["estimate"] is not None
    assert "too few groups (3 < 10)" in iv["reason"]
    assert "no interval: too few groups (3 < 10)" in format_interval(iv)


# -- 2. undefined resamples are counted, shown, and withhold the interval above 5% ---------------


def test_undefined_resamples_withhold_the_interval():
    """A greedy reading that varies in two documents only: most resamples of 12 documents
    draw neither of them (constant predictions, Spearman undefined)."""
    rng = np.random.default_rng(2)
    groups, human, _ = _judge(rng, 14)
    logits = np.tile(np.log([0.1, 0.1, 0.6, 0.1, 0.1]), (groups.size, 1)).astype(np.float32)
    varied = np.isin(groups, ["d000", "d001"])
    logits[varied & (human > 3), 3] = 2.0  # greedy "4" on the better half of two documents
    arrays = CellArrays(scale=SCALE, logprobs=logits, human=human, human_range=(1.0, 5.0), groups=groups)
    splits = make_splits("fixed_docs", groups, dev_groups=["d012", "d013"])
    opts = MethodOptions(methods=("vanilla",), temperatures=(1.0,), greedy=True, per_group=True,
                         metrics=("spearman",), n_boot=400)
    report = evaluate_cell(arrays, splits, opts, LAB)
    row = _row(report, "vanilla", "greedy")
    iv = row["metrics"]["spearman"]
    # P(a resample misses both documents) = (10/12)^12 = 11%
    assert 0.05 < iv["nan_share"] < 0.25
    assert iv["low"] is None and "resamples undefined" in iv["reason"]
    # per-document mean: defined in 2 of the 12 documents
    doc = row["metrics"]["spearman_doc"]
    assert (doc["docs_defined"], doc["docs"]) == (2, 12)
    assert "2/12 docs defined" in format_interval(doc)
    # CSV and Markdown show the share
    cols, flat = flat_rows(Results(experiment="t", rows=report.rows))
    (fr,) = [r for r in flat if r["score"] == "greedy"]
    assert fr["spearman_nan_share"] == pytest.approx(iv["nan_share"])
    assert "resamples undefined" in fr["spearman_reason"]
    md = markdown_report(Results(experiment="t", rows=report.rows))
    assert "resamples undefined" in md


# -- 3. the temperature convention --------------------------------------------------------------


def _cell_with_priors(seed=4, n_docs=12, per_doc=8):
    rng = np.random.default_rng(seed)
    groups, human, logits = _judge(rng, n_docs, per_doc)
    k = SCALE.size
    random_lp = np.log(_softmax(rng.normal(0, 1.0, (20, k)) + np.array([0, 0, 2.0, 0, 0]))) - 1.0
    cf = np.log(_softmax(rng.normal(0, 1.0, (3, k)))) - 0.7
    arrays = CellArrays(scale=SCALE, logprobs=logits, human=human, human_range=(1.0, 5.0), groups=groups,
                        random={"R": RandomPrior(random_lp.astype(np.float32), rng.uniform(1, 3, 20))},
                        content_free=cf.astype(np.float32))
    return arrays


T = 0.2


def _reference_check(row, pred_ref, arrays, splits):
    """The row's pooled Pearson and MSE equal scipy's on the reference predictions (test side)."""
    test = np.asarray(splits.test[0])
    human = to_prompt_range(arrays.human, SCALE.lo, SCALE.hi, src=arrays.human_range)
    want_r = st.pearsonr(pred_ref[test], human[test])[0]
    want_mse = np.mean((pred_ref[test] - human[test]) ** 2)
    assert row["metrics"]["pearson"]["estimate"] == pytest.approx(want_r, abs=2e-4)
    assert row["metrics"]["mse"]["estimate"] == pytest.approx(want_mse, rel=2e-4, abs=2e-4)


@pytest.fixture(scope="module")
def tempered_report():
    arrays = _cell_with_priors()
    dev_docs = sorted(set(arrays.groups))[:4]
    splits = make_splits("fixed_docs", arrays.groups, dev_groups=dev_docs)
    opts = MethodOptions(methods=("vanilla", "deb_r", "contextual", "batch", "distribution"), temperatures=(T,),
                         greedy=False, deb_tp=(10,), metrics=("pearson", "mse"), n_boot=50)
    return arrays, splits, evaluate_cell(arrays, splits, opts, LAB)


def test_distribution_calibration_is_p_T_times_q_over_pbar_T(tempered_report):
    arrays, splits, report = tempered_report
    row = _row(report, "distribution", f"expected@{T:g}")
    q = np.asarray(row["hparams"][0]["q"])
    p_t = _softmax(arrays.logprobs / T)
    pbar = p_t[np.asarray(splits.dev[0])].mean(0)
    adj = p_t * q / pbar
    adj /= adj.sum(1, keepdims=True)
    _reference_check(row, adj @ SCALE.values, arrays, splits)


def test_contextual_and_batch_priors_are_measured_at_T(tempered_report):
    arrays, splits, report = tempered_report
    p_t = _softmax(arrays.logprobs / T)
    for method, prior in (("contextual", _softmax(arrays.content_free / T).mean(0)),
                          ("batch", p_t[np.asarray(splits.test[0])].mean(0))):
        adj = p_t / prior
        adj /= adj.sum(1, keepdims=True)
        _reference_check(_row(report, method, f"expected@{T:g}"), adj @ SCALE.values, arrays, splits)


def test_deb_r_lambda_in_log_probability_units(tempered_report):
    arrays, splits, report = tempered_report
    row = _row(report, "deb_r_tp10", f"expected@{T:g}")
    lam = row["hparams"][0]["lam"]
    rp = arrays.random["R"]
    top = rp.logprobs[np.argsort(rp.nll, kind="stable")[:10]]
    p_rand = _softmax(top / T).mean(0)
    adj = _softmax(arrays.logprobs / T) * (1.0 / SCALE.size / p_rand) ** lam
    adj /= adj.sum(1, keepdims=True)
    _reference_check(row, adj @ SCALE.values, arrays, splits)


def test_a_judge_whose_marginal_is_the_human_prior_is_unchanged_by_dc():
    """At any T: dev rows whose tempered distribution is exactly q leave DC the identity."""
    from jaxjudge.debias import human_prior  # noqa: PLC0415

    rng = np.random.default_rng(5)
    groups, human, logits = _judge(rng, 12)
    dev_docs = sorted(set(groups))[:4]
    dev = np.isin(groups, dev_docs)
    hmap = to_prompt_range(human, SCALE.lo, SCALE.hi, src=(1.0, 5.0))
    q = np.asarray(human_prior(hmap.astype(np.float32), SCALE.values, dev))
    for t in (0.2, 1.0, 2.0):
        lg = logits.copy()
        lg[dev] = t * np.log(q) - 1.3  # softmax(lg / t) = q on every dev row
        arrays = CellArrays(scale=SCALE, logprobs=lg, human=human, human_range=(1.0, 5.0), groups=groups)
        splits = make_splits("fixed_docs", groups, dev_groups=dev_docs)
        opts = MethodOptions(methods=("vanilla", "distribution"), temperatures=(t,), greedy=False,
                             metrics=("pearson", "mse"), n_boot=20)
        rep = evaluate_cell(arrays, splits, opts, LAB)
        for m in ("pearson", "mse"):
            a = _row(rep, "distribution", f"expected@{t:g}")["metrics"][m]["estimate"]
            b = _row(rep, "vanilla", f"expected@{t:g}")["metrics"][m]["estimate"]
            assert a == pytest.approx(b, abs=1e-5), (t, m)


def test_vanilla_and_contrastive_generation_validity_side_by_side():
    from jaxjudge.report.tables import headline_table  # noqa: PLC0415

    rng = np.random.default_rng(8)
    groups, human, logits = _judge(rng, 12)
    gen = np.where(rng.uniform(size=human.size) < 0.5, np.nan, np.clip(np.round(human), 1, 5))
    cgen = np.where(rng.uniform(size=human.size) < 0.1, np.nan, np.clip(np.round(human + rng.normal(0, 0.5, human.size)), 1, 5))
    arrays = CellArrays(scale=SCALE, logprobs=logits, human=human, human_range=(1.0, 5.0), groups=groups,
                        generated=gen, contrastive_generated=cgen)
    splits = make_splits("fixed_docs", groups, dev_groups=["d000"])
    opts = MethodOptions(methods=("vanilla", "generate", "contrastive_generate"), temperatures=(1.0,), greedy=False,
                         metrics=("spearman", "validity"), n_boot=50)
    rep = evaluate_cell(arrays, splits, opts, LAB)
    test = np.asarray(splits.test[0])
    for method, g in (("generate", gen), ("contrastive_generate", cgen)):
        row = _row(rep, method, "generate")
        assert row["parse_failures"] == int(np.isnan(g).sum())
        assert row["parse_failures_test"] == int(np.isnan(g[test]).sum()) and row["n_test"] == int(test.sum())
        assert row["metrics"]["validity"]["estimate"] == pytest.approx(np.isfinite(g[test]).mean(), abs=1e-6)
        ok = test & np.isfinite(g)
        assert row["metrics"]["spearman"]["estimate"] == pytest.approx(st.spearmanr(g[ok], human[ok])[0], abs=1e-5)
    table = headline_table(Results(experiment="t", rows=rep.rows), "spearman")
    # The note counts the reported (test) rows, as validity does; the dev document has rows too.
    assert (~test).sum() > 0
    assert f"{int(np.isfinite(gen[test]).sum())}/{int(test.sum())} parsed" in table
    assert f"{int(np.isfinite(cgen[test]).sum())}/{int(test.sum())} parsed" in table


# -- 8. labels -------------------------------------------------------------------------------------


def test_markdown_does_not_claim_tuning_or_print_empty_per_document_tables():
    """An untuned run (vanilla only) on a task without documents: no 'chosen on dev' sentence
    and no per-document headline full of dashes."""
    rng = np.random.default_rng(9)
    n = 60
    human = rng.uniform(0, 5, n)
    logits = (np.log(_softmax(rng.normal(0, 1, (n, 5)))) - 0.3).astype(np.float32)
    ids = np.asarray([f"pair{i}" for i in range(n)])
    arrays = CellArrays(scale=ScoreScale(0, 4), logprobs=logits, human=human, human_range=(0.0, 5.0), groups=ids)
    splits = make_splits("original", ids, split_labels=np.asarray(["dev"] * 20 + ["test"] * 40), original=("dev", "test"))
    opts = MethodOptions(methods=("vanilla",), temperatures=(1.0,), greedy=False, per_group=True,
                         metrics=("spearman",), n_boot=50)
    rep = evaluate_cell(arrays, splits, opts, {"judge": "sim", "task": "stsb", "aspect": "similarity"})
    assert rep.rows[0]["metrics"]["spearman_doc"]["estimate"] is None  # one pair per group
    md = markdown_report(Results(experiment="t", rows=rep.rows))
    assert "Nothing is tuned." in md
    assert "chosen on each fold's dev side" not in md
    assert "## spearman_doc" not in md and "## spearman (headline)" in md


def test_truncated_prompts_are_counted_and_warned_about():
    rng = np.random.default_rng(10)
    groups, human, logits = _judge(rng, 12)
    truncated = np.zeros(human.size, bool)
    truncated[:7] = True
    arrays = CellArrays(scale=SCALE, logprobs=logits, human=human, human_range=(1.0, 5.0), groups=groups,
                        truncated=truncated)
    splits = make_splits("fixed_docs", groups, dev_groups=["d000"])
    opts = MethodOptions(methods=("vanilla",), temperatures=(1.0,), greedy=False, metrics=("spearman",), n_boot=20)
    rep = evaluate_cell(arrays, splits, opts, LAB)
    assert {r["n_truncated"] for r in rep.rows} == {7}
    res = Results(experiment="t", rows=rep.rows)
    assert "Warning: prompts were truncated" in markdown_report(res) and "7 of 96 prompts" in markdown_report(res)
    _, flat = flat_rows(res)
    assert flat[0]["n_truncated"] == 7
    assert "tokens cut unknown" in markdown_report(res) and flat[0]["n_tokens_cut"] is None
    # With the per-prompt count from the store: the total cut, in the row, the CSV and the warning.
    cut = np.where(truncated, np.arange(human.size) + 3, 0)
    arrays = CellArrays(scale=SCALE, logprobs=logits, human=human, human_range=(1.0, 5.0), groups=groups,
                        truncated=truncated, truncated_tokens=cut)
    res = Results(experiment="t", rows=evaluate_cell(arrays, splits, opts, LAB).rows)
    want = 3 + 4 + 5 + 6 + 7 + 8 + 9
    assert {r["n_tokens_cut"] for r in res.rows} == {want}
    assert f"7 of 96 prompts, {want} source tokens cut" in markdown_report(res)
    assert flat_rows(res)[1][0]["n_tokens_cut"] == want


def test_rows_without_truncation_carry_no_token_count():
    rng = np.random.default_rng(10)
    groups, human, logits = _judge(rng, 12)
    arrays = CellArrays(scale=SCALE, logprobs=logits, human=human, human_range=(1.0, 5.0), groups=groups,
                        truncated=np.zeros(human.size, bool), truncated_tokens=np.zeros(human.size, np.int32))
    splits = make_splits("fixed_docs", groups, dev_groups=["d000"])
    opts = MethodOptions(methods=("vanilla",), temperatures=(1.0,), greedy=False, metrics=("spearman",), n_boot=20)
    rows = evaluate_cell(arrays, splits, opts, LAB).rows
    assert all(r["n_truncated"] == 0 and "n_tokens_cut" not in r for r in rows)
    assert "Warning: prompts were truncated" not in markdown_report(Results(experiment="t", rows=rows))
