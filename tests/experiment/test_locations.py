"""Locations a run cannot serve are refused before any work (a bucket where gcsfs is installed is served)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from jaxjudge.experiment import ConfigError, check_location, load_config, with_overrides
from jaxjudge.data.tasks import resolve_data_dir
from jaxjudge.store import location

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value, why", [
    ("gs:/bucket/stores", r"looks like a mistyped 'gs' URL \(did you mean 'gs://bucket/stores'\?\)"),
    ("gs:bucket/stores", r"looks like a mistyped 'gs' URL \(did you mean 'gs://bucket/stores'\?\)"),
    ("s3://b/p", r"names a 's3' location, which this version cannot read or write \(it serves local folders and "
                 r"gs://bucket/prefix\)$"),
    ("file:///tmp/x", r"names a 'file' location, which this version cannot read or write"),
    ("gs://", r"does not name a bucket \('' is not a bucket name\)"),
    ("gs://My_Bucket/x", r"does not name a bucket \('My_Bucket' is not a bucket name\)"),
])
def test_unserved_schemes_and_mistyped_urls_are_refused_naming_the_field(value, why):
    with pytest.raises(ConfigError, match=rf"^--stores: {re.escape(repr(value))} {why}"):
        check_location("--stores", value)
    cfg = load_config(str(REPO / "experiments" / "demo.py:ci"))
    with pytest.raises(ConfigError, match=r"^ExperimentConfig.results_root: "):
        with_overrides(cfg, {"results_root": value})


def test_a_bucket_is_a_location_where_its_libraries_are_installed(monkeypatch):
    check_location("--stores", "gs://bucket/stores")
    cfg = with_overrides(load_config(str(REPO / "experiments" / "demo.py:ci")),
                         {"store_root": "gs://bucket/stores", "results_root": "gs://bucket/results"})
    assert cfg.store_root == "gs://bucket/stores"
    # Without them (the gcs extra not installed): refused, naming what is missing.
    monkeypatch.setitem(location.SERVED, "gs", ("gcsfs", "a_module_that_is_not_installed"))
    with pytest.raises(ConfigError, match=r"^--stores: 'gs://bucket/stores' needs a_module_that_is_not_installed, "
                                          r"which are not installed \(pip install 'jaxjudge\[gcs\]'\)$"):
        check_location("--stores", "gs://bucket/stores")


@pytest.mark.parametrize("value", [None, "stores", "results/stores/x", "/tmp/a:b", "C:/stores", "../shared/x"])
def test_local_paths_pass(value):
    check_location("--stores", value)
    if value is not None:
        assert isinstance(location.location(value), Path)


@pytest.mark.parametrize("flag, value, line", [
    ("--stores", "gs:/bucket/stores", "--stores: 'gs:/bucket/stores' looks like a mistyped 'gs' URL (did you mean "
     "'gs://bucket/stores'?); a URL is scheme://bucket/prefix, and a local folder cannot start with 'gs:'"),
    ("--results", "s3://bucket/results", "--results: 's3://bucket/results' names a 's3' location, which this version "
     "cannot read or write (it serves local folders and gs://bucket/prefix)"),
])
def test_the_cli_refuses_an_unserved_location_before_any_work(tmp_path, flag, value, line):
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "jaxjudge.cli", "sweep", str(REPO / "experiments" / "demo.py:ci"),
                           flag, value, "--quiet"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [f"jaxjudge sweep: {line}"]
    assert not any(tmp_path.iterdir())  # no folder named gs: (nor anything else)


def test_a_data_folder_may_be_a_bucket_and_a_bad_one_is_one_line(monkeypatch):
    from jaxjudge.experiment import TaskSpec
    from jaxjudge.experiment.checks import _task_problems

    stsb = TaskSpec("stsb", ("similarity",), data="gs://bucket/data/stsb", split="original")
    assert str(resolve_data_dir(stsb)) == "gs://bucket/data/stsb"
    for value, why in (("gs:/bucket/stsb", "looks like a mistyped 'gs' URL"),
                       ("s3://bucket/stsb", "names a 's3' location, which this version cannot read or write")):
        with pytest.raises(ConfigError, match=rf"^TaskSpec\[stsb\]\.data: {re.escape(repr(value))} {why}"):
            TaskSpec("stsb", ("similarity",), data=value, split="original")
    with pytest.raises(ConfigError, match=r"^TaskSpec\[summeval\]\.data: 'gs://bucket/s': SummEval's files are read "
                                          r"from a local folder"):
        TaskSpec("summeval", ("coherence",), data="gs://bucket/s")
    # $JAXJUDGE_DATA_DIR for data="shared": a bucket prefix, or one line naming the variable.
    shared = TaskSpec("stsb", ("similarity",), data="shared", split="original")
    monkeypatch.setenv("JAXJUDGE_DATA_DIR", "gs://bucket/data")
    assert str(resolve_data_dir(shared)) == "gs://bucket/data/stsb"
    monkeypatch.setenv("JAXJUDGE_DATA_DIR", "gs:/bucket/data")
    (problem,) = _task_problems(shared)
    assert problem.startswith("task 'stsb': $JAXJUDGE_DATA_DIR: 'gs:/bucket/data' looks like a mistyped "
                              "'gs' URL"), problem


def test_a_mistyped_compile_cache_variable_is_one_line_and_changes_nothing(monkeypatch):
    import jax

    from jaxjudge.cli import enable_compile_cache

    before = jax.config.jax_compilation_cache_dir
    monkeypatch.setenv("JAXJUDGE_XLA_CACHE", "gs:/bucket/xla")
    with pytest.raises(ConfigError, match=r"^\$JAXJUDGE_XLA_CACHE: 'gs:/bucket/xla' looks like a mistyped 'gs' URL"):
        enable_compile_cache()
    assert jax.config.jax_compilation_cache_dir == before
