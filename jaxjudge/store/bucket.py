"""Paths in a Cloud Storage bucket: whole objects, conditional writes, stated retries.

A `BucketPath` (``gs://bucket/prefix``) has the small pathlib API the stores, registrations and
run folders use (see `jaxjudge.store.location`). Objects are read and written whole, through
fsspec's gcsfs: a write is a single object upload, which the service makes visible at once and
whole (there is no rename in a bucket, and none is used). A folder is a prefix: ``mkdir`` does
nothing and a folder exists when an object lies under it.

Conditional writes (the service's generation preconditions):

- `BucketPath.create` uploads only if no object has the name (``ifGenerationMatch=0``): the
  first of several writers wins, the others are told so. Chunks and manifests are published
  this way: once, whole.
- `BucketPath.rewrite` replaces an object only if its generation still matches, and
  `BucketPath.delete_if` deletes it only then: the chunk claims that independent workers share
  (`jaxjudge.store.bucket_claims`) rest on them.

Retries: every request retries transient failures (429, 5xx, a reset connection, a lost answer)
with exponential backoff (`RETRY_INITIAL_S`); a precondition's refusal (412) is an answer, never
retried. Because a retried conditional write whose first try was applied is refused, the
conditional writes are idempotent: a refusal is checked against the object, and one that holds
exactly this write's bytes (a claim record carries its writer's token and a nonce) was this
write (`BucketPath.holds`).
"""

from __future__ import annotations

import fnmatch
import io
import os
import posixpath
import threading
from collections.abc import Iterator
from pathlib import PurePosixPath
from typing import Any

__all__ = ["BucketPath", "transient_errors"]

_FS: Any = None
_CLIENT: Any = None
_LOCK = threading.Lock()


def filesystem() -> Any:
    """The process's gcsfs filesystem (listings never cached: other workers write the same prefixes)."""
    global _FS
    with _LOCK:
        if _FS is None:
            # gcsfs.core's class: the package's default subclass first asks a control API, with
            # credentials, whether each bucket is zonal; a store's buckets are regional.
            from gcsfs.core import GCSFileSystem

            _FS = GCSFileSystem(use_listings_cache=False, skip_instance_cache=True)
        return _FS


def client() -> Any:
    """The process's google-cloud-storage client, for the conditional rewrites and deletes."""
    global _CLIENT
    with _LOCK:
        if _CLIENT is None:
            from google.cloud import storage  # local: the optional gcs extra, only for gs:// paths

            _CLIENT = storage.Client()
        return _CLIENT


def _precondition_errors() -> tuple[type[BaseException], ...]:
    from google.api_core import exceptions  # local: the optional gcs extra, only for gs:// paths

    return exceptions.PreconditionFailed, exceptions.NotFound


RETRY_INITIAL_S, RETRY_MAX_S, RETRY_TOTAL_S = 0.25, 8.0, 60.0
"""The google-cloud-storage requests' retries: a transient failure (429, 5xx, a reset connection,
a lost response) is tried again after 0.25 s, doubling to 8 s, for 60 s in all. gcsfs retries
its own requests the same way, with its fixed policy (6 tries, waits of 1-2 s doubling to 32 s)."""


def _retry() -> Any:
    """The retry for this module's google-cloud-storage requests (see `RETRY_INITIAL_S`): only
    transient errors; a precondition's refusal (412) and a 404 are answers, never retried."""
    from google.cloud.storage.retry import DEFAULT_RETRY  # local: the optional gcs extra, only for gs:// paths

    return DEFAULT_RETRY.with_delay(initial=RETRY_INITIAL_S, maximum=RETRY_MAX_S, multiplier=2.0).with_timeout(
        RETRY_TOTAL_S)


