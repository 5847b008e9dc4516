"""The mesh planner: the smallest ``model`` axis a judge fits, every other chip on ``data``.

Prefill is compute-bound: once a judge's parameters, KV cache and activations fit a chip,
tensor parallelism only adds collectives (two all-reduces a layer per forward pass). So the
planner takes the smallest ``model`` axis, among the divisors of the chips of one slice, with
which every chip's bytes fit its usable memory with `SPARE` to spare, and puts the other chips
on ``data``. Over several slices ``data`` spans the slices (data-centre network between them)
and ``model`` stays inside one (interconnect within a slice).

The bytes per chip are a model's estimate, computed from shapes alone (no weights, no device):

- parameters: each parameter's shard under the project's sharding rules
  (`jaxjudge.models.sharding`), exact for the rules (a dimension the axis does not divide is
  replicated);
- KV cache: ``2 x layers x rows x slots x kv_heads_per_chip x head_dim`` bytes in the compute
  dtype for the prefix cache and the decode rows' cache; key/value heads are replicated when
  the ``model`` axis does not divide them, and the plan line names it;
- activations: the largest of one layer's transients in the prefill, the read of the rows and a
  decode step (scanned layers hold one layer at a time; inference keeps no residuals):
  ``tokens x (4 D + (2 N_c + 2 K_c) H + 3 F_c) x itemsize`` for the residual stream (whole on
  every chip), queries, keys, values, attention output and the MLP's gate, up and product
  (``_c``: per chip), plus ``2 x tokens x N_c x keys x 4`` for the float32 attention scores
  and their exponentials, plus ``2 x rows x V_c x 4`` for the float32 logits read and their
  log-softmax.

It is an estimate for planning, not a measurement, and not an upper bound: for `jaxjudge aot`'s
presets the compiled scoring programs' memory (XLA:TPU's memory analysis) came out 2.6% to 8.6%
above it at the meshes compiled, which the `SPARE` covers; the README's planner table puts the
two side by side.

Usable memory, the fit rule (`SPARE`) and the parameter bytes are the machine model's
(`jaxjudge.models.machine`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax.numpy as jnp

from jaxjudge.models.decoder_config import DecoderConfig
from jaxjudge.models.machine import GIB, SPARE, ChipMemory, budget, fits, parameter_bytes

__all__ = ["CallShape", "Bytes", "MeshPlan", "MeshPlanError", "bytes_per_chip", "plan_mesh"]

class MeshPlanError(ValueError):
    """No ``model`` axis makes the judge fit: the message names the smallest bytes per chip found."""


@dataclasses.dataclass(frozen=True)
class CallShape:
    """The work one call puts on one ``data`` shard, globally sized as the engine calls it.

    Attributes:
        prefix_len: tokens of a shared prefix, padded (`jaxjudge.engine.primitives.bucket_length`).
        prefix_slots: its KV cache slots (`slot_bucket`).
        groups: prefix groups per call (None: one per ``data`` shard, as the engine reads them).
        tails: rows continuing each prefix group.
        tail_len: tokens per row, padded.
        decode_rows: rows of a decode step (0: no decoding).
        decode_slots: slots of each decode row's cache.
    """

    prefix_len: int
    prefix_slots: int
    tails: int
    tail_len: int
    groups: int | None = None
    decode_rows: int = 0
    decode_slots: int = 0

    def per_shard(self, data: int) -> tuple[int, int, int]:
        """Prefix groups, rows and decode rows on one ``data`` shard (as `jaxjudge.aot` lays
        them out: one group's rows split over ``data``; several groups, each on its shard)."""
        groups = data if self.groups is None else self.groups
        if groups == 1:
            return 1, -(-self.tails // data), -(-self.decode_rows // data)
        return -(-groups // data), -(-groups // data) * self.tails, -(-self.decode_rows // data)


@dataclasses.dataclass(frozen=True)
class Bytes:
    """Bytes on one chip."""

    parameters: int
    kv_cache: int
    activations: int

    @property
    def total(self) -> int:
        return self.parameters + self.kv_cache + self.activations

    def text(self) -> str:
        return (f"parameters {self.parameters / GIB:.2f} + KV cache {self.kv_cache / GIB:.2f} + activations "
                f"{self.activations / GIB:.2f} = {self.total / GIB:.2f} GiB")


def _split(n: int, model: int) -> int:
    """A dimension of size ``n`` on one chip: split when the axis divides it, else whole."""
    return n // model if model > 1 and n % model == 0 else n


def bytes_per_chip(cfg: DecoderConfig, dtype: Any, step: CallShape, data: int, model: int) -> Bytes:
    """Parameters, KV cache and activations on one chip of a ``data x model`` mesh (see the
    module docstring for the formulas)."""
    b = jnp.dtype(dtype).itemsize
    n_layers, d, hd = cfg.num_hidden_layers, cfg.hidden_size, cfg.head_dim
    q_c, kv_c = _split(cfg.num_attention_heads, model), _split(cfg.num_key_value_heads, model)
    f_c, v_c = _split(cfg.intermediate_size, model), _split(cfg.vocab_size, model)
    groups, rows, decode_rows = step.per_shard(data)
    kv = 2 * n_layers * kv_c * hd * b * (groups * step.prefix_slots + decode_rows * step.decode_slots)

    def layer(tokens: int, keys: int, read_rows: int) -> int:
        dense = tokens * (4 * d + (2 * q_c + 2 * kv_c) * hd + 3 * f_c) * b
        return dense + 2 * tokens * q_c * keys * 4 + 2 * read_rows * v_c * 4

    act = max(layer(groups * step.prefix_len, step.prefix_slots, 0),
              layer(rows * step.tail_len, step.prefix_slots + step.tail_len, rows),
              layer(decode_rows, step.prefix_slots + step.decode_slots, decode_rows) if decode_rows else 0)
    return Bytes(parameter_bytes(cfg, dtype, model), kv, act)


@dataclasses.dataclass(frozen=True)
class MeshPlan:
    """The mesh the planner chose and why.

    Attributes:
        data, model: the axis sizes (``data`` counts every slice's shards).
        slices: slices the ``data`` axis spans.
        per_chip: bytes on one chip with this mesh (summed over the judges loaded together).
        memory: the chip's usable memory and its source.
        tried: ``(model, total bytes per chip)`` of each axis size tried, smallest first.
        replicated_kv: ``(judge, kv heads)`` of each judge whose key/value heads the ``model``
            axis does not divide (whole on every chip).
        auto: chosen by the planner (False: the sizes were given, only checked).
        shared_by: devices sharing ``memory`` (CPU devices of one process), each with a share.
    """

    data: int
    model: int
    slices: int
    per_chip: Bytes
    memory: ChipMemory
    tried: tuple[tuple[int, int], ...]
    replicated_kv: tuple[tuple[str, int], ...] = ()
    auto: bool = True
    shared_by: int = 1

    @property
    def budget(self) -> int:
        """Bytes one chip may hold: (1 - `SPARE`) of its usable memory (CPU devices: of the
        host's RAM divided among the devices of the process that share it)."""
        return budget(self.memory, shared_by=self.shared_by)

    @property
    def fits(self) -> bool:
        return fits(self.per_chip.total, self.memory, shared_by=self.shared_by)

    @property
    def shape(self) -> dict[str, int]:
        return {"data": self.data, "model": self.model}

    def line(self) -> str:
        """One line: the mesh, what it puts on each chip against what the chip may use, and why
        this ``model`` axis (the smaller ones tried and their bytes)."""
        where = (f"{self.memory.usable_bytes / GIB:.2f} GiB usable ({self.memory.source})" +
                 (f", shared by {self.shared_by} devices" if self.shared_by > 1 else ""))
        head = (f"mesh data={self.data} x model={self.model}" + (f" over {self.slices} slices (model inside one)"
                                                                 if self.slices > 1 else ""))
        per = f"{self.per_chip.text()} per chip, budget {self.budget / GIB:.2f} GiB ({1 - SPARE:.0%} of {where})"
        if self.auto:
            smaller = [f"model={m}: {t / GIB:.2f} GiB" for m, t in self.tried if m < self.model]
            why = (f"auto: the smallest model axis that fits"
                   + (f" (does not fit: {', '.join(smaller)})" if smaller else "")
                   + (f"; the other {self.data} shard(s) on data" if self.data > 1 else ""))
        else:
            why = "as configured"
        kv = "".join(f"; {j}'s {k} KV heads replicated on every chip (model={self.model} does not divide them)"
                     for j, k in self.replicated_kv)
        return f"{head}: {why}; {per}{kv}"


def _divisors(n: int) -> list[int]:
    return [m for m in range(1, n + 1) if n % m == 0]


def plan_mesh(judges: Sequence[tuple[str, DecoderConfig]], dtype: Any, step: CallShape, chips: int,
              memory: ChipMemory, *, slices: int = 1, model: int | None = None, shared_by: int = 1) -> MeshPlan:
    """The smallest ``model`` axis with which ``judges`` (loaded together) fit every chip.

    Args:
        judges: ``(name, config)`` of the judges one process holds at once (a judge and the
            assistant it decodes with); their parameters and caches add up.
        dtype: parameter and compute dtype.
        step: the shapes of one call.
        chips: chips in all (every slice).
        memory: one chip's usable memory.
        slices: slices the chips form (equal parts); ``model`` divides one slice's chips.
        model: a given ``model`` axis to check instead of choosing one.
        shared_by: devices sharing ``memory`` (CPU devices of one process), each holding a share.

    Returns:
        The plan (``model`` the first size tried that fits).

    Raises:
        MeshPlanError: no size fits (naming the smallest bytes per chip and the budget), or a
            given ``model`` does not fit or does not divide a slice.
    """
    if chips < 1 or slices < 1 or chips % slices:
        raise MeshPlanError(f"{chips} chips do not split into {slices} equal slices")
    per_slice = chips // slices
    sizes = _divisors(per_slice) if model is None else [model]
    if model is not None and (model < 1 or per_slice % model):
        raise MeshPlanError(f"model={model} does not divide the {per_slice} chips of a slice")
    tried: list[tuple[int, int]] = []
    chosen = None
    for m in sizes:
        data = chips // m
        parts = [bytes_per_chip(cfg, dtype, step, data, m) for _, cfg in judges]
        per = Bytes(*(sum(getattr(p, f) for p in parts) for f in ("parameters", "kv_cache", "activations")))
        tried.append((m, per.total))
        candidate = MeshPlan(data, m, slices, per, memory, (), auto=model is None, shared_by=shared_by)
        if candidate.fits:
            chosen = candidate
            break
    if chosen is None:
        m, total = min(tried, key=lambda t: (t[1], t[0]))  # the least any size needs
        what = "no model axis makes" if model is None else f"model={model} does not make"
        raise MeshPlanError(
            f"{what} {' + '.join(n for n, _ in judges)} ({jnp.dtype(dtype).name}) fit {chips} {memory.kind} chips"
            f"{f' in {slices} slices' if slices > 1 else ''}: model={m} needs {total / GIB:.2f} GiB per chip, "
            f"more than {1 - SPARE:.0%} of the {memory.usable_bytes / GIB:.2f} GiB usable ({memory.source})")
    replicated = tuple((n, cfg.num_key_value_heads) for n, cfg in judges
                       if chosen.model > 1 and cfg.num_key_value_heads % chosen.model)
    return dataclasses.replace(chosen, tried=tuple(tried), replicated_kv=replicated)
