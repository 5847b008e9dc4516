"""Range invariance on items (`jaxjudge.report.invariance`) against hand computation and the
bootstrap's own resamples."""

from __future__ import annotations

from types import SimpleNamespace

import jax
import numpy as np
import pytest

from jaxjudge.metrics.bootstrap import resample_weights
from jaxjudge.metrics.groups import encode_groups
from jaxjudge.metrics.intervals import interval_summary
from jaxjudge.report.invariance import item_sd, range_invariance

OPTS = SimpleNamespace(n_boot=200, seed=3, alpha=0.05, ci_method="percentile", min_ci_groups=2)


def test_item_sd_by_hand():
    # item 0: 1, 2, 3 -> sd 1; item 1: 2, 2, 2 -> 0; item 2: 0, 0, 3 -> sqrt(((1)^2 + 1 + 2^2) / 2) = sqrt(3)
    x = np.array([[1.0, 2.0, 0.0], [2.0, 2.0, 0.0], [3.0, 2.0, 3.0]])
    np.testing.assert_allclose(item_sd(x), [1.0, 0.0, np.sqrt(3.0)])
    assert np.isnan(item_sd(np.array([[1.0], [np.nan]])))[0]
    with pytest.raises(ValueError, match="R >= 2"):
        item_sd(np.ones((1, 3)))


def _items(scores: dict[str, np.ndarray], groups, split=None) -> dict[str, np.ndarray]:
    """Columns for one judge/task/aspect/reading: scores[method] is [R, N] on the human scale."""
    ranges = ["0-4", "1-5", "2-6"]
    cols: dict[str, list] = {k: [] for k in ("model", "task", "aspect", "reading", "range", "method", "item_id",
                                              "group", "split", "score_human_scale")}
    for m, x in scores.items():
        for r, rng in enumerate(ranges[: x.shape[0]]):
            for n in range(x.shape[1]):
                for k, v in (("model", "j"), ("task", "t"), ("aspect", "a"), ("reading", "expected@1"), ("range", rng),
                             ("method", m), ("item_id", f"i{n}"), ("group", groups[n]),
                             ("split", "test" if split is None else split[n]), ("score_human_scale", x[r, n])):
                    cols[k].append(v)
    return {k: np.asarray(v, dtype=float if k == "score_human_scale" else object) for k, v in cols.items()}


def test_the_statistic_and_its_paired_interval():
    rng = np.random.default_rng(0)
    n = 40
    groups = [f"g{k // 2}" for k in range(n)]  # 20 groups of two items
    vanilla = rng.normal(3.0, 1.0, (3, n))
    better = vanilla.mean(0) + rng.normal(0.0, 0.1, (3, n))  # nearly range-invariant
    split = ["test"] * (n - 2) + ["dev"] * 2  # the dev items are left out
    (rec,) = range_invariance(_items({"vanilla": vanilla, "m": better}, groups, split), {"m": "vanilla"}, OPTS)
    assert rec["scales"] == ["0-4", "1-5", "2-6"] and rec["n_items"] == n - 2 and rec["n_groups"] == 19
    sd_v, sd_m = np.std(vanilla[:, : n - 2], axis=0, ddof=1), np.std(better[:, : n - 2], axis=0, ddof=1)
    by = {e["method"]: e for e in rec["methods"]}
    assert by["vanilla"]["item_sd"]["estimate"] == pytest.approx(sd_v.mean())
    (vs,) = by["m"]["versus"]  # its matched baseline is vanilla: one comparison
    assert vs["baseline"] == "vanilla" and vs["diff"]["estimate"] == pytest.approx(sd_m.mean() - sd_v.mean())
    # the replicates, rebuilt from the bootstrap's own resample weights (same seed, same groups)
    codes = encode_groups(np.asarray(groups[: n - 2]))
    keys = jax.random.split(jax.random.key(OPTS.seed), OPTS.n_boot + 1)[1:]
    w = np.stack([np.asarray(resample_weights(k, codes.codes, codes.num_groups)) for k in keys])  # [B, N]
    reps = (w @ (sd_m - sd_v)) / w.sum(1)
    want = interval_summary(sd_m.mean() - sd_v.mean(), reps, 0.05, num_groups=19, min_groups=2, method="percentile")
    assert vs["diff"]["low"] == pytest.approx(want["low"], abs=1e-5)
    assert vs["diff"]["high"] == pytest.approx(want["high"], abs=1e-5)
    assert vs["diff"]["high"] < 0 and vs["diff"]["p_interval"] < 0.05


def test_an_item_undefined_on_some_range_leaves_the_reading_paired():
    x = np.array([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, np.nan, 4.0]])
    (rec,) = range_invariance(_items({"vanilla": x, "m": x + 1.0}, ["a", "b", "c", "d"]), {}, OPTS)
    assert rec["n_items"] == 3
    assert rec["methods"][1]["versus"][0]["diff"]["estimate"] == pytest.approx(0.0)


def test_a_single_range_has_no_invariance_row():
    # a run on one range (the demo's quick variants, a user's single scale): nothing to spread
    assert range_invariance(_items({"vanilla": np.ones((1, 4))}, ["a", "b", "c", "d"]), {}, OPTS) == []


def test_the_table_and_the_reports_section():
    from jaxjudge.report import Results
    from jaxjudge.report.invariance import invariance_table
    from jaxjudge.report.tables import markdown_report

    x = np.array([[1.0, 2.0, 3.0, 4.0], [2.0, 2.0, 3.0, 5.0]])
    recs = range_invariance(_items({"vanilla": x, "m": x * 0.5}, ["a", "b", "c", "d"]), {}, OPTS)
    text = invariance_table(recs)
    assert "j, t a, expected@1: 4 items (4 groups), ranges 0-4, 1-5" in text
    assert "| vanilla | 0.354 [" in text and "| m | 0.177 [" in text and "| vanilla (vanilla) | -0.177 [" in text
    res = Results("x", invariance=recs)
    assert "## Range invariance on items" in markdown_report(res)
    assert Results.from_dict(res.to_dict()).invariance == recs
    assert "invariance" not in Results("x").to_dict()  # results that predate it are written as before
