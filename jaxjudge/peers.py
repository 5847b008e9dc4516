"""The processes of one ``jax.distributed`` job watching each other: a lost one ends the run in
bounded time, with one line naming it.

Why a watch of its own: the coordination service notices a silent process only after its
heartbeat timeout (`HEARTBEAT_TIMEOUT_S`, which `jaxjudge.experiment.distributed.start` passes
to `jax.distributed.initialize`), and then ends every other process by a C++ abort (``Check
failure``) that names no process; a collective whose peer died fails at once in gloo with an
error that names an address. So every process writes a beat into the coordination service's
key-value store every `BEAT_S` seconds and reads the others'; a process whose beat has not
changed for `LOST_AFTER_S` seconds of this process's clock (well inside the service's timeout,
so the abort never comes first) is lost: this process runs the hooks registered with
`on_lost` (the store releases the claims it holds, so a restart does not wait for a lease),
prints one line naming the lost process and exits with `LOST_EXIT`. When the service fails
or stops answering for as long (process 0's host hangs or is cut off: a call into it then
blocks, so each call runs on a thread of its own and is waited for at most `BEAT_S` at a time),
that names process 0. A process 0 that dies closes the service's connections, and JAX's client
then aborts every other process at once (its error poll; jaxlib's hook for that error cannot be
set from Python: a Python callback fails there with ``std::bad_cast``, measured on jaxlib
0.10.2), before any watch can act: docs/pods.md. An error that ends the program (a collective
whose peer died fails at once) waits for that verdict before its traceback is printed
(`settle`, run from ``sys.excepthook``), so a lost peer is one line.

A process that ends on purpose marks itself done first (at exit), and is not waited for.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import jax
from jax._src import distributed  # the job's coordination-service client (no public handle)

__all__ = ["BEAT_S", "HEARTBEAT_TIMEOUT_S", "LOST_AFTER_S", "LOST_EXIT", "lost_after", "on_lost", "settle",
           "watch_peers"]

HEARTBEAT_TIMEOUT_S = 100
"""The coordination service's heartbeat timeout: a process silent this long is declared dead and
every other one aborted (JAX's default, stated here)."""

LOST_AFTER_S = 30.0
"""Seconds without a beat after which a process is taken for lost (this process's clock);
``$JAXJUDGE_LOST_AFTER_S`` sets another, kept between ``3 * BEAT_S`` and half the heartbeat
timeout."""

BEAT_S = 2.0
"""How often each process writes its beat and reads the others'."""

LOST_EXIT = 3
"""The exit status of a process that stopped because another was lost."""

_PREFIX = "jaxjudge/peers"


def lost_after() -> float:
    """`LOST_AFTER_S`, or ``$JAXJUDGE_LOST_AFTER_S`` within its bounds (an unreadable value: the default)."""
    try:
        value = float(os.environ.get("JAXJUDGE_LOST_AFTER_S", LOST_AFTER_S))
    except ValueError:
        value = LOST_AFTER_S
    return min(max(value, 3 * BEAT_S), HEARTBEAT_TIMEOUT_S / 2)
_HOOKS: list[Callable[[], None]] = []
_WATCH: _Watch | None = None


def on_lost(hook: Callable[[], None]) -> Callable[[], None]:
    """Run ``hook`` (from the watch's thread) before this process stops for a lost peer.

    Returns:
        A function that unregisters it.
    """
    _HOOKS.append(hook)
    return lambda: _HOOKS.remove(hook) if hook in _HOOKS else None


class _Call(threading.Thread):
    """``fn()`` on a thread of its own (a daemon: a call the service never answers keeps no
    process alive); ``result`` or ``error`` once it has returned."""

    def __init__(self, fn: Callable[[], Any]):
        super().__init__(name="jaxjudge-peers-call", daemon=True)
        self.fn, self.result, self.error = fn, None, None
        self.start()

    def run(self) -> None:
        try:
            self.result = self.fn()
        except Exception as e:  # noqa: BLE001 - handed to the watch, which decides
            self.error = e


class _Watch:
    def __init__(self, client: Any, n: int, me: int):
        self.client, self.n, self.me = client, n, me
        self.after = lost_after()
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name="jaxjudge-peers", daemon=True)

    def _beats(self) -> tuple[dict[int, str], set[int]]:
        """Each other process's last beat, and those that are done."""
        self.client.key_value_set(f"{_PREFIX}/beat/{self.me}", str(time.monotonic_ns()), allow_overwrite=True)
        beats, done = {}, set()
        for key, value in self.client.key_value_dir_get(f"{_PREFIX}/"):
            kind, _, who = key.rstrip("/").rpartition("/")
            kind = kind.rpartition("/")[2]
            p = int(who) if who.isdigit() else -1
            if kind == "beat":
                beats[p] = value
            elif kind == "done":
                done.add(p)
        return beats, done

    def _run(self) -> None:
        start = time.monotonic()
        seen: dict[int, tuple[str | None, float]] = {p: (None, start) for p in range(self.n) if p != self.me}
        quiet = None  # since when the service has failed or not answered
        call = None
        while not self.stopped.wait(BEAT_S):
            now = time.monotonic()
            call = call or _Call(self._beats)
            call.join(BEAT_S)  # a call still unanswered is waited for again, not asked twice
            if call.is_alive() or call.error is not None:  # the service is unreachable: process 0 is gone
                quiet = now if quiet is None else quiet
                if now - quiet >= self.after and self.me != 0:
                    why = (f"has not answered for {now - quiet:.0f} s" if call.is_alive() else
                           "stopped answering: " + str(call.error).splitlines()[0][:120])
                    self._end([0], f"the coordination service {why}")
                call = call if call.is_alive() else None
                continue
            (beats, done), call, quiet = call.result, None, None
            lost = []
            for p, (value, since) in seen.items():
                if p in done:
                    continue
                if beats.get(p) != value:
                    seen[p] = (beats.get(p), now)
                elif now - since >= self.after:
                    lost.append(p)
            if lost:
                self._end(lost, f"no heartbeat for {self.after:g} s")

    def _end(self, lost: list[int], why: str) -> None:
        for hook in list(_HOOKS):
            try:
                hook()
            except Exception:  # noqa: BLE001, S110 - stopping anyway; what was published stays published
                pass
        names = ", ".join(map(str, lost))
        sys.stdout.flush()
        sys.stderr.write(f"jaxjudge: process {names} of {self.n} lost ({why}); process {self.me} stops: the chunks "
                         "published so far are kept, start every process again to compute the rest\n")
        sys.stderr.flush()
        os._exit(LOST_EXIT)

    def stop(self) -> None:
        """Marks this process done (it ends on purpose) and stops watching."""
        if self.stopped.is_set():
            return
        self.stopped.set()
        try:
            self.client.key_value_set(f"{_PREFIX}/done/{self.me}", "1", allow_overwrite=True)
        except Exception:  # noqa: BLE001, S110 - the others will then take it for lost, which it is about to be
            pass


def watch_peers() -> None:
    """Start watching the other processes of this ``jax.distributed`` job (once per process)."""
    global _WATCH
    client = distributed.global_state.client
    if _WATCH is not None or client is None or jax.process_count() < 2:
        return
    _WATCH = _Watch(client, jax.process_count(), jax.process_index())
    _WATCH.thread.start()
    atexit.register(_WATCH.stop)  # after jax's own exit hook is registered: runs before its shutdown
    shown = sys.excepthook

    def settle_first(*exc: Any) -> None:
        # An error that ends the program (a collective that failed because its peer died, say)
        # waits for the watch to name a lost process before the traceback is printed.
        settle()
        shown(*exc)

    sys.excepthook = settle_first


def settle() -> None:
    """Where a peer is watched: wait long enough for a lost one to be named (the watch then ends
    this process); returns at once where nothing is watched, or after the wait if none is lost."""
    if _WATCH is not None and not _WATCH.stopped.is_set():
        _WATCH.stopped.wait(_WATCH.after + 3 * BEAT_S)
