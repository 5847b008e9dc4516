"""Hub checkpoints, offline: ``models.load("org/name")`` from the local Hugging Face Hub cache.

A tiny random Gemma 3 (transformers' torch class) is saved in several safetensors shards with
their index file and laid out as the Hub cache lays out a downloaded repo
(``models--org--name/refs/main`` naming a commit, ``snapshots/<commit>/...``). With the Hub
offline (conftest sets ``HF_HUB_OFFLINE=1``), the repo id resolves to that snapshot. The judge
is loaded straight onto a data 4 x model 2 mesh of the 8 host devices, converted once and then
restored from the converted-parameter cache into the mesh's shardings; its logits equal the
single-device judge's within 1e-5 and the torch model's within 1e-4.
"""

from pathlib import Path

import jax
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

torch = pytest.importorskip("torch")
tf = pytest.importorskip("transformers")
huggingface_hub = pytest.importorskip("huggingface_hub")

from jaxjudge import models  # noqa: E402
from jaxjudge.models import sharding as S  # noqa: E402

from test_models_parity import make_hf_model, torch_logits  # noqa: E402

REPO = "jaxjudge-test/tiny-gemma3"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
# Sizes the 2-way model axis divides (6 query / 2 K/V heads, F=14, V=38): every rule splits.
SIZES = dict(vocab_size=38, intermediate_size=14, query_pre_attn_scalar=13, sliding_window=4,
             layer_types=["sliding_attention", "full_attention"])

pytestmark = pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 (host) devices")


@pytest.fixture(scope="module")
def hub_cache(tmp_path_factory):
    """(Hub cache root, torch model) with the tiny Gemma 3 cached as REPO at COMMIT."""
    root = tmp_path_factory.mktemp("hub")
    repo = root / ("models--" + REPO.replace("/", "--"))
    snapshot = repo / "snapshots" / COMMIT
    snapshot.mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    model = make_hf_model(snapshot, "gemma3_text", SIZES, max_shard_size="3KB")
    return root, model


def test_offline_hub_repo_loads_sharded_onto_a_mesh(hub_cache, tmp_path, monkeypatch):
    root, model = hub_cache
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(root))
    assert huggingface_hub.constants.HF_HUB_OFFLINE
    snapshot = root / ("models--" + REPO.replace("/", "--")) / "snapshots" / COMMIT
    assert (snapshot / "model.safetensors.index.json").is_file()
    assert len(list(snapshot.glob("model-*-of-*.safetensors"))) >= 3

    single = models.load(REPO, use_cache=False)
    assert Path(single.source) == snapshot and single.config.model_type == "gemma3_text"
    mesh = S.make_mesh(data=4, model=2)
    converted = models.load(REPO, mesh=mesh, cache_dir=tmp_path)
    with monkeypatch.context() as mp:  # restored from the Orbax cache: no shard is read
        from jaxjudge.models import hf

        def refuse(folder):
            raise AssertionError(f"read {folder} instead of restoring from the cache")

        mp.setattr(hf, "read_safetensors", refuse)
        restored = models.load(REPO, mesh=mesh, cache_dir=tmp_path)
    assert [p.name for p in tmp_path.iterdir() if (p / "meta.json").is_file()]

    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 37, (8, 11)).astype(np.int32)
    mask = np.ones_like(tokens, bool)
    read = np.tile(np.arange(11), (8, 1))
    ref = np.asarray(single.forward(tokens, mask, read))
    np.testing.assert_allclose(ref, torch_logits(model, tokens), atol=1e-4, rtol=0)
    for judge in (converted, restored):
        layers = judge.model.layers  # every layer's parameters stacked on a leading [L] axis
        n_layers = judge.config.num_hidden_layers
        q = layers.self_attn.q_proj.kernel[...]
        assert q.sharding.spec == P(None, None, "model", None) and len(q.sharding.device_set) == 8
        assert q.addressable_shards[0].data.shape == (n_layers, 18, 3, 10)  # half of the 6 heads
        assert layers.self_attn.q_norm.scale[...].sharding.spec == P(None, None)
        up = layers.mlp.up_proj.kernel[...]
        assert up.addressable_shards[0].data.shape == (n_layers, 18, 7)
        logits = judge.forward(tokens, mask, read)  # rows over the judge's mesh
        assert logits.sharding.spec[0] == "data"
        np.testing.assert_allclose(np.asarray(logits), ref, atol=1e-5, rtol=0)


def test_uncached_repo_id_names_the_repo(tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match="jaxjudge-test/not-cached"):
        models.load("jaxjudge-test/not-cached", use_cache=False)
