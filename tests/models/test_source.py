"""Model sources in a bucket or on the Hub: the converted-parameter cache is keyed by the
source's identity (`jaxjudge.models.source`), so a warm entry is found with no byte of the
checkpoint read and none hashed, and a new identity (a rewritten object, another commit) is
converted again.

Bytes read are counted on the wire: the storage clients reach the Cloud Storage emulator
(tests/conftest.py) through a proxy that logs every answer's size (tests/store/fault_proxy.py),
and what counts is the body of each media download of a checkpoint object. Hashing is counted
twice: calls of the file hash the cache uses, and every byte fed to any ``hashlib.sha256`` in
the process.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import threading
import urllib.parse
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from jaxjudge import models as jm
from jaxjudge.models import weights_cache as jc
from jaxjudge.models import hf
from jaxjudge.models import loading
from jaxjudge.models import source as js
from jaxjudge.store.location import location

from tests.tiny_judge import sha256 as file_sha256

TOKENS = np.array([[5, 17, 230, 1024, 9, 44]], np.int32)


@pytest.fixture
def counted(monkeypatch):
    """Counters of hashing: ``calls`` of the cache's file hash, ``bytes`` fed to any sha256."""
    counts = SimpleNamespace(calls=0, bytes=0)
    real_file_hash, real_sha256 = jc.file_sha256, hashlib.sha256

    def file_hash(*args, **kwargs):
        counts.calls += 1
        return real_file_hash(*args, **kwargs)

    class Counted:
        def __init__(self, data=b"", **kwargs):
            self._h = real_sha256(**kwargs)
            self.update(data)

        def update(self, data):
            counts.bytes += memoryview(data).nbytes
            self._h.update(data)

        def __getattr__(self, name):
            return getattr(self._h, name)

    monkeypatch.setattr(jc, "file_sha256", file_hash)
    monkeypatch.setattr(hashlib, "sha256", Counted)
    return counts


def _reset(counts, proxy):
    counts.calls = counts.bytes = 0
    proxy.sent.clear()


def _read(proxy, name: str) -> int:
    """Bytes of the object ``name`` downloaded (media requests) since the proxy's log was cleared."""
    return sum(n for method, path, n in proxy.sent
               if method == "GET" and "alt=media" in path and name in urllib.parse.unquote(path))


def _logits(judge):
    return np.asarray(judge.forward(TOKENS, np.ones_like(TOKENS), np.arange(TOKENS.shape[1])[None]))


def test_a_bucket_cached_model_is_found_without_reading_or_hashing_its_checkpoint(
        gcs_bucket, proxied, counted, tiny_gguf):
    src = location(gcs_bucket) / "models" / "tiny.gguf"
    src.write_bytes(Path(tiny_gguf).read_bytes())
    size, sha = Path(tiny_gguf).stat().st_size, file_sha256(tiny_gguf)
    cache = f"{gcs_bucket}/converted"

    _reset(counted, proxied)
    cold = jm.load(str(src), cache_dir=cache)
    cold_read, cold_calls, cold_hashed = _read(proxied, "models/tiny.gguf"), counted.calls, counted.bytes
    assert cold_read == size and cold_calls == 1 and cold_hashed >= size  # fetched once, hashed once
    assert cold.sha256 == sha and cold.source == str(src)

    _reset(counted, proxied)
    warm = jm.load(str(src), cache_dir=cache, expected_sha256=sha)
    assert (_read(proxied, "models/tiny.gguf"), counted.calls) == (0, 0)
    assert counted.bytes < 1024  # the identity's few fields, nothing of the checkpoint
    print(f"cold: {cold_read} checkpoint bytes read, {cold_calls} file hashes, {cold_hashed} bytes hashed; "
          f"warm: 0 read, 0 file hashes, {counted.bytes} bytes hashed (checkpoint {size} bytes)")
    assert warm.sha256 == sha  # the digest recorded when the entry was converted
    np.testing.assert_array_equal(_logits(warm), _logits(cold))
    entry = location(cache) / jc.cache_key(js.bucket_identity(str(src)).digest, "float32")
    meta = json.loads((entry / "meta.json").read_text())
    assert meta["sha256"] == sha and meta["identity"]["objects"] == [[str(src), src.generation(), size]]

    # A pinned digest is checked on a warm entry against the recorded one, still reading nothing.
    _reset(counted, proxied)
    with pytest.raises(jm.ModelHashMismatch, match="expected 1111"):
        jm.load(str(src), cache_dir=cache, expected_sha256="1" * 64)
    assert (_read(proxied, "models/tiny.gguf"), counted.calls) == (0, 0)
    (entry / "meta.json").write_text(json.dumps({**meta, "sha256": None}))  # an entry without its digest
    with pytest.raises(jm.ModelHashMismatch, match="not recorded"):
        jm.load(str(src), cache_dir=cache, expected_sha256=sha)

    # The same bytes written again: a new generation, so a new identity, converted again.
    src.write_bytes(Path(tiny_gguf).read_bytes())
    _reset(counted, proxied)
    again = jm.load(str(src), cache_dir=cache)
    assert _read(proxied, "models/tiny.gguf") == size and counted.calls == 1
    assert again.sha256 == sha
    entries = [p for p in location(cache).iterdir() if (p / "meta.json").is_file()]
    assert len(entries) == 2


