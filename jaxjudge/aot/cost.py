"""The cost model of `jaxjudge aot`: a bound on a compiled TPU step's time, never a measurement.

What it is
----------
For one step on one chip (every chip runs the same SPMD program):

- **roofline**: summed over the program's instructions, each its own max(its dot and
  convolution flops at the chip's published peak dense bf16 rate, every matmul at 100%; the
  bytes of its arrays in HBM at the published bandwidth), read from the full-depth program's HLO
  (`jaxjudge.aot.roofline`, which says what it counts); the Pallas kernels' flops are counted
  from their blocks. (The report keeps the older global max(XLA's compiled flops at peak, XLA's
  bytes accessed at the bandwidth) beside it, ``roofline_global_seconds``: XLA's bytes count
  arrays held on chip too, so that one is no bound.)
- **ICI**: each collective of the HLO priced by a ring formula over the mesh axis its replica
  groups name (`collective_seconds`), plus a latency per ring step;
- the time lies between **overlapped** = max(roofline, ICI) (collectives entirely hidden behind
  compute) and **serialised** = roofline + ICI (nothing hidden). MFU = useful flops over chips x
  peak x time is therefore a range ``[serialised, overlapped]`` of *bounds*: a real run is
  slower than both wherever a matmul misses peak, a fusion is latency-bound, or XLA's schedule
  leaves gaps; with no TPU at hand none of this is calibrated.

Collectives over a ring
-----------------------
An axis of ``n`` chips along one dimension of the slice with links of ``B`` bytes/s per
direction between neighbours. With a wraparound link the axis is a ring and a collective runs
two counter-rotating rings, each carrying half the data; without one (a line) a ring embedded
in the line uses each link once in each direction, so one ring at ``B``. For ``S`` result bytes
per chip (``S`` = the all-reduced array; the gathered array for an all-gather; the scattered
input, n x the result, for a reduce-scatter):

- all-reduce: ``2 (n - 1) / n x S / (k B)`` with ``k`` = 2 on a ring, 1 on a line;
- all-gather and reduce-scatter: ``(n - 1) / n x S / (k B)``;
- each ring step adds `LATENCY_PER_STEP` (``2 (n - 1)`` steps for an all-reduce, ``n - 1``
  otherwise).

A group spanning several dimensions (``model`` = 8 over a 2 x 4 slice) is priced as one ring
per dimension in turn (reduce-scatter along the first, then the next on 1/n_1 of the data, and
the all-gathers back), which is what a torus all-reduce does.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence

from jaxjudge.models.machine import CHIPS, Chip

__all__ = ["LATENCY_PER_STEP", "LINKS", "Links", "Topology", "TOPOLOGIES", "topology", "replica_groups",
           "collective_seconds", "group_dims"]

# A chosen figure, not a vendor's: seconds each ring step of a collective adds (synchronisation
# and one hop). Public TPU material gives no per-hop figure; 1 microsecond is the order of ICI
# collective latencies reported for small messages. Small next to the bandwidth term for the
# megabyte activations of a scoring step; it decides only for tiny collectives.
LATENCY_PER_STEP = 1e-6


@dataclasses.dataclass(frozen=True)
class Links:
    """Inter-chip links of one TPU generation.

    Attributes:
        per_chip: ICI links of a chip (4: a 2-D torus; 6: a 3-D torus).
        bandwidth: bytes/s of one link in one direction.
        wrap_at: an axis has a wraparound link when its length is a multiple of this (None: never).
        source: where the figures come from.
    """

    per_chip: int
    bandwidth: float
    wrap_at: int | None
    source: str


LINKS: dict[str, Links] = {
    # cloud.google.com/tpu/docs/v5e: 1,600 Gbps ICI per chip, a 2-D torus of 4 links per chip
    # (16 x 16 pod): 400 Gbps = 50 GB/s per link and direction. Wraparound only along a full
    # pod dimension of 16 chips: a slice such as 2 x 4 is a mesh of lines.
    "v5e": Links(4, 1600e9 / 8 / 4, 16,
                 "v5e docs: 1,600 Gbps ICI per chip over 4 links; torus links only on 16-chip axes"),
    # cloud.google.com/tpu/docs/v5p: 4,800 Gbps ICI per chip, a 3-D torus of 6 links per chip:
    # 800 Gbps = 100 GB/s per link and direction; slices built of whole 4 x 4 x 4 cubes have
    # wraparound links (an axis whose length is a multiple of 4).
    "v5p": Links(6, 4800e9 / 8 / 6, 4,
                 "v5p docs: 4,800 Gbps ICI per chip over 6 links; wraparound on axes of whole 4-chip cubes"),
    # cloud.google.com/tpu/docs/v6e: 3,584 Gbps ICI per chip, a 2-D torus of 4 links per chip:
    # 896 Gbps = 112 GB/s per link and direction; wraparound on full 16-chip axes only.
    "v6e": Links(4, 3584e9 / 8 / 4, 16,
                 "v6e docs: 3,584 Gbps ICI per chip over 4 links; torus links only on 16-chip axes"),
}


@dataclasses.dataclass(frozen=True)
class Topology:
    """One slice a user rents, as libtpu names it (``v5e:2x4``).

    Attributes:
        name: the topology string.
        chip: the generation's published figures.
        links: its link layout.
        shape: chips along each dimension (``(2, 4)``).
        wraparound: per dimension, whether the axis closes into a ring.
        host_bounds: chips per host along each of 3 dimensions (libtpu's ``chips_per_host_bounds``).
        slices: slices joined over the data-centre network (1 here: ICI only).
    """

    name: str
    chip: Chip
    links: Links
    shape: tuple[int, ...]
    wraparound: tuple[bool, ...]
    host_bounds: tuple[int, int, int]
    slices: int = 1

    @property
    def chips(self) -> int:
        return math.prod(self.shape)

    @property
    def hosts(self) -> int:
        return self.chips // math.prod(self.host_bounds)

    @property
    def accelerator_type(self) -> str:
        """The slice's Cloud TPU accelerator type (``v5litepod-8``; v5p counts TensorCores, two a chip)."""
        gen = self.chip.name
        if gen == "v5e":
            return f"v5litepod-{self.chips}"
        if gen == "v5p":
            return f"v5p-{2 * self.chips}"
        return f"{gen}-{self.chips}"

    def coords(self, index: int) -> tuple[int, ...]:
        """Physical coordinates of chip ``index`` (row-major over ``shape``, the first dimension fastest
        as libtpu numbers a slice's chips)."""
        out = []
        for n in self.shape:
            out.append(index % n)
            index //= n
        return tuple(out)


# Single-host slices (cloud.google.com/tpu/docs, "TPU versions" pages): v5e and v6e machines of
# 1, 4 and 8 chips (ct5lp-hightpu-1t/4t/8t, ct6e-standard-1t/4t/8t) hold the whole slice on one
# host (2 x 4 for 8 chips); larger v5e/v6e slices are hosts of 4 chips (2 x 2). Every v5p host
# holds 4 chips (2 x 2 x 1).
def _host_bounds(gen: str, shape: tuple[int, ...]) -> tuple[int, int, int]:
    chips = math.prod(shape)
    if gen in ("v5e", "v6e") and chips <= 8:
        return (shape[0], shape[1] if len(shape) > 1 else 1, 1)
    return (2, 2, 1)


def topology(name: str) -> Topology:
    """The `Topology` of a name such as ``v5e:2x4`` or ``v5p:4x4x4``.

    Raises:
        ValueError: naming the topology when its generation or shape is not understood.
    """
    gen, _, dims = name.partition(":")
    gen = gen.strip().lower()
    if gen not in CHIPS or gen not in LINKS:
        raise ValueError(f"topology {name!r}: no figures for {gen!r}; known: {sorted(LINKS)}")
    try:
        shape = tuple(int(x) for x in dims.lower().split("x"))
    except ValueError:
        raise ValueError(f"topology {name!r}: the shape after ':' must be like 2x4 or 4x4x4") from None
    want = 3 if gen == "v5p" else 2
    if len(shape) != want or min(shape) < 1:
        raise ValueError(f"topology {name!r}: a {gen} slice has {want} dimensions")
    links = LINKS[gen]
    wrap = tuple(links.wrap_at is not None and n > 2 and n % links.wrap_at == 0 for n in shape)
    return Topology(name, CHIPS[gen], links, shape, wrap, _host_bounds(gen, shape))


TOPOLOGIES: dict[str, Topology] = {n: topology(n) for n in (
    "v5e:1x1", "v5e:2x2", "v5e:2x4", "v5e:4x4", "v5e:4x8", "v5e:8x8", "v5e:8x16", "v5e:16x16",
    "v6e:1x1", "v6e:2x2", "v6e:2x4", "v6e:4x4", "v6e:4x8", "v6e:8x8", "v6e:8x16", "v6e:16x16",
    "v5p:2x2x1", "v5p:2x2x2", "v5p:2x2x4", "v5p:2x4x4", "v5p:4x4x4", "v5p:4x4x8", "v5p:8x8x8")}


_LIST = re.compile(r"replica_groups=\{((?:\{[\d,\s]*\},?\s*)*)\}")
_IOTA = re.compile(r"replica_groups=\[([\d,]+)\]<=\[([\d,]+)\](?:T\(([\d,]+)\))?")


def replica_groups(line: str) -> list[list[int]] | None:
    """The replica groups of one HLO collective line, or None when it names none.

    Both spellings: ``{{0,1},{2,3}}`` and the iota form ``[G,S]<=[dims]T(perm)`` (the ids
    ``0..prod(dims)-1`` laid out as ``dims``, transposed by ``perm``, read as G groups of S).
    """
    m = _LIST.search(line)
    if m:
        groups = [[int(x) for x in g.split(",") if x.strip()] for g in re.findall(r"\{([\d,\s]*)\}", m.group(1))]
        return [g for g in groups if g] or None
    m = _IOTA.search(line)
    if not m:
        return None
    out_shape = [int(x) for x in m.group(1).split(",")]
    dims = [int(x) for x in m.group(2).split(",")]
    perm = [int(x) for x in m.group(3).split(",")] if m.group(3) else list(range(len(dims)))
    ids = list(range(math.prod(dims)))
    # transpose: element at transposed index t comes from the original index with axes permuted
    strides = [math.prod(dims[i + 1:]) for i in range(len(dims))]
    tdims = [dims[p] for p in perm]
    flat = []
    for t in range(len(ids)):
        rest, idx = t, [0] * len(tdims)
        for i in range(len(tdims) - 1, -1, -1):
            idx[i] = rest % tdims[i]
            rest //= tdims[i]
        flat.append(sum(idx[i] * strides[perm[i]] for i in range(len(perm))))
    size = out_shape[-1]
    return [flat[i:i + size] for i in range(0, len(flat), size)]


def group_dims(group: Sequence[int], coords: Sequence[tuple[int, ...]]) -> list[int]:
    """The physical dimensions along which the chips of one replica group differ."""
    points = [coords[i] for i in group]
    return [d for d in range(len(points[0])) if len({p[d] for p in points}) > 1]


def _ring(kind: str, nbytes: float, n: int, bandwidth: float) -> tuple[float, int]:
    """(seconds at the bandwidth, ring steps) of one collective of ``nbytes`` over ``n`` chips."""
    if n <= 1:
        return 0.0, 0
    if kind == "all-reduce":
        return 2 * (n - 1) / n * nbytes / bandwidth, 2 * (n - 1)
    return (n - 1) / n * nbytes / bandwidth, n - 1


def collective_seconds(kind: str, nbytes: float, group: Sequence[int], topo: Topology,
                       coords: Sequence[tuple[int, ...]] | None = None,
                       latency: float = LATENCY_PER_STEP) -> float:
    """Modelled seconds of one collective (see the module docstring for the formulas).

    Args:
        kind: ``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all`` or
            ``collective-permute``.
        nbytes: for an all-reduce the array's bytes per chip; for an all-gather its result's;
            for a reduce-scatter its result's (the input is n times that).
        group: the chips (device ids) of one replica group.
        topo: the slice.
        coords: physical coordinates per device id (default: `Topology.coords` of the id).
        latency: seconds per ring step.
    """
    n = len(group)
    if n <= 1:
        return 0.0
    coords = coords if coords is not None else [topo.coords(i) for i in range(topo.chips)]
    bw = topo.links.bandwidth
    if kind == "collective-permute":  # one hop to a neighbour
        return nbytes / bw + latency
    if kind == "all-to-all":  # priced as an all-gather of the same bytes (every chip's share goes out)
        return (n - 1) / n * nbytes / bw + (n - 1) * latency
    dims = group_dims(group, coords) or [0]
    total_bytes = nbytes * n if kind == "reduce-scatter" else nbytes  # the full array the ring moves
    seconds, steps, share = 0.0, 0, total_bytes
    for d in dims:
        length = len({coords[i][d] for i in group})
        k = 2 if topo.wraparound[d] else 1
        s, st = _ring(kind, share, length, k * bw)
        seconds, steps, share = seconds + s, steps + st, share / length
    return seconds + steps * latency
