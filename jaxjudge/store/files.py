"""Crash-safe files of a store: atomic writes, and claims that share chunks between workers.

On a local disk (below) and in a bucket (`jaxjudge.store.bucket`, where a file is published by
a single object upload and a claim is a create under a generation precondition): `publish`,
`claim_file` and `clear_dead_claim` take either kind of path (`jaxjudge.store.location`).

Every local file is written to a unique temporary name in the same folder, flushed to disk and
renamed into place (an atomic replace on POSIX). A chunk claim is an exclusive create of a
claim file holding its host and pid, kept fresh by a heartbeat; a claim whose holder is gone
(a dead pid on this host, or no heartbeat for `CLAIM_STALE_S` seconds) is taken over.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jaxjudge.store.bucket import BucketPath
from jaxjudge.store.bucket_claims import claim_object, clear_dead_object_claim

__all__ = ["CLAIM_STALE_S", "ChunkClaim", "claim_file", "clear_dead_claim", "fsync_dir", "publish", "tmp_name",
           "write_atomic"]

CLAIM_STALE_S = 120.0  # a claim without a heartbeat for this long is abandoned


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def tmp_name(target: Path) -> Path:
    return target.with_name(f".{target.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")


def write_atomic(target: Path, write) -> None:
    """Write via ``write(fileobj)`` to a temporary file, fsync, and rename onto ``target``."""
    tmp = tmp_name(target)
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)


def publish(target: Any, data: bytes, *, once: bool = False) -> bool:
    """Write ``data`` as the whole file ``target`` (a local path or a `BucketPath`).

    Locally an atomic replace (`write_atomic`). In a bucket one object upload; with ``once``
    only if no object has the name (another writer's is kept). Returns whether it was written.
    """
    if isinstance(target, BucketPath):
        if once:
            return target.create(data)
        target.write_bytes(data)
        return True
    write_atomic(target, lambda f: f.write(data))
    return True


class ChunkClaim:
    """A held claim on one chunk: a heartbeat thread touches the claim file until `release`."""

    def __init__(self, path: Path, token: str, *, interval: float):
        self.path, self.token = path, token
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, args=(interval,), daemon=True)
        self._thread.start()

    def _beat(self, interval: float) -> None:
        while not self._stop.wait(interval):
            try:
                os.utime(self.path)
            except OSError:
                return

    def release(self) -> None:
        self._stop.set()
        self._thread.join()
        try:
            if json.loads(self.path.read_text(encoding="utf-8")).get("token") == self.token:
                self.path.unlink(missing_ok=True)
        except (OSError, ValueError):
            pass

    def __enter__(self) -> ChunkClaim:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def claim_file(path: Path, written: Callable[[], bool], *, stale_after: float = CLAIM_STALE_S) -> ChunkClaim | None:
    """Claim the chunk whose claim file is ``path``, or None when a live process holds it or
    ``written()`` says the chunk is done (checked again once the claim is held). In a bucket
    see `jaxjudge.store.bucket_claims.claim_object`."""
    if isinstance(path, BucketPath):
        return claim_object(path, written, stale_after=stale_after)
    path.parent.mkdir(parents=True, exist_ok=True)
    token = uuid.uuid4().hex
    record = json.dumps({"host": socket.gethostname(), "pid": os.getpid(), "token": token})
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            if not _take_over_stale(path, stale_after):
                return None
            continue
        with os.fdopen(fd, "w") as f:
            f.write(record)
        claim = ChunkClaim(path, token, interval=max(stale_after / 6, 0.05))
        if written():  # written between the first look and the claim
            claim.release()
            return None
        return claim
    return None


def clear_dead_claim(path: Path, stale_after: float = CLAIM_STALE_S) -> None:
    """Remove the claim of a written chunk if its holder is dead or silent (a worker killed between
    publishing the chunk and releasing the claim); a live holder's stays."""
    if isinstance(path, BucketPath):
        clear_dead_object_claim(path, stale_after)
        return
    if path.exists():
        _take_over_stale(path, stale_after)


def _claim_is_stale(path: Path, text: str, stale_after: float) -> bool:
    """Whether a claim file (holding ``text``) was abandoned: no heartbeat, or a dead pid here."""
    try:
        age = time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return False
    if age > stale_after:
        return True
    try:
        holder = json.loads(text)
        host, pid = holder["host"], int(holder["pid"])
    except (ValueError, KeyError, TypeError):
        return False  # half-written by its creator just now: let the age decide
    if host != socket.gethostname():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False

def _take_over_stale(path: Path, stale_after: float) -> bool:
    """Remove a stale claim; True if it was stale (and is now gone)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return True
    except OSError:
        return False
    if not _claim_is_stale(path, text, stale_after):
        return False
    aside = path.with_name(f"{path.name}.{uuid.uuid4().hex[:8]}.stale")
    try:
        os.rename(path, aside)
    except FileNotFoundError:
        return True  # another process removed it first
    try:
        if aside.read_text(encoding="utf-8") != text:  # a fresh claim replaced it meanwhile: put it back
            try:
                os.link(aside, path)
            except FileExistsError:
                pass
            return False
        return True
    finally:
        aside.unlink(missing_ok=True)
