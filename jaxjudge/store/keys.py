"""Building store keys: what an extraction's outputs depend on, as one JSON-able dict."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["extraction_key", "file_sha256", "ids_digest"]


_SHA_CACHE: dict[tuple[str, int, int], str] = {}


def file_sha256(path: str | os.PathLike, *, block_size: int = 1 << 20) -> str:
    """sha256 (hex) of a file's bytes, read in blocks (model files are gigabytes); cached per
    (path, size, modification time) within the process."""
    p = Path(path)
    st = p.stat()
    key = (str(p.resolve()), st.st_size, st.st_mtime_ns)
    if key not in _SHA_CACHE:
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


def _describe(value: Any) -> Any:
    to_key = getattr(value, "to_key", None)
    return to_key() if callable(to_key) else value


def extraction_key(
    *,
    model_sha256: str,
    template: Any,
    scale: Any,
    example_ids: Sequence[str],
    chunk_size: int,
    chat: Any = None,
    candidates: Any = None,
    **extra: Any,
) -> dict[str, Any]:
    """The key of one extraction run (model x template x scale x prompt style x examples).

    Args:
      model_sha256: hash of the model file(s) (`file_sha256`).
      template: a `Template` (its `to_key()` is recorded) or a JSON-able description.
      scale: a `ScoreScale` or description.
      example_ids: the ordered work list; recorded as count + digest.
      chunk_size: examples per chunk (chunk i holds examples ``[i*chunk_size, (i+1)*chunk_size)``).
      chat: the `ChatFormat` (None records the raw prompt style).
      candidates: the `ScoreCandidates` (their token ids pin the tokenizer's behaviour).
      **extra: anything else the outputs depend on (overflow policy, max_tokens, top_k, dtype).

    Returns:
      A dict for `Store.open`.
    """
    if not isinstance(model_sha256, str) or not model_sha256:
        raise ValueError("model_sha256 must be a non-empty str")
    if not isinstance(chunk_size, int) or chunk_size <= 0:
        raise ValueError(f"chunk_size must be a positive int, got {chunk_size!r}")
    key = {
        "model_sha256": model_sha256,
        "template": _describe(template),
        "scale": _describe(scale),
        "style": "raw" if chat is None else "chat",
        "chat": None if chat is None else _describe(chat),
        "candidates": None if candidates is None else _describe(candidates),
        "n_examples": len(example_ids),
        "example_ids_sha256": ids_digest(example_ids),
        "chunk_size": chunk_size,
    }
    for name, value in extra.items():
        if name in key:
            raise ValueError(f"extra key {name!r} clashes with a standard key entry")
        key[name] = _describe(value)
    return key
