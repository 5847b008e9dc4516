"""Experiment: typed configs, their checks and plans, and the extraction jobs they run.

Entry points (the ``jaxjudge`` command calls them):

* `load_config("experiments/x.py[:arg]", overrides)` -> `ExperimentConfig`; `with_overrides`,
  `config_from_dict` / `config_to_dict`; `pick_variant`, with which an experiment file's
  ``get_config(arg)`` picks its variant;
* `validate_config(cfg)`, `check_tokenizer(cfg, model, tokenizer)`: every problem that can be
  seen before a forward pass;
* `extraction_plan(cfg)` -> the `ExtractionJob`s a config needs; `plan_run(cfg)` -> the
  `RunPlan` of one run (its jobs, models and store root; ``--dry-run`` prints it);
  `run_extractions(cfg)` carries it out into resumable stores, `upgrade_stores(cfg)` migrates stores written before keys held
  their setup;
* `resolve_spec(cfg)` -> the `RunSpec` the report and the jobs read (the config resolved once);
* `collect_metadata(cfg)`, `run_dir(cfg)`: a run's metadata and folder (the report writes it);
  `report_run(cfg)` reports a run's stores into that folder.
"""

from jaxjudge.experiment.checks import check_tokenizer, validate_config
from jaxjudge.experiment.few_labels import FewLabelsConfig
from jaxjudge.experiment.extractions import JobResult, job_store_path, load_tokenizer, run_extractions, upgrade_stores
from jaxjudge.experiment.loader import load_config, pick_variant
from jaxjudge.experiment.metadata import collect_metadata, command_line, portable_path, run_dir
from jaxjudge.experiment.plan import RunPlan, extraction_plan, plan_run, resolve_spec
from jaxjudge.experiment.reporting import report_run
from jaxjudge.experiment.schema import (
    ConfigError,
    Endpoint,
    ExperimentConfig,
    ModelSpec,
    SubsetSpec,
    TaskSpec,
    check_location,
    check_run_name,
    config_from_dict,
    config_to_dict,
    engine_options,
    resolve_model_path,
    with_overrides,
)
from jaxjudge.jobs import ExtractionJob
from jaxjudge.report.stores import Cell, cells

__all__ = [
    "FewLabelsConfig",
    "Cell",
    "ConfigError",
    "Endpoint",
    "ExperimentConfig",
    "ExtractionJob",
    "JobResult",
    "ModelSpec",
    "RunPlan",
    "SubsetSpec",
    "TaskSpec",
    "cells",
    "check_location",
    "check_run_name",
    "check_tokenizer",
    "collect_metadata",
    "command_line",
    "config_from_dict",
    "config_to_dict",
    "engine_options",
    "extraction_plan",
    "job_store_path",
    "load_config",
    "load_tokenizer",
    "pick_variant",
    "plan_run",
    "portable_path",
    "report_run",
    "resolve_model_path",
    "resolve_spec",
    "run_dir",
    "run_extractions",
    "upgrade_stores",
    "validate_config",
    "with_overrides",
]
