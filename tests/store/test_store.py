"""Store: chunked writes, resume after SIGKILL, key checks, concurrent writers and merging."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from jaxjudge.store import (
    Store,
    StoreError,
    StoreKeyMismatch,
    assign_chunks,
    canonical_key,
    hash_key,
    merge_stores,
)

KEY = {
    "model_sha256": "ab" * 32,
    "template": "Rate {min}-{max}:\n{{Summary}}",
    "scale": {"lo": 1, "hi": 5, "step": 1},
    "style": "raw",
    "example_ids": [f"ex{i}" for i in range(23)],
    "chunk_size": 5,
}
N_CHUNKS = 5  # 23 examples in chunks of 5


def chunk_arrays(i: int) -> dict[str, np.ndarray]:
    """Deterministic stand-in for the engine's outputs of chunk i (sizes 5,5,5,5,3)."""
    start, stop = 5 * i, min(5 * i + 5, 23)
    rng = np.random.default_rng(100 + i)
    n = stop - start
    return {
        "logprobs": rng.normal(size=(n, 5)).astype(np.float32),
        "greedy": rng.integers(0, 49152, size=n).astype(np.int32),
        "valid": rng.random(n) > 0.3,
        "example_id": np.asarray([f"ex{j}" for j in range(start, stop)]),
    }


def reference() -> dict[str, np.ndarray]:
    parts = [chunk_arrays(i) for i in range(N_CHUNKS)]
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def assert_same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]):
    assert sorted(a) == sorted(b)
    for k in a:
        assert a[k].dtype == b[k].dtype, k
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


# The writer run in a subprocess: it computes and writes the missing chunks of its share,
# optionally hanging at a chosen point of chunk `block_at`'s write so the test can SIGKILL it.
WRITER = textwrap.dedent(
    """
    import io, json, os, sys, time
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    from test_store import KEY, N_CHUNKS, chunk_arrays
    from jaxjudge.store import Store, assign_chunks

    root, block_at, mode = sys.argv[2], int(sys.argv[3]), sys.argv[4]
    process_index, process_count = int(sys.argv[5]), int(sys.argv[6])
    store = Store.open(root, KEY, n_chunks=N_CHUNKS)
    current = {"i": None}

    def hang():
        print("blocked", flush=True)
        while True:
            time.sleep(1)

    real_replace, real_savez = os.replace, np.savez

    def replace(src, dst):
        if mode == "before_rename" and current["i"] == block_at:
            hang()  # the temporary file is complete but not yet renamed
        return real_replace(src, dst)

    def savez(f, **arrays):
        if mode == "mid_write" and current["i"] == block_at:
            buf = io.BytesIO()
            real_savez(buf, **arrays)
            data = buf.getvalue()
            f.write(data[: len(data) // 2])  # half a file on disk
            f.flush()
            hang()
        return real_savez(f, **arrays)

    os.replace, np.savez = replace, savez
    # Shares come from the full chunk list (the same on every process, whenever it starts);
    # finished chunks are then skipped.
    missing = set(store.missing_chunks())
    for i in [c for c in assign_chunks(range(N_CHUNKS), process_index, process_count) if c in missing]:
        current["i"] = i
        store.write_chunk(i, chunk_arrays(i))
        print("wrote", i, flush=True)
    print("done", flush=True)
    """
)


def start_writer(root: Path, block_at: int = -1, mode: str = "none", process: tuple[int, int] = (0, 1)):
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(Path(__file__).parent), str(root), str(block_at), mode, *map(str, process)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_writer(root: Path, **kwargs) -> list[int]:
    proc = start_writer(root, **kwargs)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    lines = out.splitlines()
    assert lines[-1] == "done"
    return [int(line.split()[1]) for line in lines if line.startswith("wrote")]


# -- basics ----------------------------------------------------------------------------------------


