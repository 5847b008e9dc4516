"""Choices at the edge of their grid, counted from a report's rows and grids (hand-made cases)."""

from __future__ import annotations

import pytest

from jaxjudge.report import Results, markdown_report
from jaxjudge.report.edges import edge_table, grid_edges

LABELS = {"judge": "j", "task": "stsb", "aspect": "similarity"}


def _results(hparams, dev, params, method="m", score="expected@1"):
    row = {**LABELS, "scale": "1-5", "method": method, "score": score, "n": 10, "n_folds": len(hparams),
           "n_test": 5, "metrics": {"spearman": {"estimate": 0.5, "low": 0.4, "high": 0.6}}, "delta": None,
           "hparams": hparams, "dev_metric": [None] * len(hparams), "test_metric": [None] * len(hparams)}
    vanilla = {**row, "method": "vanilla", "hparams": [{} for _ in hparams]}
    aux = {**LABELS, "scale": "1-5", "grids": {f"{method}|{score}": {"params": params, "dev": dev, "test": dev}}}
    return Results(experiment="unit", rows=[vanilla, row], aux=[aux], notes=[])


# lam x t, lam varying fastest here: points (0.1, 1) (0.5, 1) (1, 1) (0.1, 2) (0.5, 2) (1, 2).
PARAMS = {"lam": [0.1, 0.5, 1.0, 0.1, 0.5, 1.0], "t": [1.0, 1.0, 1.0, 2.0, 2.0, 2.0], "alpha": [0.1] * 6}
DEV = [0.3, 0.3, 0.3, 0.1, 0.2, 0.4]  # flat in lam at t = 1, rising in lam at t = 2


def test_edges_counted_per_parameter_with_ties_apart():
    hparams = [
        {"lam": 1.0, "t": 2.0, "alpha": 0.1},  # lam at the top (0.1 < 0.2 < 0.4 at t = 2); t at the top
        {"lam": 0.5, "t": 2.0, "alpha": 0.1},  # lam inside; t at the top (0.3 vs 0.2 at lam = 0.5)
        {"lam": 0.1, "t": 1.0, "alpha": 0.1},  # lam among ties (0.3 everywhere at t = 1); t at the bottom
    ]
    recs = {e["param"]: e for e in grid_edges(_results(hparams, DEV, PARAMS))}
    assert set(recs) == {"lam", "t"}  # alpha takes one value: no choice
    assert {k: recs["lam"][k] for k in ("low", "high", "at_low", "at_high", "flat", "choices")} == {
        "low": 0.1, "high": 1.0, "at_low": 0, "at_high": 1, "flat": 1, "choices": 3}
    assert {k: recs["t"][k] for k in ("low", "high", "at_low", "at_high", "flat", "choices")} == {
        "low": 1.0, "high": 2.0, "at_low": 1, "at_high": 2, "flat": 0, "choices": 3}
    # The last step's dev change at the edge choices: lam at t = 2 goes 0.2 -> 0.4 (0.2); t at
    # lam = 1 goes 0.3 -> 0.4 (0.1), at lam = 0.5 0.3 -> 0.2 (0.1), at lam = 0.1 (bottom) 0.1 -> 0.3 (0.2).
    assert recs["lam"]["last_step"] == pytest.approx(0.2) and recs["t"]["last_step"] == pytest.approx(0.2)
    table = edge_table(_results(hparams, DEV, PARAMS)).splitlines()
    assert table[2] == "| j | m | expected@1 | lam | 0.1 .. 1 | 0 of 3 | 1 of 3 | 1 | 3 | 0.2000 |"
    assert table[3] == "| j | m | expected@1 | t | 1 .. 2 | 1 of 3 | 2 of 3 | 0 | 3 | 0.2000 |"
    md = markdown_report(_results(hparams, DEV, PARAMS))
    assert "## Choices at the edge of their grid" in md and table[3] in md


def test_a_choice_inside_the_grid_is_not_flagged_and_untuned_runs_say_nothing():
    params = {"lam": [0.1, 0.5, 1.0]}
    inside = _results([{"lam": 0.5}, {"lam": 0.5}], [0.1, 0.3, 0.2], params)
    assert [(e["at_low"], e["at_high"], e["flat"], e["choices"]) for e in grid_edges(inside)] == [(0, 0, 0, 2)]
    assert edge_table(inside) == ""
    assert "No tuned choice sits at an edge of its grid." in markdown_report(inside)
    untuned = Results(experiment="unit", rows=inside.rows[:1], aux=[{**LABELS, "scale": "1-5", "grids": {}}], notes=[])
    assert grid_edges(untuned) == [] and "edge of its grid" not in markdown_report(untuned)
    # A NaN dev metric (stored as None) is no tie.
    gap = _results([{"lam": 0.1}], [None, None, 0.2], params)
    assert [(e["at_low"], e["flat"]) for e in grid_edges(gap)] == [(1, 0)]