def transient_errors() -> tuple[type[BaseException], ...]:
    """The errors a request may end with after its retries are spent on a transient failure (the
    service overloaded or unreachable): worth trying again later, unlike a refusal."""
    # local: the optional gcs extra's packages (aiohttp comes with gcsfs, requests and google.api_core with
    # google-cloud-storage), only for gs:// paths
    import aiohttp
    import requests  # local: as above (gcs extra)
    from google.api_core import exceptions  # local: as above (gcs extra)

    return (exceptions.TooManyRequests, exceptions.ServerError, exceptions.RetryError, requests.ConnectionError,
            requests.Timeout, aiohttp.ClientError, TimeoutError, ConnectionError)


class BucketPath:
    """``gs://bucket/key``: an object or a prefix of one (a "folder")."""

    __slots__ = ("bucket", "key", "scheme")

    def __init__(self, url: str, key: str | None = None):
        if key is None:
            scheme, sep, rest = url.partition("://")
            if not sep:
                raise ValueError(f"{url!r} is not a bucket URL (scheme://bucket/prefix)")
            bucket, _, key = rest.partition("/")
        else:
            scheme, bucket = "gs", url
        self.scheme = scheme.lower()
        self.bucket = bucket
        self.key = posixpath.normpath(key).lstrip("/") if key and key.strip("/") else ""
        if self.key == ".":
            self.key = ""

    # -- pure path ------------------------------------------------------------------------------

    def __str__(self) -> str:
        return f"{self.scheme}://{self.bucket}/{self.key}" if self.key else f"{self.scheme}://{self.bucket}"

    def __repr__(self) -> str:
        return f"BucketPath({str(self)!r})"

    def __fspath__(self) -> str:
        # An os.PathLike (so the APIs that take a folder take it), but never a local path: code
        # that would open it as a file fails here instead of writing a local folder named "gs:".
        raise TypeError(f"{self} is a bucket location, not a local path")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BucketPath) and str(self) == str(other)

    def __lt__(self, other: BucketPath) -> bool:
        return str(self) < str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __truediv__(self, other: str | os.PathLike) -> BucketPath:
        part = str(other) if not isinstance(other, str) else other
        if part.startswith("/"):
            raise ValueError(f"cannot join the absolute path {part!r} to {self}")
        return BucketPath(self.bucket, f"{self.key}/{part}" if self.key else part)._with_scheme(self.scheme)

    def joinpath(self, *parts: str) -> BucketPath:
        out = self
        for p in parts:
            out = out / p
        return out

    def _with_scheme(self, scheme: str) -> BucketPath:
        self.scheme = scheme
        return self

    @property
    def name(self) -> str:
        return self.key.rsplit("/", 1)[-1] if self.key else ""

    @property
    def suffix(self) -> str:
        return PurePosixPath(self.name).suffix if self.name else ""

    @property
    def stem(self) -> str:
        return PurePosixPath(self.name).stem if self.name else ""

    @property
    def parent(self) -> BucketPath:
        return BucketPath(self.bucket, self.key.rsplit("/", 1)[0] if "/" in self.key else "")._with_scheme(self.scheme)

    def with_name(self, name: str) -> BucketPath:
        return self.parent / name

    def relative_to(self, other: BucketPath) -> PurePosixPath:
        if not isinstance(other, BucketPath) or other.bucket != self.bucket:
            raise ValueError(f"{self} is not under {other}")
        if not other.key:
            return PurePosixPath(self.key)
        if self.key != other.key and not self.key.startswith(other.key + "/"):
            raise ValueError(f"{self} is not under {other}")
        return PurePosixPath(self.key[len(other.key) + 1:] or ".")

    def resolve(self) -> BucketPath:
        return self

    def expanduser(self) -> BucketPath:
        return self

    @property
    def _fs_path(self) -> str:
        return f"{self.bucket}/{self.key}" if self.key else self.bucket

    # -- reading --------------------------------------------------------------------------------

    def _info(self) -> dict[str, Any] | None:
        if not self.key:
            return None
        try:
            return filesystem().info(self._fs_path)
        except FileNotFoundError:
            return None

    def is_file(self) -> bool:
        info = self._info()
        return info is not None and info.get("type") == "file"

    def is_dir(self) -> bool:
        return any(True for _ in self._list())

    def exists(self) -> bool:
        return self.is_file() or self.is_dir()

    def generation(self) -> int | None:
        """The object's generation, or None when there is no object of this name."""
        info = self._info()
        return int(info["generation"]) if info is not None and info.get("type") == "file" else None

    def size(self) -> int:
        info = self._info()
        if info is None:
            raise FileNotFoundError(str(self))
        return int(info["size"])

    def objects(self) -> list[tuple[BucketPath, int, int]]:
        """``(object, generation, size)`` of this object, or of every object under this prefix
        (sorted by name): what the service's metadata says, without reading any object's bytes."""
        info = self._info()
        if info is not None and info.get("type") == "file":
            found = {self._fs_path: info}
        else:
            try:
                found = filesystem().find(self._fs_path + "/", detail=True)
            except FileNotFoundError:
                found = {}
        start = len(self.bucket) + 1
        return [(BucketPath(self.bucket, name[start:])._with_scheme(self.scheme), int(i["generation"]), int(i["size"]))
                for name, i in sorted(found.items())]

    def download(self, dest: str | os.PathLike, generation: int) -> None:
        """Copy the object's bytes into the local file ``dest``, only while its generation is
        ``generation``, so the bytes are the ones that generation names: a replaced object is
        refused (``google.api_core.exceptions``' ``NotFound``, or ``PreconditionFailed``)."""
        # Both the generation asked for and the precondition (the emulator checks only the first).
        blob = client().bucket(self.bucket).blob(self.key, generation=int(generation))
        blob.download_to_filename(os.fspath(dest), if_generation_match=int(generation), retry=_retry())

    def read_range(self, start: int, end: int, generation: int) -> bytes:
        """Bytes ``[start, end)`` of the object, only while its generation is ``generation``
        (as `download`): one ranged read, for a file's header without its body."""
        blob = client().bucket(self.bucket).blob(self.key, generation=int(generation))
        return blob.download_as_bytes(start=int(start), end=int(end) - 1, if_generation_match=int(generation),
                                      retry=_retry())

    def _list(self) -> list[str]:
        try:
            return filesystem().ls(self._fs_path + "/", detail=False)
        except FileNotFoundError:
            return []

    def iterdir(self) -> Iterator[BucketPath]:
        """The objects and prefixes right under this prefix."""
        seen = set()
        for name in self._list():
            child = name.rstrip("/").rsplit("/", 1)[-1]
            if child and child not in seen:
                seen.add(child)
                yield self / child

    def glob(self, pattern: str) -> Iterator[BucketPath]:
        """The children whose name matches ``pattern`` (one level, no ``**``)."""
        if "/" in pattern:
            raise ValueError(f"BucketPath.glob takes one level of names, not {pattern!r}")
        return (p for p in self.iterdir() if fnmatch.fnmatchcase(p.name, pattern))

    def rglob(self, pattern: str) -> Iterator[BucketPath]:
        """The objects anywhere under this prefix whose name matches ``pattern``, sorted."""
        if "/" in pattern:
            raise ValueError(f"BucketPath.rglob takes a pattern of names, not {pattern!r}")
        try:
            found = filesystem().find(self._fs_path + "/")
        except FileNotFoundError:
            found = []
        start = len(self.bucket) + 1
        for name in sorted(found):
            if fnmatch.fnmatchcase(name.rsplit("/", 1)[-1], pattern):
                yield BucketPath(self.bucket, name[start:])._with_scheme(self.scheme)

    def read_bytes(self) -> bytes:
        try:
            return filesystem().cat_file(self._fs_path)
        except FileNotFoundError:
            raise FileNotFoundError(f"{self}: no such object") from None

    def read_text(self, encoding: str = "utf-8") -> str:
        return self.read_bytes().decode(encoding)

    def open(self, mode: str = "rb", encoding: str | None = None, newline: str | None = None) -> Any:
        """A file object reading the whole object (objects are written whole: `write_bytes`)."""
        if mode not in ("r", "rb", "rt"):
            raise ValueError(f"{self}: mode {mode!r} is not served (read whole objects; write them with write_bytes)")
        data = io.BytesIO(self.read_bytes())
        return data if "b" in mode else io.TextIOWrapper(data, encoding=encoding or "utf-8", newline=newline)

    # -- writing --------------------------------------------------------------------------------

    def mkdir(self, parents: bool = False, exist_ok: bool = False) -> None:
        """Nothing to do: a prefix exists once an object lies under it."""

    def write_bytes(self, data: bytes) -> int:
        """Upload ``data`` as the whole object (replacing one there): one request, visible whole."""
        filesystem().pipe_file(self._fs_path, bytes(data))
        return len(data)

    def write_text(self, text: str, encoding: str = "utf-8", newline: str | None = None) -> int:
        if newline not in (None, "", "\n"):
            text = text.replace("\n", newline)
        return self.write_bytes(text.encode(encoding))

    def create(self, data: bytes) -> bool:
        """Upload ``data`` only if no object has this name (``ifGenerationMatch=0``); False if
        another writer's object is there (it is left as it was).

        Idempotent: a retried upload whose first try was applied (its answer lost) is refused
        412, so a refusal is checked against the object, and one holding exactly ``data`` (a
        claim record carries its writer's token) is this upload's.
        """
        try:
            filesystem().pipe_file(self._fs_path, bytes(data), mode="create")
        except FileExistsError:
            return self.holds(data) is not None
        return True

    def holds(self, data: bytes) -> int | None:
        """The object's generation if it holds exactly ``data``, else None (another writer's
        object, or none)."""
        from google.api_core import exceptions  # local: the optional gcs extra, only for gs:// paths

        blob = client().bucket(self.bucket).get_blob(self.key, retry=_retry())
        if blob is None:
            return None
        try:
            got = blob.download_as_bytes(if_generation_match=blob.generation, retry=_retry())
        except (exceptions.PreconditionFailed, exceptions.NotFound):
            return None  # replaced or deleted between the two requests: not this writer's any more
        return int(blob.generation) if got == bytes(data) else None

    def rewrite(self, data: bytes, generation: int) -> int | None:
        """Replace the object if its generation is still ``generation``; its new generation, or
        None if it changed or went (nothing is written then). Idempotent as `create`: a refused
        retry finds ``data`` (unique to this write) in the object when its first try was applied."""
        refused = _precondition_errors()
        blob = client().bucket(self.bucket).blob(self.key)
        try:
            blob.upload_from_string(bytes(data), if_generation_match=int(generation), retry=_retry())
        except refused:
            return self.holds(data)
        return int(blob.generation)

    def delete_if(self, generation: int) -> bool:
        """Delete the object if its generation is still ``generation``; True if it is gone (a
        retried delete whose first try was applied is answered 404)."""
        from google.api_core import exceptions  # local: the optional gcs extra, only for gs:// paths

        try:
            client().bucket(self.bucket).blob(self.key).delete(if_generation_match=int(generation), retry=_retry())
        except exceptions.NotFound:
            return True
        except exceptions.PreconditionFailed:
            return False
        return True

    def rmtree(self) -> None:
        """Delete every object under this prefix (and one of this name)."""
        for name in filesystem().find(self._fs_path + "/") + ([self._fs_path] if self.is_file() else []):
            try:
                filesystem().rm_file(name)
            except FileNotFoundError:
                pass

    def unlink(self, missing_ok: bool = False) -> None:
        try:
            filesystem().rm_file(self._fs_path)
        except FileNotFoundError:
            if not missing_ok:
                raise

