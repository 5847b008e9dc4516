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
import time
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding, PartitionSpec as P

from jaxjudge.aot import flops as _flops
from jaxjudge.aot.step_report import ProgramCost, StepReport, combine, step_report
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
from jaxjudge.models.machine import Chip, chip_for_topology, fits, parameter_bytes

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


def _config(hf: dict[str, Any], layers: int | None) -> DecoderConfig:
    if layers is not None:
        hf = {**hf, "num_hidden_layers": int(layers)}
        if hf.get("max_window_layers") is not None:  # Qwen: windowed from this layer on
            hf["max_window_layers"] = min(hf["max_window_layers"], int(layers))
    return config_from_hf(hf)


def _sds(tree: Any, shardings: Any) -> Any:
    return jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), tree, shardings)


def _program_state(cfg: DecoderConfig, dtype: jnp.dtype, mesh, unroll: bool = False, attention: str = "xla"
                   ) -> tuple[nnx.GraphDef, Any]:
    """The decoder's graphdef and its abstract state placed on the mesh, as a compiled step takes
    them (``unroll``: the layer scan unrolled, for the cost programs; ``attention="splash"``: the
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
    return graphdef, state


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
class _Shapes:
    """A workload's step shapes on a ``data`` axis, padded as the engine pads them.

    Attributes:
        groups: prefix groups in one scoring step.
        rows: tails read in one scoring step (every group's).
        prefix_len, prefix_slots: a prefix's tokens and its cache's slots.
        tail_len: tokens of a tail.
        decode_rows, decode_slots: rows of a decode step and the slots of each row's cache.
    """

    groups: int
    rows: int
    prefix_len: int
    prefix_slots: int
    tail_len: int
    decode_rows: int
    decode_slots: int

    @classmethod
    def of(cls, w: Workload, data: int) -> _Shapes:
        groups = data if w.groups is None else int(w.groups)
        if groups % data and data % groups:
            raise ValueError(f"{groups} prefix groups per step do not split over the data axis ({data}): use a "
                             f"divisor or a multiple of {data}")
        # As many groups as data shards or more: each group's tails stay on its shard. Fewer: each
        # group's tails split over the data / groups shards that read its prefix (rounded up).
        share = max(1, data // groups)
        p_len, t_len = _prim.bucket_length(w.prefix), _prim.bucket_length(w.tail_len)
        return cls(groups, groups * -(-w.tails // share) * share, p_len, _prim.slot_bucket(p_len), t_len,
                   -(-w.decode_rows // data) * data, t_len + w.decode_len)


def _check_fits(cfg: DecoderConfig, dtype: Any, mesh, shapes: _Shapes, decodes: bool, topology: str,
                chip: Chip) -> None:
    """Refuses, before compiling, a judge whose parameters and the steps' caches exceed a chip's
    usable HBM (the machine model's fit rule with no spare: `DoesNotFitError` names the bytes)."""
    data, model = int(mesh.shape["data"]), int(mesh.shape["model"])
    param_bytes = parameter_bytes(cfg, dtype, model)
    needed = param_bytes + _nbytes_per_chip(_cache_sds(cfg, shapes.groups, shapes.prefix_slots, dtype, mesh))
    if decodes:
        needed += _nbytes_per_chip(_cache_sds(cfg, shapes.decode_rows, shapes.decode_slots, dtype, mesh))
    if not fits(needed, chip.memory, spare=0.0):
        usable = chip.usable_hbm
        raise DoesNotFitError(
            f"{cfg.model_type} judge ({cfg.num_params() / 1e9:.2f} B parameters, {jnp.dtype(dtype).name}) needs "
            f"{needed / 2**30:.2f} GiB per chip on {topology} with mesh data={data} x model={model} "
            f"(parameters {param_bytes / 2**30:.2f} GiB + caches), more than the {usable / 2**30:.2f} GiB usable of "
            f"the {chip.hbm_bytes / 2**30:.0f} GiB a {chip.name} chip has", needed, usable)


@dataclasses.dataclass(frozen=True)
class _Target:
    """One judge's steps on one mesh: the abstract arguments the engine gives each step
    (`jaxjudge.engine.calls`), and the programs compiled from them."""

    hf: dict[str, Any]
    cfg: DecoderConfig
    dtype: Any
    mesh: Any
    attention: str
    w: Workload
    shapes: _Shapes
    graphdef: Any
    state: Any

    def _rows(self, shape: tuple[int, ...], dtype: Any, split: bool = True) -> jax.ShapeDtypeStruct:
        """Rows over ``data`` (`Judge.put_rows`), or replicated (``split`` False)."""
        sharding = _sh.batch_sharding(self.mesh, len(shape)) if split else NamedSharding(self.mesh, P())
        return jax.ShapeDtypeStruct(shape, dtype, sharding=sharding)

    def args(self, step: str, c: DecoderConfig, gd, st) -> tuple[Step, tuple[Any, ...], dict[str, Any]]:
        """The engine step and the abstract arguments the engine gives it (`jaxjudge.engine.calls`)."""
        sh, w, dt, mesh, i32 = self.shapes, self.w, self.dtype, self.mesh, jnp.int32
        if step == "prefill":  # calls.prefill_prefixes: groups prefixes into a fresh cache (donated)
            split = sh.groups % int(mesh.shape["data"]) == 0  # Judge.put_rows replicates what data does not divide
            fresh = jax.eval_shape(lambda: _dec.init_cache(c, sh.groups, sh.prefix_slots, dt))
            cache = _sds(fresh, _sh.cache_sharding(mesh, fresh))
            # Judge.put_prefixes: the prefixes over data, or (fewer than data shards) their tokens
            prefixes = _sh.prefix_sharding(mesh, (sh.groups, sh.prefix_len))
            return _prim.PREFILL, (gd, st, jax.ShapeDtypeStruct((sh.groups, sh.prefix_len), i32, sharding=prefixes),
                                   jax.ShapeDtypeStruct((sh.groups, sh.prefix_len), bool, sharding=prefixes),
                                   self._rows((sh.groups, 1), i32, split), None, cache, None), {}
        if step == "read_rows":  # calls.read_rows: every group's tails against its prefix
            rows, t_len = sh.rows, sh.tail_len
            return _prim.READ_ROWS, (gd, st, self._rows((rows, t_len), i32), self._rows((rows, t_len), bool),
                                     self._rows((rows, 1), i32), self._rows((rows, w.candidates), i32),
                                     self._rows((rows, w.candidates), i32),
                                     _cache_sds(c, sh.groups, sh.prefix_slots, dt, mesh), None), \
                {"answer_read": 0, "topk": w.topk}
        # decode.generate_tokens: the greedy loop through a per-row cache continuing one prefix
        return DECODE, ((gd,), (st,), (self._rows((sh.decode_rows, c.vocab_size), jnp.float32),),
                        (_cache_sds(c, sh.decode_rows, sh.decode_slots, dt, mesh),),
                        (_cache_sds(c, 1, sh.prefix_slots, dt, mesh),), None), \
            {"choice": Greedy(), "max_new_tokens": w.decode_len, "eos_ids": tuple(int(e) for e in c.eos_token_ids),
             "pad_id": 0}

    def compile(self, step: str, c: DecoderConfig, unroll: bool = False) -> tuple[Any, float, float]:
        """One step's program for config ``c`` (its own layer count), its compile seconds and the
        flops of its Pallas kernels: the layer scan traces its body once however far it is
        unrolled, so the kernels counted in that trace run once per layer."""
        gd, st = ((self.graphdef, self.state) if c is self.cfg and not unroll
                  else _program_state(c, self.dtype, self.mesh, unroll, self.attention))
        compiled, seconds, kernel_flops = _compile(*self.args(step, c, gd, st))
        return compiled, seconds, kernel_flops * c.num_hidden_layers

    def unrolled(self, step: str, layers: int | None = None) -> tuple[Any, ProgramCost]:
        """The step compiled with its layers unrolled (``layers`` of them, default the judge's) and its cost."""
        c = self.cfg if layers is None else _config(self.hf, layers)
        compiled, _, kernel_flops = self.compile(step, c, unroll=True)
        return compiled, ProgramCost.of(compiled, kernel_flops)

    def costed(self, step: str) -> tuple[Any, float, ProgramCost, str, dict[str, Any]]:
        """The step's full-depth program, its compile seconds, its cost, where the cost comes from,
        and `step_report`'s loop options.

        XLA's cost analysis counts a loop body once, so flops and bytes come from programs with
        the layers unrolled. A decode loop's body is one token (one forward and one pick): its
        program unrolled at full depth (seconds to a minute) gives the cost and the collectives
        per generated token. A prefill or a read would take minutes at full depth: their cost is
        extrapolated from 2 and 3 unrolled layers (a judge of 3 layers or fewer is compiled
        unrolled whole, once). Flops add up exactly; bytes accessed only roughly, since XLA fuses
        and prefetches differently by depth. Not 1 and 2: the first layer's program fuses
        differently from the next ones, so a slope from 1 layer overstates every further layer's
        bytes.
        """
        n = self.cfg.num_hidden_layers
        lo = min(2, n)
        per_token = ", per generated token (XLA counts the token loop's body once)" if step == "decode" else ""
        if n <= lo + 1:  # a shallow judge: one program per step, compiled unrolled, gives everything
            compiled, secs, kernel_flops = self.compile(step, self.cfg, unroll=True)
            extra = {"trips": 1} if step == "decode" else {}
            return compiled, secs, ProgramCost.of(compiled, kernel_flops), "full depth unrolled" + per_token, extra
        compiled, secs, _ = self.compile(step, self.cfg)
        if step == "decode":
            whole, cost = self.unrolled(step)
            return compiled, secs, cost, "full depth unrolled" + per_token, {"collectives_from": whole, "trips": 1}
        c_lo, c_hi = self.unrolled(step, lo)[1], self.unrolled(step, lo + 1)[1]
        cost = ProgramCost(c_lo.flops + (n - lo) * (c_hi.flops - c_lo.flops),
                           c_lo.bytes_accessed + (n - lo) * (c_hi.bytes_accessed - c_lo.bytes_accessed),
                           c_lo.kernel_flops + (n - lo) * (c_hi.kernel_flops - c_lo.kernel_flops))
        return compiled, secs, cost, f"{lo}-{lo + 1} unrolled layers, extrapolated", {}


def _useful_flops(cfg: DecoderConfig, w: Workload, groups: int) -> dict[str, float]:
    """The flops each step must do (`jaxjudge.aot.flops`), all chips together."""
    prefix = groups * _flops.score_flops(cfg, w.prefix, 0, w.tail_len)
    return {"prefill": prefix,
            "read_rows": groups * _flops.score_flops(cfg, w.prefix, w.tails, w.tail_len) - prefix,
            "decode": _flops.decode_flops(cfg, w.decode_rows, w.prefix + w.tail_len + w.decode_len - 1)}


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
    graphdef, state = _program_state(cfg, dt, mesh, attention=attention)
    shapes = _Shapes.of(workload, data)
    _check_fits(cfg, dt, mesh, shapes, "decode" in steps, topology, chip)
    target = _Target(hf_config, cfg, dt, mesh, attention, workload, shapes, graphdef, state)
    useful = _useful_flops(cfg, workload, shapes.groups)
    reports = []
    for step in [s for s in ("prefill", "read_rows", "decode") if s in steps or (s != "decode" and "score" in steps)]:
        compiled, secs, cost, cost_from, extra = target.costed(step)
        reports.append(step_report(step, compiled, secs, cost, topology=topology, mesh=mesh, chip=chip,
                                   layers=cfg.num_hidden_layers, groups=1 if step == "decode" else shapes.groups,
                                   useful=useful[step], dump=dump, cost_from=cost_from, attention=attention, **extra))
    if "score" in steps:
        parts = [r for r in reports if r.step in ("prefill", "read_rows")]
        reports.insert(len(parts), combine("score", parts))
    return reports
