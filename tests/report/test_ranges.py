"""Statistics over score ranges, the primary endpoint and Holm's adjustment.

References are hand-computed (Holm, the percentile p-value), scipy (the Wald p-value) or numpy
on replicates built by hand; the pipeline test checks the over-range numbers against the
per-range rows, which come from another code path (`score_stats_batch`).
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.stats as st

from jaxjudge.metrics.heterogeneity import heterogeneity_interval
from jaxjudge.metrics.multiplicity import bootstrap_p_value, holm
from jaxjudge.prompts import ScoreScale
from jaxjudge.report import CellArrays, markdown_report
from jaxjudge.report.cell_inputs import CellReport
from jaxjudge.report.pipeline import report_from_arrays
from jaxjudge.report.ranges import endpoints, range_statistics, three_way
from jaxjudge.report.stores import Cell


def test_holm_hand_computed():
    # sorted: 0.005 x 4 = 0.02; 0.01 x 3 = 0.03; 0.03 x 2 = 0.06; 0.04 x 1 = 0.04 -> max(0.06, 0.04)
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])
    out = holm([0.5, None, 0.9])
    assert out[1] is None and out[0] == pytest.approx(1.0) and out[2] == pytest.approx(1.0)
    with pytest.raises(ValueError, match="position 1"):
        holm([0.1, 1.5])


def test_wald_p_value_matches_scipy():
    reps = np.random.default_rng(0).normal(0.3, 0.12, 1000)
    want = 2 * st.norm.sf(0.25 / np.std(reps, ddof=1))
    assert bootstrap_p_value(0.25, reps) == pytest.approx(want, rel=1e-9)
    assert bootstrap_p_value(0.25, np.append(reps, np.nan)) == pytest.approx(want, rel=1e-9)  # NaN left out


def test_percentile_p_value_hand_computed():
    # below 0: 1 of 4 -> (1 + 1) / 5; above: 3 of 4 -> 4 / 5; p = 2 x 0.4
    assert bootstrap_p_value(1.0, [-1.0, 1.0, 2.0, 3.0], method="percentile") == pytest.approx(0.8)
    # Never below 2 / (B + 1), however far the replicates are from 0.
    assert bootstrap_p_value(5.0, np.full(999, 5.0) + np.arange(999) * 1e-3, method="percentile") == pytest.approx(
        2 / 1000)


def test_identical_predictions_have_p_one():
    assert bootstrap_p_value(3e-9, np.full(100, 1e-8) * np.sign(np.arange(100) - 50)) == 1.0
    assert bootstrap_p_value(float("nan"), np.ones(10)) is None


def _options(**kw):
    base = dict(select_metric="spearman", select_per_group=False, alpha=0.05, ci_method="percentile",
                min_ci_groups=10)
    return SimpleNamespace(**{**base, **kw})


def _rep(scale_reps: dict, scale: str, key: str = "k", groups: int = 40, dev=None) -> CellReport:
    rows = []
    for (method, score), (est, _) in scale_reps.items():
        rows.append({"method": method, "score": score, "scale": scale, "dev_metric": dev.get(method) if dev else [0.5],
                     "metrics": {"spearman": {"estimate": est}},
                     **({"matched_baseline": "temperature"} if method == "contrastive" else {})})
    return CellReport(rows=rows, aux={}, replicates={k: v[1] for k, v in scale_reps.items()}, resample_key=key,
                      num_groups=groups)


def _cells(rng, keys=("k", "k", "k")):
    """Three ranges, three methods, replicates drawn by hand."""
    cells, truth = [], {}
    for scale, key in zip(("0-4", "1-5", "2-6"), keys):
        reps = {}
        for m, loc in (("vanilla", 0.5), ("temperature", 0.55), ("contrastive", 0.6)):
            loc = loc + rng.normal(0, 0.05)
            reps[(m, "expected@1")] = (loc, rng.normal(loc, 0.03, 500))
        truth[scale] = reps
        labels = {"judge": "j", "task": "stsb", "aspect": "similarity", "scale": scale}
        cells.append((labels, _rep(reps, scale, key)))
    return cells, truth


def test_range_statistics_against_numpy():
    cells, truth = _cells(np.random.default_rng(1))
    recs = {r["method"]: r for r in range_statistics(cells, _options())}
    scales = ("0-4", "1-5", "2-6")
    est = {m: np.array([truth[s][(m, "expected@1")][0] for s in scales]) for m in recs}
    reps = {m: np.stack([truth[s][(m, "expected@1")][1] for s in scales]) for m in recs}
    con = recs["contrastive"]
    assert con["mean"]["estimate"] == pytest.approx(est["contrastive"].mean())
    assert [con["mean"]["low"], con["mean"]["high"]] == pytest.approx(
        np.quantile(reps["contrastive"].mean(0), [0.025, 0.975]))
    # The spread: heterogeneity_interval's estimate and interval (checked against scipy in
    # tests/metrics/test_heterogeneity.py); its raw sd and noise by hand. spread_diff below is
    # the difference of the sds net of the replicates' covariance, by hand.
    def net(x, sigma, times):
        c = np.eye(3) - 1 / 3
        dev = x - x.mean(0)
        return np.sqrt(np.maximum((dev * dev).sum(0) - times * np.trace(c @ sigma @ c), 0) / 2)

    sig = {m: np.cov(reps[m]) for m in recs}
    ref = heterogeneity_interval(est["contrastive"], reps["contrastive"], 0.05)
    assert [con["spread"][k] for k in ("estimate", "low", "high")] == [ref[k] for k in ("estimate", "low", "high")]
    assert con["spread"]["raw"] == pytest.approx(float(net(est["contrastive"], sig["contrastive"], 0)))
    assert con["spread"]["noise"] == pytest.approx(math.sqrt(np.trace((np.eye(3) - 1 / 3) @ sig["contrastive"]) / 2))
    assert con["spread"]["low"] <= con["spread"]["estimate"] <= con["spread"]["high"]
    assert con["max_min"] == pytest.approx(np.ptp(est["contrastive"]))
    versus = {v["baseline"]: v for v in con["versus"]}
    assert {v["role"] for v in con["versus"]} == {"vanilla", "matched"}
    d = reps["contrastive"] - reps["temperature"]
    m = versus["temperature"]
    assert m["mean_diff"]["estimate"] == pytest.approx((est["contrastive"] - est["temperature"]).mean())
    assert [m["mean_diff"]["low"], m["mean_diff"]["high"]] == pytest.approx(np.quantile(d.mean(0), [0.025, 0.975]))
    assert m["spread_diff"]["estimate"] == pytest.approx(float(
        net(est["contrastive"], sig["contrastive"], 1) - net(est["temperature"], sig["temperature"], 1)))
    sd = net(reps["contrastive"], sig["contrastive"], 2) - net(reps["temperature"], sig["temperature"], 2)
    assert [m["spread_diff"]["low"], m["spread_diff"]["high"]] == pytest.approx(np.quantile(sd, [0.025, 0.975]))
    # The relative improvement is a ratio of means.
    rel = (reps["contrastive"].mean(0) - reps["vanilla"].mean(0)) / np.abs(reps["vanilla"].mean(0))
    assert versus["vanilla"]["relative"]["estimate"] == pytest.approx(
        (est["contrastive"].mean() - est["vanilla"].mean()) / abs(est["vanilla"].mean()))
    assert versus["vanilla"]["relative"]["low"] == pytest.approx(np.quantile(rel, 0.025))
    assert "p" not in versus["vanilla"]["relative"]  # descriptive: its test is mean_diff's
    assert recs["vanilla"]["versus"] == []
    # Every pair of ranges for the vanilla judge: 0-4 - 2-6 on the same resamples.
    pair = next(d for d in recs["vanilla"]["range_diffs"] if d["scales"] == ["0-4", "2-6"])
    assert pair["diff"]["estimate"] == pytest.approx(est["vanilla"][0] - est["vanilla"][2])
    assert [pair["diff"]["low"], pair["diff"]["high"]] == pytest.approx(
        np.quantile(reps["vanilla"][0] - reps["vanilla"][2], [0.025, 0.975]))
    assert len(recs["vanilla"]["range_diffs"]) == 3 and "range_diffs" not in recs["contrastive"]


def test_ranges_resampled_differently_get_no_interval():
    cells, _ = _cells(np.random.default_rng(2), keys=("k", "k", "other"))
    con = next(r for r in range_statistics(cells, _options()) if r["method"] == "contrastive")
    assert con["mean"]["low"] is None and con["mean"]["reason"] == "ranges resampled differently"
    assert con["versus"][0]["mean_diff"]["estimate"] is not None


def test_best_calibration_baseline_is_chosen_on_dev():
    rng = np.random.default_rng(3)
    cells = []
    for scale in ("1-5", "2-6"):
        reps = {(m, "greedy"): (0.5, rng.normal(0.5, 0.02, 200)) for m in ("vanilla", "contextual", "batch", "deb_r")}
        dev = {"vanilla": [0.1], "contextual": [0.2, 0.3], "batch": [0.4, 0.2], "deb_r": [0.9]}
        cells.append(({"judge": "j", "task": "t", "aspect": "a", "scale": scale}, _rep(reps, scale, dev=dev)))
    recs = {r["method"]: r for r in range_statistics(cells, _options())}
    # Mean dev metric over ranges and folds: batch 0.3 beats contextual 0.25.
    roles = {v["baseline"]: v["role"] for v in recs["deb_r"]["versus"]}
    assert roles == {"vanilla": "vanilla", "batch": "calibration"}
    # A calibration baseline is not compared with another calibration baseline.
    assert all(v["role"] != "calibration" for v in recs["batch"]["versus"])


def test_endpoints_primary_excluded_from_holm_family():
    cells, _ = _cells(np.random.default_rng(4))
    opts = _options()
    ranges = range_statistics(cells, opts)
    rows = []
    ep = endpoints(rows, ranges, {"method": "contrastive", "versus": "temperature", "statistic": "mean",
                                  "score": "expected@1"}, 0.05)
    (prim,) = [e["interval"] for e in ep["primary"]["endpoints"]]
    assert "p_holm" not in prim and prim["p"] is not None
    family = [v[k] for r in ranges for v in r["versus"] for k in ("mean_diff", "spread_diff") if v[k] is not prim]
    family += [d["diff"] for r in ranges for d in r.get("range_diffs", ())]
    # 3 comparisons x (mean, spread), less the primary, and vanilla's 3 pairs of ranges
    assert ep["secondary"]["count"] == len(family) == 2 * 3 - 1 + 3
    assert [iv["p_holm"] for iv in family] == pytest.approx(holm([iv["p"] for iv in family]))
    own = endpoints(rows, ranges, {"method": "vanilla", "versus": None, "statistic": "spread",
                                   "score": "expected@1"}, 0.05)
    vanilla = next(r for r in ranges if r["method"] == "vanilla")
    assert own["primary"]["endpoints"][0]["interval"] is vanilla["spread"]
    assert own["secondary"]["count"] == 2 * 3 + 3  # nothing left out of the family
    with pytest.raises(ValueError, match="matches no comparison"):
        endpoints(rows, ranges, {"method": "contrastive", "versus": "batch", "statistic": "mean",
                                 "score": "expected@1"}, 0.05)


def _simulated(primary):
    """Arrays and a config of a simulated judge with an assistant, over three ranges."""
    rng = np.random.default_rng(0)
    n_docs, per = 30, 4
    groups = np.repeat([f"d{i}" for i in range(n_docs)], per)
    human = rng.uniform(1, 5, groups.size)
    arrays = {}
    scales = ("0-4", "1-5", "2-6")
    for s in scales:
        sc = ScoreScale.parse(s)
        q = sc.lo + (human - 1) / 4 * (sc.hi - sc.lo) + rng.normal(0, 0.6, human.size)
        lp = -((sc.values[None] - q[:, None]) ** 2) + rng.normal(0, 0.5, (human.size, sc.size))
        arrays[Cell("sim", "stsb", "similarity", s)] = CellArrays(
            scale=sc, logprobs=lp / 0.3, human=human, human_range=(1.0, 5.0), groups=groups,
            assistant=rng.normal(0, 1, (human.size, sc.size)), split_labels=np.where(np.arange(human.size) < 40,
                                                                                    "dev", "test"))
    task = SimpleNamespace(task="stsb", aspects=("similarity",), split="original", n_folds=5, fold_seed=0,
                           per_group=False, original=("dev", "test"))
    cfg = SimpleNamespace(
        name="sim", tasks=(task,), scales=scales, judge_names=("sim",), methods=("vanilla", "temperature", "contrastive"),
        temperatures=(1.0,), greedy=False, deb_tp=(10,), lambdas=(0.5,), lambdas_extended=None,
        contrastive_lams=(0.1, 1.0), contrastive_temps=(1.0, 3.0), contrastive_fine=False,
        contrastive_temperature="t_main", select_metric="spearman", select_per_group=False, metrics=("spearman",),
        ci_metrics=("spearman",), n_boot=300, alpha=0.05, seed=0, min_ci_groups=10, ci_method="expanded",
        assistant_of=lambda j: "asst", task_of=None, comparisons=(),
        primary=primary, family_options=lambda: {},
    )
    cfg.task = lambda name: task
    return arrays, cfg, scales


def test_pipeline_over_ranges_agree_with_per_range_rows():
    """End to end on a simulated judge: the mean over ranges and its difference from vanilla
    equal the means of the per-range rows' estimates (a separate code path)."""
    arrays, cfg, scales = _simulated(
        {"method": "contrastive", "versus": "temperature", "statistic": "mean", "score": "expected@1"})
    res = report_from_arrays(arrays, cfg)
    per = {(r["method"], r["scale"]): r for r in res.rows}
    con = next(r for r in res.ranges if r["method"] == "contrastive")
    assert con["mean"]["estimate"] == pytest.approx(
        np.mean([per[("contrastive", s)]["metrics"]["spearman"]["estimate"] for s in scales]), abs=1e-6)
    vs_van = next(v for v in con["versus"] if v["baseline"] == "vanilla")
    assert vs_van["mean_diff"]["estimate"] == pytest.approx(
        np.mean([per[("contrastive", s)]["delta"]["spearman"]["estimate"] for s in scales]), abs=1e-6)
    assert vs_van["mean_diff"]["low"] <= vs_van["mean_diff"]["estimate"] <= vs_van["mean_diff"]["high"]
    assert res.endpoints["primary"]["endpoints"][0]["description"]["versus"] == "temperature"
    # Per range: 2 comparisons x 3 ranges (vs vanilla; contrastive vs temperature) + 1 (temperature
    # vs vanilla) x 3; over ranges: 3 (method, baseline) x (mean, spread); less the primary.
    # ... and vanilla's 3 pairs of ranges.
    assert res.endpoints["secondary"]["count"] == 3 * 3 + 3 * 2 - 1 + 3
    md = markdown_report(res)
    assert md.splitlines()[2].startswith("**Primary endpoint** (95% interval, unadjusted): contrastive − temperature")
    assert "## Over ranges" in md and "## Secondary comparisons" in md


