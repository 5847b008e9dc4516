"""What the processes of one ``jax.distributed`` job say to each other: the multi-host helpers.

At the bottom of the package's layers (it imports only JAX and NumPy), so that the store, the
models, the engine and the experiment share one copy:

- `is_leader`: process 0 (or the only process), the one that writes what is written once;
- `agree`: process 0's integer on every process (a collective);
- `any_process`: whether any process's flag is set (a collective);
- `process_max`: every process's table of integers, combined by maximum (a collective);
- `barrier`: waits until every process reaches the named point;
- `spans_processes`: whether a mesh holds devices of other processes (one SPMD program);
- `to_host`: a device array's whole value on this process, gathered from the others if split
  over their devices (a collective);
- `watch_peers`: a lost process ends this one in bounded time, with one line naming it (see
  `jaxjudge.peers`); `settle` lets an error a lost peer caused wait for that line.

A collective must be called by every process, for the same values, in the same order.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxjudge.peers import HEARTBEAT_TIMEOUT_S, LOST_AFTER_S, settle, watch_peers

__all__ = ["HEARTBEAT_TIMEOUT_S", "LOST_AFTER_S", "is_leader", "agree", "any_process", "barrier", "process_max",
           "settle", "spans_processes", "to_host", "watch_peers"]


def is_leader() -> bool:
    """Process 0 (or the only process): the one that writes what is written once."""
    return jax.process_index() == 0


def agree(value: int) -> int:
    """Process 0's ``value``, on every process of the ``jax.distributed`` job (a collective)."""
    return int(multihost_utils.broadcast_one_to_all(np.int32(value)))


def any_process(flag: bool) -> bool:
    """Whether ``flag`` is set on any process of the ``jax.distributed`` job (a collective): so
    that an error one process finds in its own rows stops every process before the next
    collective, instead of leaving the others waiting in it."""
    return bool(np.asarray(multihost_utils.process_allgather(np.int32(bool(flag)))).max())


def process_max(table: np.ndarray) -> np.ndarray:
    """Every process's ``table`` of ints (each below 2**31, the same shape everywhere), combined
    element by element by maximum, as int64: one gather (a collective). One process: ``table``
    itself, with no collective."""
    if jax.process_count() == 1:
        return np.asarray(table, np.int64)
    return np.asarray(multihost_utils.process_allgather(np.asarray(table, np.int32))).max(axis=0).astype(np.int64)


def barrier(name: str) -> None:
    """Waits until every process of the ``jax.distributed`` job reaches the barrier ``name``."""
    multihost_utils.sync_global_devices(name)


def spans_processes(mesh: Any) -> bool:
    """Whether ``mesh`` (a `jax.sharding.Mesh`, or None) holds devices of other processes (one
    SPMD program over several hosts)."""
    return mesh is not None and _spans(mesh)


@functools.lru_cache(maxsize=16)
def _spans(mesh: Any) -> bool:
    # Asked for every array a call places: looked up once per mesh, not per device per call.
    me = jax.process_index()
    return any(d.process_index != me for d in np.asarray(mesh.devices).flat)


def to_host(x: Any) -> np.ndarray:
    """A device array's whole value as numpy on this process. An array split over other
    processes' devices is gathered from them (a collective: every process of the mesh must
    call this for the same array in the same order)."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.asarray(x)
