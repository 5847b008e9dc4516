"""Store keys: their canonical JSON form and hash, key differences, content and file hashes."""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["canonical_key", "content_sha256", "file_sha256", "hash_key", "ids_digest", "key_differences"]


_SHA_CACHE: dict[tuple[str, int, int, int], str] = {}


def file_sha256(path: str | os.PathLike, *, block_size: int = 1 << 20, fresh: bool = False) -> str:
    """sha256 (hex) of a file's bytes, read in blocks (model files are gigabytes).

    Cached within the process per (path, size, modification and status-change times); ``fresh``
    hashes the bytes again (and refreshes the cache). An object of a bucket
    (`jaxjudge.store.bucket.BucketPath`, e.g. a data file) is hashed from its bytes each time.
    """
    if not isinstance(path, (str, Path)) and hasattr(path, "read_bytes"):
        return hashlib.sha256(path.read_bytes()).hexdigest()
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if fresh or key not in _SHA_CACHE:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            while block := f.read(block_size):
                h.update(block)
        _SHA_CACHE[key] = h.hexdigest()
    return _SHA_CACHE[key]


def ids_digest(example_ids: Sequence[str]) -> str:
    """sha256 (hex) of an ordered id list (newline-joined), so keys stay small for big sets."""
    for i, x in enumerate(example_ids):
        if not isinstance(x, str) or "\n" in x:
            raise ValueError(f"example id {i} must be a str without newlines, got {x!r}")
    return hashlib.sha256("\n".join(example_ids).encode("utf-8")).hexdigest()


def _normalise(value: Any, path: str) -> Any:
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        if not math.isfinite(float(value)):
            raise ValueError(f"store key {path}: non-finite number {value!r}")
        return float(value)
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, np.ndarray):
        return _normalise(value.tolist(), path)
    if isinstance(value, Mapping):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"store key {path}: mapping keys must be str, got {k!r}")
            out[k] = _normalise(v, f"{path}.{k}")
        return out
    if isinstance(value, (list, tuple)):
        return [_normalise(v, f"{path}[{i}]") for i, v in enumerate(value)]
    raise TypeError(f"store key {path}: {type(value).__name__} is not JSON-able; use str/number/bool/list/dict")


def canonical_key(key: Mapping[str, Any]) -> dict[str, Any]:
    """The key with tuples as lists, numpy scalars/arrays as Python values, paths as str.

    Raises:
      TypeError: a value that has no JSON form (the message names where it is).
    """
    if not isinstance(key, Mapping):
        raise TypeError(f"store key must be a dict, got {type(key).__name__}")
    return _normalise(key, "key")


def _key_json(key: Mapping[str, Any]) -> str:
    return json.dumps(canonical_key(key), sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def hash_key(key: Mapping[str, Any]) -> str:
    """sha256 (hex) of the key's canonical JSON (sorted keys, no whitespace)."""
    return hashlib.sha256(_key_json(key).encode("utf-8")).hexdigest()


def _short(value: Any, n: int = 80) -> str:
    text = json.dumps(value, sort_keys=True, ensure_ascii=False)
    return text if len(text) <= n else text[: n - 3] + "..."


def key_differences(stored: Mapping[str, Any], wanted: Mapping[str, Any]) -> list[str]:
    """One line per entry where two keys differ (missing on either side, or another value)."""
    diffs = []
    for k in sorted(set(stored) | set(wanted)):
        if k not in stored:
            diffs.append(f"'{k}' is not in the stored key (requested {_short(wanted[k])})")
        elif k not in wanted:
            diffs.append(f"'{k}' is missing from the requested key (stored {_short(stored[k])})")
        elif stored[k] != wanted[k]:
            diffs.append(f"'{k}' differs (stored {_short(stored[k])}, requested {_short(wanted[k])})")
    return diffs


def content_sha256(arrays: Mapping[str, np.ndarray]) -> str:
    """sha256 (hex) of a chunk's arrays: each name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(json.dumps([name, a.dtype.str, list(a.shape)]).encode("utf-8") + b"\0")
        h.update(a.tobytes())
    return h.hexdigest()
