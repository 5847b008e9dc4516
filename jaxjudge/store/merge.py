"""Merging stores written by several processes (one folder each) into one."""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from jaxjudge.store.chunked import Store, StoreError, StoreKeyMismatch
from jaxjudge.store.files import publish
from jaxjudge.store.keys import key_differences

__all__ = ["merge_chunks", "merge_stores"]


def merge_chunks(dest: Store, other: Store | str | os.PathLike) -> list[int]:
    """Copy the chunks of another store with the same key into ``dest``.

    A chunk present in both must hold identical arrays (a conflict raises).

    Returns:
      The chunk indices copied.
    """
    src = other if isinstance(other, Store) else Store.open(other)
    if src.key_hash != dest.key_hash:
        diffs = key_differences(src.key, dest.key)
        raise StoreKeyMismatch(f"cannot merge {src.root} into {dest.root}: " + "; ".join(diffs or ["key hash differs"]))
    copied = []
    for i in src.completed_chunks():
        if dest.has_chunk(i):
            a, b = src.read_chunk(i), dest.read_chunk(i)
            same = sorted(a) == sorted(b) and all(
                a[k].shape == b[k].shape and np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind in "fc")
                for k in a
            )
            if not same:
                raise StoreError(f"chunk {i} differs between {src.root} and {dest.root}")
            continue
        target = dest.chunk_path(i)
        target.parent.mkdir(parents=True, exist_ok=True)
        publish(target, src.chunk_path(i).read_bytes(), once=True)
        copied.append(i)
    return copied


def merge_stores(dest: str | os.PathLike, sources: Sequence[str | os.PathLike | Store]) -> Store:
    """Merge stores written by several processes (same key) into ``dest``.

    ``dest`` may be one of the sources or a new folder; it is created with the sources' key.

    Raises:
      StoreKeyMismatch: the sources (or an existing ``dest``) have different keys.
    """
    if not sources:
        raise ValueError("merge_stores: no sources")
    opened = [s if isinstance(s, Store) else Store.open(s) for s in sources]
    first = opened[0]
    for s in opened[1:]:
        if s.key_hash != first.key_hash:
            diffs = key_differences(first.key, s.key)
            raise StoreKeyMismatch(f"cannot merge {s.root} with {first.root}: " + "; ".join(diffs or ["key hash differs"]))
    n_values = {s.n_chunks for s in opened if s.n_chunks is not None}
    if len(n_values) > 1:
        raise StoreKeyMismatch(f"cannot merge stores with different n_chunks {sorted(n_values)}")
    out = Store.open(dest, first.key, n_chunks=next(iter(n_values), None), info=first.meta.get("info"))
    for s in opened:
        if s.root.resolve() != out.root.resolve():
            merge_chunks(out, s)
    return out
