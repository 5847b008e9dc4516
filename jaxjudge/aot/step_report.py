"""What a compiled step says: `StepReport`, read from a program compiled by
`jaxjudge.aot.compile` (its memory analysis, its HLO's collectives and roofline, XLA's cost
analysis), and `combine` for steps the engine runs one after the other.

A compiled program and a cost model that is a bound, never a measurement (`jaxjudge.aot.cost`).
A step fits when the program's own memory is within the chip's usable HBM: the machine model's
fit rule (`jaxjudge.models.machine.fits`) with no spare, since the figure is the compiled
program's, not an estimate.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from jaxjudge.aot import cost as _cost
from jaxjudge.aot import hlo as _hlo
from jaxjudge.aot import roofline as _roofline
from jaxjudge.models.machine import Chip, fits

__all__ = ["StepReport", "ProgramCost", "step_report", "combine"]


@dataclasses.dataclass
class StepReport:
    """What the compiled program of one step says (bytes and flops per chip unless named).

    ``hbm_copy_bytes`` is read from the full-depth program's HLO (`jaxjudge.aot.hlo.hbm_copy_bytes`):
    what its copy instructions write to HBM per run, layout changes XLA inserted (each also read
    back); it is inside ``bytes_accessed``, not added to it. ``cost_from`` says which programs
    ``flops_compiled`` and ``bytes_accessed`` were read from (``"full depth unrolled"``: the step
    with its layers unrolled; ``"2-3 unrolled layers, extrapolated"``: from the step with 2 and 3).
    """

    step: str
    topology: str
    mesh: dict[str, int]
    chips: int
    layers: int
    groups: int
    fits: bool
    hbm_per_chip: int
    hbm_capacity: int
    bytes: dict[str, int]
    collectives: dict[str, int]
    collective_bytes: dict[str, int]
    flops_useful: float
    flops_compiled: float
    bytes_accessed: float
    peak_flops: float
    hbm_bandwidth: float
    ici_link_bandwidth: float
    compute_seconds: float
    hbm_seconds: float
    ici_seconds: float
    roofline_seconds: float
    seconds_overlapped: float
    seconds_serialised: float
    hbm_bound_seconds: float
    mfu_bound: tuple[float, float]
    compile_seconds: float
    hbm_bytes: float = 0.0
    hlo_flops: float = 0.0
    kernel_flops: float = 0.0  # per chip: the Pallas kernels', counted from their blocks
    roofline_global_seconds: float = 0.0
    hbm_bound_share: float = 0.0
    hbm_copy_bytes: int = 0
    cost_from: str = ""
    attention: str = "xla"
    ici_seconds_by_kind: dict[str, float] = dataclasses.field(default_factory=dict)
    slices: int = 1
    chips_per_program: int | None = None
    slice_transfers: dict[str, int] = dataclasses.field(default_factory=dict)
    slice_transfer_bytes: dict[str, int] = dataclasses.field(default_factory=dict)
    note: str = ("compiled program and a cost model that is a bound, not a measurement (jaxjudge.aot.cost): "
                 "flops_compiled and bytes_accessed are XLA:TPU's cost analysis, plus the splash kernels' flops "
                 "counted from the blocks they compute; roofline_seconds = the program's instructions one after "
                 "another, each max(its flops at peak, its HBM bytes at HBM bandwidth), summed over every run "
                 "(jaxjudge.aot.roofline; hlo_flops and hbm_bytes per chip, x chips for hlo_flops, read from the "
                 "full-depth program's HLO: dots and convolutions, arrays in HBM only); roofline_global_seconds = "
                 "max(flops_compiled at peak, bytes_accessed at HBM bandwidth), the earlier model, for comparison "
                 "(XLA's bytes_accessed counts on-chip arrays too); ici_seconds = every collective by a ring formula over the axis its replica groups "
                 "name, plus a latency per ring step; seconds_overlapped = max(roofline, ici), seconds_serialised "
                 "= roofline + ici; mfu_bound = [useful flops / (chips x peak x serialised), ... overlapped]: "
                 "upper bounds on MFU, uncalibrated; hbm_capacity is the usable HBM, not nominal; over several "
                 "slices each program is one slice's (chips_per_program) and slice_transfers are its sends over "
                 "the data-centre network, not in ici_seconds")

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class ProgramCost:
    """A compiled program's flops and bytes accessed per chip, as XLA's cost analysis counts them."""

    flops: float  # per chip, the kernels' included
    bytes_accessed: float  # per chip
    kernel_flops: float = 0.0  # per chip: the Pallas kernels'

    @classmethod
    def of(cls, compiled, kernel_flops: float = 0.0) -> "ProgramCost":
        """XLA's cost analysis of a compiled program, plus the flops of its Pallas kernels."""
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        return cls(float(cost.get("flops", 0.0)) + kernel_flops, float(cost.get("bytes accessed", 0.0)), kernel_flops)


