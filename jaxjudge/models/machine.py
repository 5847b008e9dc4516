"""One model of the machine: what a chip is, what a judge's parameters take on each chip of a
mesh, and whether a program's bytes fit. The mesh planner (`jaxjudge.models.mesh_plan`), the fit
check before a judge loads (`jaxjudge.experiment.hardware.check_fits`), ``--dry-run`` and
`jaxjudge aot` all ask it.

Chips
-----
`CHIPS` holds each TPU generation's published per-chip figures (peak dense bfloat16 matmul
throughput, HBM capacity and bandwidth, inter-chip interconnect bandwidth), as Google Cloud's TPU
documentation states them (system architecture pages of TPU v5e, v5p and v6e, read 2026-12):
vendor figures, not measurements. Capacities are GiB as the pages give them; bandwidths bytes
per second.

Beside them each chip's usable HBM: what libtpu reports as "available HBM" when a program
exceeds it (RESOURCE_EXHAUSTED: ... exceeds available HBM (15.75G)), measured on a CPU host with
libtpu 0.0.42.1 (jax 0.10.2) describing each topology (`jax.experimental.topologies`). The unit
is GiB: the largest donated float32 array that compiles on one chip, found by bisection to
1 MiB, was 15.748 GiB (v5e), 95.743 GiB (v5p) and 31.246 GiB (v6e). The printed figure has two
decimals. The v6e figure agrees with the per-device memory a running v6e chip reported
(33,550,237,696 bytes, 31.25 GiB, in the usage log of vllm-project/vllm pull request 16211).

A device of this process (`chip_memory`): its runtime's ``memory_stats()["bytes_limit"]`` where
it reports one, else the table's usable HBM by its kind, else for CPU devices the host's RAM,
shared by every CPU device of the process.

The fit rule
------------
`fits`: a chip may hold (1 - `SPARE`) of its usable memory (`budget`), divided among the devices
that share it (CPU devices of one process). The planner's estimate of parameters, KV cache and
activations and the pre-load check of the parameters alone both ask it with `SPARE`; `jaxjudge
aot` asks it with no spare for the compiled program's own memory analysis, which is the
program's figure, not an estimate.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import AbstractMesh, AxisType

from jaxjudge.models.convert import abstract_model
from jaxjudge.models.decoder_config import DecoderConfig
from jaxjudge.models.sharding import logical_spec

__all__ = ["GIB", "SPARE", "Chip", "CHIPS", "chip_for_topology", "ChipMemory", "usable_memory", "chip_memory",
           "budget", "fits", "abstract_state", "parameter_bytes", "model_axis"]

GIB = 1 << 30
SPARE = 0.10
"""The share of a chip's usable memory a plan leaves free (fragmentation, XLA's own buffers)."""


@dataclasses.dataclass(frozen=True)
class ChipMemory:
    """What one chip may use, and where the figure comes from.

    Attributes:
        kind: the chip (``v5e``, ``cpu``, a device kind).
        usable_bytes: bytes a program may use on one chip (for CPU devices: the host RAM they share).
        source: where ``usable_bytes`` comes from.
        shared: whether every device of a process shares the memory (CPU devices: their
            parameters and caches add up in one RAM).
    """

    kind: str
    usable_bytes: int
    source: str
    shared: bool = False


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation's figures (per chip).

    Attributes:
        name: the generation as topology strings name it (``v5e``).
        peak_flops: dense bfloat16 FLOP/s (published).
        hbm_bytes: HBM capacity in bytes (published).
        hbm_bandwidth: HBM bytes/s (published).
        ici_bandwidth: inter-chip interconnect bytes/s (all links of one chip together, published).
        source: where the published figures come from.
        usable_hbm: bytes of HBM the runtime lets a program use (measured, see the module docstring).
        usable_source: where ``usable_hbm`` comes from.
    """

    name: str
    peak_flops: float
    hbm_bytes: int
    hbm_bandwidth: float
    ici_bandwidth: float
    source: str
    usable_hbm: int
    usable_source: str

    @property
    def memory(self) -> ChipMemory:
        """What a program may use on one chip (`usable_hbm`)."""
        return ChipMemory(self.name, self.usable_hbm, self.usable_source)


CHIPS: dict[str, Chip] = {
    "v5e": Chip("v5e", 197e12, 16 * GIB, 819e9, 1600e9 / 8,
                "cloud.google.com/tpu/docs/v5e: 197 TFLOP/s bf16, 16 GiB HBM2 at 819 GB/s, ICI 1,600 Gbps",
                int(15.75 * GIB), "libtpu 0.0.42.1: available HBM 15.75 GiB of the v5e's 16"),
    "v5p": Chip("v5p", 459e12, 95 * GIB, 2765e9, 4800e9 / 8,
                "cloud.google.com/tpu/docs/v5p: 459 TFLOP/s bf16, 95 GiB HBM2e at 2,765 GB/s, ICI 4,800 Gbps",
                int(95.74 * GIB), "libtpu 0.0.42.1: available HBM 95.74 GiB of the v5p's 95 GiB (vendor figure)"),
    "v6e": Chip("v6e", 918e12, 32 * GIB, 1640e9, 3584e9 / 8,
                "cloud.google.com/tpu/docs/v6e: 918 TFLOP/s bf16, 32 GiB HBM at 1,640 GB/s, ICI 3,584 Gbps",
                int(31.25 * GIB), "libtpu 0.0.42.1: available HBM 31.25 GiB of the v6e's 32"),
}

