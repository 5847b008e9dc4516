"""A run's config resolved once into plain data (`RunSpec`): what the report and the jobs read.

`jaxjudge.experiment.plan.resolve_spec` builds it from an `ExperimentConfig` (the experiment
layer's own work: the grid's judges, the family options checked and built, the model entries);
the extraction jobs and the report (`jaxjudge.report.pipeline.report_from_store`,
`jaxjudge.report.stores.load_cells`, `jaxjudge.report.methods.Need.job`) then read its fields and
lookups instead of calling back up into the config. It lives in the jobs layer, the lowest one
both import. A config itself still serves wherever a `RunSpec` is read (a notebook's
`report_from_arrays(arrays, cfg)`): the two answer the same fields and lookups.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["RunSpec", "SPEC_FIELDS", "model_named", "partner_of", "task_named"]


@dataclass(frozen=True)
class RunSpec:
    """What the report and the extraction jobs read of a run's config, as plain values.

    Attributes:
      name, tasks, scales, methods, ... ``nested_rows``, ``confirmation``: the config's fields of
        the same names (`SPEC_FIELDS`), as they are.
      judge_names: the grid's judges (``ExperimentConfig.judge_names``), in config order.
      family_options: the options of every configured family that declares them
        (``ExperimentConfig.family_options()``).
      analysis: the config's analysis plan (`jaxjudge.store.registration.analysis_plan`) and
        ``config_type`` the config class it comes from, for the report's registration status.
    """

    name: str
    models: tuple[Any, ...]
    tasks: tuple[Any, ...]
    scales: tuple[str, ...]
    methods: tuple[str, ...]
    pairs: tuple[tuple[str, str], ...]
    control_pairs: tuple[tuple[str, str], ...]
    temperatures: tuple[float, ...]
    greedy: bool
    deb_tp: tuple[int, ...]
    lambdas: tuple[float, ...]
    lambdas_extended: tuple[float, ...] | None
    contrastive_lams: tuple[float, ...]
    contrastive_temps: tuple[float, ...]
    contrastive_fine: bool
    contrastive_temperature: str
    contrastive_generate_lam: float
    contrastive_generate_t_main: float
    contrastive_generate_t_asst: float
    contrastive_generate_alpha: float
    select_metric: str
    select_per_group: bool
    metrics: tuple[str, ...]
    ci_metrics: tuple[str, ...] | None
    n_boot: int
    alpha: float
    min_ci_groups: int
    ci_method: str
    seed: int
    prompt_style: str
    dtype: str
    engine: Mapping[str, Any]
    changes: tuple[str, ...]
    primary: Any
    comparisons: tuple[Any, ...]
    nested_rows: tuple[str, ...]
    judge_names: tuple[str, ...]
    options: Mapping[str, Any] = field(default_factory=dict)
    analysis: Mapping[str, Any] = field(default_factory=dict)
    config_type: type | None = None
    confirmation: Any = None

    def family_options(self) -> dict[str, Any]:
        """The configured families' options, as ``ExperimentConfig.family_options()`` gave them."""
        return dict(self.options)

    def model(self, name: str) -> Any:
        """The model entry (`ModelSpec`) named ``name``."""
        return model_named(self.models, name, self.name)

    def task(self, name: str) -> Any:
        """The task entry (`TaskSpec`) named ``name``."""
        return task_named(self.tasks, name, self.name)

    def assistant_of(self, judge: str) -> str | None:
        """The judge's assistant in ``pairs`` (None if it has none)."""
        return partner_of(self.pairs, judge)

    def control_of(self, judge: str) -> str | None:
        """The judge's other-family assistant in ``control_pairs`` (None if it has none)."""
        return partner_of(self.control_pairs, judge)


def model_named(models: Sequence[Any], name: str, config: str, error: type[Exception] = KeyError) -> Any:
    """The entry of ``models`` named ``name``; ``error`` naming config ``config`` and its models
    otherwise. The one lookup of a `RunSpec` and of an `ExperimentConfig` (which raises its
    ConfigError)."""
    for m in models:
        if m.name == name:
            return m
    raise error(f"config {config!r}: no model named {name!r} (models: {[m.name for m in models]})")


def task_named(tasks: Sequence[Any], name: str, config: str, error: type[Exception] = KeyError) -> Any:
    """The entry of ``tasks`` for task ``name``; ``error`` naming config ``config`` otherwise."""
    for t in tasks:
        if t.task == name:
            return t
    raise error(f"config {config!r}: no task {name!r}")


def partner_of(pairs: Sequence[tuple[str, str]], judge: str) -> str | None:
    """The model ``pairs`` pairs with ``judge`` (the first; None if none)."""
    return next((a for m, a in pairs if m == judge), None)


SPEC_FIELDS: tuple[str, ...] = tuple(
    f for f in RunSpec.__dataclass_fields__ if f not in ("judge_names", "options", "analysis", "config_type"))
"""The `RunSpec` fields copied from the config's fields of the same names."""
