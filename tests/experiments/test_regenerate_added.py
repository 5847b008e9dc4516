"""`experiments/regenerate.py --add`: a part or key the code now computes is added to a committed
results.json only where every committed number regenerates, and no committed value changes."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _regenerate():
    spec = importlib.util.spec_from_file_location("regenerate_script", REPO / "experiments" / "regenerate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_added_keys_are_allowed_only_when_asked_and_committed_values_are_kept():
    regen = _regenerate()
    committed = {"rows": [{"delta": {"estimate": 0.1, "p": 0.01}}], "notes": ["n"]}
    fresh = {"rows": [{"delta": {"estimate": 0.1 + 4e-7, "p": 0.01, "p_interval": 0.02}}], "notes": ["n"],
             "invariance": [{"item_sd": 0.4}]}
    # p_interval came after the run: not a difference (a new part, invariance, main leaves out)
    assert regen.compare({k: fresh[k] for k in committed}, committed, 1e-6) == []
    assert regen.compare(fresh, committed, 1e-6)
    assert regen.compare({**fresh, "rows": [{"delta": {"estimate": 0.1, "p": 0.01, "other": 1}}]},
                         committed, 1e-6)  # any other new key is
    assert regen.compare(fresh, committed, 1e-6, added_ok=True) == []
    merged = regen.with_added(committed, fresh)
    assert merged["rows"][0]["delta"] == {"estimate": 0.1, "p": 0.01, "p_interval": 0.02}  # 0.1 kept, not 0.1000004
    assert merged["invariance"] == [{"item_sd": 0.4}] and merged["notes"] == ["n"]
    # a committed key the fresh results lack is a difference, added_ok or not
    assert regen.compare({"rows": []}, {"rows": [], "notes": []}, 1e-6, added_ok=True)
    # a number that moved past the tolerance is a difference, added_ok or not
    moved = {**fresh, "rows": [{"delta": {"estimate": 0.2, "p": 0.01, "p_interval": 0.02}}]}
    assert regen.compare(moved, committed, 1e-6, added_ok=True)
