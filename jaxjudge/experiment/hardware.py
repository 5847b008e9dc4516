"""The hardware a config names: its device mesh (checked before any model loads)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np

from jaxjudge.engine import EngineOptions
from jaxjudge.engine.feed import block_rows
from jaxjudge.engine.primitives import bucket_length, slot_bucket
from jaxjudge.experiment.specs import resolve_model_path
from jaxjudge.experiment.typed import ConfigError, choose
from jaxjudge.models import gguf
from jaxjudge.models.config import config_from_hf
from jaxjudge.models.hf import read_config, resolve_source
from jaxjudge.models.machine import SPARE, ChipMemory, chip_memory, fits, model_axis, parameter_bytes
from jaxjudge.models.mesh_plan import CallShape, MeshPlan, MeshPlanError, plan_mesh
from jaxjudge.models.sharding import make_mesh
from jaxjudge.models.source import is_remote, source_header
from jaxjudge.multihost import process_max
from jaxjudge.prompts import as_tokenizer

__all__ = ["MESH_AXES", "check_mesh", "mesh_for", "mesh_and_plan", "auto_plan", "step_for", "model_shapes",
           "prompt_lengths", "exchanged_lengths", "CHAT_MARGIN", "model_header", "parameter_bytes_per_device",
           "check_fits"]

MESH_AXES = ("data", "model")


def check_mesh(where: str, mesh: Mapping[str, int]) -> None:
    """Axis names from `MESH_AXES`, sizes >= 1 or -1 (the rest of the devices) once at most."""
    for k, v in mesh.items():
        choose(f"{where}.{k}", k, MESH_AXES)
        if isinstance(v, bool) or not isinstance(v, int) or (v < 1 and v != -1):
            raise ConfigError(f"{where}.{k}: a mesh axis size is a positive int or -1 (the rest), got {v!r}")
    if sum(v == -1 for v in mesh.values()) > 1:
        raise ConfigError(f"{where}: at most one axis may be -1 (the rest of the devices), got {dict(mesh)}")


def _mesh_devices(cfg: Any, devices: Sequence[Any] | None) -> tuple[list[Any], str, bool]:
    """The devices a config's mesh covers, how to name them in an error, and whether the mesh
    must take all of them (a mesh over several processes)."""
    sizes = {"data": 1, "model": 1, **(cfg.mesh if isinstance(cfg.mesh, Mapping) else {"data": -1})}
    known = math.prod(v for v in sizes.values() if v != -1)
    if devices is not None:
        return list(devices), f"{len(devices)} in this process", False
    local, every = jax.local_devices(), jax.devices()
    several = len(every) > len(local)
    per_process = several and -1 not in sizes.values() and known == len(local)
    chosen = local if per_process or not several else every
    where = (f"{len(chosen)} in this process" if not several else
             f"{len(local)} in this process, {len(every)} in all {jax.process_count()} processes")
    return chosen, where, several and not per_process


def model_shapes(path: Any) -> Any:
    """A judge's `DecoderConfig` from its model file's config alone (no weights read); a remote
    source's from its converted entry when cached (`jaxjudge.models.source.source_header`)."""
    if is_remote(path):
        return config_from_hf(source_header(path).hf_config)
    path = Path(path)
    return config_from_hf(model_header(path)[0] if path.is_file() else read_config(resolve_source(path)))


