"""A resumable, content-keyed store of extraction outputs, written chunk by chunk.

Layout of a store folder::

    manifest.json          key (what was computed), its hash, format, creation info
    chunks/000000.npz      arrays of chunk 0 (leading axis = examples of the chunk)
    chunks/000001.npz      ...

The key is a JSON-able dict describing everything the outputs depend on (model file sha256,
template text, score scale, prompt style, example ids and chunking, ...). Opening a folder
whose manifest has another key raises `StoreKeyMismatch` naming the differing entries, so a
sweep never mixes outputs of two configurations (keys and hashes: `jaxjudge.store.keys`).

Crash safety. Every file is written to a unique temporary name in the same folder, flushed to
disk and renamed into place (an atomic replace on POSIX), so a chunk file either exists
complete or not at all; a process killed at any point leaves at worst a stray ``*.tmp`` file,
which readers ignore. A chunk's existence is its completion record: there is no shared index
to update, so several processes (hosts of a multi-host run) can write distinct chunks into the
same folder at once, or into separate folders merged afterwards with `merge_stores`.

Sharing work (`jaxjudge.store.files`). A process about to compute chunk i claims it first (`Store.claim_chunk`): an
exclusive create of ``chunks/.NNNNNN.claim`` holding its host and pid, kept fresh by a
heartbeat while the chunk is computed and removed once it is written. Other processes skip a
claimed chunk, so N workers started on one store split its chunks between them. A claim whose
holder is gone (a dead pid on this host, or no heartbeat for `CLAIM_STALE_S` seconds) is taken
over, so a worker killed mid-chunk only delays that chunk. Claims are an optimisation: at worst
two processes compute one chunk, and its atomic write keeps the file whole either way.

In a bucket. The root may be ``gs://bucket/prefix`` (`jaxjudge.store.location`). A chunk is
then published by a single object create, refused if the chunk's object exists (``ifGenerationMatch=0``;
the first writer's copy is kept, never replaced and never renamed), the manifest the same way,
and a claim is an object created and renewed under generation preconditions, taken over after
the lease (`jaxjudge.store.bucket`).

Integrity. Every chunk carries a seal (an extra entry ``@seal`` in its ``.npz``, a JSON
string): the sha256 of the store key it was written for, its chunk index, and a sha256 of its
arrays (names, dtypes, shapes and bytes). `Store.read_chunk` checks all three, so a chunk that
was rewritten (even as a valid ``.npz``), copied from another store or moved to another index
is refused with an error naming the chunk; the zip CRC already catches flipped bytes. A chunk
without a seal (written before seals existed) is refused too, never trusted silently:
`seal_store` (``jaxjudge store seal DIR``) seals such chunks once, after checking their example
ids, and thereby trusts their current content.
"""

from __future__ import annotations

import datetime as _dt
import io
import json
import os
import re
import zipfile
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from jaxjudge import __version__
from jaxjudge.store.bucket import BucketPath
from jaxjudge.store.files import (CLAIM_STALE_S, ChunkClaim, claim_file, clear_dead_claim, fsync_dir, publish,
                                  tmp_name, write_atomic)
from jaxjudge.store.keys import canonical_key, content_sha256, hash_key, key_differences
from jaxjudge.store.layout import FORMAT, MANIFEST, StoreError, StoreKeyMismatch, recompute_hint
from jaxjudge.store.location import Location, location
from jaxjudge.store.migrate import Migrations

__all__ = [
    "CLAIM_STALE_S",
    "FORMAT",
    "Store",
    "StoreError",
    "StoreKeyMismatch",
    "assign_chunks",
    "seal_store",
]

_CHUNKS = "chunks"
_CHUNK_RE = re.compile(r"^(\d{6,})\.npz$")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")
_SEAL = "@seal"  # not a valid array name (see _NAME_RE), so it cannot clash with one
_SEAL_FORMAT = 1


def assign_chunks(chunk_ids: Iterable[int], process_index: int, process_count: int) -> list[int]:
    """The chunks one process of ``process_count`` works on (strided: ``j % process_count``).

    Pass the full chunk list (``range(n_chunks)``), the same on every process, and skip the
    finished ones afterwards: a list of missing chunks read by each process at its own start
    time can differ between processes, and their shares would then overlap or leave gaps.
    """
    if not 0 <= process_index < process_count:
        raise ValueError(f"process_index must be in [0, {process_count}), got {process_index}")
    return [c for j, c in enumerate(sorted(chunk_ids)) if j % process_count == process_index]


# -- the store ----------------------------------------------------------------------------------