def test_a_cold_bucket_entry_is_converted_by_one_worker_and_read_by_the_others(
        gcs_bucket, proxied, tiny_gguf, monkeypatch):
    src = location(gcs_bucket) / "shared.gguf"
    src.write_bytes(Path(tiny_gguf).read_bytes())
    cache = f"{gcs_bucket}/converted"
    monkeypatch.setattr(loading, "CLAIM_POLL_S", 0.05)
    conversions = []
    real_convert = loading._convert
    monkeypatch.setattr(loading, "_convert", lambda *a, **k: conversions.append(1) or real_convert(*a, **k))
    proxied.sent.clear()
    judges, errors = {}, []

    def worker(i):
        try:
            judges[i] = jm.load(str(src), cache_dir=cache)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert len(conversions) == 1 and _read(proxied, "shared.gguf") == Path(tiny_gguf).stat().st_size
    key = jc.cache_key(js.bucket_identity(str(src)).digest, "float32")
    assert [p.name for p in location(cache).iterdir() if (p / "meta.json").is_file()] == [key]
    assert not (location(cache) / f".{key}.claim").exists()  # released
    for i in (1, 2):
        np.testing.assert_array_equal(_logits(judges[i]), _logits(judges[0]))


def test_verify_fetches_and_hashes_a_bucket_source_again(gcs_bucket, proxied, counted, tiny_gguf):
    src = location(gcs_bucket) / "tiny.gguf"
    src.write_bytes(Path(tiny_gguf).read_bytes())
    cache = f"{gcs_bucket}/converted"
    jm.load(str(src), cache_dir=cache)
    _reset(counted, proxied)
    judge = jm.load(str(src), cache_dir=cache, verify=True, expected_sha256=file_sha256(tiny_gguf))
    assert _read(proxied, "tiny.gguf") == Path(tiny_gguf).stat().st_size and counted.calls == 1
    assert judge.sha256 == file_sha256(tiny_gguf)


def test_a_hugging_face_folder_in_a_bucket_is_identified_by_its_model_objects(gcs_bucket, tiny_hf, tmp_path):
    prefix = location(gcs_bucket) / "hf" / "tiny-judge"
    for f in Path(tiny_hf).iterdir():
        (prefix / f.name).write_bytes(f.read_bytes())
    (prefix / "README.md").write_text("not part of the model")
    (prefix / "sub" / "other.json").write_text("{}")
    ident = js.bucket_identity(str(prefix))
    names = [Path(url).name for url, _, _ in ident.fields["objects"]]
    assert names == sorted(f.name for f in Path(tiny_hf).iterdir())
    judge = jm.load(str(prefix), cache_dir=tmp_path / "cache")
    assert judge.sha256 == jm.load(tiny_hf, use_cache=False).sha256  # the content hash, wherever it lies
    (prefix / "README.md").write_text("edited")  # not a model file: the same identity
    assert js.bucket_identity(str(prefix)).digest == ident.digest
    (prefix / "config.json").write_bytes((Path(tiny_hf) / "config.json").read_bytes())
    assert js.bucket_identity(str(prefix)).digest != ident.digest
    with pytest.raises(FileNotFoundError, match="no model object"):
        js.bucket_identity(f"{gcs_bucket}/nothing/here")


