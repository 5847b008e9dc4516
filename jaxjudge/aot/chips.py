"""Published per-chip figures of the TPU generations `jaxjudge aot` models.

These are vendor figures, not measurements: peak dense bfloat16 matmul throughput, HBM capacity
and bandwidth, and inter-chip interconnect bandwidth per chip, as Google Cloud's TPU
documentation states them (system architecture pages of TPU v5e, v5p and v6e, read 2026-12).
Capacities are GiB as the pages give them; bandwidths bytes per second.
"""

from __future__ import annotations

import dataclasses

__all__ = ["Chip", "CHIPS", "chip_for_topology"]

GIB = 1 << 30


@dataclasses.dataclass(frozen=True)
class Chip:
    """One TPU generation's published figures (per chip).

    Attributes:
        name: the generation as topology strings name it (``v5e``).
        peak_flops: dense bfloat16 FLOP/s.
        hbm_bytes: HBM capacity in bytes.
        hbm_bandwidth: HBM bytes/s.
        ici_bandwidth: inter-chip interconnect bytes/s (all links of one chip together).
        source: where the figures come from.
    """

    name: str
    peak_flops: float
    hbm_bytes: int
    hbm_bandwidth: float
    ici_bandwidth: float
    source: str


CHIPS: dict[str, Chip] = {
    "v5e": Chip("v5e", 197e12, 16 * GIB, 819e9, 1600e9 / 8,
                "cloud.google.com/tpu/docs/v5e: 197 TFLOP/s bf16, 16 GiB HBM2 at 819 GB/s, ICI 1,600 Gbps"),
    "v5p": Chip("v5p", 459e12, 95 * GIB, 2765e9, 4800e9 / 8,
                "cloud.google.com/tpu/docs/v5p: 459 TFLOP/s bf16, 95 GiB HBM2e at 2,765 GB/s, ICI 4,800 Gbps"),
    "v6e": Chip("v6e", 918e12, 32 * GIB, 1640e9, 3584e9 / 8,
                "cloud.google.com/tpu/docs/v6e: 918 TFLOP/s bf16, 32 GiB HBM at 1,640 GB/s, ICI 3,584 Gbps"),
}


def chip_for_topology(topology: str) -> Chip:
    """The chip of a topology string such as ``v5e:2x4``.

    Raises:
        ValueError: naming the generation when the table has no figures for it.
    """
    name = topology.split(":", 1)[0].strip().lower()
    if name not in CHIPS:
        raise ValueError(f"topology {topology!r}: no chip figures for {name!r}; known: {sorted(CHIPS)}")
    return CHIPS[name]
