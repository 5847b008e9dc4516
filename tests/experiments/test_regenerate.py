"""A committed run regenerates from its committed stores, with no model and no forward pass.

`jaxjudge report` on the committed stores of ``results/score_range_bias/cpu_stsb`` must give the
committed ``results.json`` again: every label and count exactly, every number within 1e-6
(absolute, or relative for numbers above 1).

The statistics run in float32 under XLA, whose reduction order follows the CPU's vector width
and the arrays' layout: the same stores reported on two machines differ in the 8th significant
digit (measured: 1.5e-8 on a Kendall bound), and an SDD of 16.8 nats moved by 2e-6 when the
cell statistic's rows were laid out per fold instead of per row. The tolerance is a float32
one (1e-4 relative for the ratio ``relative.vs_vanilla``, which divides by a vanilla estimate
that can be near 0); results print 3 decimals.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from jaxjudge.experiment import load_config
from jaxjudge.report import report_from_store
from jaxjudge.report.results import Results

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO.parent / "shared" / "data"  # the human scores the run is reported against


def _compare(a, b, where="results"):
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{where}: keys {sorted(set(a) ^ set(b))}"
        for k in a:
            _compare(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), f"{where}: lengths differ"
        for i, (x, y) in enumerate(zip(a, b)):
            _compare(x, y, f"{where}[{i}]")
    elif isinstance(a, float) or isinstance(b, float):
        assert isinstance(a, (int, float)) and isinstance(b, (int, float)), f"{where}: {a!r} vs {b!r}"
        # relative.vs_vanilla = (m - b) / |b| divides float32 noise by a vanilla estimate near 0.
        t = 1e-4 if where.rsplit(".", 1)[-1] in ("vs_vanilla", "vs_generate") else 1e-6
        assert math.isclose(a, b, rel_tol=t, abs_tol=t) or (math.isnan(a) and math.isnan(b)), f"{where}: {a!r} vs {b!r}"
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "stsb").is_dir(), reason="shared data absent (../shared/data/stsb)")
def test_committed_run_regenerates_from_its_stores(monkeypatch):
    monkeypatch.chdir(REPO)
    run = REPO / "results" / "score_range_bias" / "cpu_stsb"
    cfg = load_config("experiments/score_range_bias.py:cpu_stsb")
    assert (REPO / cfg.store_root).is_dir(), f"the committed stores {cfg.store_root} are missing"
    fresh = report_from_store(cfg.store_root, cfg)
    committed = Results.load_json(run / "results.json")
    _compare(fresh.to_dict()["rows"], committed.to_dict()["rows"], "rows")
    _compare(fresh.to_dict()["notes"], committed.to_dict()["notes"], "notes")
