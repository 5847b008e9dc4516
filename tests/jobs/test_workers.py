"""Workers sharing one store root in a bucket of the Cloud Storage emulator the tests start
(tests/conftest.py): `jaxjudge extract` started twice on the same config splits the chunks; one
killed with SIGKILL mid-run leaves its chunks to the other, and the store equals an uninterrupted
run's on the local disk; the report of the bucket's stores equals the local one's.

Slow: four extractions and two reports (subprocesses) on the tiny random judge with SmolLM2's
tokenizer (tests/tiny_judge.py): what is checked is the claims and the storage, not the judge's
numbers (its report reads Spearman only).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from jaxjudge.experiment import ExperimentConfig, SubsetSpec, TaskSpec, config_to_dict
from jaxjudge.store import Store
from jaxjudge.store.location import location

from tests.xla_flags import xla_flags

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.slow, pytest.mark.alone]  # alone: it starts processes of its own


def _experiment(tmp_path: Path, judge: Path) -> Path:
    from tests.tiny_judge import spec

    cfg = ExperimentConfig(
        name="workers", models=(spec(judge),),
        tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="kfold", n_folds=2,
                        subset=SubsetSpec("two documents: a short test", n_docs=2)),),
        scales=("1-5",), methods=("vanilla", "contextual"), temperatures=(1.0,), metrics=("spearman",),
        engine={"chunk_size": 2, "batch_size": 2}, claim_lease=2.0,
    )
    data = tmp_path / "workers.json"
    data.write_text(json.dumps(config_to_dict(cfg)))
    path = tmp_path / "workers.py"
    path.write_text("import json\nfrom jaxjudge.experiment import config_from_dict\n\n\n"
                    f"def get_config(arg=None):\n    return config_from_dict(json.loads(open({str(data)!r}).read()))\n")
    return path


def _start(tmp_path: Path, config: Path, stores, log: str, command: str = "extract", *more: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PYTHONUNBUFFERED": "1"}
    env["XLA_FLAGS"] = xla_flags()
    out = open(tmp_path / log, "w")
    return subprocess.Popen([sys.executable, "-m", "jaxjudge.cli", command, str(config), "--quiet",
                             "--stores", str(stores), *more], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)


def _arrays(root) -> dict[str, dict[str, np.ndarray]]:
    """Every store two levels under ``root`` (``<model>/<job>``), by its folder's relative path."""
    return {str(s.relative_to(root)): Store.open(s).load()
            for m in sorted(root.iterdir()) if m.is_dir() for s in sorted(m.iterdir()) if (s / "manifest.json").is_file()}


def _first_difference(a, b, at="") -> str:
    """Where two JSON values first differ, as a path and the two values."""
    if isinstance(a, dict) and isinstance(b, dict) and a.keys() == b.keys():
        return next((_first_difference(a[k], b[k], f"{at}/{k}") for k in a if a[k] != b[k]), "")
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return next((_first_difference(x, y, f"{at}[{i}]") for i, (x, y) in enumerate(zip(a, b)) if x != y), "")
    return f"{at}: {a!r} != {b!r}"


def test_a_killed_workers_chunks_are_done_by_the_other(tmp_path, tiny_gguf, gcs_bucket):
    """In a bucket, where no folder is shared and a dead worker's claim is taken over after the
    lease. The same story on a local disk, and in a bucket for the claims alone, is
    tests/store/test_workers_store.py's (workers in seconds, without a model)."""
    config = _experiment(tmp_path, tiny_gguf)
    shared, alone = location(gcs_bucket) / "shared", tmp_path / "alone"
    a = _start(tmp_path, config, shared, "a.log")
    b = _start(tmp_path, config, shared, "b.log")
    # An uninterrupted run in a store root of its own, on the local disk, beside them (it shares
    # nothing with them; started now, it keeps both cores busy once one worker is gone).
    c = _start(tmp_path, config, alone, "c.log")
    score = shared / "tiny" / "score-summeval-coherence-1-5" / "chunks"
    deadline = time.time() + 600
    while not (score.is_dir() and any(p.suffix == ".npz" for p in score.iterdir())):
        assert a.poll() is None and time.time() < deadline, (tmp_path / "a.log").read_text()[-2000:]
        time.sleep(0.05)
    a.send_signal(signal.SIGKILL)  # mid-run: 16 chunks of 2 summaries, the first just written
    a.wait()
    assert len(list(score.glob("*.npz"))) < 16  # killed with work left
    assert b.wait(timeout=600) == 0, (tmp_path / "b.log").read_text()[-2000:]
    manifest = json.loads((score.parent / "manifest.json").read_text())
    assert len(list(score.glob("*.npz"))) == manifest["n_chunks"] == 16
    # Every claim released or taken over, except one the killed worker may have left on a chunk
    # it had written but not yet released (the other worker finishes within the lease then, and
    # leaves a live-looking claim alone; it marks no missing work).
    left = [p.name for p in score.glob(".*.claim")]
    assert len(left) <= 1 and all((score / (n[1:-len(".claim")] + ".npz")).exists() for n in left), left

    # The uninterrupted run gives the same arrays.
    assert c.wait(timeout=600) == 0, (tmp_path / "c.log").read_text()[-2000:]
    got, want = _arrays(shared), _arrays(alone)
    assert got.keys() == want.keys() and len(got) == 2  # score, content_free
    for store, arrays in want.items():
        for name, value in arrays.items():
            if value.dtype.kind == "f":
                np.testing.assert_allclose(got[store][name], value, atol=1e-6, err_msg=f"{store}: {name}")
            else:
                np.testing.assert_array_equal(got[store][name], value, err_msg=f"{store}: {name}")

    # The killed worker, restarted, finds everything done; beside it (they only read), the report
    # of the bucket's stores, its run folder beside them in the bucket, and the report of the
    # uninterrupted local stores on the local disk: the same results.json.
    again = _start(tmp_path, config, shared, "again.log")
    results = {"beside": (shared, shared.parent / "results"), "local": (alone, tmp_path / "local-results")}
    reports = {name: _start(tmp_path, config, stores, f"report-{name}.log", "report", "--results", str(where),
                            "--run", "r1") for name, (stores, where) in results.items()}
    assert again.wait(timeout=600) == 0
    log = (tmp_path / "again.log").read_text()
    assert "computed " not in log and log.count("cached") == 2, log
    for name, report in reports.items():
        assert report.wait(timeout=600) == 0, (tmp_path / f"report-{name}.log").read_text()[-2000:]
    folders = {name: where / "workers" / "r1" for name, (_, where) in results.items()}
    beside, local = (json.loads(folders[k].joinpath("results.json").read_text()) for k in ("beside", "local"))
    # Each store root registered the analysis plan, and wrote its first store, at its own first
    # extraction: the same plan, other times.
    for got in (beside, local):
        assert got["registration"].pop("registered_utc") and got["registration"].pop("first_store_utc")
    assert beside == local, _first_difference(beside, local)
    assert (folders["beside"] / "metadata.json").is_file()
