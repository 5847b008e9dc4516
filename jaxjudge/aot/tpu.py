"""The TPU devices `jaxjudge aot` compiles for, described by libtpu on a host without a TPU.

`tpu_devices` asks libtpu for a topology's devices (one slice as a user rents it, or several
joined by the data-centre network); `describe_host_for_libtpu` tells libtpu, before it loads,
what it would otherwise guess about the host and print.
"""

from __future__ import annotations

import os
from typing import Any

import jax
from jax.experimental import topologies

from jaxjudge.aot import cost as _cost

__all__ = ["LibtpuMissingError", "describe_host_for_libtpu", "tpu_devices"]


class LibtpuMissingError(RuntimeError):
    """libtpu is not installed, so no TPU topology can be described."""


def describe_host_for_libtpu(topology: str) -> None:
    """Sets what libtpu asks of a host before it loads (unless already set): the accelerator type
    of the slice, this host as its only worker. Without them libtpu, loaded on a host that is not
    a TPU VM, prints its guesses and a source-location trace on stderr. For a process that only
    compiles (`jaxjudge aot`): on a TPU VM that runs on its chips the VM's own values must win.
    """
    os.environ.setdefault("TPU_ACCELERATOR_TYPE", _cost.topology(topology).accelerator_type)
    os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
    os.environ.setdefault("TPU_WORKER_ID", "0")


def tpu_devices(topology: str, *, chips_per_host_bounds: tuple[int, int, int] | None = None,
                slices: int = 1) -> list[Any]:
    """The devices of a TPU topology such as ``v5e:2x4``, described without a TPU, laid out as the
    slice a user rents (hosts of `jaxjudge.aot.cost.topology`'s ``host_bounds`` unless given);
    with ``slices`` > 1, that many such slices joined by the data-centre network (each device's
    ``slice_index`` says which).

    Raises:
        LibtpuMissingError: libtpu is not installed (says how to get it).
        ValueError: libtpu does not know the topology (naming it).
    """
    if chips_per_host_bounds is None:
        chips_per_host_bounds = _cost.topology(topology).host_bounds
    os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
    # Nothing runs on a TPU here, so another process that loaded libtpu (and holds its lockfile)
    # must not stop a compile.
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    try:
        import libtpu  # noqa: F401  (only to tell a missing install from a bad topology)
    except ImportError:
        raise LibtpuMissingError(
            "libtpu is not installed: pip install -e '.[tpu]' (or pip install \"jax[tpu]==" +
            jax.__version__ + "\")") from None
    try:
        topo = topologies.get_topology_desc(topology, "tpu", chip_config_name="default",
                                            chips_per_host_bounds=chips_per_host_bounds, num_slices=slices)
    except Exception as e:  # libtpu's own error text names what it rejects
        raise ValueError(f"topology {topology!r} could not be described by libtpu: {e}") from None
    return list(topo.devices)
