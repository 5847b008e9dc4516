"""Planning an experiment: the config resolved once into plain data for the report and the jobs
(`resolve_spec`), the extraction jobs its methods need, in a stable order, and the plan of one run
(`plan_run`), which ``jaxjudge extract|sweep`` carries out and ``--dry-run`` prints."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jaxjudge.experiment.checks import validate_config
from jaxjudge.experiment.schema import ConfigError, ExperimentConfig, resolve_model_path
from jaxjudge.jobs import ExtractionJob, RunSpec
from jaxjudge.jobs.spec import SPEC_FIELDS
from jaxjudge.report.methods import cell_needs
from jaxjudge.report.stores import cells
from jaxjudge.store.location import location
from jaxjudge.store.registration import analysis_plan

__all__ = ["RunPlan", "extraction_plan", "plan_run", "resolve_spec"]


def resolve_spec(cfg: ExperimentConfig) -> RunSpec:
    """The config resolved once into the plain data the report and the jobs read (`RunSpec`):
    its fields, its judges, its families' options (ConfigError for bad ``method_options``) and
    its analysis plan."""
    return RunSpec(**{f: getattr(cfg, f) for f in SPEC_FIELDS}, judge_names=tuple(cfg.judge_names),
                   options=cfg.family_options(), analysis=analysis_plan(cfg), config_type=type(cfg))


def extraction_plan(cfg: ExperimentConfig) -> list[ExtractionJob]:
    """The extractions `report` needs, deduplicated, in a stable order.

    The union over the grid's cells of what the configured methods need
    (`jaxjudge.report.methods.cell_needs`: the judge's score arrays, and each method's declared
    `Need`s, some of them jobs of the judge's assistant in ``pairs``). Ordered model by model
    (judges, then assistants, then other-family assistants), then by scale, task and aspect (a task-free job first), then by
    job kind (``order``).
    """
    return _planned_jobs(resolve_spec(cfg))


def _planned_jobs(spec: RunSpec) -> list[ExtractionJob]:
    """`extraction_plan` of a config resolved (`resolve_spec`)."""
    needs = cell_needs(spec.methods)
    jobs = {}
    for cell in cells(spec):
        for need in needs:
            job = need.job(spec, cell.judge, cell.task, cell.aspect, cell.scale)
            if job is not None:
                jobs[job] = None
    models = list(dict.fromkeys([*spec.judge_names, *(a for _, a in (*spec.pairs, *spec.control_pairs))]))
    scales = list(spec.scales)
    places = {(t.task, a): (i, j) for i, t in enumerate(spec.tasks) for j, a in enumerate(t.aspects)}

    def place(job: ExtractionJob) -> tuple:
        where = places[(job.task, job.aspect)] if job.per_task else (-1, -1)
        return models.index(job.model), scales.index(job.scale), *where, job.order

    return sorted(jobs, key=place)


@dataclass(frozen=True)
class RunPlan:
    """What a run of a config does, decided from the config alone (no file read beyond the
    config, nothing loaded): the one walk that `jaxjudge.experiment.run_extractions` carries out
    and ``--dry-run`` (`jaxjudge.experiment.dry_run`) describes.

    Attributes:
      spec: the validated config resolved (`resolve_spec`): what the jobs read of it.
      root: the store root (a local path or a bucket location).
      jobs: the extraction jobs of the judges below, in plan order.
      judges: the models whose jobs run, in plan order (``models`` of `plan_run`, or all).
      companions: per judge, the models its jobs load beside it (contrastive generation's
        assistant).
      paths: every model file the run reads, judges and companions, by name.
    """

    spec: RunSpec
    root: Any
    jobs: tuple[ExtractionJob, ...]
    judges: tuple[str, ...]
    companions: dict[str, tuple[str, ...]]
    paths: dict[str, Path]

    def jobs_of(self, judge: str) -> list[ExtractionJob]:
        """The jobs run with ``judge`` loaded, in plan order."""
        return [j for j in self.jobs if j.model == judge]

    @property
    def decodes(self) -> bool:
        """Whether a job decodes tokens (a KV cache per row), for the mesh planner's bytes."""
        return any(j.decodes for j in self.jobs)


def plan_run(cfg: ExperimentConfig, *, store_root: str | os.PathLike | None = None,
             models: Sequence[str] | None = None) -> RunPlan:
    """The run's plan: the config checked (`validate_config`), the store root's location, the
    jobs of ``models`` (default: every model with jobs), what each judge loads beside it, and
    the model files.

    Raises:
      ConfigError: the config's checks, or ``models`` naming a model without jobs.
      LocationError: a store root no installed library serves.
    """
    validate_config(cfg)
    root = location(store_root or cfg.store_root, "store root")
    spec = resolve_spec(cfg)
    jobs = _planned_jobs(spec)
    names = list(dict.fromkeys(j.model for j in jobs))
    if models is not None:
        unknown = sorted(set(models) - set(names))
        if unknown:
            raise ConfigError(f"config {cfg.name!r}: no jobs for models {unknown} (jobs exist for {names})")
        names = [n for n in names if n in models]
    chosen = tuple(j for j in jobs if j.model in names)
    companions = {n: tuple(dict.fromkeys(c for j in chosen if j.model == n for c in j.companions(spec)))
                  for n in names}
    paths = {n: resolve_model_path(cfg.model(n))
             for n in dict.fromkeys([*names, *(c for cs in companions.values() for c in cs)])}
    return RunPlan(spec, root, chosen, tuple(names), companions, paths)
