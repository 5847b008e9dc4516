"""``jaxjudge extract|sweep CONFIG --dry-run``: what a run would do, before it does any of it.

The plan is derived from the config, the model files' configs (no weights), the data files, the
stores' manifests and the number of devices: no model loads, no device is used beyond counting
them, and a multi-process launch (``--num-processes N --process-id I``, or a TPU slice's named
workers) is described for this process without joining the others (each process is taken to
have as many devices as this one).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax

from jaxjudge.data.tasks import load_task_data
from jaxjudge.experiment.hardware import model_header, model_shapes, prompt_lengths, step_for
from jaxjudge.experiment.extractions import load_tokenizer
from jaxjudge.experiment.metadata import portable_path
from jaxjudge.experiment.plan import RunPlan, plan_run
from jaxjudge.experiment.schema import ConfigError, ExperimentConfig
from jaxjudge.models.config import config_from_hf
from jaxjudge.models.machine import GIB, ChipMemory, chip_memory, usable_memory
from jaxjudge.models.mesh_plan import MeshPlanError, plan_mesh
from jaxjudge.models.source import is_remote, source_outline
from jaxjudge.models.tokenizer import tokenizer_from_gguf_metadata
from jaxjudge.store import Store

__all__ = ["Launch", "describe_run"]


@dataclasses.dataclass(frozen=True)
class Launch:
    """The processes a run is launched as, and the devices counted.

    Attributes:
        processes: processes of the job.
        process_id: this process.
        local_devices: devices of this process (each process taken to have as many).
        platform: their platform (``cpu``, ``tpu``, ...).
        kind: their device kind.
        slices: slices the devices form (TPU multislice), 1 otherwise.
    """

    processes: int
    process_id: int
    local_devices: int
    platform: str
    kind: str
    slices: int = 1

    @classmethod
    def counted(cls, processes: int = 1, process_id: int = 0) -> Launch:
        """This process's devices, counted (the backend starts; nothing is placed on them)."""
        local = jax.local_devices()
        return cls(processes, process_id, len(local), local[0].platform, local[0].device_kind,
                   len({int(getattr(d, "slice_index", 0) or 0) for d in local}))

    @property
    def devices(self) -> int:
        return self.processes * self.local_devices


def _shown(path: Path) -> str:
    """A model file's path as printed: under the home folder with ``~``, else `portable_path`'s;
    a remote source as named (a ``gs://`` URL, a Hub repo id)."""
    if is_remote(path):
        return str(path)
    try:
        return str(Path("~") / Path(path).resolve().relative_to(Path.home().resolve()))
    except ValueError:
        return portable_path(path)


def _memory(launch: Launch) -> ChipMemory:
    if launch.platform == "cpu":
        return chip_memory(jax.local_devices()[0])  # the host's RAM; a CPU device reports no limit
    try:
        return usable_memory(launch.kind)
    except ValueError:
        return chip_memory(jax.local_devices()[0])