# `Device.device_kind` of each generation -> its name in topology strings.
_DEVICE_KINDS = {"tpu v5 lite": "v5e", "tpu v5e": "v5e", "tpu v5": "v5p", "tpu v5p": "v5p",
                 "tpu v6 lite": "v6e", "tpu v6e": "v6e"}


def _generation(name: str) -> str:
    """``v5e:2x4`` or ``TPU v5 lite`` -> ``v5e`` (unknown names lower-cased, as given)."""
    name = name.split(":", 1)[0].strip().lower()
    return _DEVICE_KINDS.get(name, name)


def chip_for_topology(topology: str) -> Chip:
    """The chip of a topology string such as ``v5e:2x4``.

    Raises:
        ValueError: naming the generation when the table has no figures for it.
    """
    name = topology.split(":", 1)[0].strip().lower()
    if name not in CHIPS:
        raise ValueError(f"topology {topology!r}: no chip figures for {name!r}; known: {sorted(CHIPS)}")
    return CHIPS[name]


def usable_memory(chip: str) -> ChipMemory:
    """A TPU generation's usable HBM per chip (`Chip.usable_hbm`), by topology name (``v5e:2x4``)
    or device kind (``TPU v5 lite``).

    Raises:
        ValueError: naming the chip when the table has no figure for it.
    """
    name = _generation(chip)
    if name not in CHIPS:
        raise ValueError(f"chip {chip!r}: no usable-memory figure for it; known: {sorted(CHIPS)}")
    return CHIPS[name].memory


def chip_memory(device: Any) -> ChipMemory:
    """What a device of this process may use: its runtime's ``bytes_limit`` where it reports
    one, else `usable_memory` by its kind, else (a CPU device) the host's RAM, shared (0 bytes
    where the host does not say).

    Raises:
        ValueError: an accelerator that reports no limit and whose kind the table lacks.
    """
    try:
        stats = device.memory_stats()
    except Exception:  # noqa: BLE001 - backends without memory statistics
        stats = None
    if device.platform != "cpu" and stats and stats.get("bytes_limit"):
        return ChipMemory(device.device_kind, int(stats["bytes_limit"]),
                          f"{device.device_kind}: the runtime's bytes_limit")
    if device.platform != "cpu":
        return usable_memory(device.device_kind)
    try:
        ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        ram = 0
    return ChipMemory("cpu", int(ram), "host RAM (os.sysconf), shared by the CPU devices", shared=True)


def budget(memory: ChipMemory, *, shared_by: int = 1, spare: float = SPARE) -> int:
    """Bytes one chip may hold: (1 - ``spare``) of its usable memory, divided among the
    ``shared_by`` devices that share it."""
    return int((1 - spare) * memory.usable_bytes / shared_by)


def fits(nbytes: int, memory: ChipMemory, *, shared_by: int = 1, spare: float = SPARE) -> bool:
    """The fit rule: ``nbytes`` on one chip within its `budget`."""
    return nbytes <= budget(memory, shared_by=shared_by, spare=spare)


@functools.lru_cache(maxsize=32)
def abstract_state(cfg: DecoderConfig, dtype: str) -> nnx.State:
    """The abstract parameter state of ``cfg``'s decoder in ``dtype`` (a dtype name), remembered:
    shapes and dtypes only, no memory."""
    _, state = nnx.split(abstract_model(cfg, dtype))
    return state


def model_axis(mesh: Any) -> int:
    """The ``model`` axis size of a mesh (1 without a mesh or without the axis)."""
    return 1 if mesh is None else int(dict(mesh.shape).get("model", 1))


def parameter_bytes(cfg: DecoderConfig, dtype: Any, model: int) -> int:
    """Bytes of ``cfg``'s parameters on each chip of a ``model``-way axis, under the project's
    sharding rules (`jaxjudge.models.sharding`: only the ``model`` axis splits a parameter; a
    dimension the axis does not divide is whole on every chip)."""
    state = abstract_state(cfg, jnp.dtype(dtype).name)
    mesh = AbstractMesh((1, model), ("data", "model"), axis_types=(AxisType.Auto, AxisType.Auto))
    total = 0
    for v in jax.tree.leaves(state, is_leaf=lambda x: isinstance(x, nnx.Variable)):
        shape = tuple(v.shape)
        spec = logical_spec(v.get_metadata().get("out_sharding"), shape, mesh) if isinstance(v, nnx.Variable) \
            else ()
        per = [n // model if i < len(spec) and spec[i] == "model" else n for i, n in enumerate(shape)]
        total += math.prod(per) * jnp.dtype(v.dtype).itemsize
    return total
