"""Sliced safetensors loading: each device's block of each parameter read from the file alone.

- `read_block` against numpy's own transpose, reshape and slicing of the whole tensor, and the
  bytes it reads against the block's;
- `build_model` from lazy tensors on a mesh equals `build_model` from whole arrays, bit for bit
  (a Llama, a fused Phi-3, a Gemma 3);
- two processes on one checkpoint: tests/models/test_slices_processes.py.
"""

from __future__ import annotations


import jax
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file

from jaxjudge.models import config as C
from jaxjudge.models import convert, hf
from jaxjudge.models import sharding as S
from jaxjudge.models.slices import ReadCounter, layout_groups, lazy_safetensors, read_block

def _lazy_one(tmp_path, array, key="w"):
    save_file({key: array}, str(tmp_path / "model.safetensors"))
    counter = ReadCounter()
    return lazy_safetensors(tmp_path, counter)[key], counter


@pytest.mark.parametrize("source, target, groups", [
    ((4096,), (4096,), [(0, 1)]),
    ((12,), (3, 4), [(0, 2)]),
    ((6, 12), (6, 3, 4), [(0, 1), (1, 3)]),
    ((1, 5), (1, 5), [(0, 1), (1, 2)]),
    ((5,), (5, 1), [(0, 2)]),
    ((1, 5), (5,), [(0, 0), (0, 1)]),
])
def test_layout_groups(source, target, groups):
    assert layout_groups(source, target) == groups


@pytest.mark.parametrize("source, target", [((12,), (5, 3)), ((6, 12), (6, 5, 4)), ((4,), (4, 2))])
def test_layout_groups_refuses_a_non_split(source, target):
    with pytest.raises(ValueError, match="does not split"):
        layout_groups(source, target)


def test_read_block_transposed_matches_numpy(tmp_path):
    rng = np.random.default_rng(0)
    w = rng.normal(size=(6 * 4, 10)).astype(np.float32)  # torch [out = heads x width, in]
    lazy, counter = _lazy_one(tmp_path, w)
    target = (10, 6, 4)
    whole = w.T.reshape(target)
    for index in [(slice(None), slice(2, 4), slice(None)), (slice(3, 7), slice(0, 3), slice(None)),
                  (slice(None), slice(None), slice(1, 3)), (slice(0, 10), slice(5, 6), slice(2, 4))]:
        before = counter.bytes
        got = read_block(lazy, True, target, index)
        np.testing.assert_array_equal(got, whole[index])
        if index[2] == slice(None):  # heads sharded, width whole: exactly the block's bytes
            assert counter.bytes - before == whole[index].nbytes
        else:  # a width slice reads the heads it spans whole
            assert counter.bytes - before >= whole[index].nbytes


def test_read_block_reshaped_and_fused_rows(tmp_path):
    rng = np.random.default_rng(1)
    w = rng.normal(size=(9 * 4,)).astype(np.float32)
    lazy, _ = _lazy_one(tmp_path, w)
    np.testing.assert_array_equal(read_block(lazy, False, (9, 4), (slice(3, 6), slice(None))),
                                  w.reshape(9, 4)[3:6])
    fused = rng.normal(size=(14, 5)).astype(np.float32)
    lazy, _ = _lazy_one(tmp_path, fused, key="qkv")
    part = lazy.row_range(8, 14)  # the third of a 8 + 0 + 6 split
    assert part.shape == (6, 5)
    np.testing.assert_array_equal(read_block(part, True, (5, 3, 2), (slice(None), slice(1, 3), slice(None))),
                                  fused[8:14].T.reshape(5, 3, 2)[:, 1:3])


FAMILIES = {
    "llama": ("llama", {}),
    "phi3": ("phi3", dict(sliding_window=6)),
    "gemma3": ("gemma3_text", dict(query_pre_attn_scalar=13, sliding_window=4, tie_word_embeddings=False,
                                   layer_types=["sliding_attention", "full_attention"])),
}
# Sizes the 2-way model axis divides (6 query / 2 K/V heads, F=14, V=38).
SIZES = dict(vocab_size=38, intermediate_size=14)


@pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (host) devices")
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_lazy_build_equals_whole_build(tmp_path, name):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from test_models_parity import make_hf_model  # noqa: PLC0415

    family, overrides = FAMILIES[name]
    make_hf_model(tmp_path, family, {**SIZES, **overrides}, max_shard_size="3KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    hf_config = hf.read_config(tmp_path)
    cfg = C.config_from_hf(hf_config)
    mesh = S.make_mesh(data=4, model=2)
    whole = convert.build_model(cfg, hf.read_safetensors(tmp_path), mesh=mesh)
    counter = ReadCounter()
    sliced = convert.build_model(cfg, lazy_safetensors(tmp_path, counter), mesh=mesh)
    a = {p: v.get_value() for p, v in nnx.to_flat_state(nnx.state(whole))}
    b = {p: v.get_value() for p, v in nnx.to_flat_state(nnx.state(sliced))}
    assert a.keys() == b.keys() and len(a) > 0
    for path in a:
        assert a[path].sharding == b[path].sharding, path
        np.testing.assert_array_equal(np.asarray(a[path]), np.asarray(b[path]))
    # One process holds every block here: each is read once whatever its replicas.
    total = sum(x.nbytes for x in a.values())
    assert total <= counter.bytes <= 1.25 * total
