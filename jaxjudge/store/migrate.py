"""One-time migrations of a store's chunks, kept apart from `jaxjudge.store.chunked`'s reading and
writing: sealing chunks written before chunks carried seals, extending a store's key, and telling
a store begun before an array existed from its chunks' names.

`Migrations` is a base of `jaxjudge.store.chunked.Store`: its methods use the store's chunk
readers and writers (``_read_raw``, ``_check_seal``, ``_write_sealed``), and this module imports
nothing of `jaxjudge.store.chunked`.
"""

from __future__ import annotations

import json
import os
import zipfile
from collections.abc import Mapping
from typing import Any

from jaxjudge.store.bucket import BucketPath
from jaxjudge.store.files import fsync_dir, tmp_name
from jaxjudge.store.keys import canonical_key, hash_key
from jaxjudge.store.layout import MANIFEST, StoreError, recompute_hint

__all__ = ["Migrations"]


class Migrations:
    """The one-time migrations of a store (a base of `jaxjudge.store.chunked.Store`)."""

    def chunk_names(self, i: int) -> list[str]:
        """The array names chunk ``i`` holds, from its archive's directory alone (no array read,
        no seal checked): whether a store was begun before chunks carried an array."""
        path = self.chunk_path(i)
        try:
            with path.open("rb") as f, zipfile.ZipFile(f) as z:
                return [n.removesuffix(".npy") for n in z.namelist()]
        except (OSError, zipfile.BadZipFile) as e:
            raise StoreError(f"{path}: unreadable chunk {i} ({e}); {recompute_hint(self.root)}") from None

    def seal(self) -> dict[str, int]:
        """Seal this store's unsealed chunks (`jaxjudge.store.chunked.seal_store`): every chunk
        checked first, then the unsealed ones rewritten with their seal. Returns counts per outcome."""
        done = self.completed_chunks()
        unsealed: list[int] = []
        seen: dict[str, int] = {}
        for i in done:
            arrays, seal = self._read_raw(i)
            if seal is not None:
                self._check_seal(i, arrays, seal)  # a sealed chunk is verified, never re-sealed
            path = self.chunk_path(i)
            lead = {len(a) for a in arrays.values()}
            if len(lead) > 1:
                raise StoreError(f"{path}: chunk {i} has arrays of different lengths {sorted(lead)}; "
                                 f"{recompute_hint(self.root)}")
            if "example_ids" in arrays or "n_examples" in self.key:
                if "example_ids" not in arrays:
                    raise StoreError(f"{path}: chunk {i} has no 'example_ids' array; {recompute_hint(self.root)}")
                for e in (str(x) for x in arrays["example_ids"]):
                    if e in seen:
                        raise StoreError(f"{path}: chunk {i} repeats example id {e!r} (also in chunk {seen[e]}); "
                                         f"{recompute_hint(self.root)}")
                    seen[e] = i
            if seal is None:
                unsealed.append(i)
        n_total = self.key.get("n_examples")
        if isinstance(n_total, int) and self.n_chunks is not None and len(done) == self.n_chunks and seen:
            if len(seen) != n_total:
                raise StoreError(f"store at {self.root}: its chunks hold {len(seen)} example ids, its key says "
                                 f"{n_total}")
        # Every chunk checked first: a store that fails a check is left exactly as it was.
        for i in unsealed:
            arrays, _ = self._read_raw(i)
            self._write_sealed(i, arrays, origin="seal")
        return {"sealed": len(unsealed), "already": len(done) - len(unsealed)}


    def extend_key(self, entries: Mapping[str, Any]) -> dict[str, int]:
        """Add new entries to this store's key, keeping its arrays (a one-time migration).

        Every chunk is verified against the current key first (a store that fails is left as
        it was), then re-sealed for the extended key, and the manifest is rewritten last. A
        crash part-way leaves chunks sealed for either key; calling again with the same
        entries finishes the job.

        Args:
          entries: new key entries; one the key already holds raises.

        Returns:
          ``{"resealed": n, "already": m}`` chunk counts.

        Raises:
          ValueError: an entry the key already has.
          StoreError: a chunk fails its seal under both the current and the extended key.
        """
        clash = sorted(set(entries) & set(self.key))
        if clash:
            raise ValueError(f"store at {self.root}: its key already has {clash}")
        new_key = canonical_key({**self.key, **entries})
        new_hash = hash_key(new_key)
        new = type(self)(self.root, {**self.meta, "key": new_key, "key_hash": new_hash})
        todo, already = [], 0
        for i in self.completed_chunks():
            arrays, seal = self._read_raw(i)
            if seal is not None and seal.get("key_hash") == new_hash:
                new._check_seal(i, arrays, seal)  # finished by an earlier, interrupted call
                already += 1
            else:
                self._check_seal(i, arrays, seal)
                todo.append(i)
        for i in todo:
            arrays, _ = self._read_raw(i)
            new._write_sealed(i, arrays, origin="extend_key")
        manifest = {**self.meta, "key": new_key, "key_hash": new_hash}
        target = self.root / MANIFEST
        text = json.dumps(manifest, indent=1, sort_keys=True, ensure_ascii=False) + "\n"
        if isinstance(target, BucketPath):
            target.write_text(text)  # one upload replaces the object whole
        else:
            tmp = tmp_name(target)
            tmp.write_text(text, encoding="utf-8")
            os.replace(tmp, target)
            fsync_dir(self.root)
        self.meta, self.key, self.key_hash = manifest, new_key, new_hash
        return {"resealed": len(todo), "already": already}