def step_report(step: str, compiled, seconds: float, cost: ProgramCost, *, topology: str, mesh, chip: Chip, layers: int,
                groups: int, useful: float, dump: str | None, cost_from: str, attention: str,
                collectives_from: Any = None, trips: int | None = None) -> StepReport:
    """What the compiled program of one step says, and its cost model.

    ``collectives_from`` (default ``compiled``): the program whose collectives, copies and
    per-instruction roofline are counted, a collective or copy in a loop body ``trips`` times
    (default ``layers``: the only loops are the layer scans; the roofline reads each loop's
    trip count from its condition, a loop with no constant bound, the decoding loop, once)."""
    mem = compiled.memory_analysis()
    text = compiled.as_text()
    if dump:
        os.makedirs(dump, exist_ok=True)
        with open(os.path.join(dump, f"{step}.hlo.txt"), "w") as f:
            f.write(text)
    if collectives_from is not None:
        text = collectives_from.as_text()
    loop_trips = layers if trips is None else trips
    found = _hlo.collectives(text, loop_trips=loop_trips)
    chips = int(mesh.devices.size)
    topo = _cost.topology(topology)
    flat = list(mesh.devices.flat)
    coords = ([tuple(d.coords) for d in flat] if all(hasattr(d, "coords") for d in flat)
              else [topo.coords(i) for i in range(len(flat))])
    slices = len({getattr(d, "slice_index", 0) for d in flat})
    across = _hlo.slice_transfers(text, loop_trips=loop_trips)
    ici_by_kind = dict.fromkeys(_hlo.COLLECTIVE_KINDS, 0.0)
    for c in found:
        replica = _cost.replica_groups(c.line) or [list(range(chips))]
        ici_by_kind[c.kind] += c.times * _cost.collective_seconds(c.kind, c.bytes, replica[0], topo, coords)
    nbytes = {"argument": int(mem.argument_size_in_bytes), "temp": int(mem.temp_size_in_bytes),
              "output": int(mem.output_size_in_bytes), "alias": int(mem.alias_size_in_bytes),
              "code": int(mem.generated_code_size_in_bytes)}
    hbm = nbytes["argument"] + nbytes["output"] - nbytes["alias"] + nbytes["temp"] + nbytes["code"]
    coll_bytes = _hlo.bytes_by_kind(found)
    compute_s = cost.flops / chip.peak_flops
    hbm_s = cost.bytes_accessed / chip.hbm_bandwidth
    ici_s = sum(ici_by_kind.values())
    # A program whose loops are the layer scans reads their trips from the loop conditions; the
    # decoding loop (layers unrolled, ``trips`` given) is costed per iteration, whatever its bound.
    fused = _roofline.roofline(text, chip.peak_flops, chip.hbm_bandwidth, default_trips=1,
                               kernel_flops=cost.kernel_flops, read_trips=trips is None)
    roof = fused.seconds
    overlapped, serialised = max(roof, ici_s), roof + ici_s
    usable = chip.usable_hbm

    def mfu(seconds: float) -> float:
        return float(useful) / (chips * chip.peak_flops * seconds) if seconds > 0 else 0.0
    return StepReport(
        step=step, topology=topology, mesh={k: int(v) for k, v in mesh.shape.items()}, chips=chips, layers=layers,
        groups=groups, fits=fits(hbm, chip.memory, spare=0.0), hbm_per_chip=hbm, hbm_capacity=usable, bytes=nbytes,
        collectives=_hlo.count_by_kind(found), collective_bytes=coll_bytes, flops_useful=float(useful),
        flops_compiled=cost.flops * chips, bytes_accessed=cost.bytes_accessed, peak_flops=chip.peak_flops,
        hbm_bandwidth=chip.hbm_bandwidth, ici_link_bandwidth=topo.links.bandwidth, compute_seconds=compute_s,
        hbm_seconds=hbm_s, ici_seconds=ici_s, roofline_seconds=roof, seconds_overlapped=overlapped,
        seconds_serialised=serialised, hbm_bound_seconds=nbytes["argument"] / chip.hbm_bandwidth,
        mfu_bound=(mfu(serialised), mfu(overlapped)), compile_seconds=seconds, hbm_bytes=fused.hbm_bytes,
        hlo_flops=fused.flops * chips, kernel_flops=cost.kernel_flops, roofline_global_seconds=max(compute_s, hbm_s), hbm_bound_share=fused.hbm_bound_share,
        hbm_copy_bytes=_hlo.hbm_copy_bytes(text, loop_trips=loop_trips), cost_from=cost_from, attention=attention,
        ici_seconds_by_kind=ici_by_kind, slices=slices, chips_per_program=_hlo.partitions(text),
        slice_transfers={k: sum(c.times for c in across if c.kind == k) for k in sorted({c.kind for c in across})},
        slice_transfer_bytes={k: sum(c.bytes * c.times for c in across if c.kind == k)
                              for k in sorted({c.kind for c in across})})


