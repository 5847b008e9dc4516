"""Prose numbers read by typed keys and checked (`jaxjudge.report.quotes`, the claims CLI)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from jaxjudge.report import Results
from jaxjudge.report.claims import main
from jaxjudge.report.quotes import Quote, quote_text, splice

REPO = Path(__file__).resolve().parents[2]
LAB = {"judge": "j", "task": "t", "aspect": "a", "score": "expected@1", "metric": "spearman", "scales": ["1-5", "3-7"]}


def _res() -> Results:
    iv = {"estimate": 0.0123, "low": 0.0021, "high": 0.0226, "n_boot": 1000, "p": 0.01, "p_holm": 0.3}
    ranges = [{**LAB, "method": "m", "mean": {"estimate": 0.5, "low": 0.4, "high": 0.6},
               "spread": {"estimate": 0.1, "low": 0.0, "high": 0.2},
               "versus": [{"baseline": "vanilla", "role": "vanilla", "mean_diff": iv,
                           "spread_diff": {"estimate": -0.02, "low": -0.05, "high": 0.01, "p": 0.2, "p_holm": 1.0},
                           "relative": {"estimate": 0.02}}]}]
    rows = [{"judge": "j", "task": "t", "aspect": "a", "score": "expected@1", "method": "vanilla", "scale": "3-7",
             "metrics": {"spearman": {"estimate": -0.165, "low": -0.262, "high": -0.068}}}]
    endpoints = {"primary": {"endpoints": [{"description": {**{k: LAB[k] for k in ("judge", "task", "aspect", "score")},
                                                            "method": "m", "versus": "vanilla", "statistic": "mean",
                                                            "metric": "spearman"},
                                            "interval": iv, "verdict": "inconclusive"}]},
                 "secondary": {"count": 1490}}
    return Results("x", rows=rows, ranges=ranges, endpoints=endpoints)


@pytest.mark.parametrize("quote, want", [
    (Quote("r", "m", "vanilla"), "+0.012 [0.002, 0.023]"),
    (Quote("r", "m", "vanilla", digits=4), "+0.0123 [0.0021, 0.0226]"),
    (Quote("r", "m", "vanilla", show="p_holm"), "0.3"),
    (Quote("r", "m", "vanilla", "spread", show="estimate"), "-0.020"),
    (Quote("r", "vanilla", None, "3-7", kind="metric"), "-0.165 [-0.262, -0.068]"),
    (Quote("r", "m", "vanilla", kind="primary", show="verdict"), "inconclusive"),
    (Quote("r", kind="secondary count", show="count"), "1,490"),
])
def test_quotes_read_by_typed_keys(quote, want):
    assert quote_text(quote, _res()) == want


def test_splice_rewrites_spans_and_refuses_unknown_or_unused(tmp_path):
    (tmp_path / "r").mkdir()
    _res().save_json(tmp_path / "r" / "results.json")
    quotes = {"a": Quote("r", "m", "vanilla")}
    text = "gain <!-- q:a -->+0.011 [0.002, 0.019]<!-- /q --> here"
    assert splice(text, quotes, tmp_path) == "gain <!-- q:a -->+0.012 [0.002, 0.023]<!-- /q --> here"
    with pytest.raises(ValueError, match="does not define"):
        splice(text + " <!-- q:b -->1<!-- /q -->", quotes, tmp_path)
    with pytest.raises(ValueError, match=r"defined but not in the text: \['c'\]"):
        splice(text, {**quotes, "c": Quote("r", "m", "vanilla")}, tmp_path)
    with pytest.raises(ValueError, match="0 records match"):
        splice(text, {"a": Quote("r", "m", "other")}, tmp_path)


def test_check_passes_on_the_committed_page_and_fails_on_a_changed_prose_number(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(REPO)
    page = tmp_path / "README.md"
    text = (REPO / "results" / "README.md").read_text(encoding="utf-8")
    page.write_text(text, encoding="utf-8")
    assert main(["experiments/claims.py", "--check", str(page)]) == 0
    # The Holm p of contrastive - vanilla on STS-B as the prose printed it before the runs moved.
    stale = re.sub(r"(<!-- q:stsb\.vs_vanilla\.holm -->)[^<]*(<!-- /q -->)", r"\g<1>0.91\g<2>", text)
    assert stale != text
    page.write_text(stale, encoding="utf-8")
    assert main(["experiments/claims.py", "--check", str(page)]) == 1
    assert "quotes: ('stsb.vs_vanilla.holm', '0.91') -> ('stsb.vs_vanilla.holm', '1')" in capsys.readouterr().out
    assert main(["experiments/claims.py", "--write", str(page)]) == 0
    assert page.read_text(encoding="utf-8") == text


def test_invariance_quotes():
    res = _res()
    res.invariance = [{"judge": "j", "task": "t", "aspect": "a", "score": "expected@1", "scales": ["1-5", "3-7"],
                       "n_items": 4, "n_groups": 4, "methods": [
                           {"method": "vanilla", "item_sd": {"estimate": 0.45, "low": 0.44, "high": 0.47}, "versus": []},
                           {"method": "m", "item_sd": {"estimate": 0.3, "low": 0.28, "high": 0.33},
                            "versus": [{"baseline": "vanilla", "role": "vanilla",
                                        "diff": {"estimate": -0.15, "low": -0.17, "high": -0.13, "p_interval": 0.0,
                                                 "n_boot": 1000}}]}]}]
    assert quote_text(Quote("r", "vanilla", kind="invariance"), res) == "0.450 [0.440, 0.470]"
    assert quote_text(Quote("r", "m", "vanilla", kind="invariance"), res) == "-0.150 [-0.170, -0.130]"
    assert quote_text(Quote("r", "m", "vanilla", kind="invariance", show="p_interval"), res) == "<0.001"
    with pytest.raises(ValueError, match="0 records match"):
        quote_text(Quote("r", "m", "other", kind="invariance"), res)