def test_write_out_of_order_and_load_in_order(tmp_path):
    store = Store.open(tmp_path / "s", KEY, n_chunks=N_CHUNKS)
    assert store.missing_chunks() == [0, 1, 2, 3, 4]
    for i in (3, 0, 4):
        store.write_chunk(i, chunk_arrays(i))
    assert store.missing_chunks() == [1, 2] and store.completed_chunks() == [0, 3, 4]
    with pytest.raises(StoreError, match=r"2 of 5 chunks missing \(first: \[1, 2\]\)"):
        store.load()
    for i in (2, 1):
        store.write_chunk(i, chunk_arrays(i))
    assert_same(store.load(), reference())
    reopened = Store.open(tmp_path / "s", KEY)
    assert reopened.n_chunks == N_CHUNKS and reopened.missing_chunks() == []
    assert_same(reopened.load(), reference())
    assert reopened.meta["key"] == canonical_key(KEY) and reopened.meta["key_hash"] == hash_key(KEY)
    # Read-only inspection without knowing the key.
    assert Store.open(tmp_path / "s").key == canonical_key(KEY)


def test_missing_chunks_without_recorded_total(tmp_path):
    store = Store.open(tmp_path, KEY)
    store.write_chunk(1, chunk_arrays(1))
    assert store.missing_chunks(3) == [0, 2]
    with pytest.raises(ValueError, match="n_chunks"):
        store.missing_chunks()
    with pytest.raises(StoreError, match="missing"):
        store.load()  # chunks on disk must be 0..m-1
    with pytest.raises(StoreError, match="beyond"):
        store.missing_chunks(1)


def test_key_mismatch_names_the_key(tmp_path):
    Store.open(tmp_path, KEY, n_chunks=N_CHUNKS)
    other = {**KEY, "model_sha256": "cd" * 32}
    with pytest.raises(StoreKeyMismatch, match="'model_sha256' differs") as info:
        Store.open(tmp_path, other)
    assert "ab" * 10 in str(info.value) and "cd" * 10 in str(info.value)
    with pytest.raises(StoreKeyMismatch, match="'style' is missing from the requested key"):
        Store.open(tmp_path, {k: v for k, v in KEY.items() if k != "style"})
    with pytest.raises(StoreKeyMismatch, match="'seed' is not in the stored key"):
        Store.open(tmp_path, {**KEY, "seed": 0})
    with pytest.raises(StoreKeyMismatch, match="n_chunks"):
        Store.open(tmp_path, KEY, n_chunks=6)
    with pytest.raises(FileNotFoundError):
        Store.open(tmp_path / "absent", KEY, create=False)
    with pytest.raises(FileNotFoundError):
        Store.open(tmp_path / "absent")


def test_canonical_key_and_hash():
    a = {"x": (1, 2), "y": np.float32(0.5), "z": {"b": np.int64(3), "a": [True, None]}, "p": Path("m.gguf")}
    b = {"z": {"a": [True, None], "b": 3}, "p": "m.gguf", "y": 0.5, "x": [1, 2]}
    assert canonical_key(a) == b and hash_key(a) == hash_key(b)
    assert hash_key({**b, "x": [2, 1]}) != hash_key(b)
    with pytest.raises(TypeError, match=r"key\.z\.when"):
        canonical_key({"z": {"when": object()}})
    with pytest.raises(ValueError, match="non-finite"):
        canonical_key({"t": float("nan")})
    with pytest.raises(TypeError, match="str"):
        canonical_key({"t": {1: 2}})