class Store(Migrations):
    """A folder of chunked arrays for one key. Use `Store.open`.

    Attributes:
      root: the folder.
      key: the canonical key.
      key_hash: sha256 hex of the key.
      meta: the manifest (format, key, key_hash, n_chunks, created, info).
    """

    def __init__(self, root: Location, manifest: dict[str, Any]):
        self.root = root
        self.meta = manifest
        self.key = manifest["key"]
        self.key_hash = manifest["key_hash"]
        self.n_chunks: int | None = manifest.get("n_chunks")

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r}, key_hash={self.key_hash[:12]}, n_chunks={self.n_chunks})"

    @classmethod
    def open(
        cls,
        root: str | os.PathLike,
        key: Mapping[str, Any] | None = None,
        *,
        n_chunks: int | None = None,
        info: Mapping[str, Any] | None = None,
        create: bool = True,
    ) -> Store:
        """Open (or create) the store at ``root`` for ``key``.

        Args:
          root: the store folder: a local path, or ``gs://bucket/prefix``.
          key: what the outputs are of; None opens an existing store for reading, whatever its key.
          n_chunks: the total number of chunks of the work list, recorded on creation and
            checked on reopening (None leaves it to the calls of `missing_chunks`/`load`).
          info: free-form, non-key information recorded on creation (host, versions, ...).
          create: create the folder if there is no manifest.

        Raises:
          StoreKeyMismatch: the folder was created for another key or chunk count.
          FileNotFoundError: no store there and ``create`` is False or ``key`` is None.
        """
        root = location(root, "store")
        manifest_path = root / MANIFEST
        if key is None:
            if not manifest_path.is_file():
                raise FileNotFoundError(f"no store at {root} (no {MANIFEST})")
            return cls(root, cls._read_manifest(manifest_path))
        ckey = canonical_key(key)
        khash = hash_key(ckey)
        if n_chunks is not None and (not isinstance(n_chunks, int) or n_chunks <= 0):
            raise ValueError(f"n_chunks must be a positive int, got {n_chunks!r}")
        if not manifest_path.is_file():
            if not create:
                raise FileNotFoundError(f"no store at {root} (no {MANIFEST})")
            cls._create(root, ckey, khash, n_chunks, info)
        manifest = cls._read_manifest(manifest_path)
        if manifest["key_hash"] != khash or manifest["key"] != ckey:
            diffs = key_differences(manifest["key"], ckey)
            raise StoreKeyMismatch(
                f"store at {root} holds outputs for a different key: " + "; ".join(diffs or ["key hash differs"])
                + ". Use another folder (e.g. jaxjudge.store.store_path(base, key))."
            )
        stored_n = manifest.get("n_chunks")
        if n_chunks is not None and stored_n is not None and stored_n != n_chunks:
            raise StoreKeyMismatch(f"store at {root}: 'n_chunks' differs (stored {stored_n}, requested {n_chunks})")
        store = cls(root, manifest)
        if store.n_chunks is None:
            store.n_chunks = n_chunks
        return store

    @staticmethod
    def _read_manifest(path: Location) -> dict[str, Any]:
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as e:
            raise StoreError(f"{path}: unreadable manifest ({e})") from None
        if manifest.get("format") != FORMAT:
            raise StoreError(f"{path}: format {manifest.get('format')!r} is not {FORMAT!r}")
        for field in ("key", "key_hash"):
            if field not in manifest:
                raise StoreError(f"{path}: manifest has no {field!r}")
        return manifest

    @staticmethod
    def _create(root: Location, ckey: dict, khash: str, n_chunks: int | None, info: Mapping[str, Any] | None) -> None:
        (root / _CHUNKS).mkdir(parents=True, exist_ok=True)
        manifest = {
            "format": FORMAT,
            "key_hash": khash,
            "key": ckey,
            "n_chunks": n_chunks,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "jaxjudge_version": __version__,
            "info": canonical_key(dict(info or {})),
        }
        data = (json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n").encode("utf-8")
        target = root / MANIFEST
        if isinstance(target, BucketPath):
            # One create: another process's manifest wins, as link() decides below.
            target.create(data)
            return
        tmp = tmp_name(target)
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        try:
            # link() fails if another process created the manifest first: theirs wins, and the
            # key comparison that follows decides whether it is compatible.
            os.link(tmp, target)
        except FileExistsError:
            pass
        except OSError:
            if not target.exists():
                os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(root)

    # -- chunks ---------------------------------------------------------------------------------

    def chunk_path(self, i: int) -> Location:
        return self.root / _CHUNKS / f"{i:06d}.npz"

    def completed_chunks(self) -> list[int]:
        """Indices of the chunks on disk, sorted."""
        folder = self.root / _CHUNKS
        if not isinstance(folder, BucketPath) and not folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _CHUNK_RE.match(p.name)))

    def has_chunk(self, i: int) -> bool:
        return self.chunk_path(i).is_file()

    # -- claims (see the module docstring) -----------------------------------------------------

    def claim_path(self, i: int) -> Location:
        return self.root / _CHUNKS / f".{i:06d}.claim"

    def claim_chunk(self, i: int, *, stale_after: float = CLAIM_STALE_S) -> ChunkClaim | None:
        """Claim chunk ``i`` for this process, or None when it is written or claimed by a live one.

        Use the claim as a context manager around computing and writing the chunk: it keeps
        the claim fresh meanwhile and removes it at the end (also on an error).
        """
        if self.has_chunk(i):
            clear_dead_claim(self.claim_path(i), stale_after)  # its holder died before releasing it
            return None
        return claim_file(self.claim_path(i), lambda: self.has_chunk(i), stale_after=stale_after)

    def _total(self, n_chunks: int | None) -> int:
        n = n_chunks if n_chunks is not None else self.n_chunks
        if n is None:
            raise ValueError("the number of chunks is not known: pass n_chunks (or give it to Store.open)")
        if self.n_chunks is not None and n != self.n_chunks:
            raise ValueError(f"n_chunks={n} but the store was opened for {self.n_chunks} chunks")
        return n

    def missing_chunks(self, n_chunks: int | None = None) -> list[int]:
        """Chunks of ``0 .. n_chunks-1`` that are not written yet: the work left to do."""
        n = self._total(n_chunks)
        done = set(self.completed_chunks())
        extra = sorted(c for c in done if c >= n)
        if extra:
            raise StoreError(f"store at {self.root} has chunks {extra[:5]} beyond n_chunks={n}")
        return [i for i in range(n) if i not in done]

    def write_chunk(self, i: int, arrays: Mapping[str, np.ndarray]) -> Location:
        """Write chunk ``i`` atomically (replacing an existing copy; in a bucket, published once:
        a copy already there, another worker's, is kept).

        Args:
          i: chunk index, ``0 <= i < n_chunks``.
          arrays: name -> array; every array's leading axis runs over the chunk's examples, so
            all must have the same leading size. Object arrays are refused (no pickles).

        Returns:
          The chunk file.
        """
        if not isinstance(i, (int, np.integer)) or i < 0:
            raise ValueError(f"chunk index must be an int >= 0, got {i!r}")
        if self.n_chunks is not None and i >= self.n_chunks:
            raise ValueError(f"chunk index {i} out of range for n_chunks={self.n_chunks}")
        if not arrays:
            raise ValueError(f"chunk {i}: no arrays to write")
        clean: dict[str, np.ndarray] = {}
        lead = None
        for name, value in arrays.items():
            if not isinstance(name, str) or not _NAME_RE.match(name):
                raise ValueError(f"chunk {i}: array name {name!r} must match {_NAME_RE.pattern}")
            a = np.asarray(value)
            if a.dtype == object:
                raise TypeError(f"chunk {i}: array {name!r} has dtype object; store numbers, bools or fixed-width strings")
            if a.ndim == 0:
                raise ValueError(f"chunk {i}: array {name!r} is a scalar; arrays need a leading example axis")
            if lead is None:
                lead = a.shape[0]
            elif a.shape[0] != lead:
                raise ValueError(f"chunk {i}: array {name!r} has {a.shape[0]} rows, others have {lead}")
            clean[name] = a
        return self._write_sealed(int(i), clean, origin="write")

    def _write_sealed(self, i: int, arrays: dict[str, np.ndarray], *, origin: str) -> Location:
        seal = {"format": _SEAL_FORMAT, "key_hash": self.key_hash, "chunk": i,
                "content_sha256": content_sha256(arrays), "origin": origin}
        entries = {**arrays, _SEAL: np.asarray(json.dumps(seal, sort_keys=True))}
        target = self.chunk_path(i)
        if isinstance(target, BucketPath):
            buf = io.BytesIO()
            np.savez(buf, **entries)  # the whole chunk, then one upload
            publish(target, buf.getvalue(), once=origin == "write")
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, lambda f: np.savez(f, **entries))
        return target

    def _read_raw(self, i: int) -> tuple[dict[str, np.ndarray], dict[str, Any] | None]:
        """A chunk's arrays and its seal (None when it has none), unchecked."""
        path = self.chunk_path(i)
        if not path.is_file():
            raise StoreError(f"store at {self.root}: chunk {i} is missing")
        try:
            z = np.load(io.BytesIO(path.read_bytes()) if isinstance(path, BucketPath) else path, allow_pickle=False)
            if not isinstance(z, np.lib.npyio.NpzFile):
                raise ValueError("not an .npz archive")
            with z:
                arrays = {name: z[name] for name in z.files}
        except (OSError, ValueError, EOFError, zipfile.BadZipFile) as e:
            size = path.size() if isinstance(path, BucketPath) else path.stat().st_size
            what = "empty file" if size == 0 else str(e) or type(e).__name__
            raise StoreError(f"{path}: unreadable chunk {i} ({what}); {recompute_hint(self.root)}") from None
        seal = arrays.pop(_SEAL, None)
        if seal is None:
            return arrays, None
        try:
            seal = json.loads(str(seal[()]))
            if not isinstance(seal, dict):
                raise ValueError("not a JSON object")
        except (ValueError, TypeError, IndexError) as e:
            raise StoreError(f"{path}: chunk {i} has an unreadable seal ({e}); {recompute_hint(self.root)}") from None
        return arrays, seal

    def _check_seal(self, i: int, arrays: dict[str, np.ndarray], seal: dict[str, Any] | None) -> None:
        path = self.chunk_path(i)
        if seal is None:
            raise StoreError(
                f"{path}: chunk {i} has no seal (written before chunks recorded their key and content hash), so "
                f"its content cannot be verified; if you trust the store's current content, run "
                f"`jaxjudge store seal {self.root}` once, or {recompute_hint(self.root)}")
        if seal.get("key_hash") != self.key_hash:
            raise StoreError(
                f"{path}: chunk {i} was written for another store key (sealed for {str(seal.get('key_hash'))[:12]}, "
                f"this store is {self.key_hash[:12]}; copied from another store?); {recompute_hint(self.root)}")
        if seal.get("chunk") != i:
            raise StoreError(f"{path}: chunk {i} was written as chunk {seal.get('chunk')!r} (moved or copied?); "
                             f"{recompute_hint(self.root)}")
        if seal.get("content_sha256") != content_sha256(arrays):
            raise StoreError(f"{path}: chunk {i} content does not match its recorded hash (altered after it was "
                             f"written); {recompute_hint(self.root)}")

    def read_chunk(self, i: int) -> dict[str, np.ndarray]:
        """Arrays of one chunk, after checking its seal (key, index and content hash).

        Raises:
          StoreError: the chunk is missing, unreadable, unsealed, sealed for another key or
            index, or its arrays differ from the ones sealed (the message names the file).
        """
        arrays, seal = self._read_raw(i)
        self._check_seal(i, arrays, seal)
        return arrays

    def load(self, n_chunks: int | None = None) -> dict[str, np.ndarray]:
        """All chunks concatenated in chunk order along the leading axis.

        Args:
          n_chunks: expected total (defaults to the one given to `open`; if neither is known,
            the chunks on disk must be exactly ``0 .. m-1``).

        Raises:
          StoreError: chunks missing, or chunks disagreeing on array names, dtypes or shapes.
        """
        done = self.completed_chunks()
        n = n_chunks if n_chunks is not None else self.n_chunks
        if n is None:
            n = (max(done) + 1) if done else 0
        if n == 0:
            raise StoreError(f"store at {self.root}: no chunks written yet")
        missing = self.missing_chunks(n)
        if missing:
            raise StoreError(
                f"store at {self.root}: cannot load, {len(missing)} of {n} chunks missing (first: {missing[:10]})"
            )
        parts = [self.read_chunk(i) for i in range(n)]
        names = sorted(parts[0])
        for i, p in enumerate(parts):
            if sorted(p) != names:
                raise StoreError(f"store at {self.root}: chunk {i} has arrays {sorted(p)}, chunk 0 has {names}")
            for name in names:
                a, b = p[name], parts[0][name]
                strings = a.dtype.kind == b.dtype.kind == "U"  # widths may differ between chunks
                if a.shape[1:] != b.shape[1:] or (a.dtype != b.dtype and not strings):
                    raise StoreError(
                        f"store at {self.root}: array {name!r} of chunk {i} is {a.dtype}{list(a.shape)}, "
                        f"chunk 0 has {b.dtype}{list(b.shape)}"
                    )
        return {name: np.concatenate([p[name] for p in parts], axis=0) for name in names}


def seal_store(root: str | os.PathLike) -> dict[str, int]:
    """Seal the chunks of a store written before chunks carried seals, trusting their content.

    Each unsealed chunk is read (the zip CRC is checked), its example ids are checked (present
    where the key counts examples, unique across chunks, as many as the key says when the store
    is complete, every array as long as the ids), and it is rewritten atomically with the
    store's key hash and the hash of its current arrays. The arrays themselves are unchanged.
    Sealed chunks are verified and left alone. Run it once, on a store whose content you trust:
    sealing is a statement that the current content is what the key describes.

    Returns:
      ``{"sealed": n, "already": m}``.

    Raises:
      StoreError: a chunk unreadable, with bad example ids, or sealed but not matching its seal.
    """
    return Store.open(root).seal()
