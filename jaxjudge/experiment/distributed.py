"""Several processes on one sweep: `jax.distributed` from the command line, and each process's plan.

``jaxjudge extract`` and ``sweep`` join a multi-process job when launched as one:

- explicitly, on any machine (this CPU included): ``--coordinator HOST:PORT --num-processes N
  --process-id I`` on every process, I = 0 .. N-1, the same HOST:PORT everywhere;
- on a Cloud TPU host, with no flags: `jax.distributed.initialize` finds the slice's hosts in the
  TPU VM's metadata (or GKE's ``TPU_WORKER_HOSTNAMES``); a single-host slice is one process.

Join or refuse: where the slice has several workers (read where JAX reads them,
`jaxjudge.experiment.tpu_slice`) or the flags name several processes, a failed join stops the
run before any work with one line naming the slice or job, its size and the error (the CLI's
exit 2). A process other than 0 first waits, at most ``$JAXJUDGE_JOIN_TIMEOUT_S`` (300 s), for
the coordinator to accept a connection, so that an absent one is that line and not the C++
abort of a failed registration. Once joined, every process watches the others
(`jaxjudge.peers`): a lost process ends the others within `jaxjudge.peers.LOST_AFTER_S` (30 s),
each with one line naming it and exit status 3; the chunks already published stay, and starting
every process again computes the rest.

What each process then computes (its *plan line* says it) depends on the config's mesh
(`jaxjudge.experiment.hardware.mesh_for`):

- a mesh over every process's devices (a multi-host slice): one SPMD program. Every process
  computes every chunk of every job together with the others, each batch's rows split over
  ``data`` and the judge over ``model`` (which may span hosts); each process tokenises and
  places only the rows of its own devices' ``data`` blocks (`jaxjudge.engine.feed`), each
  chunk's results are gathered to every process, and process 0 claims and writes the store's
  chunks.
- no mesh, or one the size of each process's own devices: each process builds its own mesh,
  and every job shares its store chunks through the store's claims, as independent workers do:
  a process takes the chunks j with j mod N == its index first, then every chunk nobody holds,
  then waits for the chunks others hold (and takes over those of a process that died), so the
  store must be one folder (or bucket prefix) every process writes.

The report is written once, by process 0.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
import time
import warnings
from typing import Any

import jax
import numpy as np

from jaxjudge.experiment.typed import ConfigError
from jaxjudge.experiment.tpu_slice import on_tpu_host, tpu_slice
from jaxjudge.multihost import HEARTBEAT_TIMEOUT_S, is_leader, spans_processes, watch_peers

__all__ = ["Cluster", "cluster_from_flags", "start", "plan_line", "is_leader", "launch_from_environment",
           "reach"]

_ADDRESS = re.compile(r"^\[?[A-Za-z0-9_.:-]+\]?:(\d{1,5})$")


@dataclasses.dataclass(frozen=True)
class Cluster:
    """An explicit multi-process launch: where process 0 listens, how many processes, which this is."""

    coordinator: str
    num_processes: int
    process_id: int


def cluster_from_flags(coordinator: str | None, num_processes: int | None, process_id: int | None
                       ) -> Cluster | None:
    """The launch the three flags describe, or None when none is given.

    Raises:
        ConfigError: some but not all flags given, an address that is not HOST:PORT, or a process
            id outside ``[0, num_processes)`` (each naming the flag).
    """
    given = {"--coordinator": coordinator, "--num-processes": num_processes, "--process-id": process_id}
    if all(v is None for v in given.values()):
        return None
    absent = [k for k, v in given.items() if v is None]
    if absent:
        raise ConfigError(f"{', '.join(absent)} missing: a multi-process launch needs --coordinator HOST:PORT, "
                          "--num-processes N and --process-id I on every process")
    m = _ADDRESS.match(coordinator)
    if m is None or not 0 < int(m.group(1)) < 65536:
        raise ConfigError(f"--coordinator: expected HOST:PORT (e.g. 127.0.0.1:12355), got {coordinator!r}")
    if num_processes < 1:
        raise ConfigError(f"--num-processes: expected a positive int, got {num_processes}")
    if not 0 <= process_id < num_processes:
        raise ConfigError(f"--process-id: expected 0 .. {num_processes - 1} for --num-processes {num_processes}, "
                          f"got {process_id}")
    return Cluster(coordinator, num_processes, process_id)


JOIN_TIMEOUT_S = 300
"""Seconds a process waits for the job's coordinator and the other processes to join
(``$JAXJUDGE_JOIN_TIMEOUT_S`` overrides it)."""


def _join_timeout() -> int:
    text = os.environ.get("JAXJUDGE_JOIN_TIMEOUT_S", "")
    try:
        return max(1, int(text)) if text.strip() else JOIN_TIMEOUT_S
    except ValueError:
        raise ConfigError(f"$JAXJUDGE_JOIN_TIMEOUT_S: expected whole seconds, got {text!r}") from None


def start(cluster: Cluster | None) -> bool:
    """Joins the multi-process job the launch describes (explicit flags, else the Cloud TPU
    slice's environment, `jaxjudge.experiment.tpu_slice`); does nothing for a single process.
    Call before anything touches a device. Once joined, every process watches the others
    (`jaxjudge.multihost.watch_peers`): a lost one ends the run with one line.

    Returns:
        Whether this process is one of several.

    Raises:
        ConfigError: the join failed (one line naming the job or the slice, its size and the
            error; nothing was run), or a slice of several workers was joined as one process.
    """
    timeout = _join_timeout()
    if cluster is not None:
        if cluster.num_processes > 1:
            what = f"the {cluster.num_processes}-process job at {cluster.coordinator} as process {cluster.process_id}"
            _join(what, cluster.coordinator if cluster.process_id else None, timeout,
                  coordinator_address=cluster.coordinator, num_processes=cluster.num_processes,
                  process_id=cluster.process_id)
    else:
        found = tpu_slice()
        if found is not None and len(found.workers) > 1:
            # JAX's own detection joins (it reads the same environment, and multislice's too);
            # the coordinator is probed first so that an absent one is a line, not an abort.
            _join(found.describe(), found.coordinator if found.worker_id else None, timeout)
            if jax.process_count() < len(found.workers):
                raise ConfigError(f"joining {found.describe()} made {jax.process_count()} process(es) of "
                                  f"{len(found.workers)}; nothing was run")
        elif on_tpu_host() and found is None:
            warnings.warn("jaxjudge: a TPU host that no metadata server or TPU_WORKER_HOSTNAMES describes as "
                          "part of a slice of several workers: running as one process", stacklevel=2)
    if jax.process_count() > 1:
        watch_peers()
        return True
    return False


def _join(what: str, probe: str | None, timeout: int, **how: Any) -> None:
    """`jax.distributed.initialize` with ``how``, after waiting (at most ``timeout`` s) for the
    coordinator at ``probe`` to accept a connection: an absent coordinator is a `ConfigError`
    here, not the C++ abort of a failed registration."""
    try:
        if probe is not None:
            reach(probe, timeout)
        jax.distributed.initialize(initialization_timeout=timeout, heartbeat_timeout_seconds=HEARTBEAT_TIMEOUT_S,
                                   **how)
    except Exception as e:  # noqa: BLE001 - any failure to join stops the run, in one line
        text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ConfigError(f"joining {what} failed: {text}; nothing was run") from None


def reach(address: str, timeout: float) -> None:
    """Waits until ``HOST:PORT`` accepts a TCP connection (processes start in any order).

    Raises:
        OSError: none within ``timeout`` seconds (the message names the last refusal).
    """
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=min(5.0, timeout)):
                return
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            reason = getattr(last, "strerror", None) or str(last) or type(last).__name__
            raise OSError(f"no coordinator answered at {address} within {timeout:g} s ({reason})")
        time.sleep(min(1.0, max(0.0, deadline - time.monotonic())))


def launch_from_environment() -> tuple[int, int]:
    """``(processes, this process)`` as a Cloud TPU slice's environment names them (GKE's
    variables or the TPU VM's metadata), without joining: ``(1, 0)`` elsewhere."""
    found = tpu_slice()
    if found is None or len(found.workers) <= 1:
        return 1, 0
    me = found.worker_id
    if me is None or not 0 <= me < len(found.workers):
        raise ConfigError(f"{found.source}: this worker's id ({me}) is not one of the {len(found.workers)} workers "
                          "it names (TPU_WORKER_ID, or the metadata's agent-worker-number)")
    return len(found.workers), me


def plan_line(mesh: Any) -> str:
    """One line: this process, its devices, the mesh over them, and what it computes (under a
    mesh over several processes: which blocks of every batch's rows and which model shards its
    devices hold)."""
    n, i = jax.process_count(), jax.process_index()
    local = jax.local_devices()
    names = ", ".join(f"{d.platform}:{d.id}" for d in local)
    shape = "none (one device)" if mesh is None else str({k: int(v) for k, v in mesh.shape.items()})
    if n == 1:
        share = "every chunk"
    elif spans_processes(mesh):
        grid = np.asarray(mesh.devices)
        axes = list(mesh.axis_names)
        mine = np.argwhere(np.vectorize(lambda d: d.process_index == i)(grid))
        held = {a: sorted({int(c) for c in mine[:, k]}) for k, a in enumerate(axes)}
        share = (f"every chunk with the other processes, one SPMD program: rows in block(s) "
                 f"{_span(held['data'])} of {grid.shape[axes.index('data')]} of every batch, "
                 f"model shard(s) {_span(held['model'])} of {grid.shape[axes.index('model')]}; "
                 "store and report written by process 0")
    else:
        share = f"every job's chunks by claim, chunks j with j % {n} == {i} first; report by process 0"
    return (f"plan: process {i} of {n} on {socket.gethostname()}: {len(local)} devices [{names}] "
            f"of {jax.device_count()}; mesh {shape}; computes {share}")


def _span(xs: list[int]) -> str:
    return str(xs[0]) if len(xs) == 1 else f"{xs[0]}-{xs[-1]}" if xs == list(range(xs[0], xs[-1] + 1)) else str(xs)
