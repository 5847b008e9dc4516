"""The hardware a config names: its device mesh (checked before any model loads)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax

from jaxjudge.experiment.typed import ConfigError, choose
from jaxjudge.models.sharding import make_mesh

__all__ = ["MESH_AXES", "check_mesh", "mesh_for"]


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

