"""Sliced safetensors loading: each device's block of each parameter read from the file alone.

- `read_block` against numpy's own transpose, reshape and slicing of the whole tensor, and the
  bytes it reads against the block's;
- `build_model` from lazy tensors on a mesh equals `build_model` from whole arrays, bit for bit
  (a Llama, a fused Phi-3, a Gemma 3);
- two processes under ``jax.distributed`` (2 CPU devices each) `models.load` one checkpoint onto a
  ``model`` axis that spans both: each reads at most 1.25x the bytes its own devices hold, and
  every block equals the single-process conversion's; they write one converted-cache entry
  together, and a second load restores it without reading or hashing the checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import save_file

from jaxjudge.models import config as C
from jaxjudge.models import convert, hf
from jaxjudge.models import sharding as S
from jaxjudge.models.slices import ReadCounter, layout_groups, lazy_safetensors, read_block

TESTS = Path(__file__).resolve().parent
pytestmark = pytest.mark.alone  # it starts processes of its own


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


WORKER = """
import json, math, sys
import jax
jax.distributed.initialize(coordinator_address={address!r}, num_processes=2, process_id={pid},
                           initialization_timeout=120)
import numpy as np
from jaxjudge import models
from jaxjudge.models import hf, slices
from jaxjudge.models import sharding as S

# Count every byte read from the checkpoint's tensors; a whole-checkpoint read fails the run.
read = [0]
plain = slices.LazyTensor.read
def counted(self, index=None):
    out = plain(self, index)
    read[0] += out.nbytes
    return out
slices.LazyTensor.read = counted
def refused(*a, **k):
    raise AssertionError("the whole checkpoint was read")
hf.read_safetensors = refused

# Count the files hashed in full (the memo skips the ones it knows).
from jaxjudge.models import cache
hashed = [0]
plain_hash = cache.file_sha256
def counted_hash(*a, **k):
    hashed[0] += 1
    return plain_hash(*a, **k)
cache.file_sha256 = counted_hash

from flax import nnx
whole = dict(np.load({reference!r}))

def check(model):
    held, checked = 0, 0
    for path, v in nnx.to_flat_state(nnx.state(model)):
        name = ".".join(str(p) for p in path)
        arr = v.get_value()
        seen = set()
        for shard in arr.addressable_shards:
            key = tuple(s.indices(n)[:2] for s, n in zip(shard.index, arr.shape))
            if key in seen:
                continue
            seen.add(key)
            data = np.asarray(shard.data)
            held += data.nbytes
            np.testing.assert_array_equal(data, whole[name][shard.index])
            checked += 1
    return held, checked

mesh = S.make_mesh(data=1, model=4, devices=jax.devices())
# First load: converted from the slices this process's devices hold, then one cache entry written
# by both processes together (a folder they share).
held, checked = check(models.load({folder!r}, mesh=mesh, cache_dir={cache!r}).model)
first = {{"read": read[0], "hashed": hashed[0]}}
# Second load: restored from that entry into each process's shards; nothing read or hashed again.
held2, checked2 = check(models.load({folder!r}, mesh=mesh, cache_dir={cache!r}).model)
json.dump({{"read": first["read"], "hashed": first["hashed"], "held": held, "blocks": checked,
           "read_again": read[0] - first["read"], "hashed_again": hashed[0] - first["hashed"],
           "held_again": held2, "blocks_again": checked2,
           "total": int(sum(a.nbytes for a in whole.values()))}}, open({result!r}, "w"))
jax.distributed.shutdown()
"""


@pytest.mark.slow
def test_two_processes_read_only_their_blocks(tmp_path, coordinator):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from test_models_parity import make_hf_model  # noqa: PLC0415

    folder = tmp_path / "ckpt"
    folder.mkdir()
    # 8 query / 4 K/V heads, F=16, V=40, D=32: every model-sharded axis splits 4 ways.
    make_hf_model(folder, "llama", dict(vocab_size=40, hidden_size=32, intermediate_size=16,
                                        num_attention_heads=8, num_key_value_heads=4, head_dim=8),
                  max_shard_size="20KB")
    cfg = C.config_from_hf(hf.read_config(folder))
    whole = convert.build_model(cfg, hf.read_safetensors(folder))
    reference = tmp_path / "whole.npz"
    np.savez(reference, **{".".join(str(p) for p in path): np.asarray(v.get_value())
                           for path, v in nnx.to_flat_state(nnx.state(whole))})
    address = coordinator
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
           "PYTHONPATH": os.pathsep.join([str(TESTS.parents[1]), os.environ.get("PYTHONPATH", "")])}
    procs, results = [], []
    for pid in range(2):
        result = tmp_path / f"result{pid}.json"
        script = tmp_path / f"worker{pid}.py"
        script.write_text(WORKER.format(address=address, pid=pid, folder=str(folder), reference=str(reference),
                                        result=str(result), cache=str(tmp_path / "cache")))
        results.append(result)
        procs.append(subprocess.Popen([sys.executable, str(script)], env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, text=True))
    for p in procs:
        out, _ = p.communicate(timeout=600)
        assert p.returncode == 0, out[-3000:]
    for result in results:
        r = json.loads(result.read_text())
        assert r["blocks"] > 0
        assert r["held"] < r["total"]  # the model axis spans both processes
        assert r["read"] <= 1.25 * r["held"], r
        # The second load restores the shared cache entry: the same blocks, no byte of the
        # checkpoint read and no file hashed.
        assert (r["read_again"], r["hashed_again"]) == (0, 0), r
        assert (r["held_again"], r["blocks_again"]) == (r["held"], r["blocks"]), r
    # The checkpoint's files were hashed on the first load (by whichever process reached each
    # first: they share the memo of the cache folder).
    assert sum(json.loads(r.read_text())["hashed"] for r in results) > 0
    entries = [p for p in (tmp_path / "cache").iterdir() if not p.name.startswith(".") and p.is_dir()]
    assert len(entries) == 1 and (entries[0] / "meta.json").is_file()
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".tmp-")]