def test_write_chunk_validation(tmp_path):
    store = Store.open(tmp_path, KEY, n_chunks=N_CHUNKS)
    with pytest.raises(TypeError, match="object"):
        store.write_chunk(0, {"a": np.array([{"x": 1}], dtype=object)})
    with pytest.raises(ValueError, match="'b' has 2 rows, others have 3"):
        store.write_chunk(0, {"a": np.zeros(3), "b": np.zeros((2, 4))})
    with pytest.raises(ValueError, match="name"):
        store.write_chunk(0, {"bad/name": np.zeros(3)})
    with pytest.raises(ValueError, match="out of range"):
        store.write_chunk(N_CHUNKS, {"a": np.zeros(3)})
    with pytest.raises(ValueError, match="scalar"):
        store.write_chunk(0, {"a": np.float32(1)})
    with pytest.raises(ValueError, match="no arrays"):
        store.write_chunk(0, {})
    assert store.completed_chunks() == []  # nothing half-written by the refusals


def test_inconsistent_or_corrupt_chunks(tmp_path):
    store = Store.open(tmp_path, KEY, n_chunks=2)
    store.write_chunk(0, {"lp": np.zeros((2, 5), np.float32)})
    store.write_chunk(1, {"lp": np.zeros((2, 6), np.float32)})
    with pytest.raises(StoreError, match="'lp' of chunk 1"):
        store.load()
    store.write_chunk(1, {"other": np.zeros((2, 5), np.float32)})
    with pytest.raises(StoreError, match="chunk 1 has arrays"):
        store.load()
    store.chunk_path(1).write_bytes(b"not a zip file")
    with pytest.raises(StoreError, match="000001.npz"):
        store.load()


def test_chunk_helpers():
    assert assign_chunks([4, 0, 2, 7, 9], 0, 2) == [0, 4, 9]
    assert assign_chunks([4, 0, 2, 7, 9], 1, 2) == [2, 7]
    with pytest.raises(ValueError):
        assign_chunks([1], 2, 2)


# -- crash and resume ------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["before_rename", "mid_write"])
def test_sigkill_then_resume_computes_only_missing_chunks(tmp_path, mode):
    root = tmp_path / "run"
    block_at = 2
    proc = start_writer(root, block_at=block_at, mode=mode)
    seen = []
    for line in proc.stdout:  # noqa: B007
        seen.append(line.strip())
        if line.strip() in ("blocked", "done"):
            break
    assert seen and seen[-1] == "blocked", (seen, proc.stderr.read() if proc.poll() is not None else "")
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert seen[:-1] == ["wrote 0", "wrote 1"]

    store = Store.open(root, KEY, n_chunks=N_CHUNKS)
    assert store.missing_chunks() == [2, 3, 4]
    # The killed write left a temporary file behind, never a chunk under its final name.
    stray = [p.name for p in (root / "chunks").iterdir() if p.name.endswith(".tmp")]
    assert len(stray) == 1 and stray[0].startswith(".000002.npz.")
    before = {i: (store.chunk_path(i).stat().st_ino, store.chunk_path(i).stat().st_mtime_ns) for i in (0, 1)}

    assert run_writer(root) == [2, 3, 4]  # the resumed run recomputes no finished chunk
    after = {i: (store.chunk_path(i).stat().st_ino, store.chunk_path(i).stat().st_mtime_ns) for i in (0, 1)}
    assert after == before
    resumed = Store.open(root, KEY).load()

    uninterrupted = tmp_path / "clean"
    assert run_writer(uninterrupted) == [0, 1, 2, 3, 4]
    assert_same(resumed, Store.open(uninterrupted, KEY).load())
    assert_same(resumed, reference())


def test_two_processes_share_one_folder(tmp_path):
    root = tmp_path / "shared"
    procs = [start_writer(root, process=(p, 2)) for p in range(2)]
    written = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        written.append([int(x.split()[1]) for x in out.splitlines() if x.startswith("wrote")])
    assert written == [[0, 2, 4], [1, 3]]
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["key_hash"] == hash_key(KEY)
    assert_same(Store.open(root, KEY).load(), reference())