COMMIT = "89abcdef0123456789abcdef0123456789abcdef"
REPO = "jaxjudge-test/tiny-judge"


class StandInHub:
    """What ``HfApi.model_info(..., files_metadata=True)`` answers, for one repo at ``commit``."""

    def __init__(self, folder: Path, commit: str):
        self.folder, self.commit, self.calls = folder, commit, []

    def model_info(self, repo_id, revision=None, files_metadata=False):
        self.calls.append((repo_id, revision, files_metadata))
        lfs = SimpleNamespace(sha256=file_sha256(self.folder / "model.safetensors"))
        siblings = [SimpleNamespace(rfilename=f.name, blob_id=f"blob-{f.name}-{self.commit[:6]}",
                                    lfs=lfs if f.suffix == ".safetensors" else None)
                    for f in sorted(self.folder.iterdir())]
        siblings.append(SimpleNamespace(rfilename=".gitattributes", blob_id="x", lfs=None))
        return SimpleNamespace(sha=self.commit, siblings=siblings)


def test_a_hub_model_is_keyed_by_its_commit_and_file_hashes(tiny_hf, tmp_path, monkeypatch, counted):
    constants = pytest.importorskip("huggingface_hub.constants")

    hub_cache = tmp_path / "hub"
    snapshot = hub_cache / ("models--" + REPO.replace("/", "--")) / "snapshots" / COMMIT
    shutil.copytree(tiny_hf, snapshot)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(hub_cache))
    hub = StandInHub(Path(tiny_hf), COMMIT)
    monkeypatch.setattr(js, "_hub_api", lambda: hub)

    ident = js.source_identity(REPO)
    assert ident.kind == "hub" and ident.sha256 is None and ident.fields["revision"] == COMMIT
    assert [n for n, _ in ident.fields["files"]] == sorted(f.name for f in Path(tiny_hf).iterdir())
    cold = jm.load(REPO, cache_dir=tmp_path / "cache")  # fetched (the Hub cache's snapshot at COMMIT)
    assert hub.calls[-1] == (REPO, None, True) and cold.sha256 == jm.load(tiny_hf, use_cache=False).sha256

    counted.calls = 0
    monkeypatch.setattr(hf, "read_safetensors", lambda *a: (_ for _ in ()).throw(AssertionError("weights read")))
    warm = jm.load(REPO, cache_dir=tmp_path / "cache")
    assert counted.calls == 0 and warm.sha256 == cold.sha256
    np.testing.assert_array_equal(_logits(warm), _logits(cold))
    js.source_identity(f"{REPO}@v1")
    assert hub.calls[-1] == (REPO, "v1", True)

    hub.commit = "f" * 40  # another commit: another identity, so the entry above is not used
    assert js.source_identity(REPO).digest != ident.digest
    monkeypatch.setattr(js, "_hub_api", lambda: None)  # offline: the Hub cache, by content hash
    assert js.source_identity(f"{REPO}@{COMMIT}").kind == "local"


def test_a_local_source_is_keyed_by_its_content_hash_as_before(tiny_gguf, tmp_path):
    ident = js.source_identity(tiny_gguf, tmp_path)
    assert ident.kind == "local" and ident.digest == ident.sha256 == file_sha256(tiny_gguf)
    assert ident.path == Path(tiny_gguf)


