"""Verdicts by rule on hand-made results (`jaxjudge.report.claims`)."""

from __future__ import annotations

import pytest

from jaxjudge.report import Results
from jaxjudge.report.claims import BEGIN, END, Claim, Run, _replace_block, claims_table, verdict

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
    assert verdict(res, _claim(versus=None, role="calibration"))[0] == "contradicted"
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


def _two_judges() -> Results:
    """A run of two judges whose vanilla range pairs differ: the small one's pair has the smaller p."""
    big, small = _results(_iv(0, -1, 1, 1.0), _iv(0, -1, 1, 1.0), _iv(0.15, 0.1, 0.2, 1e-3)), \
        _results(_iv(0, -1, 1, 1.0), _iv(0, -1, 1, 1.0), _iv(-0.25, -0.3, -0.2, 1e-9))
    for rec in big.ranges:
        rec["judge"] = "big"
    for rec in small.ranges:
        rec["judge"] = "small"
    return Results("two", rows=[], ranges=big.ranges + small.ranges)


def test_a_run_of_two_judges_is_read_for_the_judge_named():
    res = _two_judges()
    pairs = _claim(method="vanilla", versus=None, statistic="range pairs", expect="differs")
    word, label, text = verdict(res, pairs, Run("r", "big"))
    assert (word, text) == ("holds", "+0.150 [+0.100, +0.200], Holm p 0.001")
    assert verdict(res, pairs, Run("r", "small"))[2].startswith("-0.250")
    with pytest.raises(ValueError, match=r"has judges \['big', 'small'\]; name one"):
        verdict(res, pairs)
    with pytest.raises(ValueError, match=r"has judges"):
        verdict(res, _claim())


def test_holm_across_runs(tmp_path):
    # two confirmatory primaries, unadjusted p 0.03 and 0.04: each clears 0.05 alone, Holm across
    # the two gives 0.06 and 0.06 (0.03 x 2, then max(0.06, 0.04 x 1)): neither holds
    for name, p in (("a", 0.03), ("b", 0.04)):
        res = _results({**_iv(0.1, 0.01, 0.2), "p": p}, _iv(0, -1, 1, 1.0), _iv(0, -1, 1, 1.0), primary=True)
        (tmp_path / name).mkdir()
        res.save_json(tmp_path / name / "results.json")
    lines = claims_table([_claim(runs=("a", "b"), holm_across_runs=True)], tmp_path).splitlines()[4:]
    assert len(lines) == 2 and all("Holm across runs" in line and "Holm p 0.06" in line for line in lines)
    assert all(line.endswith("**not shown** |") for line in lines)
    alone = claims_table([_claim(runs=("a", "b"))], tmp_path).splitlines()[4:]
    assert all(line.endswith("**holds** |") for line in alone)


def test_p_values_below_the_bootstraps_resolution_are_printed_as_such():
    from jaxjudge.report.intervals_text import format_p

    assert format_p(7.7e-67, 1000) == "<0.001" and format_p(0.0004, 2000) == "<0.0005"
    assert format_p(0.0012, 1000) == "0.0012" and format_p(7.7e-67) == "7.7e-67" and format_p(None) == "-"


@pytest.mark.parametrize("nested, want", [
    (_iv(0.1, 0.01, 0.2), "holds"),
    (_iv(0.1, -0.01, 0.21), "not shown"),  # the conditional interval clears 0, the nested one does not
])
def test_a_nested_secondary_claim_reads_the_nested_interval_with_the_held_fixed_holm_p(nested, want):
    res = _results(_iv(0.1, 0.02, 0.2, 0.01), _iv(0, -1, 1, 1.0), _iv(0, -1, 1, 1.0))
    res.ranges[1]["versus"][0]["nested"] = {"mean_diff": nested, "spread_diff": _iv(0, -1, 1), "relative": _iv(0, 0, 0)}
    word, label, text = verdict(res, _claim(nested=True))
    assert (word, label) == (want, "m − vanilla, mean (*nested*)")
    assert text == f"+0.100 [{nested['low']:+.3f}, {nested['high']:+.3f}], Holm p 0.01"
    # A held-fixed Holm p above 0.05 leaves a nested interval that clears 0 not shown.
    res.ranges[1]["versus"][0]["mean_diff"] = _iv(0.1, 0.02, 0.2, 0.2)
    assert verdict(res, _claim(nested=True))[0] == "not shown"
    # A run without the nested interval is refused, by name.
    del res.ranges[1]["versus"][0]["nested"]
    with pytest.raises(ValueError, match="has no nested interval of m vs vanilla, mean, expected@1"):
        verdict(res, _claim(nested=True))