def test_merge_separate_folders(tmp_path):
    parts = [tmp_path / f"host{p}" for p in range(2)]
    for p, root in enumerate(parts):
        run_writer(root, process=(p, 2))
    assert Store.open(parts[0], KEY).missing_chunks() == [1, 3]
    merged = merge_stores(tmp_path / "merged", parts)
    assert merged.missing_chunks() == []
    assert_same(merged.load(), reference())
    # Merging into one of the sources works too, and is idempotent.
    into_first = merge_stores(parts[0], parts)
    assert_same(into_first.load(), reference())
    assert merge_stores(parts[0], parts).missing_chunks() == []


def test_merge_refuses_conflicts_and_other_keys(tmp_path):
    a = Store.open(tmp_path / "a", KEY, n_chunks=N_CHUNKS)
    b = Store.open(tmp_path / "b", KEY, n_chunks=N_CHUNKS)
    a.write_chunk(0, chunk_arrays(0))
    changed = chunk_arrays(0)
    changed["logprobs"] = changed["logprobs"] + 1
    b.write_chunk(0, changed)
    with pytest.raises(StoreError, match="chunk 0 differs"):
        merge_stores(tmp_path / "m", [a, b])
    c = Store.open(tmp_path / "c", {**KEY, "style": "chat"})
    with pytest.raises(StoreKeyMismatch, match="'style' differs"):
        merge_stores(tmp_path / "m2", [a, c])
    with pytest.raises(ValueError, match="no sources"):
        merge_stores(tmp_path / "m3", [])


# -- keys ------------------------------------------------------------------------------------------


def test_key_hashes_and_the_engine_key_refused_by_another(tmp_path):
    import hashlib

    from jaxjudge.store import file_sha256, ids_digest

    model = tmp_path / "model.bin"
    model.write_bytes(os.urandom(3 << 20))
    assert file_sha256(model, block_size=1 << 16) == hashlib.sha256(model.read_bytes()).hexdigest()
    assert ids_digest(["a", "b"]) == hashlib.sha256(b"a\nb").hexdigest()
    with pytest.raises(ValueError, match="newlines"):
        ids_digest(["a\nb"])
    # A store opened with one key refuses another, naming the entry.
    key = {**KEY, "model_sha256": file_sha256(model)}
    Store.open(tmp_path / "s", key)
    with pytest.raises(StoreKeyMismatch, match="'scale' differs"):
        Store.open(tmp_path / "s", {**key, "scale": {"lo": 0, "hi": 4, "step": 1}})


# -- integrity: every chunk sealed with its store key and content hash ---------------------------


