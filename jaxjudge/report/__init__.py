"""Report: from cached extraction arrays to methods, metrics with intervals, tables and figures.

Entry points:

* `report_from_store(store_root, cfg)` / `report_from_arrays(arrays, cfg)` -> `Results`:
  every configured method on every cell, hyper-parameters chosen on dev, test metrics with
  grouped bootstrap intervals; no model and no forward pass.
* `write_run(results, run_dir(cfg), collect_metadata(cfg))`: JSON, CSV, Markdown, PNG
  figures and metadata in ``results/<experiment>/<run>/``.
* `load_config(path)`, `validate_config(cfg)`, `check_tokenizer(cfg, model, tokenizer)`,
  `extraction_plan(cfg)`: the experiment configs (``experiments/*.py``) and their checks.
* `evaluate_cell(arrays, splits, options)`: one cell, for notebooks and custom pipelines.
"""

from jaxjudge.report.config import (
    Cell,
    ConfigError,
    ExperimentConfig,
    ExtractionJob,
    ModelSpec,
    SubsetSpec,
    TaskSpec,
    cells,
    check_tokenizer,
    config_from_dict,
    config_to_dict,
    extraction_plan,
    load_config,
    method_variants,
    resolve_data_dir,
    resolve_model_path,
    validate_config,
    with_overrides,
)
from jaxjudge.report.figures import plot_lambda_curves, plot_latent_priors, plot_score_distributions, write_figures
from jaxjudge.report.cell import evaluate_cell
from jaxjudge.report.cell_inputs import CellArrays, CellReport, MethodOptions, RandomPrior, make_splits
from jaxjudge.report.pipeline import (
    StoreIndex,
    StoreLookupError,
    StoreModelMismatch,
    TaskData,
    check_store_model,
    load_cells,
    load_task_data,
    report_from_arrays,
    report_from_store,
    store_match,
)
from jaxjudge.report.results import Results
from jaxjudge.report.run import collect_metadata, command_line, run_dir, write_run
from jaxjudge.report.tables import flat_rows, headline_table, markdown_report, read_csv, write_csv

__all__ = [
    "Cell",
    "CellArrays",
    "CellReport",
    "ConfigError",
    "ExperimentConfig",
    "ExtractionJob",
    "MethodOptions",
    "ModelSpec",
    "RandomPrior",
    "Results",
    "StoreIndex",
    "StoreLookupError",
    "StoreModelMismatch",
    "SubsetSpec",
    "TaskData",
    "TaskSpec",
    "cells",
    "check_store_model",
    "check_tokenizer",
    "collect_metadata",
    "command_line",
    "config_from_dict",
    "config_to_dict",
    "evaluate_cell",
    "extraction_plan",
    "flat_rows",
    "headline_table",
    "load_cells",
    "load_config",
    "load_task_data",
    "make_splits",
    "markdown_report",
    "method_variants",
    "plot_lambda_curves",
    "plot_latent_priors",
    "plot_score_distributions",
    "read_csv",
    "report_from_arrays",
    "report_from_store",
    "resolve_data_dir",
    "resolve_model_path",
    "run_dir",
    "store_match",
    "validate_config",
    "with_overrides",
    "write_csv",
    "write_figures",
    "write_run",
]
