"""Store: extraction outputs on disk, keyed by a content hash, written in chunks, resumable.

See `jaxjudge.store.chunked` for the layout and the crash-safety argument, `jaxjudge.store.keys`
for keys and hashes, `jaxjudge.store.files` for atomic writes and chunk claims,
`jaxjudge.store.merge` for combining the folders of several processes, and
`jaxjudge.store.location` / `jaxjudge.store.bucket` for stores, registrations, run folders and
the converted-weights cache in a ``gs://bucket/prefix``.
"""

from jaxjudge.store.chunked import CLAIM_STALE_S, FORMAT, Store, StoreError, StoreKeyMismatch, assign_chunks, seal_store
from jaxjudge.store.keys import canonical_key, content_sha256, file_sha256, hash_key, ids_digest
from jaxjudge.store.merge import merge_stores

__all__ = [
    "CLAIM_STALE_S",
    "FORMAT",
    "Store",
    "StoreError",
    "StoreKeyMismatch",
    "assign_chunks",
    "canonical_key",
    "content_sha256",
    "file_sha256",
    "hash_key",
    "ids_digest",
    "merge_stores",
    "seal_store",
]
