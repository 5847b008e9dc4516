"""The few-labels experiment (`jaxjudge.report.few_labels`): predictions from the report's code
path, label saving and the system-level tau, on a committed store and on synthetic cells."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import kendalltau

from experiments import registry as R
from jaxjudge import experiment as C
from jaxjudge.experiment.few_labels import FewLabelsConfig
from jaxjudge.report import few_labels as FL

ROOT = Path(__file__).resolve().parents[2]
CPU_STORES = ROOT / "results" / "stores" / "cpu_qwen"


def _base(**kw) -> C.ExperimentConfig:
    args = dict(name="few_labels", models=(R.QWEN_05B,),
                tasks=(C.TaskSpec("summeval", ("coherence",), split="kfold", n_folds=5, subset=R.CPU_SUMMEVAL_SUBSET),),
                scales=("1-5",), methods=("vanilla", "contextual"), temperatures=(0.2,), greedy=False,
                store_root=str(CPU_STORES))
    args.update(kw)
    return C.ExperimentConfig(**args)


def test_config_checks_and_overrides():
    cfg = FewLabelsConfig(base=_base())
    with pytest.raises(C.ConfigError, match="score 'greedy' is not a reading"):
        FewLabelsConfig(base=_base(), score="greedy")
    with pytest.raises(C.ConfigError, match="n_labels must be increasing"):
        FewLabelsConfig(base=_base(), n_labels=(50, 25))
    with pytest.raises(C.ConfigError, match="pair must name two different systems"):
        FewLabelsConfig(base=_base(), pair=("M1", "M1"))
    with pytest.raises(C.ConfigError, match="unknown field 'repeat'"):
        cfg.with_overrides(["repeat=3"])
    new = cfg.with_overrides(["repeats=7", "n_labels=10", "base.scales=0-4"])
    assert (new.repeats, new.n_labels, new.base.scales) == (7, (10,), ("0-4",))


@pytest.mark.skipif(not (CPU_STORES.is_dir() and (ROOT.parent / "shared" / "data" / "summeval").is_dir()),
                    reason="needs the committed CPU stores and the SummEval data")
def test_predictions_come_from_the_stores():
    """The vanilla predictions equal the expected score at T = 0.2 recomputed here from the
    store's log-probabilities, mapped onto the human range 1-5."""
    from jaxjudge.data import load_task_data
    from jaxjudge.jobs import ScoreJob
    from jaxjudge.report.stores import StoreIndex

    cfg = FewLabelsConfig(base=_base(methods=("vanilla",)))
    cells, notes = FL.judge_predictions(cfg)
    (cp,) = cells
    assert cp.human.size == 96 and len(set(cp.systems.tolist())) == 16 and notes
    index = StoreIndex(CPU_STORES)
    arrays = index.load(ScoreJob("qwen2.5-coder-0.5b", "summeval", "coherence", "1-5"), cfg.base)
    pos = {str(i): r for r, i in enumerate(arrays["example_ids"].tolist())}
    lp = np.asarray(arrays["cand_logprobs"], np.float64)[[pos[str(i)] for i in cp.ids]] / 0.2
    p = np.exp(lp - lp.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    expected = p @ np.arange(1.0, 6.0)  # range 1-5 maps onto the human 1-5 as it is
    np.testing.assert_allclose(cp.preds["vanilla"], expected, atol=2e-4)
    td = load_task_data(cfg.base.tasks[0])
    human = dict(zip(td.ids().tolist(), td.human("coherence").tolist()))
    np.testing.assert_allclose(cp.human, [human[i] for i in cp.ids.tolist()])
    assert set(cp.preds) == {"vanilla"}


def _synthetic(rng, docs=40, systems=4, oracle=False) -> FL.CellPredictions:
    names = np.array([f"M{i}" for i in range(systems)])
    sys_ = np.tile(names, docs)
    groups = np.repeat([f"d{i}" for i in range(docs)], systems)
    human = np.clip(3 + 0.3 * np.tile(np.arange(systems), docs) + rng.normal(0, 0.8, sys_.size), 1, 5)
    judge = human if oracle else 0.5 * human + rng.normal(0, 0.5, sys_.size)
    return FL.CellPredictions("j", "summeval", "coherence", "1-5", np.array([f"{g}/{s}" for g, s in zip(groups, sys_)]),
                              groups, sys_, human, (1.0, 5.0), {"vanilla": judge, "noise": rng.normal(0, 1, sys_.size)})


def test_label_saving_rows():
    rng = np.random.default_rng(0)
    cp = _synthetic(rng)
    cfg = FewLabelsConfig(base=_base(), n_labels=(10, 30, 50), repeats=40)
    rows = FL.label_saving(cp, cfg)
    kinds = {r["kind"] for r in rows}
    assert kinds == {"all items", "system", "difference"}
    # all items: 160 summaries of 40 documents, cluster-robust (40 >= min_clusters)
    assert all(r["clustered"] for r in rows if r["kind"] == "all items")
    # each system has 40 items, the pair 40 documents: n = 50 is skipped there, not for all items
    means = {s: cp.preds["vanilla"][cp.systems == s].mean() for s in ("M0", "M1", "M2", "M3")}
    first, second = sorted(means, key=means.get, reverse=True)[:2]  # the pair: highest vanilla means
    assert {r["estimand"] for r in rows if r.get("skipped")} == {"M0", "M1", "M2", "M3", f"{first} - {second}"}
    done = [r for r in rows if r.get("method")]
    for r in done:
        assert 0.0 <= r["covers"] <= 1.0 and r["width"] > 0
        if r["method"] == FL.HUMAN_ONLY:
            assert r["effective_n"] == pytest.approx(r["n"])
    # the pair is the two highest mean vanilla judge scores; PPI++ never wider than human only
    by = {(r["estimand"], r["n"], r["method"]): r for r in done}
    for (est, n, method), r in by.items():
        if r.get("ppi") == "ppi++":
            assert r["width"] <= by[(est, n, FL.HUMAN_ONLY)]["width"] * (1 + 1e-5)
    # a noise judge saves (almost) nothing; a useful one saves labels
    assert by[("all 160 items", 30, "noise + labels")]["effective_n"] < 33
    assert by[("all 160 items", 30, "vanilla + labels")]["effective_n"] > 40


def test_oracle_judge_and_system_level():
    rng = np.random.default_rng(1)
    cfg = FewLabelsConfig(base=_base(), n_labels=(10,), repeats=10, kendall_n_boot=50)
    rows = [r for r in FL.label_saving(_synthetic(rng, docs=60, oracle=True), cfg) if r.get("method") == "vanilla + labels"]
    # The judge is the human score: PPI++ is then as good as labelling all N items
    # (lam = m / N, se^2 = var / N), so the effective number of labels is about N.
    # (The all-items mean is clustered by document, where the systems' differences cancel
    # within a document: there it does better still.)
    assert len(rows) == 6 and all(r["effective_n"] == pytest.approx(r["N"], rel=0.25) for r in rows if not r["clustered"])
    assert all(r["effective_n"] > 0.8 * r["N"] for r in rows if r["clustered"])
    cp = _synthetic(rng, docs=12, oracle=True)
    sl = {r["method"]: r for r in FL.system_level(cp, cfg)}
    assert sl["vanilla"]["tau"] == pytest.approx(1.0)
    names = sorted(set(cp.systems.tolist()))
    noise = [cp.preds["noise"][cp.systems == s].mean() for s in names]
    hum = [cp.human[cp.systems == s].mean() for s in names]
    assert sl["noise"]["tau"] == pytest.approx(kendalltau(noise, hum).statistic, abs=1e-6)
    assert sl["noise"]["low"] is not None  # 12 documents >= min_ci_groups
    few = FL.system_level(dataclasses.replace(cp, groups=np.where(np.isin(cp.groups, ["d0", "d1"]), "a", "b")), cfg)
    assert few[0]["low"] is None and "too few documents (2 < 10)" in few[0]["reason"]