@pytest.mark.slow
def test_a_nested_primary_redoes_the_selection_in_every_resample():
    """The primary endpoint read with ``selection="nested"``: its interval comes from the cells'
    nested replicates (each resample choosing lambda and t again on its own dev rows), combined
    over ranges like the report's own; its conditional twin leaves the secondary family."""
    arrays, cfg, scales = _simulated({"method": "contrastive", "versus": "temperature", "statistic": "mean",
                                      "score": "expected@1", "selection": "nested"})
    res = report_from_arrays(arrays, cfg)
    (prim,) = res.endpoints["primary"]["endpoints"]
    assert prim["description"]["selection"] == "nested"
    # The reference: each range's cell evaluated with the nested bootstrap of the two rows.
    from jaxjudge.report import MethodOptions, evaluate_cell
    from jaxjudge.report.pipeline import _splits_for
    from jaxjudge.metrics.fold_stat import interval_summary

    task = cfg.tasks[0]
    opts = MethodOptions.from_config(cfg, task)
    nested = dataclasses.replace(opts, nested=("contrastive", "temperature"), nested_scores=("expected@1",))
    reps, est, groups = [], [], set()
    for s in scales:
        a = arrays[Cell("sim", "stsb", "similarity", s)]
        rep = evaluate_cell(a, _splits_for(task, a, None), nested, {})
        assert set(rep.nested) == {(m, "expected@1") for m in ("vanilla", "temperature", "contrastive")}
        reps.append(rep.nested[("contrastive", "expected@1")] - rep.nested[("temperature", "expected@1")])
        groups.add(rep.num_groups)
        rows = {r["method"]: r for r in rep.rows if r["score"] == "expected@1"}
        est.append(rows["contrastive"]["metrics"]["spearman"]["estimate"]
                   - rows["temperature"]["metrics"]["spearman"]["estimate"])
    assert groups == {20}  # the test split's documents
    want = interval_summary(float(np.mean(est)), np.mean(reps, axis=0), 0.05, num_groups=20, min_groups=10,
                            method="expanded")
    iv = prim["interval"]
    assert iv["estimate"] == pytest.approx(want["estimate"], abs=1e-6)
    assert [iv["low"], iv["high"]] == pytest.approx([want["low"], want["high"]], abs=1e-6)
    # The conditional interval of the same comparison: same estimate, other replicates.
    con = next(r for r in res.ranges if r["method"] == "contrastive")
    twin = next(v for v in con["versus"] if v["baseline"] == "temperature")
    assert twin["mean_diff"]["estimate"] == pytest.approx(iv["estimate"])
    assert (twin["mean_diff"]["low"], twin["mean_diff"]["high"]) != (iv["low"], iv["high"])
    assert twin["nested"]["mean_diff"] is iv
    # Only the primary's rows (and the vanilla judge) were bootstrapped nested, at the primary's
    # reading; the secondary family is the conditional report's less the twin.
    assert {v["baseline"] for v in con["versus"] if "nested" in v} == {"vanilla", "temperature"}
    # As in the conditional report (test_pipeline_over_ranges_agree_with_per_range_rows).
    assert res.endpoints["secondary"]["count"] == 3 * 3 + 3 * 2 - 1 + 3
    assert "selection redone in each resample" in markdown_report(res).splitlines()[2]


