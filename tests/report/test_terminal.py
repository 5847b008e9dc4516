"""The printed summary: narrow tables, one footnote per distinct reason, the primary first."""

from __future__ import annotations

from jaxjudge.report import Results
from jaxjudge.report.terminal import terminal_report

LABELS = {"judge": "j", "task": "summeval", "aspect": "coherence"}


def _row(method, scale, iv, score="expected@0.2", **extra):
    return {**LABELS, "scale": scale, "method": method, "score": score, "metrics": {"spearman": iv}, **extra}


def test_terminal_report_footnotes_and_width():
    few = {"estimate": 0.1, "low": None, "high": None, "reason": "too few groups (4 < 10)"}
    rows = [
        _row("vanilla", "1-5", {"estimate": 0.412, "low": 0.351, "high": 0.47}),
        _row("vanilla", "3-7", {"estimate": -0.05, "low": -0.121, "high": 0.02}),
        _row("a_rather_long_method_name_x", "1-5", few),
        _row("a_rather_long_method_name_x", "3-7", few),
        _row("generate", "1-5", {"estimate": None}, score="generate", n=64, parse_failures=58, n_distinct_parsed=1),
        _row("generate", "3-7", {"estimate": 0.2, "low": 0.1, "high": 0.3}, score="generate", n=64,
             parse_failures=0, n_distinct_parsed=3),
    ]
    res = Results("x", rows=rows, endpoints={"secondary": {"count": 3, "significant": 1, "alpha": 0.05}})
    lines = terminal_report(res).splitlines()
    assert lines[0].startswith("No primary endpoint is declared")
    body = {line.split()[0]: line for line in lines if line.startswith(("vanilla", "a_rather", "generate"))}
    assert body["vanilla"].split("  ")[0] == "vanilla" and "0.41 [.35,.47]" in body["vanilla"]
    assert "-0.05 [-.12,.02]" in body["vanilla"]
    # The same reason twice: one footnote letter; a fully parsed generation has no note.
    assert body["a_rather_long_method_name_x"].count("(a)") == 2
    assert "- (b)" in body["generate"] and "0.20 [.10,.30]" in body["generate"]
    assert "(a) no interval: too few groups (4 < 10)" in lines
    assert "(b) 6/64 generations parsed, all the same score" in lines
    assert max(len(line) for line in lines) <= 100
