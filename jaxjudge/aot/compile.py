"""Ahead-of-time compilation of the engine's steps for a TPU slice, on any host.

With ``libtpu`` installed (``pip install -e '.[tpu]'``) JAX describes a TPU topology without a
TPU present (`jax.experimental.topologies.get_topology_desc`), and ``jit(f).lower(...)
.compile()`` on abstract arrays whose shardings live on that topology's devices returns the
program XLA:TPU would run: its per-chip memory, its cost analysis and its HLO. This module
compiles the engine's own steps, the objects `jaxjudge.engine.extract` calls
(`jaxjudge.engine.step.Step`: the same jitted functions with their static and donated
arguments), on abstract arguments placed as the engine places them; nothing here defines a
forward pass:

- ``prefill`` (`jaxjudge.engine.primitives.PREFILL`): P prefix groups (by default one per
  ``data`` shard, as `jaxjudge.engine.extract` reads them) prefilled into a fresh KV cache of
  batch P (padded to the length bucket, the cache to the slot bucket, the cache donated), as
  `jaxjudge.engine.calls.prefill_prefixes` calls it: the prefixes over ``data``, or, with fewer
  groups than data shards, their tokens (each prefix computed once on the slice);
- ``read_rows`` (`jaxjudge.engine.primitives.READ_ROWS`): every group's tails continue their own
  prefix and are read at the answer position (picked log-probabilities, the log-normaliser,
  greedy token and top-k), as `jaxjudge.engine.calls.read_rows` calls it; prefixes and their
  tails split over ``data`` together, so no data shard reads another's prefix (with fewer groups
  than shards, each group's tails over the data / P shards that hold its prefix);
- ``score``: the two above, the engine's scoring step, their costs summed (`combine`);
- ``decode`` (`jaxjudge.engine.decode.DECODE`): the engine's greedy decoding loop for rows whose
  per-row cache (donated) continues one prefix, reported per generated token.

With ``attention="splash"`` the prefill's and the reads' attention is JAX's Pallas splash kernel
(`jaxjudge.models.splash`).

What comes back is a compiled program and a cost model (`StepReport`, `jaxjudge.aot.cost`), never
a measurement of a TPU: a roofline summed over the instructions of the full-depth program
(`jaxjudge.aot.roofline`: each its flops at the chip's peak or its HBM bytes at the published
bandwidth, whichever is longer), the collectives by ring formulas over their mesh axes; MFU a
[serialised, overlapped] range of upper bounds. Memory, collectives and compile time are those
of the full-depth program (its layers scanned). XLA's cost analysis counts a loop body once, so
its flops and bytes accessed come from programs with the layers unrolled: for the decode loop (cheap to
compile) the same loop at full depth, unrolled (its token loop's body, one token); for the
prefill and the reads, extrapolated from the step compiled with 2 and 3 layers unrolled (flops
add up exactly layer by layer; bytes accessed do not quite, since XLA fuses and prefetches
differently in programs of different depths).
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxjudge.aot import cost as _cost
from jaxjudge.aot import flops as _flops
from jaxjudge.aot import hlo as _hlo
from jaxjudge.aot import roofline as _roofline
from jaxjudge.aot.chips import Chip, chip_for_topology
from jaxjudge.aot.tpu import LibtpuMissingError, describe_host_for_libtpu, tpu_devices  # re-exported
from jaxjudge.engine import primitives as _prim
from jaxjudge.engine.decode import DECODE, Greedy
from jaxjudge.engine.step import Step
from jaxjudge.models import decoder as _dec
from jaxjudge.models import sharding as _sh
from jaxjudge.models import splash as _splash
from jaxjudge.models.config import config_from_hf
from jaxjudge.models.convert import abstract_model
from jaxjudge.models.decoder_config import DecoderConfig
from jaxjudge.models.layers import as_dtype

__all__ = ["Workload", "StepReport", "DoesNotFitError", "LibtpuMissingError", "tpu_devices", "aot_compile",
           "combine", "describe_host_for_libtpu"]


class DoesNotFitError(ValueError):
    """The judge's parameters and caches need more HBM per chip than the chip has."""

    def __init__(self, message: str, needed_bytes: int, capacity_bytes: int):
        super().__init__(message)
        self.needed_bytes = needed_bytes
        self.capacity_bytes = capacity_bytes


