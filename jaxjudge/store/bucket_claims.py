"""Chunk claims that independent workers share in a Cloud Storage bucket.

- A claim on a chunk (`claim_object`) is a create of ``chunks/.NNNNNN.claim`` under
  ``ifGenerationMatch=0`` (`jaxjudge.store.bucket.BucketPath.create`). Its record carries a token
  unique to the claim, and each renewal a nonce unique to the write, so that a write retried after
  its answer was lost, and refused 412 because its first try was applied, is recognised as this
  holder's by reading the object back (`BucketPath.holds`), instead of being taken for another
  worker's claim (which would stall the chunk for a whole lease) or for a lost one.
- Its holder renews it every ``lease / 6`` seconds by rewriting it under
  ``ifGenerationMatch=<its generation>``. A worker that finds a claim looks again each time it
  polls; a claim whose generation has not changed for ``lease`` seconds of that worker's own
  clock (so no clocks are compared between hosts) is taken over by the same conditional rewrite,
  which only one of several waiting workers can win.
- A holder whose renewal is refused (someone else's record is there) has lost its claim (it was
  silent for a whole lease): `BucketClaim.lost` is set, renewing stops, and the work loop
  (`jaxjudge.store.work.claimed_chunks`) does not publish the chunk it computed; the new holder
  does. A renewal that fails transiently (429, 5xx, no connection, after the request's own
  retries) is tried again at the next beat; any other failure (a refusal of access, say) ends
  the claim as lost, with the error kept in `BucketClaim.error`, rather than being retried
  forever.
- A holder releases its claim by a last conditional rewrite, then a delete under
  ``ifGenerationMatch``, so a claim taken over in the meantime is left to its new holder.

There is no process id to look at across hosts: a killed worker's claims are taken over after
the lease, not at once as on a local disk (a process that stops because a peer was lost
releases its claims first, `jaxjudge.peers`). The service allows about one write a second to
one object, so a lease shorter than 6 s (renewals more often than that) is for an emulator only.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from jaxjudge.store.bucket import BucketPath, transient_errors

__all__ = ["BucketClaim", "claim_object", "clear_dead_object_claim"]

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


def _record(base: dict[str, Any], **extra: Any) -> bytes:
    """A claim record to write: ``base`` (host, pid, the claim's token), a nonce unique to this
    write (so that a retried write is recognised as its own), and ``extra``."""
    return json.dumps({**base, "write": uuid.uuid4().hex, **extra}).encode()


class BucketClaim:
    """A held claim object, renewed by a thread until `release` (see the module docstring)."""

    def __init__(self, path: BucketPath, record: dict[str, Any], generation: int, *, interval: float,
                 took_over: bool = False):
        self.path, self.record, self.generation = path, record, generation
        self.took_over = took_over  # taken from a holder silent for a whole lease
        self.lost = False
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, args=(interval,), daemon=True)
        self._thread.start()

    def _renew(self, interval: float) -> None:
        transient = transient_errors()
        while not self._stop.wait(interval):
            try:
                gen = self.path.rewrite(_record(self.record, renewed=time.time()), self.generation)
            except transient:
                continue  # the service is overloaded or unreachable: try again at the next beat
            except Exception as e:  # noqa: BLE001 - not transient: the claim cannot be kept
                self.error, self.lost = e, True
                return
            if gen is None:  # taken over: this worker was silent for a whole lease
                self.lost = True
                return
            self.generation = gen

    def release(self) -> None:
        """Stop renewing and remove the claim, unless it was taken over. A release that fails
        transiently leaves the claim to expire after the lease (with a warning)."""
        self._stop.set()
        self._thread.join()
        if self.lost:
            return
        # A last conditional rewrite first: refused if the claim was taken over since the last
        # renewal. After it, nobody may take the claim over for a whole lease, so the delete
        # removes this claim even where the delete's own precondition is not checked
        # (fake-gcs-server ignores ifGenerationMatch on a delete).
        try:
            gen = self.path.rewrite(_record(self.record, released=time.time()), self.generation)
            if gen is None:
                self.lost = True
                return
            self.path.delete_if(gen)
        except transient_errors() as e:
            warnings.warn(f"{self.path}: the claim could not be released ({type(e).__name__}); it expires after "
                          "its lease", stacklevel=2)

    def __enter__(self) -> BucketClaim:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def claim_object(path: BucketPath, written: Callable[[], bool], *, stale_after: float) -> BucketClaim | None:
    """Claim the chunk whose claim object is ``path``, or None when another worker holds it (and
    has renewed it within ``stale_after`` seconds of this worker's clock) or ``written()`` says
    the chunk is done (checked again once the claim is held)."""
    record = {"host": socket.gethostname(), "pid": os.getpid(), "token": uuid.uuid4().hex}
    data = _record(record)
    interval = max(stale_after / 6, 0.05)
    gen, took_over = None, False
    if path.create(data):
        gen = path.holds(data)  # the generation, read back with the record (ours, not a successor's)
    else:
        held = path.generation()
        if held is None:  # released between the create and the look: try once more
            gen = path.holds(data) if path.create(data) else None
        elif _silent_for(path, held) >= stale_after:
            gen, took_over = path.rewrite(data, held), True
    if gen is None:
        return None
    _SEEN.pop(str(path), None)
    claim = BucketClaim(path, record, gen, interval=interval, took_over=took_over)
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