def _mesh_sizes(cfg: ExperimentConfig, launch: Launch) -> tuple[dict[str, int] | None, bool, str]:
    """The explicit mesh's sizes, whether it spans the processes (one SPMD program), and a note."""
    sizes = {"data": 1, "model": 1, **cfg.mesh}
    known = 1
    for v in sizes.values():
        known *= v if v != -1 else 1
    per_process = launch.processes > 1 and -1 not in sizes.values() and known == launch.local_devices
    n = launch.local_devices if per_process or launch.processes == 1 else launch.devices
    if n % known:
        raise ConfigError(f"ExperimentConfig.mesh: {dict(cfg.mesh)} needs a multiple of {known} devices, {n} counted")
    sizes = {k: (n // known if v == -1 else v) for k, v in sizes.items()}
    spans = launch.processes > 1 and not per_process
    if sizes["data"] * sizes["model"] > n or (spans and sizes["data"] * sizes["model"] != n):
        raise ConfigError(f"ExperimentConfig.mesh: {sizes} needs {sizes['data'] * sizes['model']} devices, "
                          f"{n} counted")
    return sizes, spans, "as configured"


def describe_run(cfg: ExperimentConfig, launch: Launch, *, store_root: str | os.PathLike | None = None,
                 results: Any = None, models: Sequence[str] | None = None) -> list[str]:
    """The lines ``--dry-run`` prints: the launch, the mesh and why, each judge's bytes per
    device against the device's usable memory, each job with its store and how its chunks
    divide among the processes, and where the run reads and writes.

    Raises:
      ConfigError: an explicit mesh that does not fit the counted devices, a model axis the
        planner cannot fit, or ``models`` naming a model without jobs.
    """
    n, me = launch.processes, launch.process_id
    rp = plan_run(cfg, store_root=store_root, models=models)  # the walk the run itself carries out
    root, jobs, names, companions = rp.root, rp.jobs, rp.judges, rp.companions
    title = cfg.name + (f" (run {cfg.run})" if cfg.run else "")
    out = [f"dry run of {title}: nothing loaded, no device used beyond counting them",
           f"launch: process {me} of {n}; {launch.local_devices} {launch.platform} device(s) ({launch.kind}) "
           f"per process{f', {launch.devices} in all (each process taken to have as many)' if n > 1 else ''}"]
    shapes, data, lengths = _judges(cfg, rp, out)
    resident = [g for g in ([(m, shapes[m]) for m in (j, *companions[j]) if m in shapes] for j in names) if g]
    spans = _mesh_lines(cfg, launch, resident, rp.decodes, lengths, out)
    if n == 1:
        share = "this process computes every chunk"
    elif spans:
        share = ("one SPMD program over every process's devices: every chunk computed by all processes together, "
                 "process 0 writes the stores and the report")
    else:
        share = (f"each process its own devices: every job's chunks by claim, chunks j with j % {n} == {me} "
                 "first here, the report by process 0")
    out.append(f"work: {share}")
    out += _job_lines(jobs, root, {t: len(d.examples) for t, d in data.items()}, launch, spans)
    run = results if results is not None else f"{str(cfg.results_root).rstrip('/')}/{cfg.name}/{cfg.run or '<UTC time>'}"
    out.append(f"writes: stores {root}, registration {root / 'registrations'}, report {run}")
    return out


def _judges(cfg: ExperimentConfig, rp: RunPlan,
            out: list[str]) -> tuple[dict[str, Any], dict[str, Any], dict[str, tuple[int, int]]]:
    """Each judge's shapes (its file's header), the tasks' data and the judges' longest prompts
    in tokens; a line per judge (and per absent file or unreadable data) added to ``out``."""
    paths = rp.paths
    shapes: dict[str, Any] = {}
    outlines = {}  # a remote judge's header, from the fewest of its bytes (no checkpoint fetched)
    for m, path in paths.items():
        if not path.exists():
            out.append(f"model {m}: {_shown(path)} is absent (its bytes cannot be planned; extract would "
                       "stop here)")
            continue
        if is_remote(path):
            outlines[path] = source_outline(path)
            shapes[m] = config_from_hf(outlines[path].hf_config)
        else:
            shapes[m] = model_shapes(path)
        out.append(f"model {m}: {_shown(path)} ({shapes[m].model_type}, "
                   f"{shapes[m].num_params() / 1e9:.3f} B parameters, {cfg.dtype})")
    data: dict[str, Any] = {}
    for t in cfg.tasks:
        try:
            data[t.task] = load_task_data(t)
        except (FileNotFoundError, OSError, ValueError) as e:
            out.append(f"data {t.task}: not readable ({str(e).splitlines()[0]})")

    def tokenizer(path: Path) -> Any:  # from the header already read for its shapes
        if path in outlines:
            return outlines[path].tokenizer
        if path.suffix == ".gguf":
            return tokenizer_from_gguf_metadata(model_header(path)[1], source=str(path))
        return load_tokenizer(path)[0]

    lengths = {m: prompt_lengths(cfg, rp.jobs_of(m), tokenizer(paths[m]), data) for m in rp.judges
               if m in shapes and all(j.task is None or j.task in data for j in rp.jobs_of(m))}
    return shapes, data, lengths


def _mesh_lines(cfg: ExperimentConfig, launch: Launch, resident: Sequence[Sequence[tuple[str, Any]]],
                generates: bool, lengths: dict[str, tuple[int, int]], out: list[str]) -> bool:
    """The mesh and each resident group's bytes per device (the planner's line under "auto"),
    added to ``out``; returns whether the mesh spans the processes (one SPMD program)."""
    memory, spans = _memory(launch), False
    if cfg.mesh is None or (cfg.mesh == "auto" and launch.platform == "cpu"):
        why = ("mesh 'auto' on CPU devices, which share the host's RAM and cores; sizes split them"
               if cfg.mesh == "auto" else "mesh None")
        out.append(f"mesh: none, one device per process ({why})")
        sizes, chips, shared_by = {"data": 1, "model": 1}, 1, 1
    elif cfg.mesh == "auto":
        sizes, chips, shared_by, spans = None, launch.devices, 1, launch.processes > 1
    else:
        sizes, spans, _ = _mesh_sizes(cfg, launch)
        chips = sizes["data"] * sizes["model"]
        shared_by = chips if launch.platform == "cpu" and not spans else 1
        out.append(f"mesh: data={sizes['data']} x model={sizes['model']} (as configured)")
    for group in resident:
        label = " + ".join(m for m, _ in group)
        step = step_for(cfg, [c for _, c in group], generates, lengths.get(group[0][0]))
        try:
            plan = plan_mesh(group, cfg.dtype, step, chips, memory, slices=launch.slices if sizes is None else 1,
                             model=None if sizes is None else sizes["model"], shared_by=shared_by)
        except MeshPlanError as e:
            if sizes is None:
                raise ConfigError(f"ExperimentConfig.mesh: 'auto': {e}") from None
            out.append(f"{label}: DOES NOT FIT: {e}")
            continue
        if sizes is None:
            out.append(f"{label}: {plan.line()}")
        else:
            out.append(f"{label}: {plan.per_chip.text()} per device, budget {plan.budget / GIB:.2f} GiB "
                       f"({memory.usable_bytes / GIB:.2f} GiB usable: {memory.source}"
                       f"{f', shared by {shared_by} devices' if shared_by > 1 else ''})"
                       + "".join(f"; {j}'s {k} KV heads replicated" for j, k in plan.replicated_kv))
        counted = ("the longest prompts, counted with the tokenizer" if group[0][0] in lengths
                   else "the context, the prompts not counted")
        out.append(f"  (bytes of the engine's largest call for {counted}: a {step.prefix_len}-token prefix, "
                   f"{step.tails} rows of {step.tail_len} tokens"
                   + (f", {step.decode_rows} rows decoding" if step.decode_rows else "")
                   + "; a model's estimate, not a measurement)")
    return spans


def _job_lines(jobs: Sequence[Any], root: Any, rows: dict[str, int], launch: Launch, spans: bool) -> list[str]:
    """A line per job: its store folder, its task's rows, and what of it is written (read from
    the store's manifest and chunk files; nothing is created)."""
    n, me = launch.processes, launch.process_id
    out = [f"jobs: {len(jobs)} under {root}"]
    for job in jobs:
        where = job.folder(root)
        try:
            store = Store.open(where)
            missing = store.missing_chunks()
            total = store.n_chunks or 0
            status = "complete" if not missing else f"{total - len(missing)} of {total} chunks written"
            if n > 1 and not spans and job.role == "score" and missing:
                status += f", {sum(1 for i in missing if i % n == me)} of the missing ones here"
        except FileNotFoundError:
            status = "not started"
        if job.prompt_set:  # its own prompts (random numbers, content-free fillers), one chunk
            what = f"{job.what}{f' of {job.task}' if job.task else ', task-free'}, one chunk"
        else:
            what = f"{job.task} rows: {rows.get(job.task, '?')}" if job.task else "task-free"
        out.append(f"  {where.relative_to(root)} ({what}): {status}")
    return out
