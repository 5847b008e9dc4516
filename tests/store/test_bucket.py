"""Stores in a bucket, against a Cloud Storage emulator the tests start (tests/conftest.py):
the generation preconditions the claims rest on are refused by the server, chunks are published
once, claims are held, renewed, released and taken over after the lease."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import numpy as np
import pytest

from jaxjudge.store import Store, StoreError, StoreKeyMismatch, merge_stores
from jaxjudge.store.bucket import BucketPath
from jaxjudge.store.location import location
from jaxjudge.store.registration import read_registrations

REPO = Path(__file__).resolve().parents[2]
KEY = {"what": "bucket test", "n": 3}


def _chunk(i: int) -> dict[str, np.ndarray]:
    return {"example_ids": np.asarray([f"e{2 * i}", f"e{2 * i + 1}"]),
            "scores": np.arange(2 * i, 2 * i + 2, dtype=np.float32) / 7}


def test_the_server_refuses_a_second_create_and_a_stale_generation(gcs_bucket):
    p = location(gcs_bucket) / "a" / "object"
    assert isinstance(p, BucketPath) and str(p) == f"{gcs_bucket}/a/object"
    assert p.create(b"first") is True
    assert p.create(b"second") is False  # ifGenerationMatch=0 on an existing object: 412
    assert p.read_bytes() == b"first"
    g1 = p.generation()
    g2 = p.rewrite(b"renewed", g1)
    assert g2 is not None and g2 != g1 and p.generation() == g2
    assert p.rewrite(b"stale", g1) is None  # ifGenerationMatch=<old generation>: 412
    assert p.read_bytes() == b"renewed"
    # (fake-gcs-server does not check ifGenerationMatch on a delete, so that refusal is not
    # tested here; a release does not rely on it: see jaxjudge.store.bucket_claims.BucketClaim.release.)
    assert p.delete_if(g2) is True and not p.exists()
    assert p.rewrite(b"gone", g2) is None  # no object: refused too, nothing written
    assert not p.exists()


def test_a_bucket_path_is_never_a_local_path(gcs_bucket, tmp_path, monkeypatch):
    p = location(gcs_bucket) / "x.json"
    monkeypatch.chdir(tmp_path)
    with pytest.raises(TypeError, match=r"is a bucket location, not a local path"):
        open(p, "w")  # noqa: SIM115
    assert not any(tmp_path.iterdir())
    p.write_text('{"a": 1}')
    with p.open("r") as f:
        assert json.load(f) == {"a": 1}
    with pytest.raises(ValueError, match=r"mode 'w' is not served"):
        p.open("w")
    assert p.relative_to(location(gcs_bucket)).as_posix() == "x.json"
    assert (location(gcs_bucket) / "a/b").parent.name == "a" and p.suffix == ".json" and p.stem == "x"


def test_a_store_in_a_bucket_round_trips_and_publishes_each_chunk_once(gcs_bucket, tmp_path):
    root = f"{gcs_bucket}/stores/s"
    store = Store.open(root, KEY, n_chunks=3, info={"host": "test"})
    assert isinstance(store.root, BucketPath)
    assert store.missing_chunks() == [0, 1, 2] and store.completed_chunks() == []
    for i in (2, 0):
        store.write_chunk(i, _chunk(i))
    assert store.completed_chunks() == [0, 2] and store.missing_chunks() == [1]
    assert store.has_chunk(0) and not store.has_chunk(1)
    assert sorted(store.chunk_names(2)) == sorted([*_chunk(2), "@seal"])  # the archive's directory only
    with pytest.raises(StoreError, match=r"cannot load, 1 of 3 chunks missing"):
        store.load()
    # A second publication of chunk 0 (another worker's) leaves the first copy in place.
    store.write_chunk(0, {"example_ids": np.asarray(["x", "y"]), "scores": np.zeros(2, np.float32)})
    np.testing.assert_array_equal(store.read_chunk(0)["example_ids"], ["e0", "e1"])
    store.write_chunk(1, _chunk(1))

    again = Store.open(root, KEY, n_chunks=3)
    got = again.load()
    np.testing.assert_array_equal(got["example_ids"], [f"e{k}" for k in range(6)])
    np.testing.assert_array_equal(got["scores"], np.arange(6, dtype=np.float32) / 7)
    assert Store.open(root).key == again.key  # opened for reading, whatever its key
    with pytest.raises(StoreKeyMismatch, match=r"'n': stored 3, requested 4|n"):
        Store.open(root, {**KEY, "n": 4})

    # A rewritten chunk (valid .npz, wrong content) is refused by its seal, naming the object.
    bad = dict(_chunk(1))
    bad["@seal"] = np.asarray(json.dumps({"format": 1, "key_hash": again.key_hash, "chunk": 1,
                                          "content_sha256": "0" * 64, "origin": "write"}))
    buf = io.BytesIO()
    np.savez(buf, **bad)
    again.chunk_path(1).write_bytes(buf.getvalue())
    with pytest.raises(StoreError, match=rf"^{gcs_bucket}/stores/s/chunks/000001.npz: chunk 1 content does not match"):
        again.read_chunk(1)
    again.chunk_path(1).write_bytes(b"")
    with pytest.raises(StoreError, match=r"unreadable chunk 1 \(empty file\)"):
        again.read_chunk(1)


def test_merging_between_a_bucket_and_a_local_folder(gcs_bucket, tmp_path):
    local = Store.open(tmp_path / "local", KEY, n_chunks=3)
    local.write_chunk(0, _chunk(0))
    remote = Store.open(f"{gcs_bucket}/remote", KEY, n_chunks=3)
    remote.write_chunk(1, _chunk(1))
    remote.write_chunk(2, _chunk(2))
    into_local = merge_stores(tmp_path / "local", [local, remote])
    assert into_local.missing_chunks() == []
    into_bucket = merge_stores(f"{gcs_bucket}/merged", [tmp_path / "local"])
    np.testing.assert_array_equal(into_bucket.load()["scores"], local.load()["scores"])
    assert isinstance(into_bucket.root, BucketPath)


def test_registration_records_in_a_bucket(gcs_bucket):
    from jaxjudge.experiment import load_config
    from jaxjudge.store.registration import register
    cfg = load_config(str(REPO / "experiments" / "demo.py:ci"))
    path, first = register(cfg, f"{gcs_bucket}/stores")
    assert str(path).startswith(f"{gcs_bucket}/stores/registrations/") and path.is_file()
    _, second = register(cfg, f"{gcs_bucket}/stores")
    assert second == first  # kept: the first record's time is the registration
    assert [r["plan_sha256"] for r in read_registrations(f"{gcs_bucket}/stores")] == [first["plan_sha256"]]


def test_claims_are_exclusive_renewed_released_and_taken_over_after_the_lease(gcs_bucket):
    store = Store.open(f"{gcs_bucket}/claims", KEY, n_chunks=3)
    lease = 0.6
    a = store.claim_chunk(0, stale_after=lease)
    assert a is not None
    # A live holder renews (every lease/6): nobody takes it over, however long they wait.
    first = a.generation
    for _ in range(8):
        assert store.claim_chunk(0, stale_after=lease) is None
        time.sleep(lease / 3)
    assert a.generation != first and not a.lost
    a.release()
    assert not store.claim_path(0).exists()  # released: deleted
    b = store.claim_chunk(0, stale_after=lease)
    assert b is not None

    # A holder that stops renewing (as a killed worker does) is taken over after the lease,
    # measured on the taker's clock from its first sight of that generation.
    b._stop.set()
    b._thread.join()
    t0 = time.monotonic()
    while (c := store.claim_chunk(0, stale_after=lease)) is None:
        assert time.monotonic() - t0 < 10 * lease
        time.sleep(0.05)
    assert time.monotonic() - t0 >= lease
    # The silent holder's renewal is refused by its stale generation: it has lost the claim.
    assert store.claim_path(0).rewrite(b"{}", b.generation) is None
    with c:
        store.write_chunk(0, _chunk(0))
    assert not store.claim_path(0).exists()
    assert store.claim_chunk(0, stale_after=lease) is None  # written: nothing to claim

    # A claim left on a written chunk by a holder that died before releasing it is cleared
    # once it has been silent for the lease.
    d = store.claim_chunk(1, stale_after=lease)
    store.write_chunk(1, _chunk(1))
    d._stop.set()
    d._thread.join()
    t0 = time.monotonic()
    while store.claim_path(1).exists():
        assert store.claim_chunk(1, stale_after=lease) is None
        assert time.monotonic() - t0 < 10 * lease
        time.sleep(0.05)


def test_a_judge_converted_on_a_mesh_is_cached_in_the_bucket_and_loaded_again_without_its_source(
        gcs_bucket, tiny_gguf, monkeypatch, tmp_path):
    import jax
    from flax import nnx

    import jaxjudge.models as jm
    from jaxjudge.models import gguf, sharding
    from jaxjudge.store import keys

    monkeypatch.setenv("HOME", str(tmp_path))  # the local sha256 memo goes here, not in the user's home
    mesh = sharding.make_mesh(data=4, model=2)
    cache = f"{gcs_bucket}/converted"
    first = jm.load(tiny_gguf, cache_dir=cache, mesh=mesh)
    entries = [p for p in location(cache).iterdir()]
    assert len(entries) == 1 and (entries[0] / "meta.json").is_file()
    meta = json.loads((entries[0] / "meta.json").read_text())
    assert (entries[0] / meta["params"] / "commit_success.txt").is_file()  # Orbax's commit marker in a bucket

    # The second load reads no byte of the checkpoint: neither its tensors nor, for its hash, the file.
    def refuse(*_, **__):
        raise AssertionError("the cached load read the source checkpoint")

    monkeypatch.setattr(gguf, "load_gguf", refuse)
    monkeypatch.setattr(keys, "file_sha256", refuse)
    monkeypatch.setattr("jaxjudge.models.weights_cache.file_sha256", refuse)
    second = jm.load(tiny_gguf, cache_dir=cache, mesh=mesh)
    a, b = nnx.to_pure_dict(first.state), nnx.to_pure_dict(second.state)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert y.sharding.is_equivalent_to(x.sharding, x.ndim)
        np.testing.assert_array_equal(np.asarray(y), np.asarray(x))
    assert second.tokenizer.to_str() == first.tokenizer.to_str()


def test_a_run_folder_in_a_bucket_holds_what_a_local_one_does(gcs_bucket, tmp_path):
    from jaxjudge.experiment import load_config, run_dir
    from jaxjudge.report import write_run
    from jaxjudge.report.results import Results

    iv = {"estimate": 0.25, "low": 0.1, "high": 0.4}
    res = Results(experiment="x", rows=[{"experiment": "x", "judge": "j", "task": "summeval", "aspect": "coherence",
                                         "scale": "1-5", "method": "vanilla", "score": "expected@0.2", "n": 64,
                                         "metrics": {"spearman": iv}}], notes=["a note"])
    meta = {"command": "jaxjudge report x.py"}
    cfg = load_config(str(REPO / "experiments" / "demo.py:ci"))
    out = run_dir(cfg, "r1", root=f"{gcs_bucket}/results")
    assert str(out) == f"{gcs_bucket}/results/{cfg.name}/r1"
    remote = write_run(res, out, meta)
    local = write_run(res, tmp_path / "run", meta)
    assert sorted(remote) == sorted(local)
    for name, path in local.items():
        assert str(remote[name]) == f"{out}/{path.relative_to(tmp_path / 'run').as_posix()}"
        if name != "metadata":  # its finishing time differs
            assert remote[name].read_bytes() == path.read_bytes(), name
    got = json.loads(remote["metadata"].read_text())
    assert got["files"] == json.loads(local["metadata"].read_text())["files"]
    assert Results.load_json(remote["json"]).rows == Results.load_json(str(remote["json"])).rows == res.rows
