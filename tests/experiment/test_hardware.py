"""The hardware a config names: dtype, mesh and compile cache, checked before any model loads.

The mesh test runs the tiny random judge with SmolLM2's tokenizer (tests/tiny_judge.py; slow): a
2 x 2 mesh over four of the eight host devices (tests/conftest.py) gives the same score
log-probabilities as one device. The parameter bytes are those of the tiny judge's file, and the
refusal of a judge too large reads the real SmolLM2 file's header (no weights).
"""

from __future__ import annotations

import jax
import numpy as np
import pytest

from experiments.registry import SMOLLM2
from jaxjudge.data import SUMMEVAL_SUBSET_DOC_IDS
from jaxjudge.experiment import ConfigError, ExperimentConfig, SubsetSpec, TaskSpec, run_extractions, with_overrides
from jaxjudge.experiment.hardware import mesh_for
from jaxjudge.report import StoreLookupError, report_from_store
from jaxjudge.store import Store


def _cfg(tmp_path, model=SMOLLM2, **kw):
    docs = SUMMEVAL_SUBSET_DOC_IDS[:2]
    base = dict(name="hw", models=(model,),
                tasks=(TaskSpec("summeval", ("coherence",), data="embedded", split="fixed_docs", dev_docs=docs[:1],
                                subset=SubsetSpec(reason="test", doc_ids=docs)),),
                scales=("1-5",), methods=("vanilla",), temperatures=(1.0,), greedy=False, lambdas_extended=None,
                n_boot=20, store_root=str(tmp_path / "stores"), results_root=str(tmp_path / "results"))
    return ExperimentConfig(**{**base, **kw})


def test_mesh_and_dtype_fields_are_checked(tmp_path):
    with pytest.raises(ConfigError, match=r"mesh\.dat: .*did you mean 'data'"):
        _cfg(tmp_path, mesh={"dat": 2})
    with pytest.raises(ConfigError, match=r"mesh\.model: a mesh axis size is a positive int or -1"):
        _cfg(tmp_path, mesh={"model": 0})
    with pytest.raises(ConfigError, match="at most one axis may be -1"):
        _cfg(tmp_path, mesh={"data": -1, "model": -1})
    with pytest.raises(ConfigError, match="dtype"):
        _cfg(tmp_path, dtype="float16")
    cfg = with_overrides(_cfg(tmp_path), ["mesh={'data': 2, 'model': -1}", "dtype=bfloat16", "compile_cache=xla"])
    assert dict(cfg.mesh) == {"data": 2, "model": -1} and cfg.dtype == "bfloat16" and cfg.compile_cache == "xla"


def test_attention_field_is_checked_and_splash_is_refused_off_a_tpu(tmp_path):
    with pytest.raises(ConfigError, match="attention"):
        _cfg(tmp_path, attention="flash")
    cfg = with_overrides(_cfg(tmp_path), ["attention=splash"])
    assert cfg.attention == "splash" and _cfg(tmp_path).attention == "xla"
    # On this host's CPU the kernel cannot run: refused by field before any model loads.
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.attention: the splash kernel runs on a TPU, "
                                          r"and this process's devices are on cpu"):
        run_extractions(cfg, progress=False, log=lambda s: None)
    assert not list((tmp_path / "stores").rglob("*.npz"))


def test_mesh_is_built_over_the_devices_or_refused_by_field(tmp_path):
    devices = jax.devices()[:8]
    mesh = mesh_for(_cfg(tmp_path, mesh={"data": 2, "model": -1}), devices)
    assert dict(mesh.shape) == {"data": 2, "model": 4}
    assert mesh_for(_cfg(tmp_path)) is None
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.mesh: .* 8 in this process"):
        mesh_for(_cfg(tmp_path, mesh={"data": 3}), devices)


@pytest.mark.slow
def test_a_mesh_gives_the_same_scores_and_a_dtype_is_kept_apart(tmp_path, monkeypatch, tiny_gguf):
    from tests.tiny_judge import spec

    monkeypatch.setenv("JAXJUDGE_XLA_CACHE", "")
    one = _cfg(tmp_path / "one", spec(tiny_gguf))
    run_extractions(one, progress=False)
    meshed = _cfg(tmp_path / "mesh", spec(tiny_gguf), mesh={"data": 2, "model": 2})
    run_extractions(meshed, progress=False)
    la, lb = (Store.open(next((tmp_path / d / "stores").rglob("manifest.json")).parent).load()["cand_logprobs"]
              for d in ("one", "mesh"))
    assert la.shape == lb.shape == (32, 5)
    np.testing.assert_allclose(la, lb, atol=1e-4)
    # A float32 store is not read for a bfloat16 config: refused by name.
    with pytest.raises(StoreLookupError, match=r"extracted in float32, the config asks for bfloat16"):
        report_from_store(one.store_root, with_overrides(one, ["dtype=bfloat16"]))


def test_parameter_bytes_per_device_are_the_loaded_judges(tmp_path, tiny_gguf):
    """From the file's config alone, the bytes each device holds: equal to the shards of the judge
    `models.load` places on the same mesh (float32 whole, bfloat16 on data 2 x model 2)."""
    from flax import nnx

    from jaxjudge import models
    from jaxjudge.experiment.hardware import parameter_bytes_per_device
    from jaxjudge.models.sharding import make_mesh

    path = tiny_gguf
    whole = models.load(path, cache_dir=tmp_path)
    assert parameter_bytes_per_device(path, "float32") == sum(
        x.nbytes for x in jax.tree.leaves(nnx.state(whole.model)))
    mesh = make_mesh(2, 2, devices=jax.devices()[:4])
    placed = models.load(path, dtype="bfloat16", mesh=mesh, cache_dir=tmp_path)
    per = {}
    for x in jax.tree.leaves(nnx.state(placed.model)):
        for shard in x.addressable_shards:
            per[shard.device.id] = per.get(shard.device.id, 0) + shard.data.nbytes
    assert len(per) == 4 and set(per.values()) == {parameter_bytes_per_device(path, "bfloat16", mesh)}


def test_a_judge_too_large_for_the_devices_is_one_line_before_loading(tmp_path, monkeypatch):
    from jaxjudge.experiment import hardware
    from jaxjudge.models.machine import ChipMemory

    with pytest.raises(ConfigError) as err:
        hardware.check_fits("smollm2-135m", SMOLLM2.resolved_path(), "float32", None, memory=400_000_000,
                            what="a test device")
    text = str(err.value)
    assert "\n" not in text and "'smollm2-135m'" in text and "538060032 bytes" in text and "0.37 GiB" in text
    # Through the experiment layer: refused before any weights are read.
    monkeypatch.setattr(hardware, "chip_memory",
                        lambda device: ChipMemory("a test device", 300_000_000, "set by the test"))
    from jaxjudge import models

    def no_load(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(models, "load", no_load)
    with pytest.raises(ConfigError, match=r"model 'smollm2-135m': its parameters need 0\.50 GiB per device"):
        run_extractions(_cfg(tmp_path), progress=False, log=lambda s: None)
    assert not (tmp_path / "stores").exists()