def _registered(tmp_path, name, interval, verdict_word, status="registered before extraction"):
    res = _results(interval, _iv(0, -1, 1, 1.0), _iv(0, -1, 1, 1.0), primary=True)
    (ep,) = res.endpoints["primary"]["endpoints"]
    ep["verdict"] = verdict_word
    res.endpoints["primary"]["spec"] = {"margin": 0.02}
    res.registration = {"status": status}
    (tmp_path / name).mkdir()
    res.save_json(tmp_path / name / "results.json")
    return res


def test_a_registered_primary_shows_the_verdict_its_registration_defines(tmp_path):
    # The interval clears 0 (this module's rule: holds) but its lower bound is under the declared
    # margin 0.02: the registered rule says inconclusive, and the table prints that, not "holds".
    res = _registered(tmp_path, "conf", {**_iv(0.038, 0.013, 0.063), "p": 0.0027}, "inconclusive")
    claim = _claim(runs=("conf",), margin=0.02)
    assert verdict(res, claim)[0] == "inconclusive"
    line = claims_table([claim], tmp_path).splitlines()[-1]
    assert line.startswith("| c | conf | registered |") and line.endswith("**inconclusive** |")
    # Holm across runs changes the p quoted, not the registered verdict.
    _registered(tmp_path, "conf2", {**_iv(0.066, -0.022, 0.12), "p": 0.059}, "inconclusive")
    lines = claims_table([_claim(runs=("conf", "conf2"), holm_across_runs=True)], tmp_path).splitlines()[4:]
    assert [ln.rsplit("|", 2)[-2].strip() for ln in lines] == ["**inconclusive**"] * 2
    assert "Holm p 0.0054" in lines[0]


def test_an_unregistered_primary_is_marked_post_hoc_in_the_table(tmp_path):
    _registered(tmp_path, "late", _iv(0.054, 0.003, 0.094), "better", status="not registered")
    line = claims_table([_claim(runs=("late",))], tmp_path).splitlines()[-1]
    assert "| *post hoc* |" in line and line.endswith("**holds** |")  # this module's rule, not the record's


def test_the_committed_claims_table_gives_every_registered_endpoint_its_results_verdict():
    import json
    from pathlib import Path

    from jaxjudge.report.claims import _load_claims, plan

    root = Path(__file__).resolve().parents[2]
    seen = 0
    for c in _load_claims(str(root / "experiments" / "claims.py")):
        for run in c.run_refs():
            res = Results.load_json(root / "results" / run.path / "results.json")
            if plan(res, c, run) != "registered":
                continue
            seen += 1
            raw = json.loads((root / "results" / run.path / "results.json").read_text())["endpoints"]
            # the run's primary endpoint, or an endpoint its confirmatory plan registered
            (ep,) = [e for e in raw["primary"]["endpoints"] + raw.get("registered", [])
                     if (e["description"]["method"], e["description"]["versus"]) == (c.method, c.versus)][:1]
            assert verdict(res, c, run)[0] == ep["verdict"]
    assert seen >= 2


def test_the_p_printed_beside_an_interval_is_the_intervals_own():
    from jaxjudge.report.endpoint_tables import interval_p, primary_line

    # the exploratory STS-B primary: a percentile interval touching 0 beside a Wald p of 0.040
    iv = {**_iv(0.044, -0.0002, 0.085), "n_boot": 1000, "p": 0.040, "p_interval": 0.052}
    res = _results(iv, _iv(0, -1, 1, 1.0), _iv(0, -1, 1, 1.0), primary=True)
    line = primary_line(res)
    assert ", p 0.052" in line and "p 0.04" not in line.replace("p 0.052", "")
    assert interval_p({"p": 0.04}) == 0.04  # results that predate p_interval keep their Wald p
