"""The registry's roles: the report finds the reference judge, the judge's own generation and
the calibration baselines through them, never by spelling a method's name."""

from __future__ import annotations

import numpy as np

from jaxjudge.report import evaluate_cell
from jaxjudge.report.cell_inputs import MethodOptions, make_splits
from jaxjudge.report.methods import GENERATION, METHODS, PARSED, REFERENCE, Role, role_of
from jaxjudge.report.ranges import range_statistics

from tests.report.test_report import simulated_judge


def test_one_reference_one_generation_and_single_row_role_families():
    assert [m.name for m in METHODS.values() if m.role is Role.REFERENCE] == [REFERENCE]
    assert [m.name for m in METHODS.values() if m.role is Role.GENERATION] == [GENERATION]
    assert GENERATION in PARSED and REFERENCE not in PARSED
    assert PARSED == {m.name for m in METHODS.values() if m.kind == "parsed"}
    # role_of reads a role from a row name alone: a family with a role has one row, its name.
    for m in METHODS.values():
        if m.role is not Role.METHOD:
            assert m.rows is None, m.name
    assert role_of("deb_t_tp10_ext") is Role.METHOD
    assert role_of("temperature_fine") is Role.METHOD
    assert {m for m in METHODS if role_of(m) is Role.CALIBRATION} == {"contextual", "batch", "distribution"}


def test_fixed_role_families_emit_rows_named_as_the_family():
    arrays = simulated_judge(n_docs=6, per_doc=6)
    splits = make_splits("kfold", arrays.groups, n_folds=2, seed=0)
    roles = [m for m in METHODS.values() if m.role is not Role.METHOD and m.kind == "fixed"]
    opts = MethodOptions(methods=tuple(m.name for m in roles), temperatures=(1.0,), greedy=False, n_boot=20)
    rep = evaluate_cell(arrays, splits, opts)
    assert {r["method"] for r in rep.rows} == {m.name for m in roles}
    # Only the reference row has no delta from the reference.
    for r in rep.rows:
        assert (r["delta"] is None) == (role_of(r["method"]) is Role.REFERENCE), r["method"]


def test_best_calibration_comparator_is_chosen_among_calibration_rows_only():
    arrays = [simulated_judge(seed=s, n_docs=8, per_doc=6) for s in (0, 1)]
    opts = MethodOptions(methods=("vanilla", "contextual", "batch", "deb_r"), temperatures=(1.0,), greedy=False,
                         n_boot=40, deb_tp=(10,))
    cells = []
    for scale, a in zip(("1-5", "2-6"), arrays):
        splits = make_splits("kfold", a.groups, n_folds=2, seed=0)
        cells.append(({"judge": "j", "task": "t", "aspect": "a", "scale": scale}, evaluate_cell(a, splits, opts)))
    recs = {r["method"]: r for r in range_statistics(cells, opts)}
    deb = recs["deb_r_tp10"]
    roles = {v["role"]: v["baseline"] for v in deb["versus"]}
    assert roles["vanilla"] == REFERENCE
    assert role_of(roles["calibration"]) is Role.CALIBRATION
    # A calibration row is not compared with the best calibration baseline; the reference
    # row is not compared with itself, and alone carries the range differences.
    assert all(v["role"] != "calibration" for v in recs["batch"]["versus"])
    assert [v["role"] for v in recs[REFERENCE]["versus"]] == ["calibration"]
    assert recs[REFERENCE]["range_diffs"]
    assert "range_diffs" not in deb
    assert np.isfinite(deb["mean"]["estimate"])


def test_the_registry_is_every_module_s_families_in_order():
    import importlib
    import pkgutil

    import jaxjudge.report.methods as pkg

    declared = []
    for info in pkgutil.iter_modules(pkg.__path__):
        if info.name != "base":
            declared += [m.name for m in importlib.import_module(f"{pkg.__name__}.{info.name}").FAMILIES]
    assert sorted(declared) == sorted(METHODS) and len(declared) == len(set(declared))
    orders = [m.order for m in METHODS.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders)
    assert list(METHODS)[:3] == [REFERENCE, GENERATION, "contrastive_generate"]


def test_a_family_s_kind_is_checked_when_declared():
    import pytest

    from jaxjudge.report.methods import Method, MethodKind

    assert Method("x", "tuned").kind is MethodKind.TUNED
    with pytest.raises(ValueError, match="'tunned' is not a valid MethodKind"):
        Method("x", "tunned")
