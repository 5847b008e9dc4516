"""Verdicts by rule on hand-made results (`jaxjudge.report.claims`)."""

from __future__ import annotations

import pytest

from jaxjudge.report import Results
from jaxjudge.report.claims import BEGIN, END, Claim, _replace_block, verdict

LAB = {"judge": "j", "task": "t", "aspect": "a", "score": "expected@1", "metric": "spearman",
       "scales": ["1-5", "3-7"]}


def _iv(est, lo, hi, p_holm=None):
    return {"estimate": est, "low": lo, "high": hi, **({"p_holm": p_holm} if p_holm is not None else {})}


def _results(mean_diff, spread_diff, pair, primary=False):
    ranges = [
        {**LAB, "method": "vanilla", "mean": _iv(0.5, 0.4, 0.6), "spread": _iv(0.1, 0.0, 0.2), "versus": [],
         "range_diffs": [{"scales": ["1-5", "3-7"], "diff": pair}]},
        {**LAB, "method": "m", "mean": _iv(0.6, 0.5, 0.7), "spread": _iv(0.1, 0.0, 0.2),
         "versus": [{"baseline": "vanilla", "role": "vanilla", "mean_diff": mean_diff, "spread_diff": spread_diff,
                     "relative": _iv(0.1, 0.0, 0.2)},
                    {"baseline": "cal", "role": "calibration", "mean_diff": _iv(-0.2, -0.3, -0.1, 0.001),
                     "spread_diff": _iv(0.0, -0.1, 0.1, 1.0), "relative": _iv(0.0, 0.0, 0.0)}]},
    ]
    desc = {k: LAB[k] for k in ("judge", "task", "aspect", "score")}
    endpoints = {"primary": {"endpoints": [{"description": {**desc, "method": "m", "versus": "vanilla",
                                                            "statistic": "mean", "metric": "spearman"},
                                            "interval": mean_diff}]}} if primary else {}
    return Results("x", rows=[], ranges=ranges, endpoints=endpoints)


def _claim(**kw):
    base = dict(text="c", runs=("r",), method="m", versus="vanilla", statistic="mean", score="expected@1",
                expect="higher")
    return Claim(**{**base, **kw})


@pytest.mark.parametrize("iv, primary, want", [
    (_iv(0.1, 0.02, 0.2, 0.01), False, "holds"),
    (_iv(0.1, 0.02, 0.2, 0.2), False, "not shown"),   # clears 0 unadjusted only
    (_iv(0.1, 0.02, 0.2), True, "holds"),             # the primary is read unadjusted
    (_iv(-0.1, -0.2, -0.02, 0.001), False, "contradicted"),
    (_iv(0.05, -0.01, 0.1, 0.5), False, "not shown"),
])
def test_difference_verdicts(iv, primary, want):
    word, label, text = verdict(_results(iv, _iv(0, -1, 1, 1.0), _iv(0, -1, 1, 1.0), primary), _claim())
    assert word == want
    assert label.endswith("(*primary*)") == primary and f"{iv['estimate']:+.3f}" in text


def test_spread_equivalence_calibration_and_range_pairs():
    res = _results(_iv(0.01, -0.02, 0.025, 1.0), _iv(-0.1, -0.2, -0.05, 0.01), _iv(0.3, 0.2, 0.4, 0.004))
    assert verdict(res, _claim(statistic="spread", expect="lower"))[0] == "holds"
    assert verdict(res, _claim(expect="equivalent", margin=0.03))[0] == "holds (within ±0.03)"
    assert verdict(res, _claim(expect="equivalent", margin=0.02))[0] == "not shown"
    assert verdict(res, _claim(versus="@calibration"))[0] == "contradicted"
    word, label, _ = verdict(res, _claim(method="vanilla", versus=None, statistic="range pairs", expect="differs"))
    assert (word, label) == ("holds", "vanilla, ranges 1-5 − 3-7")
    with pytest.raises(ValueError, match="no comparison"):
        verdict(res, _claim(versus="other"))


def test_block_replaced_between_markers():
    text = f"intro\n{BEGIN}\nold\n{END}\ntail\n"
    assert _replace_block(text, "new", "f") == f"intro\n{BEGIN}\nnew\n{END}\ntail\n"


def test_a_nested_primary_is_quoted_with_its_own_interval():
    # The conditional interval clears 0; the primary's, with the selection redone in each
    # resample, does not: the claim reads the primary's.
    res = _results(_iv(0.1, 0.02, 0.2), _iv(0, -1, 1, 1.0), _iv(0, -1, 1, 1.0), primary=True)
    nested = _iv(0.1, -0.01, 0.21)
    (ep,) = res.endpoints["primary"]["endpoints"]
    ep["description"] = {**ep["description"], "selection": "nested"}
    ep["interval"] = nested
    word, label, text = verdict(res, _claim())
    assert (word, label) == ("not shown", "m − vanilla, mean (*primary*)")
    assert text == "+0.100 [-0.010, +0.210]"
