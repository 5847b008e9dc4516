"""Workers sharing one store: every chunk claimed, computed and written once.

`claimed_chunks` is the one work loop over a store's missing chunks. A worker is either one
process, or a whole ``jax.distributed`` job whose processes run one SPMD program over a mesh
that spans them (``spmd=True``): process 0 then takes and keeps the claims and writes the
chunks, every process computes them together (each call is a collective over the global
mesh), and process 0's view of each claim is broadcast so that all processes take the same
chunks in the same order.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxjudge.multihost import agree, barrier  # re-exported: the helpers live in jaxjudge.multihost
from jaxjudge.multihost import is_leader as _is_leader
from jaxjudge.peers import on_lost
from jaxjudge.store.chunked import Store
from jaxjudge.store.files import CLAIM_STALE_S, clear_dead_claim

__all__ = ["CLAIM_POLL_MAX_S", "CLAIM_POLL_S", "claimed_chunks", "agree", "barrier"]

CLAIM_POLL_S = 0.5
"""How soon a worker looks again at chunks other workers hold; each look that finds nothing new
doubles the wait, up to `CLAIM_POLL_MAX_S` (and a quarter of the lease)."""

CLAIM_POLL_MAX_S = 8.0

_MINE, _WAIT, _DONE = 1, 0, 2


def claimed_chunks(store: Store, todo: Sequence[int], make: Callable[[int], dict[str, np.ndarray]],
                   lease: float = CLAIM_STALE_S, *, spmd: bool = False,
                   on_written: Callable[[int], None] | None = None) -> list[int]:
    """Write the chunks ``todo`` of ``store``, each under a claim, as workers sharing the store do.

    A chunk another live worker holds is skipped and looked at again until it is written; a
    claim without a heartbeat for ``lease`` seconds (or of a dead process on this host) is taken
    over, so a killed worker's chunks are done by the others.

    Args:
      store: the store every worker writes.
      todo: the chunks to do (those already written are skipped); under ``spmd`` the same list
        on every process (e.g. all of the store's chunks, not each process's view of the
        missing ones).
      make: ``make(i)`` computes chunk ``i``'s arrays.
      lease: seconds without a heartbeat after which another worker's claim is taken over.
      spmd: this process is one of a ``jax.distributed`` job that acts as one worker (see the
        module docstring); every process of the job must call this with the same arguments.
        It returns when every chunk of ``todo`` is in the store, on every process.
      on_written: called with each chunk this worker wrote, after the write.

    Returns:
      The chunks this worker computed, in the order computed.
    """
    lead = not spmd or _is_leader()
    done: list[int] = []
    pending = list(todo)
    poll = CLAIM_POLL_S
    while pending:
        waiting = []
        for i in pending:
            claim = store.claim_chunk(i, stale_after=lease) if lead else None
            state = (_MINE if claim is not None else _DONE if store.has_chunk(i) else _WAIT) if lead else _WAIT
            if spmd:
                state = agree(state)
            if state == _MINE and not _compute(store, i, claim, make, spmd=spmd):
                state = _WAIT  # the claim was lost meanwhile: its new holder publishes the chunk
            if state == _WAIT:
                waiting.append(i)
            if state != _MINE:
                continue
            done.append(i)
            if on_written is not None:
                on_written(i)
        if waiting:
            # Back off while nothing changes; a chunk written or taken since the last look resets it.
            poll = CLAIM_POLL_S if len(waiting) < len(pending) else min(2 * poll, CLAIM_POLL_MAX_S, lease / 4)
            time.sleep(poll)
        pending = waiting
    if lead:  # claims left on written chunks by workers that died before releasing them
        for i in todo:
            if store.has_chunk(i):
                clear_dead_claim(store.claim_path(i), lease)
    if spmd:
        # Every chunk is written (by process 0) before any process reads the store.
        barrier(f"jaxjudge-claimed-{store.key_hash[:16]}")
    return done


def _compute(store: Store, i: int, claim: Any, make: Callable[[int], dict[str, np.ndarray]], *, spmd: bool) -> bool:
    """Compute chunk ``i`` under ``claim`` (this process's, or None on a process of an SPMD job
    other than 0) and publish it; False when the claim was lost before the chunk was published
    (a holder silent for a whole lease: another worker has it now and publishes it).

    While the claim is held, a lost peer (`jaxjudge.peers`) releases it before this process
    stops, so a restart does not wait a lease for it.
    """
    unregister = on_lost(claim.release) if claim is not None else None
    try:
        with claim if claim is not None else contextlib.nullcontext():
            arrays = make(i)  # under SPMD a collective: every process computes, whatever the claim
            keep = not _lost(claim)
            if spmd:
                keep = bool(agree(int(keep)))
            if keep and claim is not None:
                store.write_chunk(i, arrays)
    finally:
        if unregister is not None:
            unregister()
    return keep


def _lost(claim: Any) -> bool:
    """Whether a held claim was taken over (a bucket claim whose renewal was refused)."""
    return bool(getattr(claim, "lost", False))
