"""Per-document metrics compare methods on the documents where every one of them is defined.

Three methods on 12 documents of 5 rows (10 reported): the second predicts one constant within
documents 0 and 1, where its within-document Spearman is undefined. Compared together, every
method's per-document Spearman is the mean over documents 2-9 (scipy, document by document),
and the count says 8 of 10; the per-document MSE, defined everywhere, keeps all 10.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats as st

from jaxjudge.report import MethodOptions, make_splits
from jaxjudge.report.cell_stats import common_docs, score_stats_batch, stats_context
from jaxjudge.report.tables import format_interval

N_DOCS, PER_DOC = 12, 5


def _case():
    rng = np.random.default_rng(3)
    groups = np.repeat([f"d{i:02d}" for i in range(N_DOCS)], PER_DOC)
    human = rng.uniform(1, 5, groups.size)
    good = human + rng.normal(0, 0.8, groups.size)
    flat = good.copy()
    for d in (0, 1):  # one value a document: no within-document ranking
        flat[groups == f"d{d:02d}"] = 3.0
    noise = rng.normal(0, 1, groups.size)
    splits = make_splits("fixed_docs", groups, dev_groups=["d10", "d11"])
    preds = np.stack([good, flat, noise])[:, None, :]  # [M, F = 1, N]
    return groups, human, splits, preds


def _doc_mean(fn, pred, human, groups, docs):
    return np.mean([fn(pred[groups == g], human[groups == g]) for g in docs])


def _spearman(x, y):
    return st.spearmanr(x, y)[0]


def _mse(x, y):
    return np.mean((x - y) ** 2)


@pytest.mark.parametrize("together", [True, False])
def test_methods_share_the_documents_they_are_compared_on(together):
    groups, human, splits, preds = _case()
    ctx = stats_context(human, groups, splits.test, 1, 0.0, np.ones(groups.size))
    options = MethodOptions(metrics=("spearman", "mse"), ci_metrics=("spearman",), per_group=True,
                            select_per_group=True, n_boot=50)
    ones = np.ones(groups.size, np.float32)
    common = common_docs(preds, None, ones, ctx, options) if together else None
    out = score_stats_batch(preds, preds[0], None, ones, ctx, options, [False, True, True], common)
    test_docs = [f"d{i:02d}" for i in range(10)]
    shared = test_docs[2:] if together else None
    for j, (mets, deltas) in enumerate(out):
        # Each method alone: the second is defined on documents 2-9 only, the others on all 10.
        own = test_docs[2:] if j == 1 else test_docs
        docs = shared or own
        sp = mets["spearman_doc"]
        assert sp["estimate"] == pytest.approx(_doc_mean(_spearman, preds[j, 0], human, groups, docs), abs=1e-5)
        assert (sp["docs_defined"], sp["docs"]) == (len(docs), 10)
        assert sp["low"] <= sp["estimate"] <= sp["high"]
        mse = mets["mse_doc"]  # a point estimate (not in ci_metrics): defined on every document
        assert mse["estimate"] == pytest.approx(_doc_mean(_mse, preds[j, 0], human, groups, test_docs), rel=1e-5)
        assert (mse["docs_defined"], mse["docs"]) == (10, 10)
        if j:
            base_docs = shared or test_docs
            want = sp["estimate"] - _doc_mean(_spearman, preds[0, 0], human, groups, base_docs)
            assert deltas["spearman_doc"]["estimate"] == pytest.approx(want, abs=1e-5)
    if together:
        assert common["spearman"].sum() == 8 and common["mse"].sum() == 10


def test_no_shared_document_is_counted_and_shown():
    groups, human, splits, preds = _case()
    for d in range(2, 10):  # the second method now constant on every reported document
        preds[1, 0, groups == f"d{d:02d}"] = 1.0
    ctx = stats_context(human, groups, splits.test, 1, 0.0, np.ones(groups.size))
    options = MethodOptions(metrics=("spearman",), per_group=True, n_boot=20)
    ones = np.ones(groups.size, np.float32)
    common = common_docs(preds, None, ones, ctx, options)
    for mets, _ in score_stats_batch(preds, preds[0], None, ones, ctx, options, [False, True, True], common):
        sp = mets["spearman_doc"]
        assert sp["estimate"] is None and (sp["docs_defined"], sp["docs"]) == (0, 10)
        assert format_interval(sp) == "- (0/10 docs defined)"
