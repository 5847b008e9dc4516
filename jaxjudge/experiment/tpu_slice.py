"""The Cloud TPU slice this host belongs to, read where JAX reads it, without joining it.

JAX's cluster detection (``jax/_src/clusters/cloud_tpu_cluster.py``) finds a slice's workers in
one of two places, and so does `tpu_slice`:

- GKE: ``TPU_PROCESS_ADDRESSES`` or else ``TPU_WORKER_HOSTNAMES`` (comma-separated, sorted by
  worker id), this worker's id in ``TPU_WORKER_ID``, the slice's type in ``TPU_ACCELERATOR_TYPE``;
- a TPU VM (``gcloud compute tpus tpu-vm create``, queued resources): the metadata server's
  instance attributes ``agent-worker-number``, ``worker-network-endpoints`` (host names, or
  ``name:id:ip`` triples) and ``accelerator-type``, at ``$GCE_METADATA_IP`` (as JAX honours it)
  or ``metadata.google.internal``. The server is asked only on a host with TPU device files
  (``/dev/accel*``, ``/dev/vfio/N``) or where ``GCE_METADATA_IP`` is set, so a laptop never
  waits on a name that does not resolve.

The slice's coordinator is where JAX puts it: ``MEGASCALE_COORDINATOR_ADDRESS``'s host, else
the first worker, on port 8482.
"""

from __future__ import annotations

import dataclasses
import glob
import os
import urllib.error
import urllib.request

__all__ = ["COORDINATOR_PORT", "TpuSlice", "on_tpu_host", "tpu_slice"]

COORDINATOR_PORT = 8482
"""The port JAX's Cloud TPU cluster detection gives the coordinator."""

_METADATA_TIMEOUT_S = 5.0


@dataclasses.dataclass(frozen=True)
class TpuSlice:
    """A Cloud TPU slice as its environment describes it."""

    name: str  # the accelerator type, e.g. "v4-32"
    workers: tuple[str, ...]  # host names or addresses, by worker id
    worker_id: int | None
    source: str  # where it was read: an environment variable or the metadata server

    @property
    def coordinator(self) -> str:
        host = os.environ.get("MEGASCALE_COORDINATOR_ADDRESS") or self.workers[0]
        return f"{host.split(':')[0]}:{COORDINATOR_PORT}"

    def describe(self) -> str:
        me = "" if self.worker_id is None else f" as worker {self.worker_id}"
        return f"the TPU slice {self.name}'s {len(self.workers)} workers ({self.source}){me}"


def _metadata_host() -> str:
    return os.environ.get("GCE_METADATA_IP") or "metadata.google.internal"


def _metadata(key: str) -> str | None:
    """An instance attribute from the metadata server, or None where it has none (or none answers)."""
    url = f"http://{_metadata_host()}/computeMetadata/v1/instance/attributes/{key}"
    req = urllib.request.Request(url, headers={"Metadata-Flavor": "Google"})
    try:
        with urllib.request.urlopen(req, timeout=_METADATA_TIMEOUT_S) as r:  # noqa: S310 - http by design
            return r.read().decode().strip()
    except (urllib.error.URLError, OSError, ValueError):
        return None


def _endpoints(text: str) -> tuple[str, ...]:
    """``worker-network-endpoints`` as JAX parses it: host names, or ``name:id:ip`` triples."""
    out = []
    for w in text.split(","):
        parts = w.strip().split(":")
        out.append(parts[0] if len(parts) == 1 else parts[2] if len(parts) == 3 else w)
    return tuple(h for h in out if h)


def _int_or_none(text: str | None) -> int | None:
    try:
        return None if text is None else int(text)
    except ValueError:
        return None


def _from_gke() -> TpuSlice | None:
    var = "TPU_PROCESS_ADDRESSES" if os.environ.get("TPU_PROCESS_ADDRESSES") else "TPU_WORKER_HOSTNAMES"
    workers = tuple(h.strip() for h in os.environ.get(var, "").split(",") if h.strip())
    if not workers:
        return None
    return TpuSlice(os.environ.get("TPU_ACCELERATOR_TYPE") or "(type unknown)", workers,
                    _int_or_none(os.environ.get("TPU_WORKER_ID")), var)


def _tpu_hardware() -> bool:
    return bool(glob.glob("/dev/accel[0-9]*") or glob.glob("/dev/vfio/[0-9]*"))


def _from_metadata() -> TpuSlice | None:
    if not (os.environ.get("GCE_METADATA_IP") or _tpu_hardware()):
        return None
    worker = _metadata("agent-worker-number")
    if worker is None:
        return None
    workers = _endpoints(_metadata("worker-network-endpoints") or "")
    return TpuSlice(_metadata("accelerator-type") or "(type unknown)", workers, _int_or_none(worker),
                    f"metadata server {_metadata_host()}")


def tpu_slice() -> TpuSlice | None:
    """The Cloud TPU slice this host's environment describes (GKE's variables first, then the
    TPU VM's metadata server), or None off Cloud TPU."""
    return _from_gke() or _from_metadata()


def on_tpu_host() -> bool:
    """Whether this host has TPU device files (a TPU VM), whether or not a slice is described."""
    return _tpu_hardware()