def combine(name: str, parts: list[StepReport]) -> StepReport:
    """Steps the engine runs one after the other (a prefill, then the reads) as one report: flops,
    bytes, collectives and every time term add up; the memory is the larger step's; the MFU
    bound is recomputed from the sums."""
    first = parts[0]

    def add(field: str) -> float:
        return sum(getattr(p, field) for p in parts)

    useful, serialised, overlapped = add("flops_useful"), add("seconds_serialised"), add("seconds_overlapped")
    denom = first.chips * first.peak_flops
    return dataclasses.replace(
        first, step=name, fits=all(p.fits for p in parts), hbm_per_chip=max(p.hbm_per_chip for p in parts),
        bytes={k: max(p.bytes[k] for p in parts) for k in first.bytes},
        collectives={k: sum(p.collectives[k] for p in parts) for k in first.collectives},
        collective_bytes={k: sum(p.collective_bytes[k] for p in parts) for k in first.collective_bytes},
        ici_seconds_by_kind={k: sum(p.ici_seconds_by_kind[k] for p in parts) for k in first.ici_seconds_by_kind},
        flops_useful=useful, flops_compiled=add("flops_compiled"), bytes_accessed=add("bytes_accessed"),
        compute_seconds=add("compute_seconds"), hbm_seconds=add("hbm_seconds"), ici_seconds=add("ici_seconds"),
        roofline_seconds=add("roofline_seconds"), seconds_overlapped=overlapped, seconds_serialised=serialised,
        hbm_bound_seconds=add("hbm_bound_seconds"), hbm_copy_bytes=int(add("hbm_copy_bytes")),
        hbm_bytes=add("hbm_bytes"), hlo_flops=add("hlo_flops"), kernel_flops=add("kernel_flops"),
        roofline_global_seconds=add("roofline_global_seconds"),
        hbm_bound_share=(sum(p.hbm_bound_share * p.roofline_seconds for p in parts) / add("roofline_seconds")
                         if add("roofline_seconds") else 0.0),
        mfu_bound=(useful / (denom * serialised) if serialised else 0.0, useful / (denom * overlapped) if overlapped else 0.0),
        compile_seconds=add("compile_seconds"), cost_from=" + ".join(f"{p.step}: {p.cost_from}" for p in parts))