def model_header(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """A GGUF file's ``config.json``-shaped dict and its metadata, from one read of its header
    (no tensor data), remembered per (path, size, mtime): the planner and ``--dry-run`` ask for
    both, and the reader parses the whole tensor index each time it opens a file."""
    st = Path(path).stat()
    return _header(str(Path(path).resolve()), st.st_size, st.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _header(path: str, size: int, mtime_ns: int) -> tuple[dict[str, Any], dict[str, Any]]:
    reader = gguf._open(Path(path))
    meta = gguf.read_metadata(reader, Path(path))
    return gguf.hf_config_from_gguf(meta, {t.name: gguf._hf_shape(t) for t in reader.tensors}, Path(path)), meta


CHAT_MARGIN = 64
"""Tokens allowed for what a chat template adds around a prompt (role markers, a default system
prompt), and for a row's answer separator and score candidate, when prompt lengths are counted
from the prompts rendered without the template."""


def prompt_lengths(cfg: Any, jobs: Sequence[Any], tokenizer: Any, data: Mapping[str, Any],
                   share: tuple[int, int] = (1, 0)) -> tuple[int, int]:
    """The longest shared prefix and the longest row (suffix) of ``jobs``' prompts in tokens of
    ``tokenizer``, each plus `CHAT_MARGIN` (prompts rendered without a chat template).

    ``share`` ``(n, i)``: only the rows share i of n feeds (`jaxjudge.engine.feed.block_rows`
    with the config's chunk size: the rows process i feeds where each process holds one run of
    every chunk); the n shares of a job cover its rows once, so the largest of their bounds is
    the bound of every row (`exchanged_lengths`).
    """
    tok = as_tokenizer(tokenizer)
    chunk_size = EngineOptions(**cfg.engine).chunk_size
    prefix = row = 0
    for job in jobs:
        prompts = job.prompts(data[job.task].examples if job.task else ())
        if share[0] > 1:
            prompts = [prompts[r] for r in block_rows(prompts, chunk_size, *share)]
        if not prompts:
            continue
        heads = list(dict.fromkeys(p.prefix for p in prompts))
        tails = [p.suffix for p in prompts]
        prefix = max(prefix, max(len(e.ids) for e in tok.encode_batch(heads, add_special_tokens=False)))
        row = max(row, max(len(e.ids) for e in tok.encode_batch(tails, add_special_tokens=False)))
    return prefix + CHAT_MARGIN, row + CHAT_MARGIN


def exchanged_lengths(cfg: Any, jobs: Mapping[str, Sequence[Any]], tokenizers: Mapping[str, Any],
                      data: Mapping[str, Any]) -> dict[str, tuple[int, int]]:
    """`prompt_lengths` of each judge's ``jobs`` over every process's rows, each process
    tokenising only its own share of them; the processes then exchange their bounds, the
    largest of each (one gather of two ints per judge; a collective: every process calls it
    with the same judges). One process: `prompt_lengths` of every row, no exchange."""
    share = (jax.process_count(), jax.process_index())
    names = list(jobs)
    mine = np.asarray([prompt_lengths(cfg, jobs[n], tokenizers[n], data, share) for n in names],
                      np.int64).reshape(len(names), 2)
    every = process_max(mine)
    return {n: (int(every[k, 0]), int(every[k, 1])) for k, n in enumerate(names)}


def step_for(cfg: Any, shapes: Sequence[Any], generates: bool = True,
             lengths: tuple[int, int] | None = None) -> CallShape:
    """The largest call the engine makes under ``cfg``'s engine options, for the planner.

    A shared prefix of ``lengths[0]`` tokens (the longest counted, `prompt_lengths`; without
    counts, the context: the config's ``context_length``, else the smallest of the judges'
    trained lengths), rows of ``lengths[1]`` tokens (else ``max_batch_tokens / batch_size``),
    as many as ``batch_size`` and ``max_batch_tokens`` allow, and (``generates``) those rows
    decoding ``generation_max_new_tokens`` tokens. Lengths are padded as the engine pads them.
    """
    o = EngineOptions(**cfg.engine)
    context = o.context_length or min(int(c.max_position_embeddings) for c in shapes)
    want_prefix, want_row = lengths if lengths is not None else (context, o.max_batch_tokens // o.batch_size)
    prefix = bucket_length(max(1, min(context, want_prefix)))
    tail = bucket_length(max(1, min(context, want_row)))
    rows = max(1, min(o.batch_size, o.max_batch_tokens // tail))
    return CallShape(prefix_len=prefix, prefix_slots=slot_bucket(prefix), tails=rows, tail_len=tail,
                groups=o.groups_per_call, decode_rows=rows if generates else 0,
                decode_slots=tail + cfg.generation_max_new_tokens if generates else 0)


def auto_plan(cfg: Any, resident: Sequence[Sequence[tuple[str, str | Path]]], devices: Sequence[Any],
              memory: ChipMemory | None = None, lengths: Mapping[str, tuple[int, int]] | None = None,
              generates: bool = True) -> MeshPlan | None:
    """The planner's mesh for ``cfg`` over ``devices``: None on CPU devices (one device per
    process, as without a mesh), else `jaxjudge.models.mesh_plan.plan_mesh` for the largest of
    ``resident`` (the judges held together: a judge and the assistant its jobs load beside it),
    its calls sized by ``lengths`` (judge -> `exchanged_lengths`, where counted).

    Raises:
        ConfigError: no ``model`` axis fits (naming the judges, the bytes per chip and the memory).
    """
    devices = list(devices)
    if not devices or (devices[0].platform == "cpu" and memory is None):
        return None
    memory = memory or chip_memory(devices[0])
    slices = len({int(getattr(d, "slice_index", 0) or 0) for d in devices})
    best = None
    for group in resident:
        shapes = [(name, model_shapes(path)) for name, path in group]
        try:
            step = step_for(cfg, [c for _, c in shapes], generates, (lengths or {}).get(group[0][0]))
            plan = plan_mesh(shapes, cfg.dtype, step, len(devices), memory, slices=slices)
        except MeshPlanError as e:
            raise ConfigError(f"ExperimentConfig.mesh: 'auto': {e}") from None
        if best is None or plan.model > best.model:
            best = plan
    return best


def mesh_for(cfg: Any, devices: Sequence[Any] | None = None,
             resident: Sequence[Sequence[tuple[str, str | Path]]] = ()) -> Any:
    """The config's mesh (`mesh_and_plan`'s first item)."""
    return mesh_and_plan(cfg, devices, resident)[0]


def mesh_and_plan(cfg: Any, devices: Sequence[Any] | None = None,
                  resident: Sequence[Sequence[tuple[str, str | Path]]] = (),
                  lengths: Mapping[str, tuple[int, int]] | None = None,
                  generates: bool = True) -> tuple[Any, MeshPlan | None]:
    """The config's ``mesh`` (None without one), and the planner's plan where it chose it.

    ``"auto"``: the planner's mesh (`auto_plan`) for the judges ``resident`` names (none: the
    config's models, one at a time), over every process's devices; None on CPU devices.

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
        return None, None
    devices, where, exact = _mesh_devices(cfg, devices)
    if cfg.mesh == "auto":
        if devices[0].platform == "cpu":
            return None, None
        if not resident:
            resident = [[(m.name, resolve_model_path(m))] for m in cfg.models]
        plan = auto_plan(cfg, resident, devices, lengths=lengths, generates=generates)
        return make_mesh(plan.data, plan.model, devices=devices), plan
    sizes = {"data": 1, "model": 1, **cfg.mesh}
    known = math.prod(v for v in sizes.values() if v != -1)
    if len(devices) % known:
        raise ConfigError(f"ExperimentConfig.mesh: {dict(cfg.mesh)} needs a multiple of {known} devices, {where}")
    sizes = {k: (len(devices) // known if v == -1 else v) for k, v in sizes.items()}
    need = sizes["data"] * sizes["model"]
    if need > len(devices) or (exact and need != len(devices)):
        raise ConfigError(f"ExperimentConfig.mesh: {sizes} needs {need} devices, {where}"
                          + (" (a mesh over several processes takes all of their devices)" if exact else ""))
    return make_mesh(sizes["data"], sizes["model"], devices=devices), None


def parameter_bytes_per_device(path: str | Path, dtype: Any, mesh: Any = None) -> int:
    """Bytes of a judge's parameters on each device of ``mesh`` (all of them without a mesh),
    from the model file's config alone (no weights read): the machine model's
    `jaxjudge.models.machine.parameter_bytes` for the mesh's ``model`` axis."""
    return parameter_bytes(model_shapes(path), dtype, model_axis(mesh))


def check_fits(name: str, path: str | Path, dtype: Any, mesh: Any = None, *,
               memory: int | None = None, what: str | None = None) -> int:
    """Refuses, in one line and before any weights load, a judge whose parameters alone would not
    fit each device's memory on ``mesh`` by the machine model's fit rule
    (`jaxjudge.models.machine.fits`: (1 - `SPARE`) of it; the rest is for activations and caches).

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
        try:
            chip = chip_memory(local[0])
        except ValueError:  # an accelerator that reports no limit, of a kind the machine model lacks
            return per_device
        if not chip.usable_bytes:  # the host does not say its RAM
            return per_device
    else:
        chip = ChipMemory(what or "given", int(memory), what or "given")
    shared = len(local) if chip.shared else 1
    if not fits(per_device, chip, shared_by=shared):
        shape = "no mesh (one device)" if mesh is None else str({k: int(v) for k, v in mesh.shape.items()})
        where = (f"{len(local)} CPU devices share {chip.usable_bytes / 2**30:.2f} GiB of host RAM" if chip.shared else
                 f"each device has {chip.usable_bytes / 2**30:.2f} GiB ({chip.kind})")
        raise ConfigError(f"model {name!r}: its parameters need {per_device / 2**30:.2f} GiB per device "
                          f"({per_device} bytes) in {jax.numpy.dtype(dtype).name} "
                          f"on mesh {shape}; {where}, of which at most {1 - SPARE:.0%} may hold parameters. "
                          "Use a larger 'model' axis, bfloat16, or more devices")
    return per_device
