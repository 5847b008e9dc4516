"""Several processes on one sweep: `jax.distributed` from the command line, and each process's plan.

``jaxjudge extract`` and ``sweep`` join a multi-process job when launched as one:

- explicitly, on any machine (this CPU included): ``--coordinator HOST:PORT --num-processes N
  --process-id I`` on every process, I = 0 .. N-1, the same HOST:PORT everywhere;
- on a Cloud TPU host, with no flags: `jax.distributed.initialize` finds the slice's hosts in the
  TPU VM's metadata (or GKE's ``TPU_WORKER_HOSTNAMES``); a single-host slice is one process.

What each process then computes (its *plan line* says it) depends on the config's mesh
(`jaxjudge.experiment.hardware.mesh_for`):

- a mesh over every process's devices (a multi-host slice): one SPMD program. Every process
  computes every chunk of every job together with the others, each batch's rows split over
  ``data`` and the judge over ``model`` (which may span hosts); each process tokenises and
  places only the rows of its own devices' ``data`` blocks (`jaxjudge.engine.feed`), each
  chunk's results are gathered to every process, and process 0 claims and writes the store's
  chunks.
- no mesh, or one the size of each process's own devices: each process builds its own mesh,
  score jobs split their store chunks across processes (chunk j to process j mod N, then every
  process waits for the others and reads the merged store), and the other job kinds
  (generation, random-number and content-free prompts) share their chunks through the store's
  claims, as independent workers do (a process takes the next chunk nobody holds, then waits
  for the chunks others hold).

The report is written once, by process 0.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import re
import socket
import warnings
from typing import Any

import jax
import numpy as np

from jaxjudge.experiment.typed import ConfigError
from jaxjudge.multihost import is_leader, spans_processes

__all__ = ["Cluster", "cluster_from_flags", "start", "plan_line", "is_leader", "launch_from_environment"]

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


def _cloud_tpu() -> bool:
    """Whether this looks like a Cloud TPU host (a TPU VM's accelerator device files, or GKE's
    worker list), without starting a backend."""
    return (bool(os.environ.get("TPU_WORKER_HOSTNAMES")) or os.path.exists("/dev/accel0")
            or bool(glob.glob("/dev/vfio/[0-9]*")))


def start(cluster: Cluster | None, timeout_s: int = 300) -> bool:
    """Joins the multi-process job the launch describes (explicit flags, else a TPU pod's
    environment); does nothing for a single process. Call before anything touches a device.

    Returns:
        Whether this process is one of several.
    """
    if cluster is not None:
        if cluster.num_processes > 1:
            jax.distributed.initialize(coordinator_address=cluster.coordinator,
                                       num_processes=cluster.num_processes, process_id=cluster.process_id,
                                       initialization_timeout=timeout_s)
    elif _cloud_tpu():
        # JAX reads the slice's hosts from the TPU VM's metadata (or GKE's environment); a host
        # it finds no cluster for stays a single process, unless the environment names several
        # workers: then every host would run the whole sweep as process 0 of 1, so the run stops.
        try:
            jax.distributed.initialize(initialization_timeout=timeout_s)
        except (ValueError, RuntimeError) as e:
            workers = _named_workers()
            if len(workers) > 1:
                raise ConfigError(
                    f"joining the TPU slice's {len(workers)} workers (TPU_WORKER_HOSTNAMES) failed: "
                    f"{str(e).splitlines()[0] if str(e) else type(e).__name__}; nothing was run") from None
            warnings.warn(f"jaxjudge: no multi-host TPU slice detected ({e}); running as one process",
                          stacklevel=2)
    return jax.process_count() > 1


def _named_workers() -> list[str]:
    """The slice's workers the environment names (GKE's and the TPU VM's ``TPU_WORKER_HOSTNAMES``)."""
    return [h for h in os.environ.get("TPU_WORKER_HOSTNAMES", "").split(",") if h.strip()]


def launch_from_environment() -> tuple[int, int]:
    """``(processes, this process)`` as a Cloud TPU slice's environment names them
    (``TPU_WORKER_HOSTNAMES``, ``TPU_WORKER_ID``), without joining: ``(1, 0)`` elsewhere."""
    workers = _named_workers()
    if len(workers) <= 1:
        return 1, 0
    try:
        me = int(os.environ.get("TPU_WORKER_ID", "0"))
    except ValueError:
        raise ConfigError(f"TPU_WORKER_ID: expected an int, got {os.environ['TPU_WORKER_ID']!r}") from None
    if not 0 <= me < len(workers):
        raise ConfigError(f"TPU_WORKER_ID: {me} is outside the {len(workers)} workers of TPU_WORKER_HOSTNAMES")
    return len(workers), me


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
        share = f"score chunks j with j % {n} == {i}; other jobs' chunks as claimed; report by process 0"
    return (f"plan: process {i} of {n} on {socket.gethostname()}: {len(local)} devices [{names}] "
            f"of {jax.device_count()}; mesh {shape}; computes {share}")


def _span(xs: list[int]) -> str:
    return str(xs[0]) if len(xs) == 1 else f"{xs[0]}-{xs[-1]}" if xs == list(range(xs[0], xs[-1] + 1)) else str(xs)
