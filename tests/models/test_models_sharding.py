"""Sharded forward passes on 8 host CPU devices (set by conftest) equal the single-device ones."""

import jax
import numpy as np
import pytest
from flax import nnx
from jax.sharding import PartitionSpec as P

from jaxjudge.engine.decode import generate_tokens
from jaxjudge.models import config as C
from jaxjudge.models import convert
from jaxjudge.models import decoder as D
from jaxjudge.models import sharding as S
from jaxjudge.models.judge import Judge

ATOL = 1e-5

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (host) devices")

# Sizes the 2-way model axis divides (6 query heads, 2 K/V heads, F=14, V=38) so that every
# tensor-parallel rule actually splits something; q/k/v biases and an untied head included.
CFG = C.Qwen2Config.tiny(vocab_size=38, intermediate_size=14)


def random_model(cfg, seed=0):
    return D.Decoder(cfg, rngs=nnx.Rngs(seed))


@pytest.fixture(scope="module")
def model_and_batch():
    model = random_model(CFG)
    rng = np.random.default_rng(0)
    seqs = [rng.integers(0, CFG.vocab_size, n).tolist() for n in (5, 9, 2, 7, 9, 1, 4, 6)]
    tokens, mask = D.pad_batch(seqs)
    read = np.stack([np.arange(9 - 3, 9)] * 8)
    g, s = nnx.split(model)
    ref, _ = D.forward(g, s, tokens, mask, read)
    return model, tokens, mask, read, np.asarray(ref)


@pytest.mark.parametrize("data, model_axis", [(8, 1), (4, 2)])
def test_sharded_forward_matches_single_device(model_and_batch, data, model_axis):
    model, tokens, mask, read, ref = model_and_batch
    mesh = S.make_mesh(data=data, model=model_axis)
    assert dict(mesh.shape) == {"data": data, "model": model_axis}
    graphdef, state = nnx.split(model)
    state = S.shard_state(state, mesh)
    q = state["layers"]["self_attn"]["q_proj"]["kernel"][...]  # [L, D, N, H], layers stacked
    expected = P(None, None, "model", None) if model_axis == 2 else P(None, None, None, None)
    assert q.sharding.spec == expected
    if model_axis == 2:
        # Each device holds half of the heads, of the MLP and of the vocabulary.
        assert q.addressable_shards[0].data.shape == (CFG.num_hidden_layers, CFG.hidden_size, 3, CFG.head_dim)
        emb = state["embed_tokens"]["embedding"][...]
        assert emb.addressable_shards[0].data.shape == (CFG.vocab_size // 2, CFG.hidden_size)
        down = state["layers"]["mlp"]["down_proj"]["kernel"][...]
        assert down.sharding.spec == P(None, "model", None)
    logits, _ = D.forward(graphdef, state, *S.shard_batch((tokens, mask, read), mesh))
    assert logits.sharding.spec[0] == "data"
    assert len(logits.sharding.device_set) == 8
    np.testing.assert_allclose(np.asarray(logits), ref, atol=ATOL, rtol=0)


def test_sharded_judge_prefix_path_matches_single_device():
    model = random_model(CFG, seed=1)
    single = Judge(CFG, model, None)
    rng = np.random.default_rng(1)
    prefix = rng.integers(0, CFG.vocab_size, (1, 6))
    conts = [rng.integers(0, CFG.vocab_size, n).tolist() for n in (1, 3, 2, 4, 4, 2, 3, 1)]
    tokens, mask = D.pad_batch(conts)
    read = np.tile(np.arange(4), (8, 1))

    def run(judge):
        _, pre = judge.prefill(prefix)
        logits, cache = judge.extend(tokens, mask, read_idx_br=read, prefix=pre, max_length=4 + 3)
        out, _ = generate_tokens(judge, logits[:, -1], cache, max_new_tokens=4, prefix=pre,
                                       stop_at_eos=False)
        return np.asarray(logits), out

    ref_logits, ref_tokens = run(single)
    sharded = Judge(CFG, model, None).shard(S.make_mesh(data=4, model=2))
    logits, out = run(sharded)
    real = mask
    np.testing.assert_allclose(logits[real], ref_logits[real], atol=ATOL, rtol=0)
    np.testing.assert_array_equal(out, ref_tokens)


def test_indivisible_dims_are_replicated():
    cfg = C.LlamaConfig.tiny()  # F=13 and V=37 are not divisible by 2
    model = random_model(cfg)
    mesh = S.make_mesh(data=4, model=2)
    graphdef, state = nnx.split(model)
    sharded = S.shard_state(state, mesh)
    layer = sharded["layers"]
    assert layer["mlp"]["up_proj"]["kernel"][...].sharding.spec == P(None, None, None)
    assert layer["self_attn"]["k_proj"]["kernel"][...].sharding.spec == P(None, None, "model", None)
    rng = np.random.default_rng(2)
    tokens = rng.integers(0, 37, (4, 5)).astype(np.int32)
    mask = np.ones_like(tokens, bool)
    read = np.full((4, 1), 4)
    ref, _ = D.forward(graphdef, state, tokens, mask, read)
    got, _ = D.forward(graphdef, sharded, *S.shard_batch((tokens, mask, read), mesh))
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=ATOL, rtol=0)
    with pytest.raises(ValueError, match="multiple of the mesh data axis"):
        S.shard_batch((tokens[:3], mask[:3], read[:3]), mesh)
    assert S.shard_batch(tokens[:1], mesh, strict=False).sharding.spec == P()  # replicated


