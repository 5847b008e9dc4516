"""Report: from cached extraction arrays to methods, metrics with intervals, tables and figures.

Entry points:

* `report_from_store(store_root, cfg)` / `report_from_arrays(arrays, cfg)` -> `Results`:
  every configured method on every cell, hyper-parameters chosen on dev, test metrics with
  grouped bootstrap intervals; no model and no forward pass. ``cfg`` is a
  `jaxjudge.experiment.ExperimentConfig` (load one with `jaxjudge.experiment.load_config`).
* `write_run(results, run_dir(cfg), collect_metadata(cfg))`: JSON, CSV, Markdown, PNG
  figures and metadata in ``results/<experiment>/<run>/`` (`run_dir` and `collect_metadata`
  are in `jaxjudge.experiment`).
* `evaluate_cell(arrays, splits, options)`: one cell, for notebooks and custom pipelines.
"""

from jaxjudge.report.figures import plot_lambda_curves, plot_latent_priors, plot_score_distributions, write_figures
from jaxjudge.report.grids import method_variants
from jaxjudge.report.cell import evaluate_cell
from jaxjudge.report.cell_inputs import CellArrays, CellReport, MethodOptions, RandomPrior, make_splits
from jaxjudge.report.pipeline import report_from_arrays, report_from_store
from jaxjudge.report.results import Results
from jaxjudge.report.run import write_run
from jaxjudge.report.stores import (
    Cell,
    ExtractionJob,
    StoreIndex,
    StoreLookupError,
    StoreModelMismatch,
    cells,
    check_store_model,
    load_cells,
    store_match,
)
from jaxjudge.report.tables import flat_rows, headline_table, markdown_report, paired_table, read_csv, write_csv

__all__ = [
    "Cell",
    "CellArrays",
    "CellReport",
    "ExtractionJob",
    "MethodOptions",
    "RandomPrior",
    "Results",
    "StoreIndex",
    "StoreLookupError",
    "StoreModelMismatch",
    "cells",
    "check_store_model",
    "evaluate_cell",
    "flat_rows",
    "headline_table",
    "paired_table",
    "load_cells",
    "make_splits",
    "markdown_report",
    "method_variants",
    "plot_lambda_curves",
    "plot_latent_priors",
    "plot_score_distributions",
    "read_csv",
    "report_from_arrays",
    "report_from_store",
    "store_match",
    "write_csv",
    "write_figures",
    "write_run",
]