def _same_header(got: js.SourceHeader, want: js.SourceHeader) -> None:
    assert got.hf_config == want.hf_config and got.chat_template == want.chat_template
    assert got.tokenizer.get_vocab(with_added_tokens=True) == want.tokenizer.get_vocab(with_added_tokens=True)


def test_an_outline_reads_a_bucket_gguf_header_without_its_tensors(gcs_bucket, proxied, counted, tiny_gguf,
                                                                   tmp_path, monkeypatch):
    """`source_outline` (what ``--dry-run`` reads of a remote judge): the object's first bytes, in
    ranges doubling from `HEAD_BYTES` (set small here so that it doubles), until the header parses."""
    from jaxjudge.models.gguf_file import GGUFFile

    src = location(gcs_bucket) / "models" / "tiny.gguf"
    src.write_bytes(Path(tiny_gguf).read_bytes())
    size, header_end = Path(tiny_gguf).stat().st_size, GGUFFile(tiny_gguf).data_start
    local = js.source_outline(tiny_gguf, tmp_path / "cache")
    monkeypatch.setattr(js, "HEAD_BYTES", 64 << 10)
    _reset(counted, proxied)
    outline = js.source_outline(str(src), tmp_path / "cache")
    read = _read(proxied, "models/tiny.gguf")
    ranges = [p for m, p, _ in proxied.sent if m == "GET" and "alt=media" in p]
    print(f"outline of a {size}-byte GGUF object: {read} bytes read in {len(ranges)} ranges "
          f"(header {header_end} bytes); {counted.calls} files hashed")
    _same_header(outline, local)
    assert outline.sha256 is None and local.sha256 == file_sha256(tiny_gguf)
    # The doubling ranges stop at the first that holds the header: [64 KiB * 2^k] covers it.
    k = max(0, (header_end - 1).bit_length() - 16)
    assert read == min(size, 64 << 10 << k) < size and header_end <= read < 2 * header_end + (64 << 10)
    assert len(ranges) == k + 1 and counted.calls == 0
    with pytest.raises(jm.GGUFFormatError, match="only the header was read"):
        js._gguf_head(src, src.generation(), size).tensors[0].data
    # `jaxjudge store upgrade` checks an old store's context length from the same header.
    from jaxjudge.experiment.extractions import _default_context_length

    assert _default_context_length(src) == _default_context_length(Path(tiny_gguf)) == local.hf_config[
        "max_position_embeddings"]


def test_an_outline_of_a_bucket_or_hub_folder_fetches_no_safetensors(gcs_bucket, proxied, tiny_hf, tmp_path,
                                                                     monkeypatch):
    prefix = location(gcs_bucket) / "hf" / "tiny-judge"
    for f in Path(tiny_hf).iterdir():
        (prefix / f.name).write_bytes(f.read_bytes())
    local = js.source_outline(tiny_hf, tmp_path / "cache")
    proxied.sent.clear()
    outline = js.source_outline(str(prefix), tmp_path / "cache")
    _same_header(outline, local)
    assert _read(proxied, "model.safetensors") == 0
    assert _read(proxied, "tokenizer.json") == (Path(tiny_hf) / "tokenizer.json").stat().st_size

    # A Hub repo: the snapshot is asked for without the safetensors (the Hub's answers from a
    # stand-in, the files from a Hub cache folder).
    constants = pytest.importorskip("huggingface_hub.constants")
    snapshot = tmp_path / "hub" / ("models--" + REPO.replace("/", "--")) / "snapshots" / COMMIT
    shutil.copytree(tiny_hf, snapshot)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(js, "_hub_api", lambda: StandInHub(Path(tiny_hf), COMMIT))
    asked, real = [], hf.resolve_source
    monkeypatch.setattr(hf, "resolve_source", lambda *a, **k: asked.append(k) or real(*a, **k))
    monkeypatch.setattr(hf, "read_safetensors", lambda *a: (_ for _ in ()).throw(AssertionError("weights read")))
    _same_header(js.source_outline(REPO, tmp_path / "cache"), local)
    assert asked == [{"revision": COMMIT, "weights": False}]