@dataclasses.dataclass(frozen=True)
class Workload:
    """The shapes of one scoring step and one decode step (SummEval-shaped by default).

    Attributes:
        prefix: tokens of each group's shared prefix (instructions + article).
        tails: continuations of each prefix scored in one step (a document's summaries).
        groups: prefix groups in one scoring step (None: one per ``data`` shard).
        tail_len: tokens of each continuation.
        candidates: score candidates picked per row (K).
        topk: top-k recorded at the answer position.
        decode_rows: rows of a decode step.
        decode_len: tokens generated per row (the decode step is the last of them).
    """

    prefix: int = 700
    tails: int = 16
    tail_len: int = 120
    groups: int | None = None
    candidates: int = 5
    topk: int = 5
    decode_rows: int = 16
    decode_len: int = 16


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


def _config(hf: dict[str, Any], layers: int | None) -> DecoderConfig:
    if layers is not None:
        hf = {**hf, "num_hidden_layers": int(layers)}
        if hf.get("max_window_layers") is not None:  # Qwen: windowed from this layer on
            hf["max_window_layers"] = min(hf["max_window_layers"], int(layers))
    return config_from_hf(hf)


def _sds(tree: Any, shardings: Any) -> Any:
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def _abstract_state(cfg: DecoderConfig, dtype: jnp.dtype, mesh, unroll: bool = False, attention: str = "xla"
                    ) -> tuple[nnx.GraphDef, Any, int]:
    """The decoder's graphdef, its abstract state on the mesh, and its parameter bytes per chip
    (``unroll``: the layer scan unrolled, for the cost programs; ``attention="splash"``: the
    attention through the Pallas splash kernel where it serves, `jaxjudge.models.splash`)."""
    # Built for the TPU, though traced on a CPU host: the decoder reads its target here, never
    # the default backend while tracing, so the CPU tunings are off.
    model = abstract_model(cfg, dtype, scan_unroll=cfg.num_hidden_layers if unroll else 1, target="tpu")
    if attention == "splash":
        _splash.use_kernel(model, _splash.SplashKernel(mesh=mesh))
    elif attention != "xla":
        raise ValueError(f"attention must be 'xla' or 'splash', got {attention!r}")
    graphdef, abstract = nnx.split(model)
    shardings = _sh.param_shardings(abstract, mesh)
    state = jax.tree.map(lambda v, s: v.replace(jax.ShapeDtypeStruct(tuple(v.shape), v.dtype, sharding=s)),
                         abstract, shardings, is_leaf=lambda x: isinstance(x, nnx.Variable))
    return graphdef, state, _sh.bytes_per_device(abstract, mesh)


def _cache_sds(cfg: DecoderConfig, batch: int, slots: int, dtype: jnp.dtype, mesh) -> _dec.KVCache:
    # A cache the step reads (a row cache being decoded into, a prefix): not the fresh one
    # init_cache describes, whose slots a forward would skip.
    cache = dataclasses.replace(jax.eval_shape(lambda: _dec.init_cache(cfg, batch, slots, dtype)), empty=False)
    return _sds(cache, _sh.cache_sharding(mesh, cache))


def _nbytes_per_chip(tree: Any) -> int:
    return sum(math.prod(x.sharding.shard_shape(x.shape)) * jnp.dtype(x.dtype).itemsize
               for x in jax.tree.leaves(tree))


def _compile(step: Step, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, float, float]:
    """One engine step lowered (`Step.lower`: its own static and donated arguments) and compiled:
    the program, its seconds, and the flops of the Pallas kernels it calls (per chip; XLA's cost
    analysis does not count them, `jaxjudge.models.splash.count_flops`)."""
    t0 = time.perf_counter()
    with _splash.count_flops() as kernels:
        lowered = step.lower(*args, **kwargs)
    compiled = lowered.compile()
    return compiled, time.perf_counter() - t0, kernels[0]