def test_co_primary_endpoints_one_per_aspect_holm_among_themselves():
    rng = np.random.default_rng(5)
    cells = []
    for aspect in ("a", "b"):
        part, _ = _cells(rng)
        cells += [({**labels, "aspect": aspect}, rep) for labels, rep in part]
    ranges = range_statistics(cells, _options())
    ep = endpoints([], ranges, {"method": "contrastive", "versus": "vanilla", "statistic": "mean",
                                "score": "expected@1"}, 0.05)
    prim = ep["primary"]["endpoints"]
    assert [e["description"]["aspect"] for e in prim] == ["a", "b"]
    assert [e["interval"]["p_holm"] for e in prim] == pytest.approx(holm([e["interval"]["p"] for e in prim]))
    assert ep["secondary"]["count"] == 2 * (2 * 3 + 3) - 2


def test_findings_tables_show_the_over_range_intervals():
    from jaxjudge.report import Results  # noqa: PLC0415
    from jaxjudge.report.findings import range_markdown  # noqa: PLC0415

    rows = [{"judge": "j", "task": "t", "aspect": "a", "scale": s, "method": "vanilla", "score": "expected@1",
             "metrics": {"spearman": {"estimate": e, "low": e - 0.1, "high": e + 0.1}}, "delta": None}
            for s, e in (("1-5", 0.5), ("3-7", 0.3))]
    over = {"judge": "j", "task": "t", "aspect": "a", "score": "expected@1", "method": "vanilla",
            "metric": "spearman", "scales": ["1-5", "3-7"], "versus": [],
            "mean": {"estimate": 0.4, "low": 0.31, "high": 0.49}, "spread": {"estimate": 0.2, "low": 0.12, "high": 0.28}}
    line = range_markdown(Results("x", rows=rows, ranges=[over])).splitlines()[4]
    assert "| 0.200 [0.120, 0.280] | 0.400 [0.310, 0.490] |" in line
    # Without the report's record (older results): the bare mean of the estimates, and no spread
    # (no replicates, so no noise to net out of it).
    assert "| - | 0.400 |" in range_markdown(Results("x", rows=rows)).splitlines()[4]


@pytest.mark.parametrize("low, high, want", [
    (0.03, 0.10, "better"), (-0.10, -0.03, "worse"), (-0.01, 0.015, "equivalent"), (-0.02, 0.02, "equivalent"),
    (0.01, 0.05, "inconclusive"), (-0.05, 0.05, "inconclusive"), (-0.03, -0.01, "inconclusive"),
    (None, None, "inconclusive"),
])
def test_three_way_verdict_at_a_margin(low, high, want):
    assert three_way({"estimate": 0.0, "low": low, "high": high}, 0.02) == want
