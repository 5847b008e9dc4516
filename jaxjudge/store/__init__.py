"""Store: extraction outputs on disk, keyed by a content hash, written in chunks, resumable.

See `jaxjudge.store.chunked` for the layout and the crash-safety argument.
"""

from jaxjudge.store.chunked import (
    FORMAT,
    Store,
    StoreError,
    StoreKeyMismatch,
    assign_chunks,
    canonical_key,
    chunk_bounds,
    content_sha256,
    hash_key,
    merge_stores,
    seal_store,
    store_path,
)
from jaxjudge.store.keys import extraction_key, file_sha256, ids_digest

__all__ = [
    "FORMAT",
    "Store",
    "StoreError",
    "StoreKeyMismatch",
    "assign_chunks",
    "canonical_key",
    "chunk_bounds",
    "content_sha256",
    "extraction_key",
    "file_sha256",
    "ids_digest",
    "hash_key",
    "merge_stores",
    "seal_store",
    "store_path",
]