def test_placement():
    mesh = S.make_mesh(data=4, model=2)
    place = S.Placement(mesh)
    assert place.round_rows(5) == 8 and S.Placement(None).round_rows(5) == 5
    rows = place.rows(np.zeros((8, 3), np.int32))
    assert rows.sharding.spec == P("data", None)
    assert place.replicated({"a": np.ones(3)})["a"].sharding.spec == P()
    cache = place.empty_cache(Judge(CFG, random_model(CFG), None), 8, 5)
    assert cache.k.sharding.spec == P(None, "data", None, "model", None)
    assert cache.valid.sharding.spec == P("data", None)


def test_prefixes_split_over_data_or_their_tokens():
    """A prefill's [P, T] tokens: P prefixes over data when it divides P; fewer prefixes than
    data shards split their tokens instead (each prefix computed once over the slice); a
    length data does not divide is replicated."""
    mesh = S.make_mesh(data=4, model=2)
    assert S.prefix_sharding(mesh, (8, 64)).spec == P("data", None)
    assert S.prefix_sharding(mesh, (2, 64)).spec == P(None, "data")
    assert S.prefix_sharding(mesh, (1, 64)).spec == P(None, "data")
    assert S.prefix_sharding(mesh, (1, 30)).spec == P()
    assert S.prefix_sharding(S.make_mesh(data=1, model=8), (1, 64)).spec == P("data", None)
    assert S.shard_prefixes(np.zeros((2, 64), bool), mesh).sharding.spec == P(None, "data")


def test_build_model_places_parameters_on_the_mesh():
    torch = pytest.importorskip("torch")
    tf = pytest.importorskip("transformers")
    hf_cfg = tf.Qwen2Config(vocab_size=38, hidden_size=18, intermediate_size=14,
                            num_hidden_layers=2, num_attention_heads=6, num_key_value_heads=2,
                            head_dim=10)
    torch.manual_seed(0)
    tensors = {k: v.numpy() for k, v in tf.Qwen2ForCausalLM(hf_cfg).state_dict().items()}
    cfg = C.config_from_hf(hf_cfg.to_dict())
    mesh = S.make_mesh(data=4, model=2)
    model = convert.build_model(cfg, tensors, mesh=mesh)
    v = model.layers.self_attn.v_proj.kernel[...]  # [L, D, K, H]
    assert v.sharding.spec == P(None, None, "model", None) and len(v.sharding.device_set) == 8
    plain = convert.build_model(cfg, tensors)
    np.testing.assert_array_equal(np.asarray(v), np.asarray(plain.layers.self_attn.v_proj.kernel[...]))
    # layer 1's slice is layer 1's tensor (torch [out, in] -> [in, K, H])
    want = tensors["model.layers.1.self_attn.v_proj.weight"].T.reshape(v.shape[1:])
    np.testing.assert_array_equal(np.asarray(v)[1], want)


def test_mesh_and_rules_errors():
    with pytest.raises(ValueError, match="model=3"):
        S.make_mesh(model=3)
    mesh = S.make_mesh(data=8)
    with pytest.raises(ValueError, match="no entry in the sharding rules"):
        S.logical_spec(("experts",), (4,), mesh)
    assert S.logical_spec(("vocab", "embed"), (38, 18), mesh) == P(None, None)


def test_a_mesh_over_several_slices_needs_data_to_divide_among_them():
    """Devices of two slices (only their slice_index matters before the mesh is built): data must
    be a multiple of the slices, since model stays inside one (the mesh itself over real
    multi-slice devices is tests/aot/test_aot.py's two-slice compile)."""
    from types import SimpleNamespace

    from jaxjudge.models.sharding import make_mesh

    devices = [SimpleNamespace(slice_index=i // 4, device_kind="TPU v5 lite", id=i) for i in range(8)]
    with pytest.raises(ValueError, match=r"over 2 slices: data must be a multiple of 2 \(model stays inside one"):
        make_mesh(1, 8, devices=devices)