def _rewrite_npz(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """What a careless script does: a valid .npz with the same names, written by np.savez."""
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def test_rewritten_chunk_is_refused_naming_it(tmp_path):
    store = Store.open(tmp_path / "s", KEY, n_chunks=N_CHUNKS)
    for i in range(N_CHUNKS):
        store.write_chunk(i, chunk_arrays(i))
    assert_same(store.load(), reference())
    # Columns reversed, kept as a valid .npz (the seal entry copied over unchanged).
    with np.load(store.chunk_path(2), allow_pickle=False) as z:
        entries = {name: z[name] for name in z.files}
    assert "@seal" in entries
    entries["logprobs"] = entries["logprobs"][:, ::-1]
    _rewrite_npz(store.chunk_path(2), entries)
    with pytest.raises(StoreError, match=r"000002\.npz: chunk 2 content does not match.*delete it and rerun"):
        store.load()
    # Without the seal entry at all: refused as unsealed.
    entries.pop("@seal")
    _rewrite_npz(store.chunk_path(2), entries)
    with pytest.raises(StoreError, match=r"000002\.npz: chunk 2 has no seal.*jaxjudge store seal"):
        store.read_chunk(2)


def test_extend_key_reseals_every_chunk_and_finishes_after_an_interruption(tmp_path):
    store = Store.open(tmp_path / "s", KEY, n_chunks=N_CHUNKS)
    for i in range(N_CHUNKS):
        store.write_chunk(i, chunk_arrays(i))
    extended = canonical_key({**KEY, "setup": {"prompt_style": "chat"}})
    # Interrupted after chunk 1 was re-sealed (the manifest still holds the old key).
    Store(store.root, {**store.meta, "key": extended, "key_hash": hash_key(extended)})._write_sealed(
        1, store.read_chunk(1), origin="extend_key")
    with pytest.raises(StoreError, match="written for another store key"):
        Store.open(tmp_path / "s").load()
    again = Store.open(tmp_path / "s")
    assert again.extend_key({"setup": {"prompt_style": "chat"}}) == {"resealed": N_CHUNKS - 1, "already": 1}
    reopened = Store.open(tmp_path / "s", extended, n_chunks=N_CHUNKS)  # the extended key, on disk
    assert_same(reopened.load(), reference())
    with pytest.raises(StoreKeyMismatch):
        Store.open(tmp_path / "s", KEY)
    with pytest.raises(ValueError, match="already has"):
        reopened.extend_key({"setup": {}})
    # A tampered chunk is refused before anything is rewritten.
    other = Store.open(tmp_path / "t", KEY, n_chunks=N_CHUNKS)
    for i in range(N_CHUNKS):
        other.write_chunk(i, chunk_arrays(i))
    with np.load(other.chunk_path(2), allow_pickle=False) as z:
        entries = {name: z[name] for name in z.files}
    entries["logprobs"] = entries["logprobs"] + 1.0
    _rewrite_npz(other.chunk_path(2), entries)
    manifest = (other.root / "manifest.json").read_bytes()
    first = other.chunk_path(0).read_bytes()
    with pytest.raises(StoreError, match=r"000002\.npz: chunk 2 content does not match"):
        other.extend_key({"setup": {}})
    assert (other.root / "manifest.json").read_bytes() == manifest and other.chunk_path(0).read_bytes() == first


def test_chunk_copied_from_another_store_or_index_is_refused(tmp_path):
    a = Store.open(tmp_path / "a", KEY, n_chunks=N_CHUNKS)
    b = Store.open(tmp_path / "b", {**KEY, "scale": {"lo": 2, "hi": 6, "step": 1}}, n_chunks=N_CHUNKS)
    a.write_chunk(0, chunk_arrays(0))
    other = chunk_arrays(0)
    other["logprobs"] = other["logprobs"] + 1.0  # same example ids, other numbers
    b.write_chunk(0, other)
    a.chunk_path(0).write_bytes(b.chunk_path(0).read_bytes())
    with pytest.raises(StoreError, match=r"000000\.npz: chunk 0 was written for another store key"):
        a.read_chunk(0)
    a.write_chunk(1, chunk_arrays(1))
    a.chunk_path(0).write_bytes(a.chunk_path(1).read_bytes())
    with pytest.raises(StoreError, match=r"chunk 0 was written as chunk 1"):
        a.read_chunk(0)


def test_empty_or_foreign_chunk_file_names_the_path(tmp_path):
    store = Store.open(tmp_path, KEY, n_chunks=N_CHUNKS)
    store.chunk_path(0).parent.mkdir(parents=True, exist_ok=True)
    store.chunk_path(0).write_bytes(b"")
    with pytest.raises(StoreError, match=r"000000\.npz: unreadable chunk 0 \(empty file\)"):
        store.read_chunk(0)
    np.save(store.chunk_path(0), np.zeros(3))  # .npy content under the .npz name
    store.chunk_path(0).with_suffix(".npz.npy").replace(store.chunk_path(0))
    with pytest.raises(StoreError, match=r"000000\.npz: unreadable chunk 0"):
        store.read_chunk(0)


def test_chunk_names_read_the_archive_directory_only(tmp_path):
    """`Store.chunk_names`: the arrays a chunk holds (its seal too), without reading or checking
    them: a chunk whose arrays were altered still lists its names; an unreadable file names it."""
    store = Store.open(tmp_path, KEY, n_chunks=N_CHUNKS)
    store.write_chunk(0, chunk_arrays(0))
    assert sorted(store.chunk_names(0)) == sorted([*chunk_arrays(0), "@seal"])
    with np.load(store.chunk_path(0)) as z:
        altered = {k: z[k] for k in z.files}
    altered["logprobs"] = altered["logprobs"] + 1.0
    np.savez(store.chunk_path(0), **altered)
    assert sorted(store.chunk_names(0)) == sorted([*chunk_arrays(0), "@seal"])
    with pytest.raises(StoreError, match="content does not match"):
        store.read_chunk(0)
    store.chunk_path(1).write_bytes(b"not a zip")
    with pytest.raises(StoreError, match=r"000001\.npz: unreadable chunk 1"):
        store.chunk_names(1)


def _legacy_store(root: Path) -> Store:
    """A store as the code before seals wrote it: plain np.savez chunks."""
    store = Store.open(root, {**KEY, "n_examples": 23}, n_chunks=N_CHUNKS)
    for i in range(N_CHUNKS):
        arrays = chunk_arrays(i)
        arrays["example_ids"] = arrays["example_id"]
        store.chunk_path(i).parent.mkdir(parents=True, exist_ok=True)
        _rewrite_npz(store.chunk_path(i), arrays)
    return store


def test_legacy_chunks_refused_until_sealed_then_trusted(tmp_path):
    from jaxjudge.store import seal_store

    store = _legacy_store(tmp_path / "old")
    before = {i: store.chunk_path(i).read_bytes() for i in range(N_CHUNKS)}
    with pytest.raises(StoreError, match=r"chunk 0 has no seal.*run `jaxjudge store seal .*old` once"):
        store.load()
    assert {i: store.chunk_path(i).read_bytes() for i in range(N_CHUNKS)} == before  # nothing discarded
    assert seal_store(tmp_path / "old") == {"sealed": N_CHUNKS, "already": 0}
    loaded = store.load()
    expected = reference()
    expected["example_ids"] = expected["example_id"]
    assert_same(loaded, expected)  # bit-identical arrays after sealing
    assert seal_store(tmp_path / "old") == {"sealed": 0, "already": N_CHUNKS}  # idempotent
    # Sealing never blesses a chunk altered after it was sealed.
    with np.load(store.chunk_path(1), allow_pickle=False) as z:
        entries = {name: z[name] for name in z.files}
    entries["logprobs"] = entries["logprobs"] * 2
    _rewrite_npz(store.chunk_path(1), entries)
    with pytest.raises(StoreError, match="chunk 1 content does not match"):
        seal_store(tmp_path / "old")


def test_seal_checks_example_ids(tmp_path):
    from jaxjudge.store import seal_store

    store = _legacy_store(tmp_path / "dup")
    arrays = chunk_arrays(1)
    arrays["example_ids"] = chunk_arrays(0)["example_id"]  # chunk 1 claims chunk 0's examples
    _rewrite_npz(store.chunk_path(1), arrays)
    with pytest.raises(StoreError, match=r"000001\.npz: chunk 1 repeats example id 'ex0' \(also in chunk 0\)"):
        seal_store(tmp_path / "dup")
    with pytest.raises(StoreError, match="no seal"):
        store.read_chunk(0)  # a failed seal leaves every chunk as it was
    store = _legacy_store(tmp_path / "noids")
    arrays = chunk_arrays(3)
    _rewrite_npz(store.chunk_path(3), arrays)
    with pytest.raises(StoreError, match=r"chunk 3 has no 'example_ids'"):
        seal_store(tmp_path / "noids")


def test_cli_store_seal_walks_a_folder_of_stores(tmp_path, capsys):
    from jaxjudge.cli import main

    for name in ("m/a", "m/b"):
        _legacy_store(tmp_path / "stores" / name)
    assert main(["store", "seal", str(tmp_path / "stores")]) == 0
    out = capsys.readouterr().out
    assert "2 stores, 10 chunks sealed" in out
    assert Store.open(tmp_path / "stores" / "m" / "a").load()["logprobs"].shape == (23, 5)
    assert main(["store", "seal", str(tmp_path / "stores")]) == 0
    assert "2 stores, 0 chunks sealed" in capsys.readouterr().out
    Store.open(tmp_path / "stores" / "m" / "b").chunk_path(4).write_bytes(b"")
    assert main(["store", "seal", str(tmp_path / "stores")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "000004.npz: unreadable chunk 4 (empty file)" in err
    assert main(["store", "seal", str(tmp_path / "nothing")]) == 2


def test_generation_job_resumes_at_its_first_missing_chunk(tmp_path, monkeypatch):
    """A generation job interrupted mid-way keeps its finished chunks: the rerun computes only
    the rest, and the store loads to the same arrays as an uninterrupted run. A store written
    as one chunk (before generation was chunked) is complete as it is."""
    from jaxjudge.jobs import base as jobs

    monkeypatch.setattr(jobs, "GENERATE_CHUNK_ROWS", 3)
    replies = {"example_ids": np.arange(7), "parsed_scores": np.linspace(1, 5, 7).astype(np.float32)}
    calls = []

    def make(lo, hi, fail_at=None):
        calls.append((lo, hi))
        if lo == fail_at:
            raise KeyboardInterrupt  # killed while generating rows 3..5
        return {k: v[lo:hi] for k, v in replies.items()}

    key = {"role": "generate", "scale": "1-5"}
    with pytest.raises(KeyboardInterrupt):
        jobs.row_chunks(tmp_path / "gen", key, 7, lambda lo, hi: make(lo, hi, fail_at=3))
    assert calls == [(0, 3), (3, 6)] and not jobs.complete(tmp_path / "gen", key)
    calls.clear()
    assert jobs.row_chunks(tmp_path / "gen", key, 7, make) == (True, 7)
    assert calls == [(3, 6), (6, 7)] and jobs.complete(tmp_path / "gen", key)
    got = Store.open(tmp_path / "gen", key).load()
    assert jobs.row_chunks(tmp_path / "once", key, 7, make)[1] == 7
    want = Store.open(tmp_path / "once", key).load()
    for name, v in replies.items():
        np.testing.assert_array_equal(got[name], v)
        np.testing.assert_array_equal(want[name], v)
    calls.clear()
    assert jobs.row_chunks(tmp_path / "gen", key, 7, make) == (False, 7) and calls == []

    legacy = Store.open(tmp_path / "legacy", key, n_chunks=1)
    legacy.write_chunk(0, replies)
    assert jobs.row_chunks(tmp_path / "legacy", key, 7, make) == (False, 7) and calls == []


def test_a_claim_left_on_a_written_chunk_by_a_dead_worker_is_cleared(tmp_path):
    """A worker killed between publishing chunk 0 and releasing its claim: the next worker's pass
    over the store removes the claim (its holder's pid is gone), and keeps a live holder's."""
    import socket

    from jaxjudge.store.work import claimed_chunks

    store = Store.open(tmp_path / "s", {"k": 1}, n_chunks=2)
    store.write_chunk(0, {"x": np.zeros(2)})
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    holder = {"host": socket.gethostname(), "pid": dead.pid, "token": "t"}
    store.claim_path(0).write_text(json.dumps(holder))
    assert claimed_chunks(store, [0, 1], lambda i: {"x": np.full(2, float(i))}) == [1]
    assert not store.claim_path(0).exists() and not store.claim_path(1).exists()
    # a live holder (this process) keeps its claim on a written chunk
    store.claim_path(0).write_text(json.dumps({**holder, "pid": os.getpid()}))
    assert claimed_chunks(store, [0, 1], lambda i: {"x": np.zeros(2)}) == []
    assert store.claim_path(0).exists()
