"""Locations a run cannot serve are refused before any work, and a slice whose join fails stops."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from jaxjudge.experiment import ConfigError, check_location, load_config, with_overrides
from jaxjudge.experiment import distributed

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value", ["gs://bucket/stores", "gs:/bucket/stores", "s3://b/p", "file:///tmp/x"])
def test_urls_and_their_typos_are_refused_naming_the_field(value):
    with pytest.raises(ConfigError, match=r"^--stores: .* location; this version reads and writes local"):
        check_location("--stores", value)
    cfg = load_config(str(REPO / "experiments" / "demo.py:ci"))
    with pytest.raises(ConfigError, match=r"^ExperimentConfig.results_root: "):
        with_overrides(cfg, {"results_root": value})


@pytest.mark.parametrize("value", [None, "stores", "results/stores/x", "/tmp/a:b", "C:/stores", "../shared/x"])
def test_local_paths_pass(value):
    check_location("--stores", value)


def test_the_cli_refuses_a_bucket_before_any_work(tmp_path):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "jaxjudge.cli", "extract", str(REPO / "experiments" / "demo.py:ci"),
                           "--stores", "gs://bucket/stores", "--quiet"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "jaxjudge extract: --stores: 'gs://bucket/stores' names a 'gs' location; this version reads and writes "
        "local or mounted folders only (on a TPU pod, give a filesystem every host mounts at the same path, "
        "e.g. NFS)"]
    assert not any(tmp_path.iterdir())  # no folder named gs: (nor anything else)


def test_a_failed_join_on_a_slice_of_several_workers_stops(monkeypatch):
    def fail(**_):
        raise RuntimeError("coordinator unreachable\ndetails")

    monkeypatch.setattr(distributed.jax.distributed, "initialize", fail)
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "t1k-w-0,t1k-w-1")
    with pytest.raises(ConfigError, match=r"^joining the TPU slice's 2 workers \(TPU_WORKER_HOSTNAMES\) failed: "
                                          r"coordinator unreachable; nothing was run$"):
        distributed.start(None)
    # one named worker (a single-host slice): a warning, then one process
    monkeypatch.setenv("TPU_WORKER_HOSTNAMES", "t1k-w-0")
    with pytest.warns(UserWarning, match="no multi-host TPU slice detected"):
        assert distributed.start(None) is False
