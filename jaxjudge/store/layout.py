"""A store folder's fixed names and the errors a store raises (`jaxjudge.store.chunked` describes
the layout)."""

from __future__ import annotations

from jaxjudge.store.location import Location

__all__ = ["FORMAT", "MANIFEST", "StoreError", "StoreKeyMismatch", "recompute_hint"]

FORMAT = "jaxjudge-store/1"
MANIFEST = "manifest.json"


def recompute_hint(root: Location) -> str:
    """What to do about a store that cannot be read: the end of an error's message."""
    return f"delete it and rerun `jaxjudge extract` (or the code that wrote {root}) to recompute it"


class StoreError(RuntimeError):
    """A store folder that cannot be used as asked (missing or inconsistent chunks, bad files)."""


class StoreKeyMismatch(StoreError, ValueError):
    """The folder holds outputs for a different key."""
