"""The hardware a config names: its device mesh (checked before any model loads)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxjudge.experiment.typed import ConfigError, choose
from jaxjudge.models.sharding import make_mesh

__all__ = ["MESH_AXES", "check_mesh", "mesh_for", "parameter_bytes_per_device", "device_memory", "check_fits"]

FIT_FRACTION = 0.9
"""The share of a device's memory a judge's parameters may take (the rest: activations, caches)."""


MESH_AXES = ("data", "model")


def check_mesh(where: str, mesh: Mapping[str, int]) -> None:
    """Axis names from `MESH_AXES`, sizes >= 1 or -1 (the rest of the devices) once at most."""
    for k, v in mesh.items():
        choose(f"{where}.{k}", k, MESH_AXES)
        if isinstance(v, bool) or not isinstance(v, int) or (v < 1 and v != -1):
            raise ConfigError(f"{where}.{k}: a mesh axis size is a positive int or -1 (the rest), got {v!r}")
    if sum(v == -1 for v in mesh.values()) > 1:
        raise ConfigError(f"{where}: at most one axis may be -1 (the rest of the devices), got {dict(mesh)}")


def mesh_for(cfg: Any, devices: Sequence[Any] | None = None) -> Any:
    """The config's ``mesh``, or None without one.

    One process: the mesh over its devices (``-1``: the rest of them). Several processes
    (``jax.distributed``): sizes whose product is this process's device count give each
    process its own mesh, and the processes split the chunks (see
    `jaxjudge.experiment.distributed`); otherwise the mesh covers every process's devices
    (``jax.devices()``, ``-1`` counted over all of them, sizes that multiply to all of them) and
    the processes run one SPMD program over it: rows over ``data``, the judge over ``model``,
    which may span hosts. ``devices`` overrides the devices used.

    Raises:
      ConfigError: the sizes do not fit the devices (naming the field and the device count).
    """
    if cfg.mesh is None:
        return None
    sizes = {"data": 1, "model": 1, **cfg.mesh}
    known = 1
    for v in sizes.values():
        known *= v if v != -1 else 1
    if devices is None:
        local, every = jax.local_devices(), jax.devices()
        several = len(every) > len(local)
        per_process = several and -1 not in sizes.values() and known == len(local)
        devices = local if per_process or not several else every
        where = (f"{len(devices)} in this process" if not several else
                 f"{len(local)} in this process, {len(every)} in all {jax.process_count()} processes")
        exact = several and not per_process
    else:
        devices, where, exact = list(devices), f"{len(devices)} in this process", False
    if len(devices) % known:
        raise ConfigError(f"ExperimentConfig.mesh: {dict(cfg.mesh)} needs a multiple of {known} devices, {where}")
    sizes = {k: (len(devices) // known if v == -1 else v) for k, v in sizes.items()}
    need = sizes["data"] * sizes["model"]
    if need > len(devices) or (exact and need != len(devices)):
        raise ConfigError(f"ExperimentConfig.mesh: {sizes} needs {need} devices, {where}"
                          + (" (a mesh over several processes takes all of their devices)" if exact else ""))
    return make_mesh(sizes["data"], sizes["model"], devices=devices)


def parameter_bytes_per_device(path: str | Path, dtype: Any, mesh: Any = None) -> int:
    """Bytes of a judge's parameters on each device of ``mesh`` (all of them without a mesh),
    from the model file's config alone (no weights read): each parameter's shard under the
    project's sharding rules, in ``dtype``."""
    from flax import nnx

    from jaxjudge.models import sharding
    from jaxjudge.models.config import config_from_hf
    from jaxjudge.models.convert import abstract_model
    from jaxjudge.models.gguf import gguf_shape_config
    from jaxjudge.models.hf import read_config, resolve_source

    path = Path(path)
    hf = gguf_shape_config(path) if path.is_file() else read_config(resolve_source(path))
    _, state = nnx.split(abstract_model(config_from_hf(hf), dtype))
    return sharding.bytes_per_device(state, mesh)


def device_memory(device: Any) -> tuple[int | None, str]:
    """A device's memory in bytes and what it is: an accelerator's own memory, or for a CPU
    device the host's RAM (shared by every CPU device of the process)."""
    try:
        stats = device.memory_stats()
    except Exception:  # some backends have no memory statistics
        stats = None
    if stats and stats.get("bytes_limit"):
        return int(stats["bytes_limit"]), f"{device.device_kind}"
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None, "unknown"
    return int(ram), "host RAM"


def check_fits(name: str, path: str | Path, dtype: Any, mesh: Any = None, *,
               memory: int | None = None, what: str | None = None) -> int:
    """Refuses, in one line and before any weights load, a judge whose parameters would take more
    than `FIT_FRACTION` of each device's memory on ``mesh``.

    On CPU devices (which share the host's RAM) the parameters of every device of the mesh on
    this host count against the RAM together. ``memory`` (bytes per device) and ``what`` override
    what the devices report.

    Returns:
      The parameter bytes per device.

    Raises:
      ConfigError: naming the model, the bytes it needs per device, the mesh and the memory.
    """
    per_device = parameter_bytes_per_device(path, dtype, mesh)
    local = [d for d in (np.asarray(mesh.devices).flat if mesh is not None else jax.local_devices()[:1])
             if d.process_index == jax.process_index()]
    if memory is None:
        memory, what = device_memory(local[0])
        if memory is None:
            return per_device
        shared = local[0].platform == "cpu"
    else:
        shared, what = False, what or "given"
    need = per_device * (len(local) if shared else 1)
    if need > FIT_FRACTION * memory:
        shape = "no mesh (one device)" if mesh is None else str({k: int(v) for k, v in mesh.shape.items()})
        where = (f"{len(local)} CPU devices share {memory / 2**30:.2f} GiB of host RAM" if shared else
                 f"each device has {memory / 2**30:.2f} GiB ({what})")
        raise ConfigError(f"model {name!r}: its parameters need {per_device / 2**30:.2f} GiB per device "
                          f"({per_device} bytes) in {jax.numpy.dtype(dtype).name} "
                          f"on mesh {shape}; {where}, of which at most {FIT_FRACTION:.0%} may hold parameters. "
                          "Use a larger 'model' axis, bfloat16, or more devices")
    return per_device
