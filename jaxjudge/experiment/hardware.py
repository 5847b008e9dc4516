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
    """The config's ``mesh`` over ``devices`` (default: this process's, `jax.local_devices()`; under
    several processes each builds its own mesh and they split the work, see
    `jaxjudge.experiment.distributed`), or None without one.

    Raises:
      ConfigError: the sizes do not fit the devices (naming the field and the device count).
    """
    if cfg.mesh is None:
        return None
    devices = list(jax.local_devices() if devices is None else devices)
    sizes = {"data": 1, "model": 1, **cfg.mesh}
    known = 1
    for v in sizes.values():
        known *= v if v != -1 else 1
    if len(devices) % known:
        raise ConfigError(f"ExperimentConfig.mesh: {dict(cfg.mesh)} needs a multiple of {known} devices, "
                          f"{len(devices)} in this process")
    sizes = {k: (len(devices) // known if v == -1 else v) for k, v in sizes.items()}
    if sizes["data"] * sizes["model"] > len(devices):
        raise ConfigError(f"ExperimentConfig.mesh: {sizes} needs {sizes['data'] * sizes['model']} devices, "
                          f"{len(devices)} in this process")
    return make_mesh(sizes["data"], sizes["model"], devices=devices)
