"""`benchmarks/bench_device.py --tiny`: the device benchmark runs on this CPU (so it cannot rot
unnoticed) and reports the engine end to end, the bare step and the model's bound for both."""

from __future__ import annotations

import importlib.util
import json
import math
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_device_tiny_reports_engine_bare_step_and_bound(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("bench_device", ROOT / "benchmarks" / "bench_device.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    out = tmp_path / "tiny.json"
    assert bench.main(["--tiny", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "engine.extract end to end" in printed and "bare step" in printed and "model's bound" in printed
    r = json.loads(out.read_text())
    assert r["tiny"] and r["devices"] == 1
    (score,) = r["score"]
    assert score["docs"] == 3 and score["tokens_per_doc"] == 96 + 4 * 24
    for key in ("engine_seconds_per_doc", "bare_seconds_per_doc"):
        assert 0 < score[key] < 60
    # The bound of the same work at the rates measured in the run: positive and finite.
    assert set(score["bound_seconds_per_doc"]) == {"measured"}
    assert 0 < score["bound_seconds_per_doc"]["measured"] < math.inf
    # useful flops of one document, by hand: 2 layers of d=256, 2 heads x 128, 1 KV head, f=512;
    # prefix 96 causal, 4 tails of 24 after it, the head (vocabulary 512) at one read per tail
    d, f, n, k, h, v = 256, 512, 2, 1, 128, 512
    per_token = 2 * 2 * (d * (n + 2 * k) * h + n * h * d + 3 * d * f)
    pairs = 96 * 97 // 2 + 4 * (24 * 96 + 24 * 25 // 2)
    assert score["flops_useful_per_doc"] == per_token * (96 + 4 * 24) + 2 * 2 * n * h * pairs * 2 + 2 * d * v * 4
    assert r["decode"]["rows"] == 2 and r["decode"]["seconds_per_token"] > 0
