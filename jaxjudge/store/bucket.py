"""Paths in a Cloud Storage bucket, and the chunk claims that independent workers share there.

A `BucketPath` (``gs://bucket/prefix``) has the small pathlib API the stores, registrations and
run folders use (see `jaxjudge.store.location`). Objects are read and written whole, through
fsspec's gcsfs: a write is a single object upload, which the service makes visible at once and
whole (there is no rename in a bucket, and none is used). A folder is a prefix: ``mkdir`` does
nothing and a folder exists when an object lies under it.

Conditional writes (the service's generation preconditions):

- `BucketPath.create` uploads only if no object has the name (``ifGenerationMatch=0``): the
  first of several writers wins, the others are told so. Chunks and manifests are published
  this way: once, whole.
- A claim on a chunk (`claim_object`) is such a create of ``chunks/.NNNNNN.claim``. Its holder
  renews it every ``lease / 6`` seconds by rewriting it under
  ``ifGenerationMatch=<its generation>``. A worker that finds a claim looks again each time it
  polls; a claim whose generation has not changed for ``lease`` seconds of that worker's own
  clock (so no clocks are compared between hosts) is taken over by the same conditional rewrite,
  which only one of several waiting workers can win. A holder whose renewal is refused has lost
  its claim (it was silent for a whole lease) and stops renewing; the chunk it then publishes,
  or the new holder's, is refused as a second create, so the chunk is still written once.
- A holder releases its claim by a last conditional rewrite, then a delete under
  ``ifGenerationMatch``, so a claim taken over in the meantime is left to its new holder.

There is no process id to look at across hosts: a killed worker's claims are taken over after
the lease, not at once as on a local disk. The service allows about one write a second to one
object, so a lease shorter than 6 s (renewals more often than that) is for an emulator only.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import posixpath
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import PurePosixPath
from typing import Any

__all__ = ["BucketClaim", "BucketPath", "claim_object", "clear_dead_object_claim"]

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
            from google.cloud import storage

            _CLIENT = storage.Client()
        return _CLIENT


def _precondition_errors() -> tuple[type[BaseException], ...]:
    from google.api_core import exceptions

    return exceptions.PreconditionFailed, exceptions.NotFound


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
        one had (it is left as it was)."""
        try:
            filesystem().pipe_file(self._fs_path, bytes(data), mode="create")
        except FileExistsError:
            return False
        return True

    def rewrite(self, data: bytes, generation: int) -> int | None:
        """Replace the object if its generation is still ``generation``; its new generation, or
        None if it changed or went (nothing is written then)."""
        refused = _precondition_errors()
        blob = client().bucket(self.bucket).blob(self.key)
        try:
            blob.upload_from_string(bytes(data), if_generation_match=int(generation))
        except refused:
            return None
        return int(blob.generation)

    def delete_if(self, generation: int) -> bool:
        """Delete the object if its generation is still ``generation``."""
        refused = _precondition_errors()
        try:
            client().bucket(self.bucket).blob(self.key).delete(if_generation_match=int(generation))
        except refused:
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


# -- claims ---------------------------------------------------------------------------------------

_SEEN: dict[str, tuple[int, float]] = {}
"""Per claim object: the generation this process last saw there and (its own clock) since when."""


def _silent_for(path: BucketPath, generation: int) -> float:
    """Seconds this process has seen ``generation`` at ``path`` unchanged (0 on first sight)."""
    now = time.monotonic()
    seen = _SEEN.get(str(path))
    if seen is None or seen[0] != generation:
        _SEEN[str(path)] = (generation, now)
        return 0.0
    return now - seen[1]


class BucketClaim:
    """A held claim object, renewed by a thread until `release` (see the module docstring)."""

    def __init__(self, path: BucketPath, record: dict[str, Any], generation: int, *, interval: float):
        self.path, self.record, self.generation = path, record, generation
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, args=(interval,), daemon=True)
        self._thread.start()

    def _renew(self, interval: float) -> None:
        while not self._stop.wait(interval):
            record = {**self.record, "renewed": time.time()}
            try:
                gen = self.path.rewrite(json.dumps(record).encode(), self.generation)
            except Exception:  # noqa: BLE001 - a failed request: try again at the next beat
                continue
            if gen is None:  # taken over: this worker was silent for a whole lease
                self.lost = True
                return
            self.generation = gen

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        if self.lost:
            return
        # A last conditional rewrite first: refused if the claim was taken over since the last
        # renewal. After it, nobody may take the claim over for a whole lease, so the delete
        # removes this claim even where the delete's own precondition is not checked
        # (fake-gcs-server ignores ifGenerationMatch on a delete).
        gen = self.path.rewrite(json.dumps({**self.record, "released": time.time()}).encode(), self.generation)
        if gen is None:
            self.lost = True
            return
        self.path.delete_if(gen)

    def __enter__(self) -> BucketClaim:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def claim_object(path: BucketPath, written: Callable[[], bool], *, stale_after: float) -> BucketClaim | None:
    """Claim the chunk whose claim object is ``path``, or None when another worker holds it (and
    has renewed it within ``stale_after`` seconds of this worker's clock) or ``written()`` says
    the chunk is done (checked again once the claim is held)."""
    record = {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex}
    data = json.dumps(record).encode()
    interval = max(stale_after / 6, 0.05)
    gen = None
    if path.create(data):
        gen = path.generation()
    else:
        held = path.generation()
        if held is None:  # released between the create and the look: try once more
            gen = path.generation() if path.create(data) else None
        elif _silent_for(path, held) >= stale_after:
            gen = path.rewrite(data, held)
    if gen is None:
        return None
    _SEEN.pop(str(path), None)
    claim = BucketClaim(path, record, gen, interval=interval)
    if written():
        claim.release()
        return None
    return claim


def clear_dead_object_claim(path: BucketPath, stale_after: float) -> None:
    """Delete the claim on a written chunk if it has been silent for ``stale_after`` seconds of
    this worker's clock (its holder died between publishing the chunk and releasing it)."""
    held = path.generation()
    if held is not None and _silent_for(path, held) >= stale_after:
        path.delete_if(held)
