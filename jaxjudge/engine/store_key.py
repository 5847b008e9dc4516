"""Store keys of an extraction: everything its arrays depend on, nothing they don't."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxjudge.models.judge import Judge
from jaxjudge.models.sharding import to_host
from jaxjudge.prompts import RenderedPrompt, ScoreCandidates
from jaxjudge.store import Store, ids_digest

__all__ = ["ENGINE_FORMAT", "extraction_key", "model_sha256", "open_store"]

ENGINE_FORMAT = "jaxjudge-engine/1"


def model_sha256(judge: Judge) -> str:
    """The judge's content hash: ``judge.sha256`` (the model files), else a hash of its parameters."""
    if getattr(judge, "sha256", None):
        return str(judge.sha256)
    h = hashlib.sha256()
    h.update(repr(judge.config).encode())
    for path, leaf in sorted(jax.tree_util.tree_leaves_with_path(judge.state), key=lambda x: str(x[0])):
        arr = to_host(leaf)
        h.update(f"{jax.tree_util.keystr(path)}:{arr.dtype}:{arr.shape}".encode())
        h.update(arr.tobytes())
    return h.hexdigest()


def _prompts_sha256(prompts: Sequence[RenderedPrompt]) -> str:
    h = hashlib.sha256()
    for p in prompts:
        # The NLL span enters only when set, so the keys of prompts without one are unchanged.
        span = [] if p.nll_span is None else [list(p.nll_span)]
        h.update(json.dumps([p.example_id, p.prefix, p.suffix, p.answer_separator, p.add_special_tokens,
                             p.truncated_tokens, *span], ensure_ascii=False).encode("utf-8"))
        h.update(b"\n")
    return h.hexdigest()


def extraction_key(
    judge: Judge,
    prompts: Sequence[RenderedPrompt],
    candidates: ScoreCandidates,
    *,
    chunk_size: int,
    topk: int,
    overflow: str,
    context_length: int,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The store key of an extraction: everything its arrays depend on, nothing they don't.

    Batch size, buckets, the prefix-cache switch, devices and process count are left out:
    they change the floating-point rounding, not what is computed, so a run may resume with
    other settings.

    Args:
        judge: the judge (its file hash, or a parameter hash when it has none, and dtype).
        prompts: the prompts as given (before the engine's own truncation).
        candidates: the resolved score candidates.
        chunk_size, topk, overflow, context_length: as given to `extract`.
        extra: more entries (e.g. ``role``, ``model``, ``task``, ``aspect``, ``scale`` for the
            report's store lookup); a clash with an engine entry raises.

    Returns:
        A JSON-able dict for `jaxjudge.store.Store.open`.
    """
    ids = [p.example_id for p in prompts]
    key = {
        "engine": ENGINE_FORMAT,
        "model_sha256": model_sha256(judge),
        "dtype": jnp.dtype(judge.dtype).name,
        "n_examples": len(ids),
        "example_ids_sha256": ids_digest(ids),
        "prompts_sha256": _prompts_sha256(prompts),
        "candidates": candidates.to_key(),
        "chunk_size": int(chunk_size),
        "topk": int(topk),
        "overflow": overflow,
        "context_length": int(context_length),
    }
    for name, value in (extra or {}).items():
        if name in key:
            raise ValueError(f"key entry {name!r} is set by the engine; pick another name")
        key[name] = value
    return key


def open_store(store: str | os.PathLike | Store, key: dict[str, Any], n_chunks: int) -> Store:
    """An open store for an extraction of ``n_chunks`` chunks: a folder opened (or created)
    with ``key``, or a `Store` already open, checked for its chunk count."""
    if isinstance(store, Store):
        if store.n_chunks is not None and store.n_chunks != n_chunks:
            raise ValueError(f"store {store.root} was opened for {store.n_chunks} chunks; this extraction has "
                             f"{n_chunks} (chunk_size or prompts differ)")
        store.n_chunks = n_chunks
        return store
    if isinstance(store, (str, os.PathLike)):
        return Store.open(store, key, n_chunks=n_chunks,
                          info={"process_count": jax.process_count(), "backend": jax.default_backend()})
    raise TypeError(f"store must be a folder path or a jaxjudge.store.Store, got {type(store).__name__}")