@dataclasses.dataclass(frozen=True)
class _Cost:
    flops: float  # per chip, the kernels' included
    bytes_accessed: float  # per chip
    kernel_flops: float = 0.0  # per chip: the Pallas kernels'

    @classmethod
    def of(cls, compiled, kernel_flops: float = 0.0) -> "_Cost":
        """XLA's cost analysis of a compiled program, plus the flops of its Pallas kernels."""
        cost = compiled.cost_analysis()
        cost = cost[0] if isinstance(cost, (list, tuple)) else cost
        return cls(float(cost.get("flops", 0.0)) + kernel_flops, float(cost.get("bytes accessed", 0.0)), kernel_flops)


def _report(step: str, compiled, seconds: float, cost: _Cost, *, topology: str, mesh, chip: Chip, layers: int,
            groups: int, useful: float, dump: str | None, cost_from: str, attention: str,
            collectives_from: Any = None, trips: int | None = None) -> StepReport:
    """``collectives_from`` (default ``compiled``): the program whose collectives, copies and
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
    usable = topo.links.usable_hbm

    def mfu(seconds: float) -> float:
        return float(useful) / (chips * chip.peak_flops * seconds) if seconds > 0 else 0.0
    return StepReport(
        step=step, topology=topology, mesh={k: int(v) for k, v in mesh.shape.items()}, chips=chips, layers=layers,
        groups=groups, fits=hbm <= usable, hbm_per_chip=hbm, hbm_capacity=usable, bytes=nbytes,
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


def aot_compile(hf_config: dict[str, Any], *, topology: str, mesh_shape: dict[str, int], dtype: Any = "bfloat16",
                workload: Workload = Workload(), layers: int | None = None, steps: tuple[str, ...] = ("score", "decode"),
                dump: str | None = None, devices: list[Any] | None = None, attention: str = "xla"
                ) -> list[StepReport]:
    """Compiles the scoring and decode steps of a judge for a TPU topology.

    Args:
        hf_config: the judge's Hugging Face config (see `jaxjudge.aot.presets.judge_config`).
        topology: e.g. ``"v5e:2x4"``.
        mesh_shape: ``{"data": d, "model": m}`` with d x m = the topology's chips.
        dtype: parameter and compute dtype.
        workload: the step shapes.
        layers: compile this many layers instead of the config's (None: full depth).
        steps: which of ``"prefill"``, ``"read_rows"``, ``"decode"`` to compile; ``"score"`` is the
            prefill and the reads, with a report of their sum.
        dump: folder for each compiled step's HLO text (``prefill.hlo.txt``, ``read_rows.hlo.txt``,
            ``decode.hlo.txt``).
        devices: the topology's devices (default: described from ``topology``).
        attention: ``"xla"`` (XLA's dense masked attention) or ``"splash"`` (JAX's Pallas splash
            kernel for the prefix prefill and the reads against the prefix; decoding through a
            per-row cache stays on XLA). The kernels' flops are counted from the blocks they
            compute (`jaxjudge.models.splash.count_flops`): XLA's cost analysis does not see them.

    Returns:
        One `StepReport` per step.

    Raises:
        DoesNotFitError: the parameters (plus the step's caches) need more HBM per chip than the
            chip has, found before compiling.
    """
    chip = chip_for_topology(topology)
    devices = tpu_devices(topology) if devices is None else devices
    data, model = int(mesh_shape.get("data", 1)), int(mesh_shape.get("model", 1))
    if data * model != len(devices):
        raise ValueError(f"mesh data={data} x model={model} = {data * model} chips, but {topology} has "
                         f"{len(devices)}")
    mesh = _sh.make_mesh(data, model, devices=devices)
    dt = as_dtype(dtype)
    cfg = _config(hf_config, layers)
    graphdef, state, param_bytes = _abstract_state(cfg, dt, mesh, attention=attention)
    w = workload
    groups = data if w.groups is None else int(w.groups)
    if groups % data and data % groups:
        raise ValueError(f"{groups} prefix groups per step do not split over the data axis ({data}): use a divisor "
                         f"or a multiple of {data}")
    # As many groups as data shards or more: each group's tails stay on its shard. Fewer: each
    # group's tails split over the data / groups shards that read its prefix (rounded up).
    share = max(1, data // groups)
    rows = groups * -(-w.tails // share) * share
    p_len = _prim.bucket_length(w.prefix)
    p_slots = _prim.slot_bucket(p_len)
    t_len = _prim.bucket_length(w.tail_len)
    d_rows = -(-w.decode_rows // data) * data
    d_slots = t_len + w.decode_len
    prefix_cache = _cache_sds(cfg, groups, p_slots, dt, mesh)
    row_cache = _cache_sds(cfg, d_rows, d_slots, dt, mesh)
    needed = param_bytes + _nbytes_per_chip(prefix_cache) + (_nbytes_per_chip(row_cache) if "decode" in steps else 0)
    usable = _cost.topology(topology).links.usable_hbm
    if needed > usable:
        raise DoesNotFitError(
            f"{cfg.model_type} judge ({cfg.num_params() / 1e9:.2f} B parameters, {jnp.dtype(dt).name}) needs "
            f"{needed / 2**30:.2f} GiB per chip on {topology} with mesh data={data} x model={model} "
            f"(parameters {param_bytes / 2**30:.2f} GiB + caches), more than the {usable / 2**30:.2f} GiB usable of "
            f"the {chip.hbm_bytes / 2**30:.0f} GiB a {chip.name} chip has", needed, usable)

    rows_of = lambda ndim: _sh.batch_sharding(mesh, ndim)  # noqa: E731  (Judge.put_rows: rows over data)
    rep = NamedSharding(mesh, P())
    i32 = jnp.int32

    def rows_sds(shape, dtype_, split: bool = True):
        return jax.ShapeDtypeStruct(shape, dtype_, sharding=rows_of(len(shape)) if split else rep)

    def step_args(step: str, c: DecoderConfig, gd, st) -> tuple[Step, tuple[Any, ...], dict[str, Any]]:
        """The engine step and the abstract arguments the engine gives it (`jaxjudge.engine.calls`)."""
        if step == "prefill":  # calls.prefill_prefixes: groups prefixes into a fresh cache (donated)
            split = groups % data == 0  # Judge.put_rows replicates a batch the data axis does not divide
            fresh = jax.eval_shape(lambda: _dec.init_cache(c, groups, p_slots, dt))
            cache = _sds(fresh, _sh.cache_sharding(mesh, fresh))
            # Judge.put_prefixes: the prefixes over data, or (fewer than data shards) their tokens
            prefixes = _sh.prefix_sharding(mesh, (groups, p_len))
            return _prim.PREFILL, (gd, st, jax.ShapeDtypeStruct((groups, p_len), i32, sharding=prefixes),
                                   jax.ShapeDtypeStruct((groups, p_len), bool, sharding=prefixes),
                                   rows_sds((groups, 1), i32, split), None, cache, None), {}
        if step == "read_rows":  # calls.read_rows: every group's tails against its prefix
            return _prim.READ_ROWS, (gd, st, rows_sds((rows, t_len), i32), rows_sds((rows, t_len), bool),
                                     rows_sds((rows, 1), i32), rows_sds((rows, w.candidates), i32),
                                     rows_sds((rows, w.candidates), i32), _cache_sds(c, groups, p_slots, dt, mesh),
                                     None), {"answer_read": 0, "topk": w.topk}
        # decode.generate_tokens: the greedy loop through a per-row cache continuing one prefix
        return DECODE, ((gd,), (st,), (rows_sds((d_rows, c.vocab_size), jnp.float32),),
                        (_cache_sds(c, d_rows, d_slots, dt, mesh),), (_cache_sds(c, 1, p_slots, dt, mesh),), None), \
            {"choice": Greedy(), "max_new_tokens": w.decode_len, "eos_ids": tuple(int(e) for e in c.eos_token_ids),
             "pad_id": 0}

    def compile_step(step: str, c: DecoderConfig, unroll: bool = False):
        """One step's program for config ``c`` (its own layer count), its compile seconds and the
        flops of its Pallas kernels: the layer scan traces its body once however far it is
        unrolled, so the kernels counted in that trace run once per layer."""
        gd, st, _ = ((graphdef, state, param_bytes) if c is cfg and not unroll
                     else _abstract_state(c, dt, mesh, unroll, attention))
        compiled, seconds, kernel_flops = _compile(*step_args(step, c, gd, st))
        return compiled, seconds, kernel_flops * c.num_hidden_layers

    def unrolled(step: str, c: DecoderConfig):
        compiled, _, kernel_flops = compile_step(step, c, unroll=True)
        return compiled, _Cost.of(compiled, kernel_flops)

    # XLA's cost analysis counts a loop body once, so flops and bytes come from programs with the
    # layers unrolled. A decode loop's body is one token (one forward and one pick): its
    # program unrolled at full depth (seconds to a minute) gives the cost and the collectives
    # per generated token. A prefill or a read would take minutes at full depth: their cost is
    # extrapolated from 2 and 3 unrolled layers (a judge of 3 layers or fewer is compiled
    # unrolled whole, once). Flops add up exactly; bytes accessed only roughly, since XLA fuses
    # and prefetches differently by depth. Not 1 and 2: the first layer's program fuses
    # differently (its bytes grow by more from 1 to 2 layers than from 2 to 3 or 3 to 4, which
    # agree), so a slope from 1 layer overstates every further layer's bytes. On the 8B decode
    # step the slope from 2 and 3 layers gave 8.4 GB per chip against the full unrolled
    # program's 5.7.
    n = cfg.num_hidden_layers
    lo = min(2, n)
    useful_prefix = groups * _flops.score_flops(cfg, w.prefix, 0, w.tail_len)
    useful = {"prefill": useful_prefix,
              "read_rows": groups * _flops.score_flops(cfg, w.prefix, w.tails, w.tail_len) - useful_prefix,
              "decode": _flops.decode_flops(cfg, w.decode_rows, w.prefix + w.tail_len + w.decode_len - 1)}
    wanted = [s for s in ("prefill", "read_rows", "decode")
              if s in steps or (s != "decode" and "score" in steps)]
    reports = []
    for step in wanted:
        extra: dict[str, Any] = {}
        if n <= lo + 1:  # a shallow judge: one program per step, compiled unrolled, gives everything
            compiled, secs, kernel_flops = compile_step(step, cfg, unroll=True)
            cost, cost_from = _Cost.of(compiled, kernel_flops), "full depth unrolled"
            if step == "decode":
                extra = {"trips": 1}
        else:
            compiled, secs, _ = compile_step(step, cfg)
            if step == "decode":
                whole, cost = unrolled(step, cfg)
                cost_from = "full depth unrolled"
                extra = {"collectives_from": whole, "trips": 1}
            else:
                c_lo, c_hi = unrolled(step, _config(hf_config, lo))[1], unrolled(step, _config(hf_config, lo + 1))[1]
                cost = _Cost(c_lo.flops + (n - lo) * (c_hi.flops - c_lo.flops),
                             c_lo.bytes_accessed + (n - lo) * (c_hi.bytes_accessed - c_lo.bytes_accessed),
                             c_lo.kernel_flops + (n - lo) * (c_hi.kernel_flops - c_lo.kernel_flops))
                cost_from = f"{lo}-{lo + 1} unrolled layers, extrapolated"
        if step == "decode":
            cost_from += ", per generated token (XLA counts the token loop's body once)"
        reports.append(_report(step, compiled, secs, cost, topology=topology, mesh=mesh, chip=chip, layers=n,
                               groups=1 if step == "decode" else groups, useful=useful[step], dump=dump,
                               cost_from=cost_from, attention=attention, **extra))
    if "score" in steps:
        parts = [r for r in reports if r.step in ("prefill", "read_rows")]
        reports.insert(len(parts), combine("score", parts))
    return reports


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
