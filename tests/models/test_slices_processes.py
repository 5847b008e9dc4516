"""Sliced safetensors loading over two processes: under ``jax.distributed`` (2 CPU devices each)
`models.load` puts one checkpoint onto a ``model`` axis that spans both processes: each reads at
most 1.25x the bytes its own devices hold, and every block equals the single-process
conversion's; they write one converted-cache entry together, and a second load restores it
without reading or hashing the checkpoint. (The one-process tests: tests/models/test_slices.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from flax import nnx

from jaxjudge.models import config as C
from jaxjudge.models import convert, hf

from tests.xla_flags import xla_flags

TESTS = Path(__file__).resolve().parent
pytestmark = pytest.mark.alone  # it starts processes of its own


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
from jaxjudge.models import weights_cache
hashed = [0]
plain_hash = weights_cache.file_sha256
def counted_hash(*a, **k):
    hashed[0] += 1
    return plain_hash(*a, **k)
weights_cache.file_sha256 = counted_hash

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
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags(2),
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
